/*
 * walgc.h - the WAL's garbage collection (rules MZ5 and MZ7 at the top of
 * walgc.c), run by the materializer's builder threads.
 *
 * Locking: called with no lock held.  g->lock lets one reclaim or seal
 * run at a time; the walk over the stream table (its lock, then each
 * st->lock) comes before g->lock is taken, and the drain and wal_seal
 * upcalls (services.h) run under it.
 */
#ifndef NRS_WALGC_H
#define NRS_WALGC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct nrs_services;
struct nrs_wal;
struct nrs_wal_stats;

struct nrs_walgc {
	const struct nrs_services *svc;
	struct nrs_wal *wal;		/* the WAL it collects */
	bool object;			/* wal holds object-wal streams' records */
	pthread_mutex_t lock;		/* one reclaimer at a time */
	uint64_t reclaimed_below;	/* protected by lock */
	uint64_t seal_after_ns;		/* protected by lock: MZ7 */
};

/* svc (services.h) stays alive and unchanged until nrs_walgc_destroy;
 * wal is svc->wal or svc->owal (object: the latter). */
void nrs_walgc_init(struct nrs_walgc *g, const struct nrs_services *svc,
		    struct nrs_wal *wal, bool object);
void nrs_walgc_destroy(struct nrs_walgc *g);
/* MZ5: delete the WAL segments nothing needs any more. */
void nrs_walgc_reclaim(struct nrs_walgc *g);
/* MZ7: seal the current segment if it holds records and none is live. */
void nrs_walgc_seal_dead(struct nrs_walgc *g);

/* MZ5: the first segment of WAL w (object: svc->owal) a reclaim may not
 * delete: what the pipeline and every stream of its profile still need,
 * and the current segment; *ws gets w's stats (read first). */
uint64_t nrs_walgc_bound(const struct nrs_services *svc, struct nrs_wal *w,
			 bool object, struct nrs_wal_stats *ws);
/* MZ5: every segment a reclaim after stats ws may delete is numbered
 * below this (walgc.c). */
uint64_t nrs_mat_reclaim_bound(const struct nrs_wal_stats *ws);

#endif
