/*
 * test_materializer.c - the materializer (bg/materializer.c) and the WAL's
 * GC (bg/walgc.c) through the services seam (bg/services.h): a real SQLite
 * store, the directory object store behind a wrapper that fails on demand,
 * a real local WAL and a stream table of the test's own (bgfake.h).
 *
 * First the pure functions: the uncertain PUT rule (DESIGN.md 6: what a
 * HEAD after a PUT proves, whatever the PUT answered) and the MZ5 bound.
 * Then the materializer's threads, started with one worker, a tiny
 * retry pause and min_bytes 1, each test waiting (bg_wait) for what it
 * expects: MZ1 (whole records, at most object_size), MZ3 (the intent before
 * the PUT; a proof that fails quarantines the generation and never writes
 * its key again; a lost PUT goes again under the same key; a store away is
 * retried, never quarantined), MZ4 (the row committed, the index and
 * `materialized` moved; a range trimmed meanwhile pokes the GC), MZ6 (an
 * upload a stop interrupted leaves its intent, which the next start
 * deletes with its object), MZ9 (a lost range waits, other streams go on),
 * MZ7 and MZ5 as the idle builder runs them.  Last, walgc.c's passes called
 * directly: MZ5 (an indexed segment, the pipeline's floor, the drain before
 * the delete), MZ7 (what may be sealed, the pause after a failed seal) and
 * the object WAL's grace (wal_object_gc.c OWG1: reclaimed again once due).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bg/materializer.h"
#include "bg/walgc.h"
#include "bgfake.h"
#include "util/clock.h"
#include "wal/wal.h"
#include "wal/walrec.h"

/* MZ5: a reclaim never reaches a segment made after it looked. */
static void test_reclaim_bound(void **state)
{
	struct nrs_wal_stats ws = { .segments = 3, .cur_seg = 7, .last_seg = 7 };

	(void)state;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 7);
	/* after start-up nothing is current: segments 5..7 are old, the next
	 * one made (8) holds records no index walk may have seen yet */
	ws.cur_seg = 0;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 8);
	ws.segments = 0;
	ws.last_seg = 0;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 1);
	ws.last_seg = UINT64_MAX;
	assert_true(nrs_mat_reclaim_bound(&ws) == UINT64_MAX);
}

static void test_put_decide(void **state)
{
	unsigned char sha[NRS_SHA256_LEN];
	struct nrs_obj_meta got = { .length = 1000, .has_sha256 = true };

	(void)state;
	memset(sha, 0x5a, sizeof(sha));
	memcpy(got.sha256, sha, sizeof(sha));
	/* exact length and SHA-256: proven, even after a failed PUT */
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha), NRS_PUT_PROVEN);
	/* nothing under the key: the same bytes go again */
	assert_int_equal(nrs_put_decide(-ENOENT, NULL, 1000, sha),
			 NRS_PUT_AGAIN);
	/* no answer: later, never a guess */
	assert_int_equal(nrs_put_decide(-ETIMEDOUT, NULL, 1000, sha),
			 NRS_PUT_LATER);
	assert_int_equal(nrs_put_decide(-ECONNREFUSED, NULL, 1000, sha),
			 NRS_PUT_LATER);
	assert_int_equal(nrs_put_decide(-EIO, NULL, 1000, sha), NRS_PUT_LATER);
	/* other bytes under the key: quarantine, never overwrite */
	assert_int_equal(nrs_put_decide(0, &got, 999, sha),
			 NRS_PUT_QUARANTINE);
	got.sha256[31] ^= 1;
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha),
			 NRS_PUT_QUARANTINE);
	/* no SHA-256 stored with it: nothing proves it is ours */
	memcpy(got.sha256, sha, sizeof(sha));
	got.has_sha256 = false;
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha),
			 NRS_PUT_QUARANTINE);
}

/* ---- the materializer's threads, through the seam --------------------- */

static struct nrs_mat *mat_start(struct bgfake *f, uint64_t object_size)
{
	struct nrs_mat_opts o = {
		.min_bytes = 1, .max_age_ms = 3600 * 1000,
		.object_size = object_size, .threads = 1, .retry_max_ms = 20,
		.compact_size = NRS_COMPACT_OFF,
	};
	struct nrs_mat *m = NULL;

	assert_int_equal(nrs_mat_start(&f->svc, &o, &m), 0);
	return m;
}

struct until {
	struct bgfake *f;
	struct nrs_stream *st;
	uint64_t v;
};

static bool n_puts(void *ctx)
{
	struct until *u = ctx;

	return bg_count(&u->f->store.mu, &u->f->store.puts) >= u->v;
}

/* Segment u->v is gone: only the current one, a later one, is left. */
static bool seg_gone(void *ctx)
{
	struct until *u = ctx;
	struct nrs_wal_stats ws;

	nrs_wal_stats(u->f->wal, &ws);
	return ws.segments == 1 && ws.cur_seg > u->v;
}

/* The one row of stream id in state, into *o. */
static void one_row(struct bgfake *f, uint64_t id, int state,
		    struct nrs_obj_row *o)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;

	assert_int_equal(nrs_meta_obj_rows(f->meta, id, state, &v, &n), 0);
	assert_int_equal(n, 1);
	*o = v[0];
	free(v);
}

/* MZ2-MZ4: a range becomes one object: intent first, then the PUT, then the
 * row committed, the index serving the object, `materialized` moved; no
 * poke (nothing was trimmed).  Then the idle builder seals the dead
 * current segment (MZ7) and reclaims it (MZ5), the drain first. */
static void test_mat_publish(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o;
	char key[NRS_OBJKEY_MAX];
	uint64_t len, seg;
	struct until u = { &f, NULL, 0 };

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	seg = bg_write(&f, st, 1000, 'a');
	bg_write(&f, st, 1000, 'b');
	bg_write(&f, st, 1000, 'c');
	m = mat_start(&f, 0);
	bg_wait_materialized(st, 3000);
	one_row(&f, st->id, NRS_OBJ_COMMITTED, &o);
	assert_int_equal(o.start, 0);
	assert_int_equal(o.end, 3000);
	assert_int_equal(o.length, nrs_objfmt_hdr_len(3000) + 3000);
	assert_int_equal(bg_rows(&f, st->id, 0), 1);	/* no intent left */
	bg_key(&o, key);
	assert_true(bg_has(&f, key, &len));
	assert_int_equal(len, o.length);
	assert_int_equal(bg_puts_of(&f, key), 1);
	assert_false(f.store.no_intent);		/* MZ3: intent first */
	pthread_mutex_lock(&st->lock);
	assert_int_equal(st->index.n, 1);
	assert_int_equal(st->index.v[0].kind, NRS_TARGET_OBJ);
	assert_int_equal(st->index.v[0].gen, o.gen);
	assert_int_equal(st->wal_bytes, 0);
	assert_int_equal(st->obj_bytes, o.length);
	assert_int_equal(st->unmat_since_ns, 0);
	pthread_mutex_unlock(&st->lock);
	assert_int_equal(atomic_load(&f.metrics.obj_uploads), 1);
	/* MZ7, then MZ5: nothing names the segment, so it is sealed (the
	 * next one made current) and goes */
	u.v = seg;
	assert_true(bg_wait(seg_gone, &u));
	pthread_mutex_lock(&f.mu);
	assert_true(f.seals >= 1);
	assert_int_equal(f.seal_seg, seg);
	assert_true(f.drains >= 1);
	assert_int_equal(f.segs_at_drain, 2);	/* drained, then deleted */
	assert_int_equal(f.pokes, 0);
	pthread_mutex_unlock(&f.mu);
	nrs_mat_stop(m);
	bg_close(&f);
}

/* MZ1: whole records, at most object_size bytes, at least one record. */
static void test_mat_object_size(void **state)
{
	static const uint64_t want[][2] = { { 0, 200 }, { 200, 300 },
					    { 300, 600 } };
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row *v = NULL;
	size_t n = 0;

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 100, 'a');
	bg_write(&f, st, 100, 'b');
	bg_write(&f, st, 100, 'c');
	bg_write(&f, st, 300, 'd');	/* larger than an object */
	m = mat_start(&f, 200);
	bg_wait_materialized(st, 600);
	nrs_mat_stop(m);
	assert_int_equal(nrs_meta_obj_rows(f.meta, st->id, NRS_OBJ_COMMITTED,
					   &v, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(v[i].start, want[i][0]);
		assert_int_equal(v[i].end, want[i][1]);
	}
	free(v);
	bg_close(&f);
}

/* MZ3, MZ6: with the store away, the intent is recorded and the PUT retried
 * until the stop, which leaves the intent; the next start finds it and
 * deletes its object (here one a PUT left after all) and its row, and
 * the range is materialized anew under a new generation. */
static void test_mat_intent_orphan(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o, n;
	char key[NRS_OBJKEY_MAX], key2[NRS_OBJKEY_MAX];
	struct until u = { &f, NULL, 2 };
	void *buf;

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 500, 'a');
	f.store.away_forever = true;
	m = mat_start(&f, 0);
	assert_true(bg_wait(n_puts, &u));
	nrs_mat_stop(m);
	assert_false(f.store.no_intent);
	one_row(&f, st->id, NRS_OBJ_PREPARED, &o);	/* the intent stays */
	assert_int_equal(bg_rows(&f, st->id, 0), 1);
	assert_int_equal(st->materialized, 0);
	assert_true(atomic_load(&f.metrics.obj_retries) >= 1);
	assert_int_equal(atomic_load(&f.metrics.obj_quarantined), 0);
	bg_key(&o, key);
	assert_false(bg_has(&f, key, NULL));
	/* the PUT had landed after all */
	buf = calloc(1, o.length);
	assert_non_null(buf);
	assert_int_equal(nrs_obj_put(f.store.real, key, buf, o.length, NULL,
				     o.sha256), 0);
	free(buf);

	f.store.away_forever = false;
	m = mat_start(&f, 0);
	bg_wait_materialized(st, 500);
	nrs_mat_stop(m);
	assert_false(bg_row(&f, o.gen, &n));		/* MZ6: row gone */
	assert_false(bg_has(&f, key, NULL));		/* and its object */
	assert_int_equal(bg_dels_of(&f, key), 1);
	assert_int_equal(atomic_load(&f.metrics.obj_orphans_removed), 1);
	one_row(&f, st->id, NRS_OBJ_COMMITTED, &n);
	assert_true(n.gen > o.gen);
	bg_key(&n, key2);
	assert_string_not_equal(key, key2);
	assert_true(bg_has(&f, key2, NULL));
	assert_int_equal(bg_rows(&f, st->id, 0), 1);
	bg_close(&f);
}

/* MZ3: the HEAD shows other bytes under the key: that generation is
 * quarantined, never published, its key never written again; the range
 * goes out under a new generation, hence a new key. */
static void test_mat_quarantine(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row q, o;
	char key[NRS_OBJKEY_MAX];

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 700, 'q');
	f.store.lie_first = true;
	m = mat_start(&f, 0);
	bg_wait_materialized(st, 700);
	nrs_mat_stop(m);
	one_row(&f, st->id, NRS_OBJ_QUARANTINED, &q);
	one_row(&f, st->id, NRS_OBJ_COMMITTED, &o);
	assert_int_equal(bg_rows(&f, st->id, 0), 2);
	assert_true(o.gen > q.gen);
	bg_key(&q, key);
	assert_string_equal(key, f.store.lie_key);
	assert_int_equal(bg_puts_of(&f, key), 1);	/* never again */
	bg_key(&o, key);
	assert_int_equal(bg_puts_of(&f, key), 1);
	assert_int_equal(atomic_load(&f.metrics.obj_quarantined), 1);
	assert_int_equal(atomic_load(&f.metrics.obj_uploads), 1);
	bg_close(&f);
}

/* MZ3: a PUT answered but lost (the HEAD finds nothing) goes again, the same
 * bytes under the same key; a store that does not answer is retried, with
 * the same generation, never quarantined. */
static void retried(unsigned int drop, unsigned int away, unsigned int puts)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o;
	char key[NRS_OBJKEY_MAX];

	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 300, 'r');
	f.store.drop = drop;
	f.store.away = away;
	m = mat_start(&f, 0);
	bg_wait_materialized(st, 300);
	nrs_mat_stop(m);
	one_row(&f, st->id, NRS_OBJ_COMMITTED, &o);
	assert_int_equal(bg_rows(&f, st->id, 0), 1);
	bg_key(&o, key);
	assert_int_equal(bg_puts_of(&f, key), puts);
	assert_int_equal(f.store.puts, puts);
	assert_int_equal(atomic_load(&f.metrics.obj_retries), puts - 1);
	assert_int_equal(atomic_load(&f.metrics.obj_quarantined), 0);
	bg_close(&f);
}

static void test_mat_put_lost(void **state)
{
	(void)state;
	retried(1, 0, 2);
}

static void test_mat_store_away(void **state)
{
	(void)state;
	retried(0, 3, 4);
}

struct trim_at_put {
	struct bgfake *f;
	struct nrs_stream *st;
	uint64_t to;
	int err;		/* the trim's (no cmocka in other threads) */
};

static void trim_hook(void *ctx, const char *key)
{
	struct trim_at_put *t = ctx;

	(void)key;
	if (t->to) {
		t->err = t->f->svc.trim(t->f, t->st, t->to);
		t->to = 0;
	}
}

static bool poked(void *ctx)
{
	struct until *u = ctx;

	return bg_count(&u->f->mu, &u->f->pokes) >= 1;
}

/* MZ4: a range trimmed while its object was on its way is published, yet
 * serves nothing: the GC is poked to look at it (lifecycle.c G1). */
static void test_mat_trimmed_meanwhile(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o;
	struct trim_at_put t;
	struct until u = { &f, NULL, 0 };

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 400, 't');
	t = (struct trim_at_put){ &f, st, 400, 0 };
	f.store.put_hook = trim_hook;
	f.store.put_hook_ctx = &t;
	m = mat_start(&f, 0);
	assert_true(bg_wait(poked, &u));
	nrs_mat_stop(m);
	assert_int_equal(t.err, 0);
	assert_int_equal(f.poke_id, st->id);
	one_row(&f, st->id, NRS_OBJ_COMMITTED, &o);
	assert_int_equal(st->index.n, 0);
	bg_close(&f);
}

static bool retry_set(void *ctx)
{
	struct until *u = ctx;
	uint64_t r;

	pthread_mutex_lock(&u->st->lock);
	r = u->st->mat_retry_ns;
	pthread_mutex_unlock(&u->st->lock);
	return r != 0;
}

/* MZ9: a stream due whose next byte no WAL record holds is put aside for a
 * pause, not taken again at once; the other streams go on. */
static void test_mat_lost_range(void **state)
{
	struct bgfake f;
	struct nrs_stream *lost, *st;
	struct nrs_mat *m;
	struct until u;

	(void)state;
	bg_open(&f, "test_materializer", true);
	lost = bg_stream(&f, "lost", NULL);
	bg_head(&f, lost, 5000, 0);		/* no record holds it */
	lost->unmat_since_ns = 1;
	st = bg_stream(&f, "s", NULL);
	bg_write(&f, st, 100, 's');	/* less due than the lost one */
	m = mat_start(&f, 0);
	u = (struct until){ &f, lost, 0 };
	assert_true(bg_wait(retry_set, &u));
	bg_wait_materialized(st, 100);
	nrs_mat_stop(m);
	assert_int_equal(bg_rows(&f, lost->id, 0), 0);
	assert_int_equal(lost->materialized, 0);
	assert_false(lost->mat_busy);
	bg_close(&f);
}

/* ---- walgc.c's passes, called directly -------------------------------- */

static uint64_t segments(struct bgfake *f)
{
	struct nrs_wal_stats ws;

	nrs_wal_stats(f->wal, &ws);
	return ws.segments;
}

/* What the materializer leaves when it has published st's range, or a
 * trim: no index entry names the WAL. */
static void forget_wal(struct nrs_stream *st)
{
	pthread_mutex_lock(&st->lock);
	st->start = st->head;
	nrs_index_drop_below(&st->index, st->head);
	pthread_mutex_unlock(&st->lock);
}

/* MZ5: a segment goes only when no index names it and the pipeline's floor
 * is above it, never the current one, and the readers drain first. */
static void test_walgc_reclaim(void **state)
{
	struct bgfake f;
	struct nrs_stream *a, *b;
	struct nrs_walgc g;

	(void)state;
	bg_open(&f, "test_materializer", true);
	a = bg_stream(&f, "a", NULL);
	b = bg_stream(&f, "b", NULL);
	assert_int_equal(bg_write(&f, a, 100, 'a'), 1);
	assert_int_equal(nrs_wal_seal(f.wal, 1), 1);
	assert_int_equal(bg_write(&f, b, 100, 'b'), 2);
	nrs_walgc_init(&g, &f.svc, f.svc.wal, false);

	nrs_walgc_reclaim(&g);			/* a's index names 1 */
	assert_int_equal(segments(&f), 2);
	forget_wal(a);
	atomic_store(&f.floor, 1);		/* a record not indexed in 1 */
	nrs_walgc_reclaim(&g);
	assert_int_equal(segments(&f), 2);
	atomic_store(&f.floor, UINT64_MAX);
	atomic_store(&f.keep, 1);		/* MZ8: no checkpoint covers 1 */
	nrs_walgc_reclaim(&g);
	assert_int_equal(segments(&f), 2);
	atomic_store(&f.keep, UINT64_MAX);
	f.drains = 0;
	nrs_walgc_reclaim(&g);
	assert_int_equal(segments(&f), 1);	/* 1 went, 2 is current */
	assert_int_equal(f.drains, 1);
	assert_int_equal(f.segs_at_drain, 2);	/* drained before */
	assert_true(atomic_load(&f.metrics.wal_reclaimed_segments) == 1);
	forget_wal(b);
	nrs_walgc_reclaim(&g);			/* the current one stays */
	assert_int_equal(segments(&f), 1);
	nrs_walgc_destroy(&g);
	bg_close(&f);
}

/* MZ7: the current segment is sealed only when it holds a record, the
 * floor is above it and no index names it; a failed seal waits. */
static void test_walgc_seal(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_walgc g;

	(void)state;
	bg_open(&f, "test_materializer", true);
	st = bg_stream(&f, "s", NULL);
	nrs_walgc_init(&g, &f.svc, f.svc.wal, false);
	nrs_walgc_seal_dead(&g);		/* no current segment */
	assert_int_equal(f.seals, 0);
	assert_int_equal(bg_write(&f, st, 100, 's'), 1);
	nrs_walgc_seal_dead(&g);		/* its index names 1 */
	assert_int_equal(f.seals, 0);
	forget_wal(st);
	atomic_store(&f.floor, 1);		/* a record not indexed in 1 */
	nrs_walgc_seal_dead(&g);
	assert_int_equal(f.seals, 0);
	atomic_store(&f.floor, UINT64_MAX);
	nrs_walgc_seal_dead(&g);
	assert_int_equal(f.seals, 1);
	assert_int_equal(f.seal_seg, 1);
	assert_true(atomic_load(&f.metrics.wal_sealed_segments) == 1);
	nrs_walgc_reclaim(&g);			/* MZ5 follows */
	assert_int_equal(segments(&f), 1);	/* 2, made current by it */

	assert_int_equal(bg_write(&f, st, 100, 't'), 2);
	forget_wal(st);
	f.seal_err = -ENOSPC;
	nrs_walgc_seal_dead(&g);
	assert_int_equal(f.seals, 2);
	f.seal_err = 0;
	nrs_walgc_seal_dead(&g);		/* not again at once */
	assert_int_equal(f.seals, 2);
	assert_int_equal(segments(&f), 1);
	nrs_walgc_destroy(&g);
	bg_close(&f);
}

/* A WAL whose stats the test sets and whose reclaim counts its calls: the
 * object WAL's grace seen from walgc.c (wal_object_gc.c OWG1). */
struct gracewal {
	struct nrs_wal base;
	struct nrs_wal_stats st;
	int reclaims;
};

static void gw_stats(struct nrs_wal *w, struct nrs_wal_stats *out)
{
	*out = ((struct gracewal *)w)->st;
}

static int gw_reclaim(struct nrs_wal *w, uint64_t below, uint64_t *bytes)
{
	(void)below;
	*bytes = 0;
	((struct gracewal *)w)->reclaims++;
	return 0;
}

static const struct nrs_wal_ops gracewal_ops = {
	.name = "gracewal", .stats = gw_stats, .reclaim = gw_reclaim,
};

/* OWG1: with its bound unmoved, the object WAL is reclaimed again once an
 * object's grace is over, and not before. */
static void test_walgc_grace(void **state)
{
	struct gracewal w = { .base.ops = &gracewal_ops,
			      .st = { .segments = 2, .last_seg = 2 } };
	struct bgfake f;
	struct nrs_walgc g;

	(void)state;
	bg_open(&f, "test_materializer", false);
	nrs_walgc_init(&g, &f.svc, &w.base, true);
	nrs_walgc_reclaim(&g);
	assert_int_equal(w.reclaims, 1);
	nrs_walgc_reclaim(&g);			/* nothing new, none waits */
	assert_int_equal(w.reclaims, 1);
	w.st.reclaim_due_ns = nrs_now_mono_ns() + 3600 * 1000000000ull;
	nrs_walgc_reclaim(&g);			/* a grace not over yet */
	assert_int_equal(w.reclaims, 1);
	w.st.reclaim_due_ns = nrs_now_mono_ns() - 1;
	nrs_walgc_reclaim(&g);			/* over: reclaimed again */
	assert_int_equal(w.reclaims, 2);
	nrs_walgc_destroy(&g);
	bg_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_decide),
		cmocka_unit_test(test_reclaim_bound),
		cmocka_unit_test(test_mat_publish),
		cmocka_unit_test(test_mat_object_size),
		cmocka_unit_test(test_mat_intent_orphan),
		cmocka_unit_test(test_mat_quarantine),
		cmocka_unit_test(test_mat_put_lost),
		cmocka_unit_test(test_mat_store_away),
		cmocka_unit_test(test_mat_trimmed_meanwhile),
		cmocka_unit_test(test_mat_lost_range),
		cmocka_unit_test(test_walgc_reclaim),
		cmocka_unit_test(test_walgc_seal),
		cmocka_unit_test(test_walgc_grace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
