/*
 * walrec.h - encoding of one WAL record (a commit intent plus its bytes).
 *
 * A record carries every append one batch made to one stream, in order, as
 * one contiguous payload.  The format is owned by walrec.c, whose top
 * comment gives every field.  This module is pure: no I/O, no locks.
 */
#ifndef NRS_WALREC_H
#define NRS_WALREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define NRS_WALREC_MAGIC	0x5253524eu	/* "NRSR" as little-endian bytes */
#define NRS_WALREC_VERSION	1
#define NRS_WALREC_FIXED	64		/* fixed header bytes */
#define NRS_WALREC_CHUNK	65536u		/* payload bytes per chunk CRC */
#define NRS_WALREC_MAX_LEN	(64u << 20)	/* largest payload accepted */
#define NRS_WALREC_ALIGN	8
/* The largest LSN ever issued (2^63 - 1: a million commits a second for
 * 290,000 years).  A record above it is damage (recovery.h RD2), and the
 * commit pipeline refuses to issue one (pipeline.c PL1). */
#define NRS_WALREC_LSN_MAX	((uint64_t)INT64_MAX)

enum nrs_walrec_kind {
	NRS_WALREC_DATA = 1,	/* appends: payload is the appended bytes */
	NRS_WALREC_META = 2,	/* a metadata change: payload is metarec.h's,
				 * base its meta sequence number (WV4) */
};

/* The decoded fixed header: the commit intent. */
struct nrs_walrec {
	uint16_t kind;
	uint64_t lsn;		/* log sequence number, unique, increasing */
	uint64_t stream_id;
	uint64_t base;		/* logical offset of the first payload byte */
	uint32_t len;		/* payload bytes */
	uint32_t n_appends;	/* appends (version steps) in the payload */
	uint64_t epoch;		/* writer epoch the appends were accepted under */
	uint64_t prev_lsn;	/* the stream's previous commit, 0 = none */
};

/* Number of chunk CRCs that follow the fixed header for a payload of len. */
uint32_t nrs_walrec_nchunks(uint32_t len);
/* Bytes of fixed header plus chunk CRC table. */
size_t nrs_walrec_hdr_len(uint32_t len);
/* Bytes the whole record occupies on disk: header, payload, padding to 8. */
size_t nrs_walrec_total_len(uint32_t len);

/*
 * Encode the header of *r into hdr (hdr_size >= nrs_walrec_hdr_len(r->len)),
 * computing the chunk CRCs over the payload given as iov (which must add up
 * to exactly r->len bytes).  Returns the header length, or -EINVAL (also
 * when *r has fields a decoder would reject: walrec.c, WV3).
 */
ssize_t nrs_walrec_encode_hdr(const struct nrs_walrec *r,
			      const struct iovec *iov, int iovcnt,
			      void *hdr, size_t hdr_size);

/*
 * Decode and verify a header (fixed part and chunk-CRC table) from buf
 * (avail bytes).  Returns 0 and fills *out with the verified fields, or:
 *   -ENODATA  avail < NRS_WALREC_FIXED: *out is untouched; or
 *             NRS_WALREC_FIXED <= avail < nrs_walrec_hdr_len(len) with len
 *             read from the magic-matching fixed part: *out is filled with
 *             the fixed fields NOT YET VERIFIED (only the magic was checked;
 *             the CRC covers the table, which is not all there).  Use them
 *             only to call again with nrs_walrec_hdr_len(out->len) bytes,
 *             which is at most NRS_WALREC_FIXED + 4 * 65536 whatever len is.
 *   -EBADMSG  the magic (checked as soon as 64 bytes are given) or the
 *             header CRC is wrong; *out is untouched.
 *   -EUCLEAN  the CRC matches but the fields are impossible (walrec.c, WV3);
 *             *out is untouched.
 */
int nrs_walrec_decode_hdr(const void *buf, size_t avail, struct nrs_walrec *out);

/*
 * Verify payload chunks [first, first + n) of a record whose verified header
 * is hdr.  data holds those chunks' bytes back to back (the last chunk of the
 * record may be short).  Returns 0, -EBADMSG (*bad_chunk, if not NULL,
 * names the first chunk that failed), or -EINVAL when [first, first + n) is
 * not within the record's chunks.
 */
int nrs_walrec_verify_chunks(const void *hdr, const struct nrs_walrec *r,
			     uint32_t first, uint32_t n, const void *data,
			     uint32_t *bad_chunk);

#endif
