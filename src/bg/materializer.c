/*
 * materializer.c - WAL-resident committed ranges become segment objects,
 * published as new generations (DESIGN.md section 1 event 4, section 6,
 * I2, I5, I6); its builder threads also run the WAL's GC (walgc.c), which
 * deletes the WAL segments no range needs any more (event 5).
 *
 * The code is cut by concern (mat_priv.h): this file holds the start, the
 * stop, the pauses and the start-up cleanup (MZ6); mat_plan.c the choice
 * of streams and of the range of each object (MZ1); mat_worker.c the
 * worker threads and the jobs they pass (MZ9, MW1-MW4);
 * mat_object.c one object's way from the WAL to a published generation
 * (MZ2-MZ4: build, intent, upload, proof, quarantine, publication);
 * mat_adopt.c write once on the embedded store (MZ10-MZ12: which records
 * are adopted in place rather than copied, how, and their orphans);
 * compaction.c compaction (CP1-CP2).
 *
 * Appends never wait for any of this.  Workers take streams one at a time
 * (st->mat_busy), so a stream's objects are built in offset order.
 *
 *  (Building an object, recording its intent, uploading, proving and
 *  publishing it, MZ2-MZ4, have their rules in mat_object.c.)
 *  (The WAL reclaim and the seal of an idle dead segment, GC work the
 *  builders run, have their rules, MZ5 and MZ7, in walgc.c.)
 *  (MZ1, the choice of a stream and its range, has its rules in
 *  mat_plan.c; MZ9, a stream stuck at a lost range, in mat_worker.c.)
 *  MZ6 Start-up.  Prepared rows left by a crash are orphans: their objects
 *     are deleted (a missing one is fine) and then the rows.  Committed
 *     rows were restored into the indexes by recovery.  The orphans are
 *     the prepared rows found before any thread starts (nrs_mat_start),
 *     never rows read later: the other threads prepare uploads of their
 *     own meanwhile, and the deletions may take as long as the store is
 *     away, so a later read would take a live upload for an orphan and
 *     delete its row and object, even after MZ4 published it.
 *
 *  (Compaction, CP1-CP2, when nothing waits to be materialized, has its
 *  rules in compaction.c; it goes through the same workers.)
 *
 *  (MW1-MW4, the workers that build and upload, have their rules in
 *  mat_worker.c.)
 *
 * A crash anywhere converges: before MZ4 the range is still served from the
 * WAL and the intent is cleaned up (MZ6); after MZ4 recovery serves it from
 * the object and stops the commit chain walk at `materialized`; a segment
 * deleted by MZ5 (walgc.c) held nothing a published head needs.  A crash
 * with two objects of a stream on their way (MW2) leaves two intents, both
 * orphans.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bg/mat_priv.h"
#include "bg/materializer.h"
#include "bg/services.h"
#include "bg/walgc.h"
#include "obj/objfmt.h"
#include "stream/table.h"
#include "util/backoff.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/sat.h"
#include "util/waitms.h"

#define RETRY_MIN_MS		100
#define DEFAULT_MIN_BYTES	(4ull << 20)
#define DEFAULT_MAX_AGE_MS	5000
#define DEFAULT_OBJECT_SIZE	(16ull << 20)
#define DEFAULT_THREADS		2
#define DEFAULT_RETRY_MAX_MS	10000
#define DEFAULT_COMPACT_SIZE	(64ull << 20)

bool nrs_mat_stopping(struct nrs_mat *m)
{
	bool s;

	pthread_mutex_lock(&m->lock);
	s = m->stopping;
	pthread_mutex_unlock(&m->lock);
	return s;
}

/* Wait on cv (m->cond or m->idle) for up to ms, or less if stopping.
 * Returns true if stopping. */
static bool wait_on(struct nrs_mat *m, pthread_cond_t *cv, uint64_t ms)
{
	return nrs_wait_ms(cv, &m->lock, &m->stopping, ms);
}

/* Sleep up to ms, or less if stopping.  Returns true if stopping. */
bool nrs_mat_nap(struct nrs_mat *m, uint64_t ms)
{
	return wait_on(m, &m->cond, ms);
}

/* A builder with nothing to do: wait up to ms for a stream to be released
 * (by any uploader) or for the stop. */
void nrs_mat_idle_wait(struct nrs_mat *m, uint64_t ms)
{
	wait_on(m, &m->idle, ms);
}

uint64_t nrs_mat_backoff_ms(const struct nrs_mat *m, unsigned int attempt)
{
	return nrs_backoff_ms(attempt, RETRY_MIN_MS, m->o.retry_max_ms);
}

/* Done with st (marked busy, with a reference the caller gives up): after
 * a failure, not again before a pause.  Idle builders look again. */
void nrs_mat_release(struct nrs_mat *m, struct nrs_stream *st, int err)
{
	pthread_mutex_lock(&st->lock);
	st->mat_busy = false;
	if (err && err != -ECANCELED)
		st->mat_retry_ns = nrs_sat_add(nrs_now_mono_ns(),
					       nrs_sat_mul(nrs_mat_backoff_ms(m, 3),
							   NRS_NS_PER_MS));
	pthread_mutex_unlock(&st->lock);
	nrs_stream_put(st);
	pthread_mutex_lock(&m->lock);
	pthread_cond_broadcast(&m->idle);
	pthread_mutex_unlock(&m->lock);
}

/* MZ6: delete the objects of the orphans found at start, then their rows;
 * the ones removed are not tried again.  0 when all are gone. */
int nrs_mat_clean_orphans(struct nrs_mat *m)
{
	const struct nrs_services *svc = m->svc;
	struct nrs_obj_row *v = m->orphans;
	int err;

	for (; m->orphans_next < m->norphans; m->orphans_next++) {
		const struct nrs_obj_row *o = &v[m->orphans_next];
		struct nrs_objhdr h = { .stream_id = o->stream_id,
					.start = o->start, .end = o->end,
					.gen = o->gen };
		char key[NRS_OBJKEY_MAX];

		if (o->seg) {		/* an adoption (mat_adopt.c MZ12) */
			err = nrs_mat_adopt_orphan(m, m->orphans_next);
			if (err)
				return err;
			continue;
		}
		nrs_objfmt_key(key, &h);
		err = nrs_obj_del(svc->store, key);
		if (!err)
			err = nrs_meta_obj_delete(svc->meta, o->gen);
		if (!err) {
			nrs_info("removed orphan object %s (an upload a stop or"
				 " crash interrupted)", key);
			nrs_count(&svc->metrics->obj_orphans_removed, 1);
		} else {
			nrs_warn("orphan object %s: cannot remove it yet: %s",
				 key, strerror(-err));
			return err;
		}
	}
	return 0;
}

int nrs_mat_start(const struct nrs_services *svc,
		  const struct nrs_mat_opts *o, struct nrs_mat **out)
{
	struct nrs_mat *m = calloc(1, sizeof(*m));
	int err = 0;

	if (!m)
		return -ENOMEM;
	m->svc = svc;
	m->o = *o;
	if (!m->o.min_bytes)
		m->o.min_bytes = DEFAULT_MIN_BYTES;
	if (!m->o.max_age_ms)
		m->o.max_age_ms = DEFAULT_MAX_AGE_MS;
	if (!m->o.object_size)
		m->o.object_size = DEFAULT_OBJECT_SIZE;
	if (m->o.object_size >= NRS_OBJ_MAX_LEN)
		m->o.object_size = NRS_OBJ_MAX_LEN - 1;
	if (!m->o.threads)
		m->o.threads = DEFAULT_THREADS;
	if (!m->o.retry_max_ms)
		m->o.retry_max_ms = DEFAULT_RETRY_MAX_MS;
	if (!m->o.compact_size)
		m->o.compact_size = DEFAULT_COMPACT_SIZE;
	if (m->o.compact_size >= NRS_OBJ_MAX_LEN &&
	    m->o.compact_size != NRS_COMPACT_OFF)
		m->o.compact_size = NRS_OBJ_MAX_LEN - 1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->adopt_lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	pthread_cond_init(&m->idle, NULL);
	nrs_walgc_init(&m->walgc[m->nwalgc++], svc, svc->wal, false);
	if (svc->owal)
		nrs_walgc_init(&m->walgc[m->nwalgc++], svc, svc->owal, true);
	/* MZ6: the orphans are the intents there are before any thread runs */
	err = nrs_meta_obj_rows(svc->meta, 0, NRS_OBJ_PREPARED, &m->orphans,
				&m->norphans);
	if (err) {
		nrs_err("cannot read the object intents a stop or crash left: %s",
			strerror(-err));
		nrs_mat_stop(m);
		return err;
	}
	m->workers = calloc(m->o.threads, sizeof(*m->workers));
	if (!m->workers) {
		nrs_mat_stop(m);
		return -ENOMEM;
	}
	for (; m->nworkers < m->o.threads; m->nworkers++) {
		err = nrs_mat_worker_start(m, &m->workers[m->nworkers]);
		if (err) {
			nrs_mat_stop(m);
			return err;
		}
	}
	*out = m;
	return 0;
}

void nrs_mat_stop(struct nrs_mat *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_broadcast(&m->cond);
	pthread_cond_broadcast(&m->idle);
	pthread_mutex_unlock(&m->lock);
	for (unsigned int i = 0; i < m->nworkers; i++) {
		struct worker *w = &m->workers[i];

		pthread_join(w->builder, NULL);
		pthread_join(w->uploader, NULL);
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
	}
	for (int i = 0; i < m->nwalgc; i++)
		nrs_walgc_destroy(&m->walgc[i]);
	pthread_cond_destroy(&m->idle);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->adopt_lock);
	pthread_mutex_destroy(&m->lock);
	free(m->orphans);
	free(m->workers);
	free(m);
}
