/*
 * walgc.c - the WAL's garbage collection: delete the WAL segments no
 * committed range needs any more, and seal an idle current segment whose
 * records are all dead so that it can go too (DESIGN.md section 1 event
 * 5).  The materializer's builder threads run it (mat_worker.c MW1: after
 * each object handed, and when idle), since what it frees is what MZ4
 * moved into objects; everything it touches comes through the services
 * seam (services.h).  Object GC is the lifecycle's (lifecycle.c G1-G5).
 *
 *  MZ5 Reclaim.  A WAL segment may go when no stream's index names it (a
 *     stream's WAL entries are a suffix of its index, in segment order, so
 *     its first one is its oldest), the pipeline holds no written but
 *     unindexed record in it (nrs_pipeline_wal_floor, read first), and
 *     appends no longer go to it.  Before deleting, the reclaimer takes the
 *     read gate exclusively once: every read that started with an older
 *     index snapshot has finished by then (reader.h).  Trimmed and unlinked
 *     ranges drop out of the indexes the same way, so their segments go too.
 *  MZ8 Host loss.  A recovery from the bucket (issue 15) starts from the
 *     last checkpoint, whose snapshot names the generations published up
 *     to then, and scans the object WAL from its covered position (what
 *     MZ5's bound was when it was taken).  So object WAL objects at or
 *     above the covered position of the last checkpoint proven stored
 *     stay, whatever the indexes say now (services.h wal_keep,
 *     checkpoint.h nrs_ckpt_covered): a generation published since could
 *     otherwise be the only copy of a range, and no checkpoint names it.
 *     Before the first checkpoint nothing of the object WAL goes; with
 *     checkpoints off, nothing holds it.
 *     Each WAL is collected on its own (struct nrs_walgc per WAL): only
 *     the streams whose profile writes to it name its segments.  The
 *     object WAL has no current segment (every object is sealed before
 *     it is PUT); a segment made after the stats were read is above
 *     their last_seg, so it is never below the bound.
 *     The object WAL deletes an object only gc_grace_ms after a reclaim
 *     first found it below the bound (wal_object_gc.c OWG1), so the
 *     bound not moving is no reason to skip a reclaim: one runs again
 *     once the stats' reclaim_due_ns is past, with the bound as it is
 *     then (MZ5 and MZ8 still hold) and after the same drain (I5).
 *     reclaim_due_ns also tells of DELETEs the object WAL owes (its
 *     OWG3: a reclaim that a crash or a failing store cut short): one
 *     runs for them then, even when the WAL holds no object.
 *  MZ7 Seal (issue 12).  MZ5 never deletes the segment appends go to, so on
 *     an idle mount the space of its dead records would stay taken for
 *     good.  When the current segment holds a record, the pipeline holds
 *     none in it unindexed (the floor, read first) and no stream's index
 *     names it, the idle builder has it sealed (nrs_pipeline_wal_seal:
 *     only while no append is in flight and none came for SEAL_IDLE_MS,
 *     pipeline.c PL6; wal_local.c WD2),
 *     and the reclaim that follows deletes it by MZ5's rules -- which look
 *     again, so a record indexed in between keeps it.  A segment that
 *     still holds live bytes not yet materialized is not sealed: MZ1 makes
 *     them due after materialize_age_ms at most, and then it is.  A failed
 *     seal (a full disk) is tried again after SEAL_RETRY_MS.
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "bg/services.h"
#include "bg/walgc.h"
#include "meta/meta.h"	/* NRS_PROFILE_OBJECT_WAL */
#include "stream/index.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"

#define SEAL_RETRY_MS		10000	/* MZ7 */
#define SEAL_IDLE_MS		1000	/* MZ7: no append for this long */

void nrs_walgc_init(struct nrs_walgc *g, const struct nrs_services *svc,
		    struct nrs_wal *wal, bool object)
{
	g->svc = svc;
	g->wal = wal;
	g->object = object;
	pthread_mutex_init(&g->lock, NULL);
	g->reclaimed_below = 0;
	g->seal_after_ns = 0;
}

void nrs_walgc_destroy(struct nrs_walgc *g)
{
	pthread_mutex_destroy(&g->lock);
}

struct oldest {
	uint64_t below;
	bool object;		/* of object-wal streams only, else the rest */
};

/* MZ5: a stream's records are in the WAL of its profile (st->lock held) */
static void oldest_seg(void *ctx, struct nrs_stream *st)
{
	struct oldest *o = ctx;
	uint64_t s;

	if ((st->profile == NRS_PROFILE_OBJECT_WAL) != o->object)
		return;
	s = nrs_index_min_seg(&st->index);
	if (s < o->below)
		o->below = s;
}

/*
 * MZ5: the first segment a reclaim that read ws may not touch.  With a
 * current segment, that one; with none (after start-up, before the first
 * append), the first number a new segment could take: every segment
 * made after ws was read holds records the index walk that follows may
 * not have seen, and a rotation or a seal between that walk and the
 * delete would no longer protect one as the current segment.
 */
uint64_t nrs_mat_reclaim_bound(const struct nrs_wal_stats *ws)
{
	if (ws->cur_seg)
		return ws->cur_seg;
	return ws->last_seg < UINT64_MAX ? ws->last_seg + 1 : UINT64_MAX;
}

uint64_t nrs_walgc_bound(const struct nrs_services *svc, struct nrs_wal *w,
			 bool object, struct nrs_wal_stats *ws)
{
	struct oldest old = { UINT64_MAX, object };
	uint64_t below, floor;

	nrs_wal_stats(w, ws);
	below = nrs_mat_reclaim_bound(ws);
	floor = svc->wal_floor(svc->ctx, w);
	if (floor < below)
		below = floor;
	nrs_streams_each(svc->streams, oldest_seg, &old);
	return old.below < below ? old.below : below;
}

/* MZ5, MZ8 */
void nrs_walgc_reclaim(struct nrs_walgc *g)
{
	const struct nrs_services *svc = g->svc;
	struct nrs_wal_stats ws;
	uint64_t below, bytes = 0, keep;
	int n;

	below = nrs_walgc_bound(svc, g->wal, g->object, &ws);
	keep = svc->wal_keep ? svc->wal_keep(svc->ctx, g->wal) : UINT64_MAX;
	if (keep < below)					/* MZ8 */
		below = keep;

	pthread_mutex_lock(&g->lock);
	/* nothing but the current segment (but DELETEs the object WAL owes
	 * are due, OWG3: sent even with no object held); or nothing new
	 * since last time (with no current segment, `below` says nothing:
	 * no appends yet) and no WAL object whose grace has run out since
	 * (OWG1) */
	if ((ws.segments <= (ws.cur_seg ? 1u : 0u) &&
	     !(g->object && ws.reclaim_due_ns &&		/* OWG3 */
	       nrs_now_mono_ns() >= ws.reclaim_due_ns)) ||
	    ((ws.cur_seg || g->object) && below <= g->reclaimed_below &&
	     (!ws.reclaim_due_ns || nrs_now_mono_ns() < ws.reclaim_due_ns))) {
		pthread_mutex_unlock(&g->lock);
		return;
	}
	if (nrs_failpoint(NRS_FP_WAL_BEFORE_RECLAIM) == 0) {
		/* readers holding an older index snapshot finish first */
		svc->drain(svc->ctx);
		n = nrs_wal_reclaim(g->wal, below, &bytes);
		if (n > 0) {
			nrs_count(&svc->metrics->wal_reclaimed_segments,
				  (uint64_t)n);
			nrs_count(&svc->metrics->wal_reclaimed_bytes, bytes);
			nrs_debug("reclaimed %d WAL segments below %016" PRIx64
				  " (%" PRIu64 " bytes)", n, below, bytes);
		}
		if (n >= 0 && (ws.cur_seg || g->object))
			g->reclaimed_below = below;
	}
	pthread_mutex_unlock(&g->lock);
}

/* MZ7: seal the current segment if it holds records and none is live. */
void nrs_walgc_seal_dead(struct nrs_walgc *g)
{
	const struct nrs_services *svc = g->svc;
	struct nrs_wal_stats ws;
	struct oldest named = { UINT64_MAX, g->object };
	uint64_t floor, now = nrs_now_mono_ns();
	int rc;

	nrs_wal_stats(g->wal, &ws);
	if (!ws.cur_seg || ws.cur_bytes == 0)
		return;
	floor = svc->wal_floor(svc->ctx, g->wal);
	nrs_streams_each(svc->streams, oldest_seg, &named);
	if (floor <= ws.cur_seg || named.below <= ws.cur_seg)
		return;		/* a live record in it: MZ7 */
	pthread_mutex_lock(&g->lock);
	if (now < g->seal_after_ns) {
		pthread_mutex_unlock(&g->lock);
		return;
	}
	rc = svc->wal_seal(svc->ctx, g->wal, ws.cur_seg,
			   (uint64_t)SEAL_IDLE_MS * 1000000);
	if (rc > 0)
		nrs_count(&svc->metrics->wal_sealed_segments, 1);
	if (rc < 0) {
		nrs_warn("sealing idle WAL segment %016" PRIx64 ": %s (tried "
			 "again in %d s)", ws.cur_seg, strerror(-rc),
			 SEAL_RETRY_MS / 1000);
		g->seal_after_ns = now + (uint64_t)SEAL_RETRY_MS * 1000000;
	}
	pthread_mutex_unlock(&g->lock);
}
