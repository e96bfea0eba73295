/*
 * materializer.c - WAL-resident committed ranges become segment objects,
 * published as new generations (DESIGN.md section 1 event 4, section 6,
 * I2, I5, I6); its builder threads also run the WAL's GC (walgc.c), which
 * deletes the WAL segments no range needs any more (event 5).
 *
 * The code is cut by concern (mat_priv.h): this file holds the threads,
 * the jobs they pass and the choice of streams (MZ1, MZ6, MZ9, MW1-MW4);
 * mat_object.c one object's way from the WAL to a published generation
 * (MZ2-MZ4: build, intent, upload, proof, quarantine, publication);
 * mat_adopt.c write once on the embedded store (MZ10-MZ12: which records
 * are adopted in place rather than copied, how, and their orphans);
 * compaction.c compaction (CP1-CP2).
 *
 * Appends never wait for any of this.  Workers take streams one at a time
 * (st->mat_busy), so a stream's objects are built in offset order.
 *
 *  MZ1 Choose.  A stream is due when the committed bytes above
 *     max(materialized, start) reach min_bytes, or the oldest of them has
 *     waited max_age_ms.  The range is a run of whole WAL records from
 *     that point, at most object_size bytes (at least one record), all
 *     copied or all adopted (mat_adopt.c MZ10).
 *  (Building an object, recording its intent, uploading, proving and
 *  publishing it, MZ2-MZ4, have their rules in mat_object.c.)
 *  (The WAL reclaim and the seal of an idle dead segment, GC work the
 *  builders run, have their rules, MZ5 and MZ7, in walgc.c.)
 *  MZ9 A stream that is due but whose next byte no WAL record holds (a
 *     range recovery found with no copy, recovery.c RC5b) is logged and
 *     retried after a pause, like a failed build: materializing it stops
 *     there, since `materialized` never moves past bytes no object holds
 *     (MW3), until a trim (user.nereus.trim, retention) raises its start
 *     past them.  Other streams go on.
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
#include <inttypes.h>
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
#include "wal/wal.h"

#define TICK_MS			100
#define RETRY_MIN_MS		100
#define DEFAULT_MIN_BYTES	(4ull << 20)
#define DEFAULT_MAX_AGE_MS	5000
#define DEFAULT_OBJECT_SIZE	(16ull << 20)
#define DEFAULT_THREADS		2
#define DEFAULT_RETRY_MAX_MS	10000
#define DEFAULT_COMPACT_SIZE	(64ull << 20)
#define RUN_MAX			4	/* objects of one stream in a row while
					 * another stream is due (MW1) */

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
static void idle_wait(struct nrs_mat *m, uint64_t ms)
{
	wait_on(m, &m->idle, ms);
}

uint64_t nrs_mat_backoff_ms(const struct nrs_mat *m, unsigned int attempt)
{
	return nrs_backoff_ms(attempt, RETRY_MIN_MS, m->o.retry_max_ms);
}

/* Where the next object of st starts: past `materialized`, the start,
 * and from (the end of an object of it still on its way, or 0). */
static uint64_t next_from(const struct nrs_stream *st, uint64_t from)
{
	uint64_t a = st->materialized > st->start ? st->materialized : st->start;

	return from > a ? from : a;
}

/* MZ1: the range to materialize, starting at next_from(st, from): a run
 * of records all copied or all adopted (mat_adopt.c MZ10: on, and below
 * the first segment that may be current); NRS_PLAN_NONE if no record is
 * there, NRS_PLAN_WAIT if the first is to be adopted once its segment is
 * no longer current.  Called under st->lock. */
static enum nrs_plan plan(const struct nrs_mat *m, const struct nrs_stream *st,
			  uint64_t from, bool on, uint64_t below,
			  uint64_t *a_out, uint64_t *b_out)
{
	uint64_t a = next_from(st, from);
	size_t i = nrs_index_find(&st->index, a), k = 0;
	enum nrs_plan mode = NRS_PLAN_NONE;
	uint64_t b = a;

	if (a >= st->head)
		return NRS_PLAN_NONE;
	for (; i < st->index.n; i++, k++) {
		const struct nrs_index_ent *e = &st->index.v[i];
		enum nrs_plan kind;

		if (e->kind != NRS_TARGET_WAL || e->start > b ||
		    e->end > st->head)
			break;
		kind = nrs_mat_adopt_kind(e, on, below);	/* MZ10 */
		if (b == a)
			mode = kind;
		if (kind != mode || mode == NRS_PLAN_WAIT)
			break;
		if (b > a && e->end - a > m->o.object_size)
			break;
		if (mode == NRS_PLAN_ADOPT && k >= NRS_ADOPT_MAX)
			break;
		b = e->end;
	}
	if (b == a)
		return mode == NRS_PLAN_WAIT ? mode : NRS_PLAN_NONE;
	*a_out = a;
	*b_out = b;
	return mode;
}

/* The first local WAL segment that may be current (MZ10), for plan(). */
static uint64_t adopt_below(const struct nrs_mat *m)
{
	struct nrs_wal_stats ws;

	nrs_wal_stats(m->svc->wal, &ws);
	return nrs_mat_reclaim_bound(&ws);
}

/* MZ1's rule for the bytes above next_from(st, from): enough of them, or
 * the oldest waited long enough.  Called under st->lock. */
static bool worth(const struct nrs_mat *m, const struct nrs_stream *st,
		  uint64_t from, uint64_t now)
{
	uint64_t a = next_from(st, from);
	uint64_t pending = st->head > a ? st->head - a : 0;

	if (pending == 0)
		return false;
	if (pending >= m->o.min_bytes)
		return true;
	return st->unmat_since_ns &&	/* SAT1 */
	       nrs_elapsed_ms((int64_t)now, st->unmat_since_ns, m->o.max_age_ms);
}

static bool due(const struct nrs_mat *m, const struct nrs_stream *st,
		uint64_t now)
{
	if (st->mat_busy || now < st->mat_retry_ns)
		return false;
	return worth(m, st, 0, now);
}


static void consider(void *ctx, struct nrs_stream *st)
{
	struct pick *p = ctx;

	if (due(p->m, st, p->now) &&
	    st->head - st->materialized >= p->best_pending) {
		p->best_pending = st->head - st->materialized;
		p->best = st->id;
	}
}

/* A due stream, marked busy, with a reference; NULL if none (also if it
 * left the table or another thread took it since it was chosen). */
static struct nrs_stream *pick(struct nrs_mat *m)
{
	struct pick p = { .m = m, .now = nrs_now_mono_ns() };
	struct nrs_stream *st;

	nrs_streams_each(m->svc->streams, consider, &p);
	if (!p.best)
		return NULL;
	st = nrs_streams_get(m->svc->streams, p.best);
	if (!st)
		return NULL;
	pthread_mutex_lock(&st->lock);
	if (st->mat_busy) {
		pthread_mutex_unlock(&st->lock);
		nrs_stream_put(st);
		return NULL;
	}
	st->mat_busy = true;
	pthread_mutex_unlock(&st->lock);
	return st;
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

struct other {
	const struct nrs_mat *m;
	uint64_t id, now;
	bool due;
};

static void consider_other(void *ctx, struct nrs_stream *st)
{
	struct other *o = ctx;

	if (st->id != o->id && due(o->m, st, o->now))
		o->due = true;
}

/* Is a stream other than id due (MZ1)?  Not under any stream's lock. */
static bool other_due(struct nrs_mat *m, uint64_t id)
{
	struct other o = { .m = m, .id = id, .now = nrs_now_mono_ns() };

	nrs_streams_each(m->svc->streams, consider_other, &o);
	return o.due;
}

/*
 * MW1: the objects of st (busy, with a reference that this gives up) from
 * max(materialized, start), in offset order, each handed to the uploader
 * as soon as it is built, while the next one is built.  The stream stays
 * with the worker while it is due and has whole objects to make, or up to
 * RUN_MAX objects when another stream is due too.
 */
/* MZ5 on every WAL (walgc.c) */
static void walgc_reclaim(struct nrs_mat *m)
{
	for (int i = 0; i < m->nwalgc; i++)
		nrs_walgc_reclaim(&m->walgc[i]);
}

/* MZ10: the first segment the run of st from `from` waits for (under
 * st->lock: the segment of the record at next_from). */
static uint64_t waiting_seg(const struct nrs_stream *st, uint64_t from)
{
	size_t i = nrs_index_find(&st->index, next_from(st, from));

	return i < st->index.n ? st->index.v[i].seg : 0;
}

/* The plan of st from `from` (MZ1, MZ10), under st->lock. */
static enum nrs_plan plan_of(struct nrs_mat *m, struct nrs_stream *st,
			     uint64_t from, uint64_t *a, uint64_t *b,
			     uint64_t *wait_seg)
{
	bool on = nrs_mat_adopt_on(m, st);
	uint64_t below = !on ? 0 : st->profile == NRS_PROFILE_OBJECT_WAL ?
			 NRS_ADOPT_OWAL : adopt_below(m);	/* MZ13 */
	enum nrs_plan p;

	pthread_mutex_lock(&st->lock);
	p = plan(m, st, from, on, below, a, b);
	*wait_seg = p == NRS_PLAN_WAIT ? waiting_seg(st, from) : 0;
	pthread_mutex_unlock(&st->lock);
	return p;
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

static void materialize(struct worker *w, struct nrs_stream *st)
{
	struct nrs_mat *m = w->m;
	uint64_t a = 0, b = 0, seg;
	unsigned int run = 0;
	enum nrs_plan p;

	p = plan_of(m, st, 0, &a, &b, &seg);
	if (p == NRS_PLAN_WAIT && nrs_mat_adopt_seal(m, seg))	/* MZ10 */
		p = plan_of(m, st, 0, &a, &b, &seg);
	if (p == NRS_PLAN_WAIT) {
		release_later(m, st);
		return;
	}
	if (p == NRS_PLAN_NONE) {
		pthread_mutex_lock(&st->lock);
		a = next_from(st, 0);
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
		ok = worth(m, st, b, nrs_now_mono_ns());
		pthread_mutex_unlock(&st->lock);
		if (ok) {
			p = plan_of(m, st, b, &a, &b, &seg);
			ok = p == NRS_PLAN_COPY || p == NRS_PLAN_ADOPT;
		}
		j.last = !ok || nrs_mat_stopping(m) || is_broken(w, st->id) ||
			 (run >= RUN_MAX && other_due(m, st->id));
		nrs_mat_hand(w, &j);
		walgc_reclaim(m);	/* the builder has the time: MW2 */
		if (j.last)
			return;
	}
}

/* MZ6: delete the objects of the orphans found at start, then their rows;
 * the ones removed are not tried again.  0 when all are gone. */
static int clean_orphans(struct nrs_mat *m)
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
	while (first && clean_orphans(m) != 0)
		if (nrs_mat_nap(m, nrs_mat_backoff_ms(m, orphan_attempt++)))
			goto out;
	while (!nrs_mat_stopping(m)) {
		struct nrs_stream *st = pick(m);

		if (!st) {
			for (int i = 0; i < m->nwalgc; i++)
				nrs_walgc_seal_dead(&m->walgc[i]);
			walgc_reclaim(m);
			if (!nrs_mat_compact_some(w))
				idle_wait(m, TICK_MS);
			continue;
		}
		materialize(w, st);
	}
out:
	worker_quit(w);
	return NULL;
}

/* A worker's threads; on failure nothing of it is left running. */
static int worker_start(struct nrs_mat *m, struct worker *w)
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
		err = worker_start(m, &m->workers[m->nworkers]);
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
