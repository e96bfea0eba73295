/*
 * mat_worker.c - the materializer's workers (materializer.c gives the
 * whole): a builder thread that takes a stream chosen by mat_plan.c and
 * builds its objects, and an uploader thread that uploads and publishes
 * them (mat_object.c, mat_adopt.c), with the slot of one between them.
 *
 *  MZ9 A stream that is due but whose next byte no WAL record holds (a
 *     range recovery found with no copy, recovery_index.c RC5b) is logged and
 *     retried after a pause, like a failed build: materializing it stops
 *     there, since `materialized` never moves past bytes no object holds
 *     (MW3), until a trim (user.nereus.trim, retention) raises its start
 *     past them.  Other streams go on.
 *  MW1-MW4 Workers.  Each materializer thread (-o materializers) is a worker
 *     of two threads, so that building one object (MZ2: reading, CRCs,
 *     SHA-256, MD5 -- CPU) overlaps uploading the one before (MZ3-MZ4:
 *     network, the server, a synced publication):
 *  MW1 The builder picks a stream (MZ1), marks it busy, and builds its
 *     objects one after another from max(materialized, start): the next
 *     one starts where the last one built ends, not at `materialized`,
 *     which moves only at MZ4.  It keeps the stream while it is due and has
 *     objects to make -- up to RUN_MAX in a row when another stream is due
 *     too, so that one busy stream does not starve the others.
 *  MW2 Each object built goes to the worker's uploader through a slot of
 *     one: the builder waits until the uploader is done with the object
 *     before (MZ3, MZ4, served), so a worker holds at most two objects, one
 *     uploading and one built.  The uploader does a worker's objects in the
 *     order handed, hence a stream's in offset order, and the intent of
 *     each (MZ3) was recorded before it was handed, so before its PUT.
 *  MW3 If an object of a stream is not published (store away at stop,
 *     quarantine cut short, publication failed), the objects of the
 *     stream built after it are not published either -- that would move
 *     `materialized` past a range no object holds, which the next mount
 *     (walking the WAL only above `materialized`) would lose: the uploader
 *     deletes their intents (their PUT never started) and the stream is
 *     retried after a pause from `materialized`.  The object that carries
 *     `last` (or an object-less job, when a build fails after one was
 *     handed) releases the stream, after everything handed before it, so
 *     no other worker takes it up while an object of it is on its way.
 *  MW4 At the stop the builder hands nothing more; the uploader finishes
 *     the object it has (an upload is not cut short, only its retries), and
 *     drops a built one whose PUT has not started (its intent deleted).
 *     Compaction (CP2) goes through the same two threads, one object at a
 *     time: the builder waits for it.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "bg/mat_priv.h"
#include "bg/materializer.h"
#include "bg/services.h"
#include "bg/walgc.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sat.h"

#define TICK_MS			100
#define RUN_MAX			4	/* objects of one stream in a row while
					 * another stream is due (MW1) */

/* MW2: the uploader does one job; the slot stays full until it is done. */
static void run_job(struct worker *w, struct job *j)
{
	struct nrs_mat *m = w->m;
	uint64_t id = j->st->id;
	bool broken;
	int err = j->err;

	pthread_mutex_lock(&w->lock);
	broken = w->broken == id;
	pthread_mutex_unlock(&w->lock);
	if ((j->buf || j->rows) && (broken || nrs_mat_stopping(m))) {
		/* MW3: an object before it in the stream is not published,
		 * so neither is this one (or the stop came first); its PUT
		 * (or link) never started */
		if (j->rows)
			nrs_mat_adopt_drop(m, j);
		else
			nrs_meta_obj_delete(m->svc->meta, j->o.gen);
		if (!broken)
			err = -ECANCELED;
	} else if (j->rows) {
		err = nrs_mat_adopt_finish(m, j);	/* MZ11 */
	} else if (j->buf) {
		err = nrs_mat_finish(m, j);
	}
	free(j->buf);
	free(j->rows);
	pthread_mutex_lock(&w->lock);
	if (err && !broken) {
		w->broken = id;
		w->broken_err = err;
	}
	if (!err && w->broken == id)
		err = w->broken_err;
	if (j->last && w->broken == id)
		w->broken = 0;
	w->last_err = err;
	pthread_mutex_unlock(&w->lock);
	if (j->last)
		nrs_mat_release(m, j->st, err);
}

static void *uploader_main(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		struct job j;

		pthread_mutex_lock(&w->lock);
		while (!w->full && !w->quit)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->full) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		j = w->slot;
		pthread_mutex_unlock(&w->lock);
		run_job(w, &j);
		pthread_mutex_lock(&w->lock);
		w->full = false;
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
	}
}

/* MW2: give j to the uploader once it is done with the one before. */
void nrs_mat_hand(struct worker *w, const struct job *j)
{
	pthread_mutex_lock(&w->lock);
	while (w->full)
		pthread_cond_wait(&w->cond, &w->lock);
	w->slot = *j;
	w->full = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Wait until the uploader has done every job handed; the last one's
 * error. */
int nrs_mat_drain(struct worker *w)
{
	int err;

	pthread_mutex_lock(&w->lock);
	while (w->full)
		pthread_cond_wait(&w->cond, &w->lock);
	err = w->last_err;
	pthread_mutex_unlock(&w->lock);
	return err;
}

static bool is_broken(struct worker *w, uint64_t id)
{
	bool b;

	pthread_mutex_lock(&w->lock);
	b = w->broken == id;
	pthread_mutex_unlock(&w->lock);
	return b;
}

/* MZ5 on every WAL (walgc.c) */
static void walgc_reclaim(struct nrs_mat *m)
{
	for (int i = 0; i < m->nwalgc; i++)
		nrs_walgc_reclaim(&m->walgc[i]);
}

/* MZ10: st waits for its segment to be sealed: not again before a pause. */
static void release_later(struct nrs_mat *m, struct nrs_stream *st)
{
	pthread_mutex_lock(&st->lock);
	st->mat_retry_ns = nrs_sat_add(nrs_now_mono_ns(),
				       nrs_sat_mul(TICK_MS, NRS_NS_PER_MS));
	pthread_mutex_unlock(&st->lock);
	nrs_mat_release(m, st, 0);
}

/* One job of [a, b) of st, copied or adopted (MZ2, MZ11). */
static int build(struct nrs_mat *m, struct nrs_stream *st, enum nrs_plan p,
		 uint64_t a, uint64_t b, struct job *j)
{
	struct olds none = { .n = 0 };

	if (p == NRS_PLAN_ADOPT)
		return nrs_mat_adopt_build(m, st, a, b, j);
	return nrs_mat_build(m, st, a, b, &none, j);
}

/*
 * MW1: the objects of st (busy, with a reference that this gives up) from
 * max(materialized, start), in offset order, each handed to the uploader
 * as soon as it is built, while the next one is built.  The stream stays
 * with the worker while it is due and has whole objects to make, or up to
 * RUN_MAX objects when another stream is due too.
 */
static void materialize(struct worker *w, struct nrs_stream *st)
{
	struct nrs_mat *m = w->m;
	uint64_t a = 0, b = 0, seg;
	unsigned int run = 0;
	enum nrs_plan p;

	p = nrs_mat_plan_of(m, st, 0, &a, &b, &seg);
	if (p == NRS_PLAN_WAIT && nrs_mat_adopt_seal(m, seg))	/* MZ10 */
		p = nrs_mat_plan_of(m, st, 0, &a, &b, &seg);
	if (p == NRS_PLAN_WAIT) {
		release_later(m, st);
		return;
	}
	if (p == NRS_PLAN_NONE) {
		pthread_mutex_lock(&st->lock);
		a = nrs_mat_next_from(st, 0);
		pthread_mutex_unlock(&st->lock);
		/* MZ9: due, yet no WAL record starts where it must (a range
		 * recovery found with no copy, RC5b): retried after a pause,
		 * never at once, or this thread would spin on it for good */
		nrs_err("stream %" PRIu64 ": committed bytes from %" PRIu64
			" have no copy (nereusfs-fsck names the range): its"
			" materialization waits until a trim passes them",
			st->id, a);
		nrs_mat_release(m, st, -EIO);
		return;
	}
	for (;;) {
		struct job j;
		int err = build(m, st, p, a, b, &j);
		bool ok;

		if (err) {
			if (run == 0) {	/* nothing of it handed */
				nrs_mat_release(m, st, err);
			} else {
				struct job r = { .st = st, .last = true,
						 .err = err };

				nrs_mat_hand(w, &r);
			}
			return;
		}
		run++;
		pthread_mutex_lock(&st->lock);
		ok = nrs_mat_worth(m, st, b, nrs_now_mono_ns());
		pthread_mutex_unlock(&st->lock);
		if (ok) {
			p = nrs_mat_plan_of(m, st, b, &a, &b, &seg);
			ok = p == NRS_PLAN_COPY || p == NRS_PLAN_ADOPT;
		}
		j.last = !ok || nrs_mat_stopping(m) || is_broken(w, st->id) ||
			 (run >= RUN_MAX && nrs_mat_other_due(m, st->id));
		nrs_mat_hand(w, &j);
		walgc_reclaim(m);	/* the builder has the time: MW2 */
		if (j.last)
			return;
	}
}

/* MW4: the builder's end: its uploader finishes what it has, then ends. */
static void worker_quit(struct worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void *builder_main(void *arg)
{
	struct worker *w = arg;
	struct nrs_mat *m = w->m;
	unsigned int orphan_attempt = 0;
	bool first;

	pthread_mutex_lock(&m->lock);
	first = !m->orphans_done;
	m->orphans_done = true;		/* one thread does it */
	pthread_mutex_unlock(&m->lock);
	while (first && nrs_mat_clean_orphans(m) != 0)
		if (nrs_mat_nap(m, nrs_mat_backoff_ms(m, orphan_attempt++)))
			goto out;
	while (!nrs_mat_stopping(m)) {
		struct nrs_stream *st = nrs_mat_pick(m);

		if (!st) {
			for (int i = 0; i < m->nwalgc; i++)
				nrs_walgc_seal_dead(&m->walgc[i]);
			walgc_reclaim(m);
			if (!nrs_mat_compact_some(w))
				nrs_mat_idle_wait(m, TICK_MS);
			continue;
		}
		materialize(w, st);
	}
out:
	worker_quit(w);
	return NULL;
}

/* A worker's threads; on failure nothing of it is left running. */
int nrs_mat_worker_start(struct nrs_mat *m, struct worker *w)
{
	int err;

	w->m = m;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	err = -pthread_create(&w->uploader, NULL, uploader_main, w);
	if (err)
		goto out_destroy;
	err = -pthread_create(&w->builder, NULL, builder_main, w);
	if (err) {
		worker_quit(w);
		pthread_join(w->uploader, NULL);
		goto out_destroy;
	}
	(void)pthread_setname_np(w->uploader, "nrs-mat-upload");
	(void)pthread_setname_np(w->builder, "nrs-mat-build");
	return 0;
out_destroy:
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	return err;
}
