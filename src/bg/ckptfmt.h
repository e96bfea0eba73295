/*
 * ckptfmt.h - the format of a metadata checkpoint object and of the
 * pointer to the latest one, and their keys.  The formats are documented
 * at the top of ckptfmt.c, which owns them; writing, finding and reading
 * them in a store is checkpoint.c's.
 */
#ifndef NRS_CKPTFMT_H
#define NRS_CKPTFMT_H

#include <stddef.h>
#include <stdint.h>

#include "obj/objstore.h"

#define NRS_CKPT_VERSION	1
#define NRS_CKPT_HDR_LEN	72
#define NRS_CKPT_BLOCK		(64u << 10)	/* database bytes per CRC32C */
#define NRS_CKPT_DB_MAX		(1ull << 40)	/* largest database (excl.) */
#define NRS_CKPT_PTR_LEN	72
#define NRS_CKPT_LATEST_KEY	"ckpt/latest"

/* The header of a checkpoint (what the caller gives, what parse finds). */
struct nrs_ckpt_hdr {
	uint64_t seq;		/* >= 1: the key's number */
	uint64_t covered;	/* object-WAL position: everything below it
				 * is in the database (opaque here) */
	uint64_t epoch;		/* the owner epoch (opaque here; 0 for now) */
	uint64_t db_len;	/* bytes of the database */
	int64_t created_ns;	/* wall clock when the snapshot was taken */
};

/* The pointer ckpt/latest: which checkpoint is the newest proven one. */
struct nrs_ckpt_ptr {
	uint64_t seq;
	uint64_t length;	/* of the checkpoint object */
	unsigned char sha256[NRS_SHA256_LEN];	/* of the checkpoint object */
};

/* "ckpt/<seq, 16 lower-case hex>"; -EINVAL for seq 0. */
int nrs_ckptfmt_key(char key[NRS_OBJKEY_MAX], uint64_t seq);
/* Bytes of the checkpoint object of a database of db_len bytes. */
size_t nrs_ckptfmt_len(uint64_t db_len);
/*
 * The whole object for h and the db_len bytes at db: *out (malloc'd, the
 * caller frees it) of *len bytes.  -EINVAL for seq 0 or a database of
 * NRS_CKPT_DB_MAX bytes or more, -ENOMEM.
 */
int nrs_ckptfmt_build(const struct nrs_ckpt_hdr *h, const void *db,
		      void **out, size_t *len);
/*
 * Verify a whole object (KP5 of checkpoint.c: magic, header CRC, length,
 * table CRC, every block) and decode it: *h, and *db pointing at the
 * database bytes inside buf.  -EUCLEAN on any mismatch (logged with
 * what), -EPROTO for another version.
 */
int nrs_ckptfmt_parse(const void *buf, size_t len, struct nrs_ckpt_hdr *h,
		      const void **db);
/* The pointer's NRS_CKPT_PTR_LEN bytes. */
void nrs_ckptfmt_ptr_encode(unsigned char out[NRS_CKPT_PTR_LEN],
			    const struct nrs_ckpt_ptr *p);
/* -EUCLEAN (a bad length, magic or CRC), -EPROTO (another version). */
int nrs_ckptfmt_ptr_decode(const void *buf, size_t len,
			   struct nrs_ckpt_ptr *p);

#endif
