/*
 * record.h - the self-checking record the test helpers append and verify.
 *
 * nrs-appender writes records, nrs-verify and nrs-tail check them.  Each
 * record is written with exactly one write(2), so each is one append of the
 * stream: a reader may only ever see whole records (DESIGN.md I3, and a
 * short read ends at the published head, which is a record boundary).
 *
 * Layout, little-endian, 32-byte header then payload:
 *
 *	off  size  field
 *	  0     4  magic     NRS_REC_MAGIC ("NRSt" as bytes)
 *	  4     4  len       total record bytes, header included
 *	                     (NRS_REC_MIN .. NRS_REC_MAX)
 *	  8     4  writer    writer id (unique in one test)
 *	 12     4  tag       stream tag: FNV-1a of the stream file's basename,
 *	                     so a record that lands in the wrong stream is caught
 *	 16     8  seq       per-writer sequence number, from 0, +1 per record
 *	 24     4  crc       CRC-32 (IEEE) of the header with this field zero,
 *	                     then the payload
 *	 28     4  pad       zero
 *	 32   len-32 payload  deterministic bytes from (writer, seq, len)
 *
 * The payload is a pure function of (writer, seq, len), so a checker
 * regenerates it and compares byte for byte: the CRC tells "damaged", the
 * comparison tells "not what was written".
 */
#ifndef NRS_TEST_RECORD_H
#define NRS_TEST_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define NRS_REC_MAGIC	0x7453524eu	/* "NRSt" */
#define NRS_REC_HDR	32u
#define NRS_REC_MIN	(NRS_REC_HDR + 1u)
#define NRS_REC_MAX	(1u << 20)	/* the mount's max atomic write */

struct nrs_rec {
	uint32_t len;
	uint32_t writer;
	uint32_t tag;
	uint64_t seq;
};

/* FNV-1a of the last path component of path. */
uint32_t nrs_rec_tag(const char *path);

/* Build a whole record (r->len bytes) into buf. */
void nrs_rec_build(const struct nrs_rec *r, unsigned char *buf);

/*
 * Check the record starting at buf, of which avail bytes are present.
 * Returns 1 and fills *out when a whole valid record is there; 0 when the
 * header is plausible but more than avail bytes are needed (*out->len says
 * how many); -1 when it is invalid, with a reason in why (size whylen).
 * Checks magic, length bounds, pad, CRC and the regenerated payload.
 */
int nrs_rec_check(const unsigned char *buf, size_t avail, struct nrs_rec *out,
		  char *why, size_t whylen);

/* Up to 32 bytes of buf as hex, for messages (static buffer). */
const char *nrs_rec_hex(const unsigned char *buf, size_t n);

#endif
