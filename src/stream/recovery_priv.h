/*
 * recovery_priv.h - what the files of start-up recovery share, and nothing
 * outside them may include (the API is recovery.h).  The rules are at the
 * top of each file:
 *
 *   recovery.c        the scan, loading the streams, the re-publication,
 *                     the driver (RC1-RC4, RC6-RC9, RD1, RD2, RD4)
 *   recovery_meta.c   the replay of the META records (RM1)
 *   recovery_index.c  the offset indexes and the commit chain (RC5, RD3,
 *                     RD5)
 */
#ifndef NRS_RECOVERY_PRIV_H
#define NRS_RECOVERY_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"
#include "stream/recovery.h"
#include "wal/wal.h"

struct nrs_stream;

/* What the scan of the WALs found (recovery.c). */
struct scan {
	struct nrs_wal_rec_info *v;	/* data records; sorted by LSN */
	size_t n, cap;
	struct nrs_wal_rec_info *meta;	/* META records (RM1) */
	size_t nmeta, mcap;
	struct nrs_streams *streams;
	bool object;			/* scanning the object WAL (RC8) */
	uint64_t other_lsn;		/* the largest LSN RC8 left out (RC6) */
};

/* The committed rows, sorted by nrs_recover_obj_cmp. */
struct objs {
	struct nrs_obj_row *v;
	size_t n;
};

/* recovery.c: WAL records by LSN (a qsort comparator). */
int nrs_recover_cmp_lsn(const void *a, const void *b);

/* recovery_meta.c, RM1: the changes above the store's number, in number
 * order. */
int nrs_recover_replay_meta(const struct nrs_recover_env *e, struct scan *s);

/* recovery_index.c, RC5: the entries of st's committed generations, from
 * l->v[*i] on (l sorted by nrs_recover_obj_cmp); *i ends past them. */
int nrs_recover_index_objects(struct nrs_stream *st, const struct objs *l,
			      size_t *i);
/* recovery_index.c, RC5: st's WAL records above max(start, materialized). */
int nrs_recover_rebuild_index(struct nrs_stream *st, const struct scan *s);

#endif
