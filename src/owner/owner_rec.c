/*
 * owner_rec.c - the owner record of a bucket (owner.c says what it is
 * for and how it is claimed and renewed): its format, and its reading and
 * writing.
 *
 * THE RECORD: key "owner" (one of the only two keys ever rewritten; every
 * other key holds one set of bytes forever, DESIGN.md 6).  64 bytes,
 * integers little-endian (le.h):
 *
 *     0   u8   magic[8]     "NRSOWNR1"
 *     8   u32  version      1
 *    12   u32  length       64
 *    16   u8   owner[16]    the owner id, 128 random bits made at the data
 *                           directory's first mount (owner_id.c)
 *    32   u64  epoch        1 at the first claim of the bucket, + 1 at
 *                           every takeover; never lowered
 *    40   u64  lease_ms     the owner's lease (what a successor waits out)
 *    48   i64  renewed_ms   wall-clock ms of the write (for operators only:
 *                           no decision reads it)
 *    56   u32  count        writes of this record by this owner and epoch
 *                           (so every renewal changes the bytes)
 *    60   u32  crc          CRC32C of bytes 0..59
 *
 * A record whose magic, version, length or CRC is wrong is no record
 * (-EUCLEAN): claim refuses it unless recover, which overwrites it with
 * epoch 1 more than nothing (1).  "Ours" means the owner id and the epoch
 * are the ones this daemon claimed.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "owner/owner_priv.h"
#include "util/crc32c.h"
#include "util/le.h"

#define REC_LEN		64
#define REC_VERSION	1
#define REC_CRC_OFF	60

static const unsigned char rec_magic[8] = "NRSOWNR1";	/* no NUL */

_Static_assert(REC_CRC_OFF + 4 == REC_LEN, "the CRC ends the record");

static void rec_encode(unsigned char out[REC_LEN], const struct owner_rec *r)
{
	memset(out, 0, REC_LEN);
	memcpy(out, rec_magic, sizeof(rec_magic));
	nrs_le32_put(out + 8, REC_VERSION);
	nrs_le32_put(out + 12, REC_LEN);
	memcpy(out + 16, r->owner, 16);
	nrs_le64_put(out + 32, r->epoch);
	nrs_le64_put(out + 40, r->lease_ms);
	nrs_le64_put(out + 48, (uint64_t)r->renewed_ms);
	nrs_le32_put(out + 56, r->count);
	nrs_le32_put(out + REC_CRC_OFF, nrs_crc32c(0, out, REC_CRC_OFF));
}

static int rec_decode(const unsigned char *in, size_t len, struct owner_rec *r)
{
	if (len != REC_LEN || memcmp(in, rec_magic, sizeof(rec_magic)) != 0 ||
	    nrs_le32_get(in + REC_CRC_OFF) != nrs_crc32c(0, in, REC_CRC_OFF) ||
	    nrs_le32_get(in + 8) != REC_VERSION ||
	    nrs_le32_get(in + 12) != REC_LEN)
		return -EUCLEAN;
	memcpy(r->owner, in + 16, 16);
	r->epoch = nrs_le64_get(in + 32);
	r->lease_ms = nrs_le64_get(in + 40);
	r->renewed_ms = (int64_t)nrs_le64_get(in + 48);
	r->count = nrs_le32_get(in + 56);
	return 0;
}

/* The record now, and (CAS) its etag.  -ENOENT: none; -EUCLEAN: bytes
 * that are no record; else the store's errno. */
int nrs_owrec_read(struct bucket_owner *b, struct owner_rec *r,
		    char etag[NRS_ETAG_MAX])
{
	unsigned char buf[REC_LEN + 1];
	struct nrs_obj_meta m;
	ssize_t n;
	int rc = nrs_obj_head(b->store, REC_KEY, &m);

	if (rc < 0)
		return rc;
	n = nrs_obj_get(b->store, REC_KEY, 0, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	if (etag)
		memcpy(etag, m.etag, NRS_ETAG_MAX);
	return rec_decode(buf, (size_t)n, r);
}

bool nrs_owrec_same(const struct owner_rec *a, const struct owner_rec *b)
{
	return memcmp(a->owner, b->owner, 16) == 0 && a->epoch == b->epoch &&
	       a->count == b->count && a->renewed_ms == b->renewed_ms;
}

bool nrs_owrec_is_ours(const struct bucket_owner *b, const struct owner_rec *r)
{
	return memcmp(r->owner, b->idbin, 16) == 0 && r->epoch == b->epoch;
}

/* Write our record (epoch b->epoch): CAS with the condition given
 * (if_match NULL: absent), lease with a plain put. */
int nrs_owrec_write(struct bucket_owner *b, bool cond, const char *if_match)
{
	unsigned char buf[REC_LEN], sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	struct owner_rec r = {
		.epoch = b->epoch, .lease_ms = b->lease_ms,
		.renewed_ms = b->clk->wall_ms(b->clk->ctx),
		.count = ++b->count,
	};
	char etag[NRS_ETAG_MAX];
	int rc;

	memcpy(r.owner, b->idbin, 16);
	rec_encode(buf, &r);
	rc = nrs_objfmt_digest(buf, REC_LEN, sha, md5);
	if (rc < 0)
		return rc;
	if (!cond)
		return nrs_obj_put(b->store, REC_KEY, buf, REC_LEN, md5, sha);
	rc = nrs_obj_put_cond(b->store, REC_KEY, buf, REC_LEN, md5, sha,
			      if_match, etag);
	if (rc == 0)
		memcpy(b->etag, etag, NRS_ETAG_MAX);
	return rc;
}
