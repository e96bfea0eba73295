/*
 * ckptfmt.c - the bucket formats of metadata checkpoints (issue 15): the
 * checkpoint object and the pointer to the latest one.
 *
 * KEYS (never derived from a user's name; found without a listing)
 *
 *   ckpt/<seq>    one checkpoint, seq 16 lower-case hex digits, from 1 up.
 *                 Immutable: a key holds one set of bytes forever.
 *   ckpt/latest   the pointer.  With the owner record (owner/) the only
 *                 keys ever rewritten; a hint, never the only way to find
 *                 a checkpoint (checkpoint.c KP4).
 *
 * CHECKPOINT OBJECT (all integers little-endian)
 *
 *   0   magic "NRSCKPT\0" (8 bytes)
 *   8   u32 version (1)
 *   12  u32 block size (65536: database bytes per CRC32C)
 *   16  u64 seq (the key's number)
 *   24  u64 covered: the object-WAL position the database covers; every
 *           object-WAL record below it is in the database (the object WAL
 *           gives it; opaque here)
 *   32  u64 owner epoch (opaque here; 0 until the owner record exists)
 *   40  u64 database length L (bytes)
 *   48  i64 created, ns since the epoch (the wall clock of the snapshot)
 *   56  u32 number of blocks N = ceil(L / block size)
 *   60  u32 CRC32C of the block table (the 4 N bytes at 72)
 *   64  u32 reserved, 0
 *   68  u32 CRC32C of bytes 0-67
 *   72  N x u32: the CRC32C of each block of the database
 *   72 + 4 N   the L bytes of the database (meta.h nrs_meta_snapshot;
 *              SQLite: a database file, sqlite_ckpt.c)
 *
 * The object's SHA-256 is in the store's metadata (x-amz-meta-sha256, or
 * the embedded store's header), and in the pointer that names it.
 *
 * POINTER ckpt/latest (72 bytes, little-endian)
 *
 *   0   magic "NRSCKLAT" (8 bytes)
 *   8   u32 version (1)
 *   12  u32 reserved, 0
 *   16  u64 seq of the newest checkpoint proven when it was written
 *   24  u64 length of that checkpoint object
 *   32  32 bytes: its SHA-256
 *   64  u32 reserved, 0
 *   68  u32 CRC32C of bytes 0-67
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bg/ckptfmt.h"
#include "util/crc32c.h"
#include "util/le.h"
#include "util/log.h"

static const char ckpt_magic[8] = "NRSCKPT";	/* the NUL is the 8th */
static const char ptr_magic[8] = { 'N', 'R', 'S', 'C', 'K', 'L', 'A', 'T' };

int nrs_ckptfmt_key(char key[NRS_OBJKEY_MAX], uint64_t seq)
{
	if (seq == 0)
		return -EINVAL;
	return snprintf(key, NRS_OBJKEY_MAX, "ckpt/%016" PRIx64, seq);
}

static uint64_t nblocks(uint64_t db_len)
{
	return (db_len + NRS_CKPT_BLOCK - 1) / NRS_CKPT_BLOCK;
}

size_t nrs_ckptfmt_len(uint64_t db_len)
{
	return NRS_CKPT_HDR_LEN + 4 * (size_t)nblocks(db_len) + (size_t)db_len;
}

int nrs_ckptfmt_build(const struct nrs_ckpt_hdr *h, const void *db,
		      void **out, size_t *len)
{
	uint64_t n = nblocks(h->db_len);
	size_t total;
	unsigned char *p, *tab;

	if (h->seq == 0 || h->db_len >= NRS_CKPT_DB_MAX)
		return -EINVAL;
	total = nrs_ckptfmt_len(h->db_len);
	p = calloc(1, total);
	if (!p)
		return -ENOMEM;
	tab = p + NRS_CKPT_HDR_LEN;
	memcpy(tab + 4 * n, db, (size_t)h->db_len);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = i * NRS_CKPT_BLOCK;
		uint64_t bl = h->db_len - off < NRS_CKPT_BLOCK ?
			      h->db_len - off : NRS_CKPT_BLOCK;

		nrs_le32_put(tab + 4 * i, nrs_crc32c(0, tab + 4 * n + off,
						     (size_t)bl));
	}
	memcpy(p, ckpt_magic, 8);
	nrs_le32_put(p + 8, NRS_CKPT_VERSION);
	nrs_le32_put(p + 12, NRS_CKPT_BLOCK);
	nrs_le64_put(p + 16, h->seq);
	nrs_le64_put(p + 24, h->covered);
	nrs_le64_put(p + 32, h->epoch);
	nrs_le64_put(p + 40, h->db_len);
	nrs_le64_put(p + 48, (uint64_t)h->created_ns);
	nrs_le32_put(p + 56, (uint32_t)n);
	nrs_le32_put(p + 60, nrs_crc32c(0, tab, 4 * (size_t)n));
	nrs_le32_put(p + 68, nrs_crc32c(0, p, 68));
	*out = p;
	*len = total;
	return 0;
}

int nrs_ckptfmt_parse(const void *buf, size_t len, struct nrs_ckpt_hdr *h,
		      const void **db)
{
	const unsigned char *p = buf, *tab, *d;
	struct nrs_ckpt_hdr r;
	uint64_t n;

	if (len < NRS_CKPT_HDR_LEN || memcmp(p, ckpt_magic, 8) != 0) {
		nrs_err("checkpoint: %zu bytes without the header of one", len);
		return -EUCLEAN;
	}
	if (nrs_le32_get(p + 68) != nrs_crc32c(0, p, 68)) {
		nrs_err("checkpoint: its header fails its CRC32C");
		return -EUCLEAN;
	}
	if (nrs_le32_get(p + 8) != NRS_CKPT_VERSION) {
		nrs_err("checkpoint: version %" PRIu32 ", not %d",
			nrs_le32_get(p + 8), NRS_CKPT_VERSION);
		return -EPROTO;
	}
	r.seq = nrs_le64_get(p + 16);
	r.covered = nrs_le64_get(p + 24);
	r.epoch = nrs_le64_get(p + 32);
	r.db_len = nrs_le64_get(p + 40);
	r.created_ns = (int64_t)nrs_le64_get(p + 48);
	n = nrs_le32_get(p + 56);
	if (nrs_le32_get(p + 12) != NRS_CKPT_BLOCK ||
	    r.db_len >= NRS_CKPT_DB_MAX || n != nblocks(r.db_len) ||
	    len != nrs_ckptfmt_len(r.db_len)) {
		nrs_err("checkpoint %" PRIu64 ": %zu bytes, not the %zu its"
			" header names", r.seq, len,
			r.db_len < NRS_CKPT_DB_MAX ?
			nrs_ckptfmt_len(r.db_len) : 0);
		return -EUCLEAN;
	}
	tab = p + NRS_CKPT_HDR_LEN;
	d = tab + 4 * n;
	if (nrs_le32_get(p + 60) != nrs_crc32c(0, tab, 4 * (size_t)n)) {
		nrs_err("checkpoint %" PRIu64 ": its block table fails its"
			" CRC32C", r.seq);
		return -EUCLEAN;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = i * NRS_CKPT_BLOCK;
		uint64_t bl = r.db_len - off < NRS_CKPT_BLOCK ?
			      r.db_len - off : NRS_CKPT_BLOCK;

		if (nrs_le32_get(tab + 4 * i) !=
		    nrs_crc32c(0, d + off, (size_t)bl)) {
			nrs_err("checkpoint %" PRIu64 ": block %" PRIu64
				" (database bytes %" PRIu64 "-%" PRIu64 ")"
				" fails its CRC32C", r.seq, i, off, off + bl);
			return -EUCLEAN;
		}
	}
	*h = r;
	*db = d;
	return 0;
}

void nrs_ckptfmt_ptr_encode(unsigned char out[NRS_CKPT_PTR_LEN],
			    const struct nrs_ckpt_ptr *p)
{
	memset(out, 0, NRS_CKPT_PTR_LEN);
	memcpy(out, ptr_magic, 8);
	nrs_le32_put(out + 8, NRS_CKPT_VERSION);
	nrs_le64_put(out + 16, p->seq);
	nrs_le64_put(out + 24, p->length);
	memcpy(out + 32, p->sha256, NRS_SHA256_LEN);
	nrs_le32_put(out + 68, nrs_crc32c(0, out, 68));
}

int nrs_ckptfmt_ptr_decode(const void *buf, size_t len,
			   struct nrs_ckpt_ptr *p)
{
	const unsigned char *b = buf;

	if (len != NRS_CKPT_PTR_LEN || memcmp(b, ptr_magic, 8) != 0 ||
	    nrs_le32_get(b + 68) != nrs_crc32c(0, b, 68))
		return -EUCLEAN;
	if (nrs_le32_get(b + 8) != NRS_CKPT_VERSION)
		return -EPROTO;
	p->seq = nrs_le64_get(b + 16);
	p->length = nrs_le64_get(b + 24);
	memcpy(p->sha256, b + 32, NRS_SHA256_LEN);
	return 0;
}
