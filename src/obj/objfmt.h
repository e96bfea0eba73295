/*
 * objfmt.h - the format of a materialized segment object, its key, and
 * verified reads of it through a block cache.  The format itself is
 * documented at the top of objfmt.c, which owns it.
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

/* ---- reads through the block cache ----------------------------------- */

struct nrs_bcache;

struct nrs_bcache_opts {
	uint64_t mem_bytes;	/* memory tier budget; 0: 64 MiB */
	const char *disk_dir;	/* optional disk tier (created), NULL: none */
	uint64_t disk_bytes;	/* disk tier budget; 0 with a dir: 1 GiB */
	uint32_t readahead;	/* bytes fetched per GET at most; 0: 8 MiB
				 * (sequential reads ramp up to it from
				 * 1 MiB, their prefetches to less if
				 * mem_bytes is small: bcache.c) */
};

struct nrs_bcache_stats {
	uint64_t hits, misses;		/* block lookups in memory */
	uint64_t disk_hits;		/* misses of memory served by disk */
	uint64_t get_requests, get_bytes;	/* headers' GETs included */
	uint64_t mem_bytes, disk_bytes;	/* held now */
	uint64_t bad_blocks;		/* verification failures seen: a
					 * block, header or table from the
					 * store, or a block from disk */
};

/*
 * A cache reading through store, which it borrows: store must outlive it.
 * o NULL: every default.  readahead is rounded down to a multiple of
 * NRS_OBJ_BLOCK (at least one block, at most 64 MiB).  With disk_dir, the
 * directory is created if missing (its parent must exist), locked against a
 * second cache (-EBUSY), and blocks an earlier run left there are reused,
 * each verified again before use (bcache.c says how).  The caller frees
 * *out with nrs_bcache_close().
 */
int nrs_bcache_open(const struct nrs_bcache_opts *o, struct nrs_objstore *store,
		    struct nrs_bcache **out);
/* Close of NULL is a no-op.  No read may be in flight; prefetches still
 * running are waited for (a GET in flight ends within the store's
 * timeout), queued ones dropped.  The disk tier's files stay for the next
 * open. */
void nrs_bcache_close(struct nrs_bcache *c);
/*
 * Copy logical bytes [off, off + len) of the object h (which must lie within
 * [h->start, h->end)) into dst.  Every block is verified against the
 * object's CRC table before it is cached or copied, and the object's header
 * must name exactly h (stream, range, gen).  Returns 0, -EBADMSG (checksum
 * or header mismatch: logged with key, stream and offset, never cached),
 * -EPROTO (the object is a newer format version: logged), -ENOENT (object
 * missing), -EINVAL (h or the range is impossible), -ENOMEM, or a store
 * error.  dst is written only where the bytes verified; on an error its
 * contents are unspecified.  Thread safe; a block that readers miss while
 * another reader fetches it is waited for, not fetched again.
 */
int nrs_bcache_read(struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint64_t off, size_t len, void *dst);
/*
 * A hint: the n objects at next hold, in order, the bytes of h's stream
 * that follow h's (each next[i] starts at or before where the one before
 * it ends, and ends after), so that a sequential reader's prefetches run on
 * from h into them (bcache.c, PREFETCH).  Worth giving when a read ends
 * within NRS_BCACHE_FOLLOW bytes of h->end, naming up to
 * NRS_BCACHE_FOLLOW_MAX objects within NRS_BCACHE_FOLLOW bytes past it;
 * nothing is fetched for it unless a sequential read gets that near.  The
 * hint is cut at the first object that does not follow; the cache copies
 * what it keeps.
 */
#define NRS_BCACHE_FOLLOW	(64u << 20)
#define NRS_BCACHE_FOLLOW_MAX	8
void nrs_bcache_follow(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       const struct nrs_objhdr *next, size_t n);
/* Forget every cached block of the object, in memory and on disk (before
 * it is deleted).  A read running at the same time may cache a block again;
 * that is harmless, keys are never reused for other bytes. */
void nrs_bcache_forget(struct nrs_bcache *c, const struct nrs_objhdr *h);
void nrs_bcache_stats(struct nrs_bcache *c, struct nrs_bcache_stats *out);
/* Audit (tests): each tier's hash table, LRU list and byte count agree,
 * each tier is within its budget, and the bytes read ahead add up.  Takes
 * the cache's lock. */
bool nrs_bcache_check(struct nrs_bcache *c);
/* Wait until no prefetch is queued or running (tests: what a read set off
 * has landed or failed, and its blocks are on the disk tier). */
void nrs_bcache_drain(struct nrs_bcache *c);

#endif
