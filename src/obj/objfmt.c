/*
 * objfmt.c - the bytes of a materialized segment object, its key, and its
 * digests.
 *
 * A segment object holds one committed range [start, end) of one stream as
 * generation gen (DESIGN.md section 1, event 4).  Objects are immutable and
 * their keys are never reused for other bytes (DESIGN.md 6), so a reader may
 * cache any verified piece of one for as long as it likes (bcache.c).  The
 * format lets a reader verify any 64 KiB block from one range GET of the
 * header and table plus one of the block (DESIGN.md I6), without reading the
 * rest of an object of up to 4 GiB.  This module does no I/O.
 *
 * OBJECT FORMAT, version 1
 *
 * All integers are little-endian, written and read byte by byte (le.h).
 * Offsets are from the start of the object.
 *
 *     0   u32  magic       0x4f53524e: the bytes "NRSO"
 *     4   u16  version     1
 *     6   u16  reserved    0
 *     8   u32  block_size  65536 (NRS_OBJ_BLOCK): payload bytes per CRC
 *    12   u32  nblocks     ceil((end - start) / block_size), >= 1
 *    16   u64  stream_id
 *    24   u64  start       logical offset of the first payload byte
 *    32   u64  end         logical offset just past the last payload byte;
 *                          0 < end - start < 2^32
 *    40   u64  gen         generation, >= 1
 *    48   u32  table_crc   CRC32C of the block table (bytes 64 .. hdr_len-1)
 *    52   u32  reserved    0
 *    56   u32  reserved    0
 *    60   u32  hdr_crc     CRC32C of bytes 0..59
 *    64   u32  block_crc[nblocks]
 *                          block_crc[i] = CRC32C of payload bytes
 *                          [i * block_size, min((i + 1) * block_size, len))
 *   hdr_len                payload: the logical bytes [start, end), in order
 *
 *   len     = end - start
 *   hdr_len = 64 + 4 * nblocks        (nrs_objfmt_hdr_len)
 *   object  = hdr_len + len bytes; nothing follows the payload
 *
 * CRC32C is the Castagnoli CRC (crc32c.h), the checksum of Kafka record
 * batches and of our WAL records; a block CRC is the plain CRC32C of the
 * block, so any tool can check one.  The header CRC and the table CRC are
 * separate so that a reader checks the 64 fixed bytes before it trusts
 * nblocks, and the table once before it trusts any entry of it.
 *
 * VALIDITY (nrs_objfmt_parse, nrs_objfmt_verify), in this order:
 *   O1  magic matches, and hdr_crc matches bytes 0..59       else -EBADMSG
 *   O2  version == 1                                         else -EPROTO
 *   O3  the fields are possible: block_size == 65536; reserved fields 0;
 *       0 < end - start < 2^32; nblocks == ceil((end - start) / 65536);
 *       gen >= 1                                             else -EUCLEAN
 *   O4  the header names the wanted stream, range and gen    else -EUCLEAN
 *   O5  table_crc matches the table                          else -EBADMSG
 *   O6  each block matches its block_crc                     else -EBADMSG
 *   (whole objects only) the object is exactly hdr_len + len bytes long,
 *   else -EBADMSG.
 *
 * VERSIONS.  Every future version keeps magic at 0, version at 4 and hdr_crc
 * at 60 over bytes 0..59, so O1 is checked before the version is believed:
 * a bit flip in the version field is a checksum failure (-EBADMSG), while a
 * header that is intact but newer is refused with -EPROTO, never misread.
 * The two must stay apart for the operator: -EBADMSG means the bucket (or a
 * cache) rotted, -EPROTO that this build is older than the writer.  Both are
 * EIO at the FUSE boundary.
 *
 * KEYS.  "s/<stream id>/<start>-<end>-g<gen>", each number 16 lower-case
 * hex digits: derived from the stream id and generation only, never from a
 * user's file name (DESIGN.md 7), unique per (stream, range, gen), and
 * sorted by offset within a stream in a listing.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "obj/objfmt.h"
#include "util/crc32c.h"
#include "util/le.h"

#define OBJ_MAGIC	0x4f53524eu	/* "NRSO" as little-endian bytes */
#define OBJ_VERSION	1

/* Field offsets in the fixed header. */
#define OFF_MAGIC	0
#define OFF_VERSION	4
#define OFF_RESERVED0	6
#define OFF_BLOCKSIZE	8
#define OFF_NBLOCKS	12
#define OFF_STREAM	16
#define OFF_START	24
#define OFF_END		32
#define OFF_GEN		40
#define OFF_TABLECRC	48
#define OFF_RESERVED1	52
#define OFF_RESERVED2	56
#define OFF_HDRCRC	60

_Static_assert(OFF_HDRCRC + 4 == NRS_OBJ_FIXED, "fixed header is 64 bytes");
_Static_assert((NRS_OBJ_MAX_LEN + NRS_OBJ_BLOCK - 1) / NRS_OBJ_BLOCK <=
	       UINT32_MAX, "nblocks fits a u32");
_Static_assert(sizeof("s/0123456789abcdef/0123456789abcdef-"
		      "0123456789abcdef-g0123456789abcdef") <= NRS_OBJKEY_MAX,
	       "a key fits NRS_OBJKEY_MAX");

bool nrs_objfmt_hdr_is_valid(const struct nrs_objhdr *h)
{
	return h->end > h->start && h->end - h->start < NRS_OBJ_MAX_LEN &&
	       h->gen != 0;
}

static bool hdr_equal(const struct nrs_objhdr *a, const struct nrs_objhdr *b)
{
	return a->stream_id == b->stream_id && a->start == b->start &&
	       a->end == b->end && a->gen == b->gen;
}

uint32_t nrs_objfmt_nblocks(uint64_t len)
{
	if (len >= NRS_OBJ_MAX_LEN)
		len = NRS_OBJ_MAX_LEN - 1;
	return (uint32_t)((len + NRS_OBJ_BLOCK - 1) / NRS_OBJ_BLOCK);
}

size_t nrs_objfmt_hdr_len(uint64_t len)
{
	return NRS_OBJ_FIXED + 4 * (size_t)nrs_objfmt_nblocks(len);
}

int nrs_objfmt_seal(void *buf, const struct nrs_objhdr *h)
{
	unsigned char *b = buf;
	const unsigned char *payload;
	unsigned char *table;
	uint64_t len;
	uint32_t nblocks;

	if (!b || !h || !nrs_objfmt_hdr_is_valid(h))
		return -EINVAL;
	len = h->end - h->start;
	nblocks = nrs_objfmt_nblocks(len);
	table = b + NRS_OBJ_FIXED;
	payload = b + nrs_objfmt_hdr_len(len);
	for (uint32_t i = 0; i < nblocks; i++) {
		uint64_t at = (uint64_t)i * NRS_OBJ_BLOCK;
		size_t n = len - at < NRS_OBJ_BLOCK ? (size_t)(len - at)
						    : NRS_OBJ_BLOCK;

		nrs_le32_put(table + 4 * (size_t)i,
			     nrs_crc32c(0, payload + at, n));
	}

	nrs_le32_put(b + OFF_MAGIC, OBJ_MAGIC);
	nrs_le16_put(b + OFF_VERSION, OBJ_VERSION);
	nrs_le16_put(b + OFF_RESERVED0, 0);
	nrs_le32_put(b + OFF_BLOCKSIZE, NRS_OBJ_BLOCK);
	nrs_le32_put(b + OFF_NBLOCKS, nblocks);
	nrs_le64_put(b + OFF_STREAM, h->stream_id);
	nrs_le64_put(b + OFF_START, h->start);
	nrs_le64_put(b + OFF_END, h->end);
	nrs_le64_put(b + OFF_GEN, h->gen);
	nrs_le32_put(b + OFF_TABLECRC, nrs_crc32c(0, table, 4 * (size_t)nblocks));
	nrs_le32_put(b + OFF_RESERVED1, 0);
	nrs_le32_put(b + OFF_RESERVED2, 0);
	nrs_le32_put(b + OFF_HDRCRC, nrs_crc32c(0, b, OFF_HDRCRC));
	return 0;
}

int nrs_objfmt_parse(const void *buf, size_t len, const struct nrs_objhdr *want,
		     struct nrs_objinfo *out)
{
	const unsigned char *b = buf;
	struct nrs_objinfo oi;

	if (!b || !out)
		return -EINVAL;
	if (len < NRS_OBJ_FIXED)
		return -EBADMSG;
	if (nrs_le32_get(b + OFF_MAGIC) != OBJ_MAGIC ||
	    nrs_le32_get(b + OFF_HDRCRC) != nrs_crc32c(0, b, OFF_HDRCRC))
		return -EBADMSG;					/* O1 */
	if (nrs_le16_get(b + OFF_VERSION) != OBJ_VERSION)
		return -EPROTO;						/* O2 */

	oi.h.stream_id = nrs_le64_get(b + OFF_STREAM);
	oi.h.start = nrs_le64_get(b + OFF_START);
	oi.h.end = nrs_le64_get(b + OFF_END);
	oi.h.gen = nrs_le64_get(b + OFF_GEN);
	oi.nblocks = nrs_le32_get(b + OFF_NBLOCKS);
	oi.table_crc = nrs_le32_get(b + OFF_TABLECRC);
	if (nrs_le32_get(b + OFF_BLOCKSIZE) != NRS_OBJ_BLOCK ||
	    nrs_le16_get(b + OFF_RESERVED0) != 0 ||
	    nrs_le32_get(b + OFF_RESERVED1) != 0 ||
	    nrs_le32_get(b + OFF_RESERVED2) != 0 ||
	    !nrs_objfmt_hdr_is_valid(&oi.h) ||
	    oi.nblocks != nrs_objfmt_nblocks(oi.h.end - oi.h.start))
		return -EUCLEAN;					/* O3 */
	if (want && !hdr_equal(&oi.h, want))
		return -EUCLEAN;					/* O4 */
	*out = oi;
	return 0;
}

int nrs_objfmt_verify_table(const struct nrs_objinfo *oi, const void *table)
{
	if (!oi || !table)
		return -EINVAL;
	if (nrs_crc32c(0, table, 4 * (size_t)oi->nblocks) != oi->table_crc)
		return -EBADMSG;					/* O5 */
	return 0;
}

size_t nrs_objfmt_block_len(const struct nrs_objinfo *oi, uint32_t i)
{
	uint64_t len = oi->h.end - oi->h.start;
	uint64_t at = (uint64_t)i * NRS_OBJ_BLOCK;

	if (i >= oi->nblocks)
		return 0;
	return len - at < NRS_OBJ_BLOCK ? (size_t)(len - at) : NRS_OBJ_BLOCK;
}

int nrs_objfmt_verify_block(const struct nrs_objinfo *oi, const void *table,
			    uint32_t i, const void *data, size_t len)
{
	const unsigned char *t = table;

	if (!oi || !t || i >= oi->nblocks || (!data && len > 0))
		return -EINVAL;
	if (len != nrs_objfmt_block_len(oi, i) ||
	    nrs_crc32c(0, data, len) != nrs_le32_get(t + 4 * (size_t)i))
		return -EBADMSG;					/* O6 */
	return 0;
}

int nrs_objfmt_verify(const void *buf, size_t len,
		      const struct nrs_objhdr *want)
{
	const unsigned char *b = buf;
	const unsigned char *table, *payload;
	struct nrs_objinfo oi;
	size_t hl;
	int err;

	if (!b)
		return -EINVAL;
	err = nrs_objfmt_parse(b, len, want, &oi);
	if (err)
		return err;
	hl = nrs_objfmt_hdr_len(oi.h.end - oi.h.start);
	if (len != hl + (oi.h.end - oi.h.start))
		return -EBADMSG;
	table = b + NRS_OBJ_FIXED;
	payload = b + hl;
	err = nrs_objfmt_verify_table(&oi, table);
	for (uint32_t i = 0; !err && i < oi.nblocks; i++)
		err = nrs_objfmt_verify_block(&oi, table, i,
					      payload + (size_t)i * NRS_OBJ_BLOCK,
					      nrs_objfmt_block_len(&oi, i));
	return err;
}

int nrs_objfmt_key(char buf[NRS_OBJKEY_MAX], const struct nrs_objhdr *h)
{
	int n;

	if (!buf || !h || !nrs_objfmt_hdr_is_valid(h))
		return -EINVAL;
	n = snprintf(buf, NRS_OBJKEY_MAX,
		     "s/%016" PRIx64 "/%016" PRIx64 "-%016" PRIx64 "-g%016" PRIx64,
		     h->stream_id, h->start, h->end, h->gen);
	if (n < 0 || n >= NRS_OBJKEY_MAX)
		return -EINVAL;	/* unreachable: the _Static_assert above */
	return n;
}

int nrs_objfmt_adopt_key(char buf[NRS_OBJKEY_MAX], uint64_t seg)
{
	if (seg & NRS_ADOPT_OWAL) {	/* MZ13: wal_object.c's ow_key */
		seg &= ~NRS_ADOPT_OWAL;
		return snprintf(buf, NRS_OBJKEY_MAX, "owal/%06" PRIx64
				"/%010" PRIx64, seg >> 40,
				seg & (((uint64_t)1 << 40) - 1));
	}
	return snprintf(buf, NRS_OBJKEY_MAX, "w/%016" PRIx64, seg);
}

/* ---- digests (the one module that includes OpenSSL) -------------------- */

/* Feed the crypto library in pieces that fit its int-sized internals and
 * stay in cache between the two digests. */
#define DIGEST_STEP	(1u << 20)

static int digest_init(EVP_MD_CTX **ctx, const EVP_MD *md)
{
	*ctx = EVP_MD_CTX_new();
	if (!*ctx)
		return -ENOMEM;
	return EVP_DigestInit_ex(*ctx, md, NULL) == 1 ? 0 : -EIO;
}

static int digest_final(EVP_MD_CTX *ctx, unsigned char *out, unsigned want)
{
	unsigned n = 0;

	if (EVP_DigestFinal_ex(ctx, out, &n) != 1 || n != want)
		return -EIO;
	return 0;
}

int nrs_objfmt_digest(const void *buf, size_t len,
		      unsigned char sha256[NRS_SHA256_LEN],
		      unsigned char md5[NRS_MD5_LEN])
{
	const unsigned char *p = buf;
	EVP_MD_CTX *s = NULL, *m = NULL;
	int err = 0;

	if ((!p && len > 0) || (!sha256 && !md5))
		return -EINVAL;
	if (sha256)
		err = digest_init(&s, EVP_sha256());
	if (!err && md5)
		err = digest_init(&m, EVP_md5());
	for (size_t at = 0; !err && at < len; at += DIGEST_STEP) {
		size_t n = len - at < DIGEST_STEP ? len - at : DIGEST_STEP;

		if ((s && EVP_DigestUpdate(s, p + at, n) != 1) ||
		    (m && EVP_DigestUpdate(m, p + at, n) != 1))
			err = -EIO;
	}
	if (!err && s)
		err = digest_final(s, sha256, NRS_SHA256_LEN);
	if (!err && m)
		err = digest_final(m, md5, NRS_MD5_LEN);
	EVP_MD_CTX_free(s);
	EVP_MD_CTX_free(m);
	return err;
}
