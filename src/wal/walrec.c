/*
 * walrec.c - the on-disk encoding of one WAL record.
 *
 * A record is one commit intent (DESIGN.md section 1, event 1) together with
 * the bytes it appends to one stream.  The same bytes are written by every
 * WAL provider (a local segment file, an object in the bucket), so this
 * module does no I/O: it formats a header for a payload given as iovecs and
 * checks a header and payload read back.
 *
 * RECORD FORMAT
 *
 * All integers are little-endian and are read and written byte by byte (no
 * struct is ever cast onto the buffer).  Offsets are from the record start.
 *
 *     0   u32  magic      0x5253524e: the bytes "NRSR"
 *     4   u16  version    1
 *     6   u16  kind       1 = DATA (the payload is appended bytes),
 *                         2 = META (the payload is one metadata change,
 *                         metarec.c; WV4 gives its fields)
 *     8   u64  lsn        log sequence number, >= 1, unique and increasing
 *    16   u64  stream_id
 *    24   u64  base       logical stream offset of the first payload byte
 *    32   u32  len        payload bytes, <= NRS_WALREC_MAX_LEN (64 MiB)
 *    36   u32  n_appends  appends (version steps) packed in the payload
 *    40   u64  epoch      writer epoch the appends were accepted under
 *    48   u64  prev_lsn   the stream's previous commit (0 = none): the
 *                         commit chain of DESIGN.md section 1
 *    56   u32  reserved   0
 *    60   u32  hdr_crc    CRC32C over bytes 0..59 followed by the whole
 *                         chunk-CRC table (bytes 64 .. hdr_len-1)
 *    64   u32  chunk_crc[nchunks]
 *                         nchunks = ceil(len / 65536), 0 when len == 0;
 *                         chunk_crc[i] = CRC32C of payload bytes
 *                         [i * 65536, min((i + 1) * 65536, len))
 *   hdr_len               payload, len bytes
 *   hdr_len + len         zero bytes up to total_len, a multiple of 8
 *
 *   hdr_len   = 64 + 4 * nchunks
 *   total_len = round_up(hdr_len + len, 8)
 *
 * CRC32C is the Castagnoli CRC (crc32c.h), the checksum of Kafka record
 * batches.  Chunking lets a reader verify a 64 KiB piece of a large record
 * without reading the rest (DESIGN.md I6), and lets a scanner check the
 * header of a 64 MiB record before reading its payload.
 *
 * VALIDITY
 *
 * A header is valid when, in this order:
 *   WV1 the magic matches                                  else -EBADMSG
 *   WV2 hdr_crc matches bytes 0..59 and the CRC table      else -EBADMSG
 *   WV3 the fields are possible:                           else -EUCLEAN
 *       version == 1; kind is DATA or META; reserved == 0;
 *       len <= NRS_WALREC_MAX_LEN; lsn != 0; prev_lsn < lsn;
 *       for DATA: n_appends == 0 exactly when len == 0, and
 *       n_appends <= len (every append is at least one byte); base + len
 *       does not overflow u64; for META, WV4.
 *   WV4 a META record names no stream and no chain: stream_id, epoch and
 *       prev_lsn are 0, n_appends is 1, len is more than the payload's
 *       fixed part (metarec.h NRS_METAREC_FIXED), and base, the meta
 *       sequence number of the change, is not 0.  A reader of DATA
 *       records (the stream recovery, the reader) never takes a META
 *       record for appended bytes: it checks the kind.
 * A record is whole when its header is valid and every chunk CRC matches its
 * payload chunk.  The padding is not checked (a reader never returns it).
 * A zero-length record (len 0, n_appends 0, no chunk CRCs) is valid.
 *
 * The encoder refuses (-EINVAL) a struct that would fail WV3, so every record
 * it formats decodes.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "util/crc32c.h"
#include "util/le.h"
#include "wal/metarec.h"
#include "wal/walrec.h"

/* Field offsets in the fixed header. */
#define OFF_MAGIC	0
#define OFF_VERSION	4
#define OFF_KIND	6
#define OFF_LSN		8
#define OFF_STREAM	16
#define OFF_BASE	24
#define OFF_LEN		32
#define OFF_NAPPENDS	36
#define OFF_EPOCH	40
#define OFF_PREV	48
#define OFF_RESERVED	56
#define OFF_HDRCRC	60

_Static_assert(OFF_HDRCRC + 4 == NRS_WALREC_FIXED, "fixed header is 64 bytes");
_Static_assert(NRS_WALREC_FIXED % NRS_WALREC_ALIGN == 0, "aligned header");

uint32_t nrs_walrec_nchunks(uint32_t len)
{
	return (uint32_t)(((uint64_t)len + NRS_WALREC_CHUNK - 1) /
			  NRS_WALREC_CHUNK);
}

size_t nrs_walrec_hdr_len(uint32_t len)
{
	return NRS_WALREC_FIXED + 4 * (size_t)nrs_walrec_nchunks(len);
}

size_t nrs_walrec_total_len(uint32_t len)
{
	size_t n = nrs_walrec_hdr_len(len) + len;

	return (n + NRS_WALREC_ALIGN - 1) & ~(size_t)(NRS_WALREC_ALIGN - 1);
}

/* WV4: a META record's fields. */
static bool meta_possible(const struct nrs_walrec *r)
{
	return r->stream_id == 0 && r->epoch == 0 && r->prev_lsn == 0 &&
	       r->n_appends == 1 && r->len > NRS_METAREC_FIXED &&
	       r->base != 0;
}

/* WV3: the fields of a header whose CRC matched could have been written. */
static bool fields_possible(const struct nrs_walrec *r)
{
	if (r->kind != NRS_WALREC_DATA && r->kind != NRS_WALREC_META)
		return false;
	if (r->len > NRS_WALREC_MAX_LEN)
		return false;
	if (r->lsn == 0 || r->prev_lsn >= r->lsn)
		return false;
	if (r->kind == NRS_WALREC_META)
		return meta_possible(r);
	if (r->len == 0 ? r->n_appends != 0
			: r->n_appends == 0 || r->n_appends > r->len)
		return false;
	if (r->base > UINT64_MAX - r->len)
		return false;
	return true;
}

static uint32_t hdr_crc(const unsigned char *hdr, uint32_t nchunks)
{
	uint32_t crc = nrs_crc32c(0, hdr, OFF_HDRCRC);

	return nrs_crc32c(crc, hdr + NRS_WALREC_FIXED, 4 * (size_t)nchunks);
}

ssize_t nrs_walrec_encode_hdr(const struct nrs_walrec *r,
			      const struct iovec *iov, int iovcnt,
			      void *hdr, size_t hdr_size)
{
	unsigned char *h = hdr;
	uint32_t nchunks, chunk = 0, in_chunk = 0, crc = 0;
	size_t hlen, total = 0;

	if (!fields_possible(r) || iovcnt < 0 || (iovcnt > 0 && !iov))
		return -EINVAL;
	hlen = nrs_walrec_hdr_len(r->len);
	if (hdr_size < hlen)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > r->len - total)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	if (total != r->len)
		return -EINVAL;

	/* Chunk CRCs: chunk boundaries fall anywhere inside the iovecs. */
	nchunks = nrs_walrec_nchunks(r->len);
	for (int i = 0; i < iovcnt; i++) {
		const unsigned char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left > 0) {
			size_t n = NRS_WALREC_CHUNK - in_chunk;

			if (n > left)
				n = left;
			crc = nrs_crc32c(crc, p, n);
			p += n;
			left -= n;
			in_chunk += (uint32_t)n;
			if (in_chunk == NRS_WALREC_CHUNK) {
				nrs_le32_put(h + NRS_WALREC_FIXED +
					     4 * (size_t)chunk, crc);
				chunk++;
				crc = 0;
				in_chunk = 0;
			}
		}
	}
	if (in_chunk > 0)
		nrs_le32_put(h + NRS_WALREC_FIXED + 4 * (size_t)chunk++, crc);
	if (chunk != nchunks)
		return -EINVAL;	/* unreachable: total == len was checked */

	nrs_le32_put(h + OFF_MAGIC, NRS_WALREC_MAGIC);
	nrs_le16_put(h + OFF_VERSION, NRS_WALREC_VERSION);
	nrs_le16_put(h + OFF_KIND, r->kind);
	nrs_le64_put(h + OFF_LSN, r->lsn);
	nrs_le64_put(h + OFF_STREAM, r->stream_id);
	nrs_le64_put(h + OFF_BASE, r->base);
	nrs_le32_put(h + OFF_LEN, r->len);
	nrs_le32_put(h + OFF_NAPPENDS, r->n_appends);
	nrs_le64_put(h + OFF_EPOCH, r->epoch);
	nrs_le64_put(h + OFF_PREV, r->prev_lsn);
	nrs_le32_put(h + OFF_RESERVED, 0);
	nrs_le32_put(h + OFF_HDRCRC, hdr_crc(h, nchunks));
	return (ssize_t)hlen;
}

int nrs_walrec_decode_hdr(const void *buf, size_t avail, struct nrs_walrec *out)
{
	const unsigned char *h = buf;
	struct nrs_walrec r;

	if (avail < NRS_WALREC_FIXED)
		return -ENODATA;
	if (nrs_le32_get(h + OFF_MAGIC) != NRS_WALREC_MAGIC)
		return -EBADMSG;					/* WV1 */

	r.kind = nrs_le16_get(h + OFF_KIND);
	r.lsn = nrs_le64_get(h + OFF_LSN);
	r.stream_id = nrs_le64_get(h + OFF_STREAM);
	r.base = nrs_le64_get(h + OFF_BASE);
	r.len = nrs_le32_get(h + OFF_LEN);
	r.n_appends = nrs_le32_get(h + OFF_NAPPENDS);
	r.epoch = nrs_le64_get(h + OFF_EPOCH);
	r.prev_lsn = nrs_le64_get(h + OFF_PREV);

	if (avail < nrs_walrec_hdr_len(r.len)) {
		/* Unverified: only tells the caller how much to read. */
		*out = r;
		return -ENODATA;
	}
	if (nrs_le32_get(h + OFF_HDRCRC) !=
	    hdr_crc(h, nrs_walrec_nchunks(r.len)))
		return -EBADMSG;					/* WV2 */
	if (nrs_le16_get(h + OFF_VERSION) != NRS_WALREC_VERSION ||
	    nrs_le32_get(h + OFF_RESERVED) != 0 || !fields_possible(&r))
		return -EUCLEAN;					/* WV3 */
	*out = r;
	return 0;
}

int nrs_walrec_verify_chunks(const void *hdr, const struct nrs_walrec *r,
			     uint32_t first, uint32_t n, const void *data,
			     uint32_t *bad_chunk)
{
	const unsigned char *table = (const unsigned char *)hdr +
				     NRS_WALREC_FIXED;
	const unsigned char *p = data;
	uint32_t nchunks = nrs_walrec_nchunks(r->len);

	if (first > nchunks || n > nchunks - first)
		return -EINVAL;
	for (uint32_t i = first; i < first + n; i++) {
		uint64_t start = (uint64_t)i * NRS_WALREC_CHUNK;
		size_t clen = r->len - start < NRS_WALREC_CHUNK ?
			      (size_t)(r->len - start) : NRS_WALREC_CHUNK;

		if (nrs_crc32c(0, p, clen) !=
		    nrs_le32_get(table + 4 * (size_t)i)) {
			if (bad_chunk)
				*bad_chunk = i;
			return -EBADMSG;
		}
		p += clen;
	}
	return 0;
}
