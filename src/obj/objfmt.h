/*
 * objfmt.h - the format of a materialized segment object and its key, and
 * the checks that verify one whole or piece by piece.  The format itself
 * is documented at the top of objfmt.c, which owns it; verified reads
 * through a block cache are bcache.h's.
 *
 * A segment object holds one contiguous committed range [start, end) of one
 * stream, as generation gen.  Its bytes are a fixed header, a CRC32C per
 * block of the payload, and the payload (the logical bytes themselves).
 *
 * Building one (materializer):
 *     hl = nrs_objfmt_hdr_len(len);
 *     buf = malloc(hl + len);  read the payload into buf + hl;
 *     nrs_objfmt_seal(buf, &h);           header and block CRCs
 *     nrs_objfmt_digest(buf, hl + len, sha256, md5);
 */
#ifndef NRS_OBJFMT_H
#define NRS_OBJFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "obj/objstore.h"

#define NRS_OBJ_BLOCK	(64u << 10)	/* payload bytes per CRC32C */
#define NRS_OBJ_MAX_LEN	(1ull << 32)	/* longest payload (exclusive) */

struct nrs_objhdr {
	uint64_t stream_id;
	uint64_t start, end;	/* logical range; end - start < 2^32 */
	uint64_t gen;		/* generation, >= 1 */
};

/* Is h a range an object can hold: non-empty, shorter than NRS_OBJ_MAX_LEN,
 * gen >= 1?  (What seal, key and the cache refuse with -EINVAL.) */
bool nrs_objfmt_hdr_is_valid(const struct nrs_objhdr *h);
/* Bytes before the payload for a payload of len bytes. */
size_t nrs_objfmt_hdr_len(uint64_t len);
/*
 * Write the header and the block CRC table for h into buf, whose payload
 * (h->end - h->start bytes) is already at buf + nrs_objfmt_hdr_len().
 * -EINVAL for an empty or too long range, or gen 0.
 */
int nrs_objfmt_seal(void *buf, const struct nrs_objhdr *h);
/* SHA-256 (for x-amz-meta-sha256 and proof) and MD5 (Content-MD5) of an
 * object's bytes, in one pass; either output may be NULL (not computed),
 * not both (-EINVAL).  -ENOMEM / -EIO if the crypto library fails. */
int nrs_objfmt_digest(const void *buf, size_t len,
		      unsigned char sha256[NRS_SHA256_LEN],
		      unsigned char md5[NRS_MD5_LEN]);
/* The object key: "s/<stream id, 16 hex>/<start, 16 hex>-<end, 16 hex>-g<gen,
 * 16 hex>" (lower-case hex, 70 characters).  Never derived from a file
 * name.  Returns the key length, or -EINVAL for a range seal refuses. */
int nrs_objfmt_key(char buf[NRS_OBJKEY_MAX], const struct nrs_objhdr *h);

/* The key of WAL segment seg adopted in place by the embedded store
 * (objstore_dir_adopt.c): "w/<seg, 16 lower-case hex>"; for a seg with
 * NRS_ADOPT_OWAL set, the object WAL's own key of the WAL object
 * seg & ~NRS_ADOPT_OWAL, "owal/<run, 6 hex>/<seq, 10 hex>" (wal_object.c,
 * mat_adopt.c MZ13).  Returns its length. */
int nrs_objfmt_adopt_key(char buf[NRS_OBJKEY_MAX], uint64_t seg);

/* MZ13: an objects row's seg with this bit names a slice of a WAL object
 * of the object WAL (run << 40 | seq below it), not a local WAL segment
 * (whose numbers never reach it). */
#define NRS_ADOPT_OWAL	(1ull << 62)

/*
 * Verify a whole object in memory (what fsck and tests use): header, table
 * and every block.  -EBADMSG on any mismatch; -EUCLEAN if its header is
 * valid but names another stream, range or generation than want (or holds
 * fields no writer produces); -EPROTO if it is a newer format version than
 * this build reads.  want NULL: any range (only the object's own checks).
 */
int nrs_objfmt_verify(const void *buf, size_t len, const struct nrs_objhdr *want);

/* ---- piecewise verification, for readers that fetch ranges ------------ */

#define NRS_OBJ_FIXED	64	/* fixed header bytes; the CRC table follows */

/* What a verified fixed header says. */
struct nrs_objinfo {
	struct nrs_objhdr h;	/* the range and generation it holds */
	uint32_t nblocks;	/* CRC table entries (payload blocks) */
	uint32_t table_crc;	/* CRC32C of the table */
};

/* Payload blocks (CRC table entries) of a payload of len bytes, for
 * 0 < len < NRS_OBJ_MAX_LEN (a longer len counts as the longest). */
uint32_t nrs_objfmt_nblocks(uint64_t len);
/*
 * Parse and check the fixed header in the first len bytes of buf (len >=
 * NRS_OBJ_FIXED): magic and header CRC (-EBADMSG), version (-EPROTO for a
 * newer one), fields a writer could have produced (-EUCLEAN), and, unless
 * want is NULL, that it names exactly want (-EUCLEAN).  *out is written only
 * on success.  The table is not checked: nrs_objfmt_verify_table().
 */
int nrs_objfmt_parse(const void *buf, size_t len, const struct nrs_objhdr *want,
		     struct nrs_objinfo *out);
/* The table (4 * oi->nblocks bytes, at NRS_OBJ_FIXED in the object) against
 * the CRC the header gives.  -EBADMSG on mismatch. */
int nrs_objfmt_verify_table(const struct nrs_objinfo *oi, const void *table);
/* Bytes in payload block i (NRS_OBJ_BLOCK but for a short last one); 0 if
 * i is past the last block. */
size_t nrs_objfmt_block_len(const struct nrs_objinfo *oi, uint32_t i);
/*
 * Block i of the payload, len bytes at data, against entry i of a table
 * verified by nrs_objfmt_verify_table().  -EBADMSG if the CRC or the length
 * is wrong, -EINVAL if i is past the last block.
 */
int nrs_objfmt_verify_block(const struct nrs_objinfo *oi, const void *table,
			    uint32_t i, const void *data, size_t len);

#endif
