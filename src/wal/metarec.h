/*
 * metarec.h - the payload of a META record of the WAL (walrec.h kind
 * NRS_WALREC_META): one metadata change, as its meta sequence number and
 * the SQLite session changeset of its transaction (meta.h, the change
 * log).  The format is owned by metarec.c, whose top comment gives every
 * field.  Pure: no I/O, no locks.
 */
#ifndef NRS_METAREC_H
#define NRS_METAREC_H

#include <stddef.h>
#include <stdint.h>

#include "wal/walrec.h"

#define NRS_METAREC_MAGIC	0x4d53524eu	/* "NRSM" as little-endian bytes */
#define NRS_METAREC_FIXED	16		/* payload bytes before the change */
#define NRS_METAREC_CHANGESET	1		/* format: a SQLite changeset */

/* A decoded META payload; change points into the payload given. */
struct nrs_metarec {
	uint64_t seq;		/* the meta sequence number of the change */
	uint16_t format;	/* NRS_METAREC_CHANGESET */
	const void *change;
	size_t change_len;	/* >= 1 */
};

/*
 * The WAL record header of a META record for change seq of change_len
 * bytes, with LSN lsn (r->len counts the fixed part too), and the fixed
 * part of its payload in fixed; the payload is fixed then the change.
 * Returns 0, or -EINVAL (seq or lsn 0, change_len 0 or too large for
 * one record, NRS_WALREC_MAX_LEN).
 */
int nrs_metarec_make(uint64_t lsn, uint64_t seq, size_t change_len,
		     struct nrs_walrec *r,
		     unsigned char fixed[NRS_METAREC_FIXED]);

/*
 * Decode the payload (r->len bytes, chunk CRCs already verified) of META
 * record r (header verified, walrec.c WV4).  Returns 0 and fills *out, or
 * -EUCLEAN (metarec.c MR1: the payload contradicts its header or is of
 * an unknown format; *out untouched).
 */
int nrs_metarec_decode(const struct nrs_walrec *r, const void *payload,
		       struct nrs_metarec *out);

#endif
