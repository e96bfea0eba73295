/*
 * compaction.c - small adjacent objects of a stream merged into one new
 * generation, by the materializer's workers (mat_worker.c MW4), along
 * the path of any object (mat_object.c MZ2-MZ4).
 *
 *  CP1-CP2 Compaction (issue 5), when nothing waits to be materialized:
 *     runs of small adjacent objects of a stream are read back (verified)
 *     and stored as one new generation, published with the replaced ones
 *     moving to draining in the same transaction (meta.h); reads that hold
 *     the old ones finish on them, and GC deletes them after its grace
 *     period (lifecycle.c G2).  Same MZ2-MZ4 path, same proof.  The
 *     cleaning of adopted files (cleaning.c) takes the same path (CP3).
 */
#include "config.h"

#include <pthread.h>

#include "bg/mat_priv.h"
#include "bg/services.h"
#include "obj/objfmt.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/sat.h"

/*
 * CP1 Compaction plan, under st->lock: the first run of at least two
 *    adjacent objects, each whole (not cut by a trim) and smaller than a
 *    quarter of compact_size, merged while the sum stays within
 *    compact_size -- once the run adds up to a quarter of compact_size, so
 *    that a byte is rewritten about once, not once per doubling; a shorter
 *    run only when the stream is idle (everything materialized, no commit
 *    for 10 x materialize_age_ms), which compacts the idle tail.  An object
 *    of a quarter of compact_size or more is never rewritten.
 *    Only the entries below `materialized` are looked at: every object
 *    entry ends at or below it (mat_object.c moves it to each published
 *    object's end), and the WAL entries above it, one per record, grow
 *    with every batch while the plan runs under the stream lock that the
 *    publisher needs (pipeline_publish.c PL4), at every idle tick.
 * CP3 Only copied objects (NRS_TARGET_OBJ) join a run: an adopted
 *    generation (NRS_TARGET_ADOPT, write once: a WAL record left in place
 *    in the embedded store) ends a run as a WAL entry does, and is copied
 *    only by the cleaning rule (cleaning.c CL1-CL3): a generation of the
 *    file chosen for cleaning is rewritten alone, as one copied object of
 *    what is left of it (from the stream's start, if a trim cut into it),
 *    replacing it.  Any other adopted generation stays where it is,
 *    whatever its size: writing it again is what adoption saved.
 */
static bool plan_compact(const struct nrs_mat *m, const struct nrs_stream *st,
			 uint64_t *a, uint64_t *b, struct olds *olds)
{
	uint64_t small = m->o.compact_size / 4;
	bool idle = st->materialized >= st->head && st->mtime_ns > 0 &&
		    nrs_elapsed_ms(nrs_now_real_ns(), st->mtime_ns,
				   nrs_sat_mul(m->o.max_age_ms, 10));	/* SAT1 */
	/* the first entry ending above materialized: no object from there */
	size_t n = nrs_index_find(&st->index, st->materialized);

	for (size_t i = 0; i < n; i++) {
		const struct nrs_index_ent *e = &st->index.v[i];
		size_t j = i;

		olds->n = 0;
		olds->bytes = 0;
		*a = *b = e->start;
		if (nrs_mat_clean_wants(m, e)) {	/* CP3, CL3 */
			olds->gen[olds->n++] = e->gen;
			olds->bytes = e->oend - e->ostart;	/* its payload */
			*b = e->end;
			return true;
		}
		for (; j < n && olds->n < MAX_COMPACT; j++) {
			const struct nrs_index_ent *x = &st->index.v[j];
			uint64_t len = x->oend - x->ostart;

			if (x->kind != NRS_TARGET_OBJ /* CP3 */ ||
			    x->start != x->ostart ||
			    x->end != x->oend || x->start != *b || len >= small ||
			    x->end - *a > m->o.compact_size)
				break;
			olds->gen[olds->n++] = x->gen;
			olds->bytes += nrs_objfmt_hdr_len(len) + len;
			*b = x->end;
		}
		if (olds->n >= 2 && (idle || *b - *a >= small))
			return true;
		i = j > i ? j - 1 : i;
	}
	return false;
}

static void consider_compact(void *ctx, struct nrs_stream *st)
{
	struct pick *p = ctx;
	uint64_t a, b;
	struct olds olds;

	if (!p->best && !st->mat_busy && plan_compact(p->m, st, &a, &b, &olds))
		p->best = st->id;
}

/* The newest intent time among the rows olds names. */
static int newest_ctime(void *ctx, const struct nrs_obj_row *o)
{
	struct olds *olds = ctx;

	for (size_t i = 0; i < olds->n; i++)
		if (olds->gen[i] == o->gen && o->ctime_ns > olds->ctime_ns)
			olds->ctime_ns = o->ctime_ns;
	return 0;
}

/* CP2: compact one run of one stream, if any, through the worker's
 * uploader, and wait for it; true if it did. */
bool nrs_mat_compact_some(struct worker *w)
{
	struct nrs_mat *m = w->m;
	struct pick p = { .m = m };
	struct nrs_stream *st;
	struct olds olds;
	struct job j;
	uint64_t a, b;
	bool ok;
	int err;

	if (m->o.compact_size == NRS_COMPACT_OFF)
		return false;
	nrs_mat_clean_choose(m);	/* CL3 */
	nrs_streams_each(m->svc->streams, consider_compact, &p);
	if (!p.best || !(st = nrs_streams_get(m->svc->streams, p.best)))
		return false;
	pthread_mutex_lock(&st->lock);
	ok = !st->mat_busy && plan_compact(m, st, &a, &b, &olds);
	if (ok)
		st->mat_busy = true;
	pthread_mutex_unlock(&st->lock);
	if (!ok) {
		nrs_stream_put(st);
		return false;
	}
	olds.ctime_ns = 0;
	err = nrs_meta_obj_foreach(m->svc->meta, st->id, newest_ctime, &olds);
	if (!err && olds.ctime_ns == 0)
		olds.ctime_ns = nrs_now_real_ns();
	if (!err)
		err = nrs_mat_build(m, st, a, b, &olds, &j);
	if (err) {
		nrs_mat_release(m, st, err);
		return false;
	}
	j.last = true;
	nrs_mat_hand(w, &j);
	return nrs_mat_drain(w) == 0;
}
