/*
 * fixture_wal.h - a fake WAL for the unit tests that call recovery
 * through its seam (stream/recovery.h, struct nrs_recover_env; wal.h is an
 * operations table).
 *
 * scan hands the records a test listed in v[] to its callback, in order,
 * and notes how many sync_all calls came before it ended; sync_all counts
 * its calls and returns sync_err; read returns the bytes a test put in
 * seg[0, used) as segment 1 (-ENOENT for any other segment or an offset
 * past used).  Recovery may call those three only: the other operations
 * are NULL, and would crash.  The struct is plain data: zero it, then
 * nrs_fixture_wal_init; a copy of it is a saved state.
 */
#ifndef NRS_TEST_FIXTURE_WAL_H
#define NRS_TEST_FIXTURE_WAL_H

#include <stddef.h>

#include "wal/wal.h"

#define NRS_FIXTURE_WAL_MAX	8		/* records */
#define NRS_FIXTURE_WAL_SEG	(1u << 16)	/* bytes of segment 1 */

struct nrs_fixture_wal {
	struct nrs_wal w;		/* first: the ops see a struct nrs_wal */
	struct nrs_wal_rec_info v[NRS_FIXTURE_WAL_MAX];
	size_t n;
	int sync_err;			/* what sync_all returns */
	unsigned int syncs;
	unsigned int syncs_at_scan;	/* sync_all calls before scan ended */
	unsigned char seg[NRS_FIXTURE_WAL_SEG];	/* segment 1's bytes */
	size_t used;
};

/* Set fw's operations table (fw zeroed or as a test left it). */
void nrs_fixture_wal_init(struct nrs_fixture_wal *fw);

#endif
