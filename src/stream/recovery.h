/*
 * recovery.h - start-up recovery (nrs_recover, recovery.c RC1-RC7, with
 * recovery_meta.c and recovery_index.c), and the rules of it (RC5,
 * RD1-RD3) that the offline checker (fsck.c) applies too, so that
 * nereusfs-fsck judges a data directory exactly as the next mount
 * will read it: those are pure functions, no I/O, no locks.
 *
 * RC5 in short: a stream's committed object generations, taken in the order
 * of nrs_recover_obj_cmp, are indexed first; the end of the last one taken
 * is the stream's `materialized`; then the commit chain is walked back from
 * the head only down to nrs_recover_chain_floor(start, materialized),
 * because the WAL segments below may have been reclaimed (walgc.c MZ5).
 * Where that walk breaks, the chain is rebuilt upwards from the
 * floor (RC5b), so that only the range no record can be trusted for is a
 * gap (nrs_recover_chain).
 */
#ifndef NRS_RECOVERY_H
#define NRS_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"
#include "wal/wal.h"
#include "wal/walrec.h"

struct nrs_streams;

/*
 * What recovery works on: the metadata store and the WAL, both open, and
 * the stream table, empty, which it fills (stream/table.h).  It runs
 * alone, before the commit pipeline and every other thread start, so it
 * reads the streams it loaded without their locks.  data_dir only names
 * files in log lines.  The core builds one (core.c); a unit test may hand
 * it a fake WAL (wal.h is an operations table).
 */
struct nrs_recover_env {
	struct nrs_meta *meta;
	struct nrs_wal *wal;		/* the local WAL */
	struct nrs_wal *owal;		/* the object WAL; NULL: none (then
					 * every record is taken from wal) */
	struct nrs_streams *streams;
	const char *data_dir;
	/* Counts the streams loaded (wal_object_scan.c RP1); NULL: none. */
	struct nrs_wal_progress *progress;
};

/* RC1-RC7: load the streams into e->streams, re-publish the heads the WAL
 * continues, rebuild every index; sets *next_lsn (RC6).  0 or -errno. */
int nrs_recover(const struct nrs_recover_env *e, uint64_t *next_lsn);

/*
 * RD1-RD3: what a value read from the disk may be (recovery.c and
 * recovery_index.c say what happens to one that is out of range; fsck.c
 * F7, F8, F20, F28, F29 report them).  The bounds: NRS_STREAM_ID_MAX and NRS_HEAD_MAX (meta.h),
 * NRS_WALREC_LSN_MAX (walrec.h).
 */

/*
 * RD1: NULL if stream row r (its checksum verified) holds values a daemon
 * could have written, else what is impossible about it (a static string).
 * _range: only the bounds of its id, head and last LSN (fsck F28; F7 and
 * F8 are the rest).
 */
static inline const char *nrs_recover_row_range(const struct nrs_stream_row *r)
{
	if (r->id == 0 || r->id > NRS_STREAM_ID_MAX)
		return "its id is out of range";
	if (r->head > NRS_HEAD_MAX)
		return "its head is out of range";
	if (r->last_lsn > NRS_WALREC_LSN_MAX)
		return "its last LSN is out of range";
	return NULL;
}

static inline const char *nrs_recover_row_damage(const struct nrs_stream_row *r)
{
	const char *why = nrs_recover_row_range(r);

	if (why)
		return why;
	if (r->start > r->head)
		return "its start is above its head";
	if (r->head > 0 ? r->last_lsn == 0 || r->version == 0 ||
			  r->version > r->head
			: r->version != 0)
		return "its version or last LSN is impossible at its head";
	return NULL;
}

/*
 * RD2: NULL if WAL record r (its CRCs verified, walrec.c WV3 passed) could
 * have been written: its LSN at most NRS_WALREC_LSN_MAX, its end at most
 * NRS_HEAD_MAX (pipeline.c PL1); else what is impossible (a static string).
 */
static inline const char *nrs_recover_rec_damage(const struct nrs_walrec *r)
{
	if (r->lsn > NRS_WALREC_LSN_MAX)
		return "its LSN is above the largest possible";
	if (r->base > NRS_HEAD_MAX || r->len > NRS_HEAD_MAX - r->base)
		return "it ends past the largest head";
	return NULL;
}

/* RD3: could a materializer have written object row o (objfmt.h)? */
bool nrs_recover_obj_is_possible(const struct nrs_obj_row *o);

/* What RC5 does with one committed generation of a stream. */
enum nrs_obj_use {
	NRS_OBJ_USE_SERVES = 1,	/* indexed: serves [start, end) */
	NRS_OBJ_USE_TRIMMED,	/* holds only bytes below the stream's start */
	NRS_OBJ_USE_PAST_HEAD,	/* reaches past the head: not the stream's */
	NRS_OBJ_USE_OVERLAPS,	/* overlaps a generation already indexed */
};

/* The order RC5 takes committed generations in: stream id, start, gen
 * (a qsort comparator over struct nrs_obj_row). */
int nrs_recover_obj_cmp(const void *a, const void *b);

/*
 * RC5: the use of committed generation o of a stream whose start and head
 * are given, when the generations taken before it (in the order above) end
 * at last_end (0 when none was taken).  Every generation that serves
 * becomes the new last_end, and the last one's end is `materialized`.
 */
enum nrs_obj_use nrs_recover_obj_use(const struct nrs_obj_row *o,
				     uint64_t start, uint64_t head,
				     uint64_t last_end);

/* RC5: where the commit chain walk stops: max(start, materialized). */
static inline uint64_t nrs_recover_chain_floor(uint64_t start,
					       uint64_t materialized)
{
	return materialized > start ? materialized : start;
}

/*
 * RC5: one stream's commit chain above floor, as recovery indexes it and
 * fsck judges it.  recs holds n records sorted by LSN (any kind; only
 * data records of stream id count), head and last_lsn are the stream's
 * published ones.
 */
struct nrs_chain {
	size_t *idx;		/* n indexes into recs, in offset order */
	size_t n;
	/* The committed range no record can be trusted for (empty when the
	 * chain is whole): reads of it fail. */
	uint64_t miss_start, miss_end;
	/* Where the walk back from the head stopped (miss_end): the LSN it
	 * could not follow, 0 when the chain ended (prev_lsn 0) there. */
	uint64_t broken_lsn;
	/* Two records that claim miss_start (RC5b), else both 0. */
	uint64_t twin[2];
};

/* 0 or -ENOMEM; *out (free with nrs_chain_free) is written on success. */
int nrs_recover_chain(const struct nrs_wal_rec_info *recs, size_t n,
		      uint64_t id, uint64_t head, uint64_t last_lsn,
		      uint64_t floor, struct nrs_chain *out);
void nrs_chain_free(struct nrs_chain *ch);

#endif
