/*
 * mat_plan.c - the materializer's choice (materializer.c gives the whole):
 * which stream is due, and which range of it the next object holds, a run
 * of whole WAL records copied or adopted (mat_adopt.c MZ10, MZ13).  The
 * worker threads that act on the choice are in mat_worker.c.
 *
 *  MZ1 Choose.  A stream is due when the committed bytes above
 *     max(materialized, start) reach min_bytes, or the oldest of them has
 *     waited max_age_ms.  The range is a run of whole WAL records from
 *     that point, at most object_size bytes (at least one record), all
 *     copied or all adopted (mat_adopt.c MZ10).
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "bg/mat_priv.h"
#include "bg/services.h"
#include "obj/objfmt.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/sat.h"
#include "wal/wal.h"

/* Where the next object of st starts: past `materialized`, the start,
 * and from (the end of an object of it still on its way, or 0). */
uint64_t nrs_mat_next_from(const struct nrs_stream *st, uint64_t from)
{
	uint64_t a = st->materialized > st->start ? st->materialized : st->start;

	return from > a ? from : a;
}

/* MZ1: the range to materialize, starting at nrs_mat_next_from(st, from): a run
 * of records all copied or all adopted (mat_adopt.c MZ10: on, and below
 * the first segment that may be current); NRS_PLAN_NONE if no record is
 * there, NRS_PLAN_WAIT if the first is to be adopted once its segment is
 * no longer current.  Called under st->lock. */
static enum nrs_plan plan(const struct nrs_mat *m, const struct nrs_stream *st,
			  uint64_t from, bool on, uint64_t below,
			  uint64_t *a_out, uint64_t *b_out)
{
	uint64_t a = nrs_mat_next_from(st, from);
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

/* MZ1's rule for the bytes above nrs_mat_next_from(st, from): enough of them, or
 * the oldest waited long enough.  Called under st->lock. */
bool nrs_mat_worth(const struct nrs_mat *m, const struct nrs_stream *st,
		   uint64_t from, uint64_t now)
{
	uint64_t a = nrs_mat_next_from(st, from);
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
	return nrs_mat_worth(m, st, 0, now);
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
struct nrs_stream *nrs_mat_pick(struct nrs_mat *m)
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
bool nrs_mat_other_due(struct nrs_mat *m, uint64_t id)
{
	struct other o = { .m = m, .id = id, .now = nrs_now_mono_ns() };

	nrs_streams_each(m->svc->streams, consider_other, &o);
	return o.due;
}

/* MZ10: the first segment the run of st from `from` waits for (under
 * st->lock: the segment of the record at nrs_mat_next_from). */
static uint64_t waiting_seg(const struct nrs_stream *st, uint64_t from)
{
	size_t i = nrs_index_find(&st->index, nrs_mat_next_from(st, from));

	return i < st->index.n ? st->index.v[i].seg : 0;
}

/* The plan of st from `from` (MZ1, MZ10), under st->lock. */
enum nrs_plan nrs_mat_plan_of(struct nrs_mat *m, struct nrs_stream *st,
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
