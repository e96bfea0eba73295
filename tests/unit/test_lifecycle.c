/*
 * test_lifecycle.c - retention and the object GC (bg/lifecycle.c).
 *
 * First the pure retention cut (L2): the larger of the size and time cuts,
 * at object boundaries, committed objects only; a retention too long to
 * count in nanoseconds keeps forever (sat.h SAT1).  Then the lifecycle
 * thread through the services seam (bg/services.h, bgfake.h): a real
 * SQLite store, the directory object store behind a wrapper that fails on
 * demand, a stream table of the test's own, upcalls that record what they
 * are asked.  Each test starts the thread and waits (bg_wait) for what it
 * expects: L1-L3 (the policy, inherited; the cut rounded to 4096; the trim
 * upcall called with it), G1 (what is no longer needed goes to draining),
 * G2 (deleted only after the grace, the readers drained first; a grace
 * that never ends), G3 (a failed delete is retried, the row retired only
 * after it), G6 (an adopted record is punched out of its file, not before
 * the WAL's own name of the file is gone), G7 (the file goes with the last
 * row that names it), G8 (rows retired only after their file's holes were
 * synced, once per file and pass), G9 (a WAL object's slice is punched
 * only once the object WAL's floor is past the object).  G5 (retired rows
 * forgotten after an hour, looked at once a minute) is out of a unit
 * test's reach.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bg/lifecycle.h"
#include "bgfake.h"
#include "util/clock.h"
#include "util/sat.h"
#include "wal/wal.h"

#define MS 1000000LL

/* four committed objects of 100 bytes, made at t = 1000, 2000, 3000, 4000 ms */
static void rows(struct nrs_obj_row v[4])
{
	for (int i = 0; i < 4; i++) {
		v[i] = (struct nrs_obj_row){
			.gen = (uint64_t)i + 1, .stream_id = 1,
			.start = 100 * (uint64_t)i, .end = 100 * (uint64_t)i + 100,
			.state = NRS_OBJ_COMMITTED, .ctime_ns = (i + 1) * 1000 * MS,
		};
	}
}

static void test_cut(void **state)
{
	struct nrs_obj_row v[4];

	(void)state;
	rows(v);
	/* no policy: nothing goes */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 0, 9000 * MS), 0);
	/* size: keep at least 250 of 450 bytes -> cut at 200 (250 kept) */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 250, 0, 0), 200);
	/* exactly at a boundary: 150 kept above 300 is >= 150 */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 150, 0, 0), 300);
	/* never into bytes above the last object (still in the WAL) */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 1, 0, 0), 400);
	/* more than the head asked for: nothing */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 1000, 0, 0), 0);
	/* time: older than 1500 ms at t = 3600 ms: objects 1 and 2 */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1500, 3600 * MS), 200);
	/* the larger of the two cuts */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 300, 1500, 3600 * MS), 200);
	assert_int_equal(nrs_retention_cut(v, 4, 450, 100, 1500, 3600 * MS), 300);
	/* only committed objects count */
	v[1].state = NRS_OBJ_PREPARED;
	v[2].state = NRS_OBJ_DRAINING;
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1, 9000 * MS), 400);
	v[3].state = NRS_OBJ_QUARANTINED;
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1, 9000 * MS), 100);
}

/* SAT1: Java's Long.MAX_VALUE ms (what adapters pass for "forever") and
 * anything up to 2^64 - 1 keeps every object, however old. */
static void test_cut_forever(void **state)
{
	static const uint64_t huge[] = {
		INT64_MAX, UINT64_MAX, (uint64_t)INT64_MAX / 1000000 + 1,
		UINT64_MAX / 1000000, 18446744073709552ull,
	};
	struct nrs_obj_row v[4];

	(void)state;
	rows(v);
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		assert_int_equal(nrs_retention_cut(v, 4, 450, 0, huge[i],
						   9000 * MS), 0);
		assert_int_equal(nrs_retention_cut(v, 4, 450, 0, huge[i],
						   INT64_MAX), 0);
		/* the size cut still applies beside it */
		assert_int_equal(nrs_retention_cut(v, 4, 450, 250, huge[i],
						   9000 * MS), 200);
	}
	/* a long one that still counts, at the end of time */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0,
					   (uint64_t)INT64_MAX / 1000000 - 5000,
					   INT64_MAX), 400);
	/* an object stamped in the future (a clock step) has not aged */
	v[0].ctime_ns = INT64_MAX;
	v[1].ctime_ns = INT64_MAX;
	v[2].ctime_ns = INT64_MAX;
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, 1, 9000 * MS), 0);
	/* nor does one from before the epoch wrap around */
	v[0].ctime_ns = INT64_MIN;
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, 1, 9000 * MS), 100);
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, UINT64_MAX, 9000 * MS),
			 0);
}

/* SAT1 helpers: saturate, never wrap. */
static void test_sat(void **state)
{
	(void)state;
	assert_true(nrs_sat_mul(UINT64_MAX / 2, 3) == UINT64_MAX);
	assert_true(nrs_sat_mul(0, UINT64_MAX) == 0);
	assert_true(nrs_sat_mul(UINT64_MAX, 0) == 0);
	assert_true(nrs_sat_add(UINT64_MAX - 1, 2) == UINT64_MAX);
	assert_true(nrs_sat_add(1, 2) == 3);
	assert_true(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX / 1000000));
	assert_false(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX / 1000000 + 1));
	assert_false(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX));
	assert_false(nrs_elapsed_ms(0, 1, 0));
	assert_true(nrs_elapsed_ms(1, 1, 0));
	assert_true(nrs_elapsed_ms(2 * MS, MS, 1));
	assert_false(nrs_elapsed_ms(2 * MS - 1, MS, 1));
}

/* ---- the lifecycle thread, through the seam --------------------------- */

#define HOUR_NS	(3600LL * 1000 * MS)

static struct nrs_lc *lc_start(struct bgfake *f, uint64_t grace_ms)
{
	struct nrs_lc *l = NULL;

	assert_int_equal(nrs_lc_start(&f->svc, grace_ms, &l), 0);
	return l;
}

/* The trim upcall pokes the lifecycle, as the core's trim does. */
static void poke_lc(void *ctx, uint64_t stream_id)
{
	nrs_lc_poke(*(struct nrs_lc *_Atomic *)ctx, stream_id);
}

struct until {
	struct bgfake *f;
	uint64_t gen;
	int state;
	uint64_t v;
};

static bool trimmed(void *ctx)
{
	struct until *u = ctx;

	return bg_count(&u->f->mu, &u->f->trims) >= 1;
}

static bool in_state(void *ctx)
{
	struct until *u = ctx;
	struct nrs_obj_row o;

	return bg_row(u->f, u->gen, &o) && o.state == u->state;
}

/* A pass of G2 has ended with v bytes still draining. */
static bool draining_bytes(void *ctx)
{
	struct until *u = ctx;

	return atomic_load(&u->f->metrics.gc_draining_bytes) == u->v;
}

static int row_state(struct bgfake *f, uint64_t gen)
{
	struct nrs_obj_row o;

	assert_true(bg_row(f, gen, &o));
	return o.state;
}

static bool has_object(struct bgfake *f, uint64_t gen)
{
	struct nrs_obj_row o;
	char key[NRS_OBJKEY_MAX];

	assert_true(bg_row(f, gen, &o));
	bg_key(&o, key);
	return bg_has(f, key, NULL);
}

/* L2, L3, then G1: retention.ms cuts at the end of the highest committed
 * object older than it, rounded down to 4096; the trim upcall is called
 * with that offset; the object wholly below it goes to draining, the one
 * the rounding cuts into stays committed. */
static void test_lc_retention_time(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *_Atomic lc = NULL;
	uint64_t ino, g1, g2, g3;
	int64_t now = nrs_now_real_ns();
	struct until u = { &f, 0, 0, 0 };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	st = bg_stream(&f, "s", &ino);
	bg_head(&f, st, 20000, 0);
	g1 = bg_object(&f, st->id, 0, 5000, now - HOUR_NS);
	g2 = bg_object(&f, st->id, 5000, 9000, now - HOUR_NS);
	g3 = bg_object(&f, st->id, 9000, 14000, now);
	assert_int_equal(nrs_meta_set_retention(f.meta, ino, NRS_RET_MS,
						60 * 1000), 0);
	f.on_trim = poke_lc;
	f.on_trim_ctx = &lc;
	lc = lc_start(&f, 3600 * 1000);
	assert_true(bg_wait(trimmed, &u));
	u.gen = g1;
	u.state = NRS_OBJ_DRAINING;
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(lc);
	assert_int_equal(f.trims, 1);
	assert_int_equal(f.trim_id, st->id);
	assert_int_equal(f.trim_v, 8192);	/* 9000, page aligned */
	assert_int_equal(st->start, 8192);
	assert_int_equal(row_state(&f, g2), NRS_OBJ_COMMITTED);
	assert_int_equal(row_state(&f, g3), NRS_OBJ_COMMITTED);
	assert_true(has_object(&f, g1));	/* the grace is an hour */
	assert_int_equal(atomic_load(&f.metrics.retention_trims), 1);
	assert_int_equal(atomic_load(&f.metrics.retention_trimmed_bytes),
			 8192);
	bg_close(&f);
}

/* L1, L2: retention.bytes set on the stream's directory applies to it; the
 * cut leaves at least that many bytes above it. */
static void test_lc_retention_bytes(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	struct nrs_attr d, a;
	struct nrs_stream_row row;
	int64_t now = nrs_now_real_ns();
	struct until u = { &f, 0, 0, 0 };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	assert_int_equal(nrs_meta_mkdir(f.meta, 1, "d", 0755, 0, 0, 1, &d), 0);
	assert_int_equal(nrs_meta_create(f.meta, d.ino, "s", 0644, 0, 0, 1, &a,
					 &row), 0);
	st = nrs_stream_new(&row);
	assert_non_null(st);
	assert_int_equal(nrs_streams_insert(&f.t, st), 0);
	bg_head(&f, st, 10000, 0);
	bg_object(&f, st->id, 0, 4096, now);
	bg_object(&f, st->id, 4096, 8192, now);
	assert_int_equal(nrs_meta_set_retention(f.meta, d.ino, NRS_RET_BYTES,
						4000), 0);
	l = lc_start(&f, 0);
	assert_true(bg_wait(trimmed, &u));
	nrs_lc_stop(l);
	assert_int_equal(f.trim_id, st->id);
	assert_int_equal(f.trim_v, 4096);	/* 5904 bytes stay above */
	bg_close(&f);
}

/* A row of stream id for [start, end), committed, then draining since
 * drained_ns. */
static uint64_t draining(struct bgfake *f, uint64_t id, uint64_t start,
			 uint64_t end, int64_t drained_ns)
{
	uint64_t gen = bg_object(f, id, start, end, drained_ns);

	assert_int_equal(nrs_meta_obj_set_state(f->meta, gen,
						NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, drained_ns),
			 0);
	return gen;
}

static uint64_t obj_len(uint64_t start, uint64_t end)
{
	return nrs_objfmt_hdr_len(end - start) + (end - start);
}

/* G2: a draining generation is deleted (and retired) only once its grace
 * is over, and the readers are drained before the first delete. */
static void test_lc_grace(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	uint64_t young, old;
	int64_t now = nrs_now_real_ns();
	struct until u = { &f, 0, 0, obj_len(0, 100) };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 300, 0);
	young = draining(&f, st->id, 0, 100, now);
	old = draining(&f, st->id, 100, 300, now - HOUR_NS);
	l = lc_start(&f, 600 * 1000);
	assert_true(bg_wait(draining_bytes, &u));	/* a pass ended */
	nrs_lc_stop(l);
	assert_int_equal(row_state(&f, old), NRS_OBJ_RETIRED);
	assert_false(has_object(&f, old));
	assert_int_equal(row_state(&f, young), NRS_OBJ_DRAINING);
	assert_true(has_object(&f, young));
	assert_true(f.drains >= 1);
	assert_int_equal(f.dels_at_first_drain, 0);	/* drained first */
	assert_int_equal(atomic_load(&f.metrics.gc_deleted), 1);
	assert_int_equal(atomic_load(&f.metrics.gc_deleted_bytes),
			 obj_len(100, 300));
	bg_close(&f);
}

/* G2, SAT1: a grace too long to count in nanoseconds never ends. */
static void test_lc_grace_forever(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	uint64_t old;
	struct until u = { &f, 0, 0, obj_len(0, 100) };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 100, 0);
	old = draining(&f, st->id, 0, 100, nrs_now_real_ns() - HOUR_NS);
	l = lc_start(&f, UINT64_MAX);
	assert_true(bg_wait(draining_bytes, &u));
	nrs_lc_stop(l);
	assert_int_equal(row_state(&f, old), NRS_OBJ_DRAINING);
	assert_true(has_object(&f, old));
	assert_int_equal(f.drains, 0);
	bg_close(&f);
}

/* G2, G3: a failed delete leaves the row draining, and is tried again at
 * the next pass; the row is retired only after the delete. */
static void test_lc_delete_retried(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	uint64_t old;
	struct until u = { &f, 0, NRS_OBJ_RETIRED, 0 };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 100, 0);
	old = draining(&f, st->id, 0, 100, nrs_now_real_ns() - HOUR_NS);
	f.store.del_fail = 1;
	l = lc_start(&f, 1000);
	u.gen = old;
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(l);
	assert_int_equal(f.store.del_fails_done, 1);
	assert_int_equal(f.store.dels, 2);
	assert_false(has_object(&f, old));
	assert_true(f.drains >= 2);		/* once per pass */
	bg_close(&f);
}

/* G1 at start: committed rows wholly below their stream's start, or of a
 * stream that is gone, go to draining; the start in memory, when lower
 * than the stored one (a trim half done), is the one trusted. */
static void test_lc_unneeded(void **state)
{
	struct bgfake f;
	struct nrs_stream *st, *half;
	struct nrs_lc *l;
	uint64_t below, above, gone, kept;
	int64_t now = nrs_now_real_ns();
	struct until u = { &f, 0, NRS_OBJ_DRAINING, 0 };

	(void)state;
	bg_open(&f, "test_lifecycle", false);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 12288, 0);
	below = bg_object(&f, st->id, 0, 4096, now);
	above = bg_object(&f, st->id, 4096, 12288, now);
	assert_int_equal(nrs_meta_set_start(f.meta, st->id, 8192), 0);
	st->start = 8192;
	half = bg_stream(&f, "half", NULL);
	bg_head(&f, half, 8192, 0);
	kept = bg_object(&f, half->id, 0, 4096, now);
	assert_int_equal(nrs_meta_set_start(f.meta, half->id, 8192), 0);
	gone = bg_object(&f, half->id + 100, 0, 4096, now);
	l = lc_start(&f, 3600 * 1000);
	u.gen = gone;
	assert_true(bg_wait(in_state, &u));
	u.gen = below;
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(l);
	assert_int_equal(row_state(&f, above), NRS_OBJ_COMMITTED);
	assert_int_equal(row_state(&f, kept), NRS_OBJ_COMMITTED);
	bg_close(&f);
}

/* ---- adopted generations (G6, G7) --------------------------------------- */

#define SEG	5
#define REC	8192		/* bytes of each record in the fake segment */

static uint64_t seg_of = SEG;	/* the rows' seg (G9: a WAL object's) */

/* A row of stream id for record k of segment SEG's file (file bytes 64 +
 * k * REC on), committed at ctime_ns. */
static uint64_t adopted(struct bgfake *f, uint64_t id, unsigned int k,
			int64_t ctime_ns)
{
	static const unsigned char sha[NRS_SHA256_LEN];
	struct nrs_obj_row o = {
		.stream_id = id, .start = 1000 * (uint64_t)k,
		.end = 1000 * (uint64_t)k + 1000, .length = REC, .seg = seg_of,
		.off = 64 + (uint64_t)k * REC, .ctime_ns = ctime_ns,
	};

	assert_int_equal(nrs_meta_obj_prepare(f->meta, &o), 0);
	assert_int_equal(nrs_meta_obj_publish(f->meta, o.gen, sha), 0);
	return o.gen;
}

/* Rows for records 0-2 of stream id into g, committed at old; 0 and 1
 * then draining since old (their grace over), 2 still committed. */
static void three_adopted(struct bgfake *f, uint64_t id, uint64_t g[3],
			  int64_t old)
{
	for (unsigned int k = 0; k < 3; k++)
		g[k] = adopted(f, id, k, old);
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(nrs_meta_obj_set_state(f->meta, g[k],
							NRS_OBJ_COMMITTED,
							NRS_OBJ_DRAINING, old),
				 0);
}

/* The fake WAL segment: 64 header bytes and 4 records of REC bytes of
 * 0xab, at path (the WAL's name), adopted by the store as w/<SEG>. */
static void segment_file(struct bgfake *f, const char *path)
{
	bg_adopted_segment(f, path, SEG, 64 + 4 * REC);
}

/* The path of segment SEG's file in the store, into path. */
static const char *adopted_path(struct bgfake *f, char *path, size_t size)
{
	char key[NRS_OBJKEY_MAX];

	nrs_objfmt_adopt_key(key, seg_of);
	snprintf(path, size, "%s/objects/%s", f->dir, key);
	return path;
}

/* Is the file's byte at (a file offset) stored, not a hole? */
static bool stored_at(struct bgfake *f, off_t at)
{
	char path[4096 + 16 + NRS_OBJKEY_MAX];
	int fd = open(adopted_path(f, path, sizeof(path)), O_RDONLY);
	off_t data;

	assert_true(fd >= 0);
	data = lseek(fd, at, SEEK_DATA);
	close(fd);
	return data == at;
}

/* (head() proves nothing of an adopted file: it is looked at directly) */
static bool adopted_file(struct bgfake *f)
{
	char path[4096 + 16 + NRS_OBJKEY_MAX];
	struct stat sb;

	return stat(adopted_path(f, path, sizeof(path)), &sb) == 0;
}

/* The punch upcalls (services.h), as the core's: the real directory
 * store's punch; its sync counted, answering sync_err. */
static struct {
	atomic_uint punches, syncs;
	atomic_int sync_err;
} pu;

static int up_punch(void *ctx, uint64_t seg, uint64_t off, uint64_t len)
{
	struct bgfake *f = ctx;
	char key[NRS_OBJKEY_MAX];

	nrs_objfmt_adopt_key(key, seg);
	atomic_fetch_add(&pu.punches, 1);
	return nrs_objstore_dir_punch(f->store.real, key, off, len);
}

static int up_punch_sync(void *ctx, uint64_t seg)
{
	struct bgfake *f = ctx;
	char key[NRS_OBJKEY_MAX];
	int err = atomic_load(&pu.sync_err);

	nrs_objfmt_adopt_key(key, seg);
	atomic_fetch_add(&pu.syncs, 1);
	return err ? err : nrs_objstore_dir_punch_sync(f->store.real, key);
}

/* bg_open, then the punch upcalls wired, their record cleared. */
static void open_punching(struct bgfake *f)
{
	bg_open(f, "test_lifecycle", false);
	f->svc.punch = up_punch;
	f->svc.punch_sync = up_punch_sync;
	atomic_store(&pu.punches, 0);
	atomic_store(&pu.syncs, 0);
	atomic_store(&pu.sync_err, 0);
}

static bool synced_twice(void *ctx)
{
	(void)ctx;
	return atomic_load(&pu.syncs) >= 2;
}

/* G6: adopted generations past their grace are punched out of their file
 * only once the WAL's name of it is gone (till then they stay draining);
 * the file stays while a row still names it.  G7: it goes with the last. */
static void test_lc_adopted(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	char wal_name[4200];
	uint64_t g[3];
	int64_t old = nrs_now_real_ns() - HOUR_NS;
	struct until u = { &f, 0, NRS_OBJ_RETIRED, 2 * REC };

	(void)state;
	open_punching(&f);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 3000, 0);
	snprintf(wal_name, sizeof(wal_name), "%s/seg", f.dir);
	segment_file(&f, wal_name);
	three_adopted(&f, st->id, g, old);
	l = lc_start(&f, 1000);
	assert_true(bg_wait(draining_bytes, &u));	/* a pass: -EBUSY */
	assert_int_equal(row_state(&f, g[0]), NRS_OBJ_DRAINING);
	assert_int_equal(row_state(&f, g[1]), NRS_OBJ_DRAINING);
	assert_true(stored_at(&f, 64 + REC));
	assert_int_equal(unlink(wal_name), 0);	/* walgc reclaims its name */
	u.gen = g[1];
	assert_true(bg_wait(in_state, &u));
	u.gen = g[0];
	assert_true(bg_wait(in_state, &u));
	assert_true(adopted_file(&f));		/* g[2] names it */
	assert_false(stored_at(&f, 4096));	/* whole blocks of g[0], g[1] */
	assert_false(stored_at(&f, 64 + 2 * REC - 4096));
	assert_true(stored_at(&f, 64 + 2 * REC + 4096));	/* g[2]'s */
	assert_true(f.drains >= 1);
	assert_int_equal(nrs_meta_obj_set_state(f.meta, g[2], NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, old), 0);
	u.gen = g[2];
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(l);
	assert_false(adopted_file(&f));
	assert_int_equal(atomic_load(&f.metrics.gc_deleted), 3);
	bg_close(&f);
}

/* G8: the rows of a file that stays are retired only after its holes
 * were synced, one sync for the pass's punches of the file; a failed sync
 * leaves them draining, punched and synced again next pass. */
static void test_lc_adopted_sync(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	char wal_name[4200];
	uint64_t g[3];
	int64_t old = nrs_now_real_ns() - HOUR_NS;
	struct until u = { &f, 0, NRS_OBJ_RETIRED, 0 };

	(void)state;
	open_punching(&f);
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 3000, 0);
	snprintf(wal_name, sizeof(wal_name), "%s/seg", f.dir);
	segment_file(&f, wal_name);
	assert_int_equal(unlink(wal_name), 0);	/* walgc has let it go */
	three_adopted(&f, st->id, g, old);
	atomic_store(&pu.sync_err, -EIO);
	l = lc_start(&f, 1000);
	assert_true(bg_wait(synced_twice, NULL));	/* two passes */
	nrs_lc_stop(l);
	assert_int_equal(row_state(&f, g[0]), NRS_OBJ_DRAINING);
	assert_int_equal(row_state(&f, g[1]), NRS_OBJ_DRAINING);
	assert_true(atomic_load(&pu.punches) >= 4);	/* punched again */
	atomic_store(&pu.sync_err, 0);
	atomic_store(&pu.syncs, 0);
	l = lc_start(&f, 1000);
	u.gen = g[1];
	assert_true(bg_wait(in_state, &u));
	u.gen = g[0];
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(l);
	assert_int_equal(atomic_load(&pu.syncs), 1);	/* one for both */
	assert_true(adopted_file(&f));		/* g[2] names it */
	assert_false(stored_at(&f, 4096));
	assert_int_equal(row_state(&f, g[2]), NRS_OBJ_COMMITTED);
	bg_close(&f);
}

/* ---- slices of WAL objects (G9) ------------------------------------------ */

#define OWSEG	((uint64_t)1 << 40 | 3)	/* run 1, seq 3 */

static uint64_t owal_floor;	/* what the fake object WAL's stats say */

static void owal_stats(struct nrs_wal *w, struct nrs_wal_stats *out)
{
	(void)w;
	memset(out, 0, sizeof(*out));
	out->floor = owal_floor;
}

/* G9, G6, G7: slices of a WAL object are punched only once the object WAL's
 * floor is past it; the object goes with the last row naming it. */
static void test_lc_adopted_owal(void **state)
{
	static const struct nrs_wal_ops ops = { .stats = owal_stats };
	static unsigned char buf[64 + 4 * REC];
	struct nrs_wal owal = { .ops = &ops };
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_lc *l;
	char path[4096 + 16 + NRS_OBJKEY_MAX], cmd[8400];
	uint64_t g[2];
	int64_t old = nrs_now_real_ns() - HOUR_NS;
	struct until u = { &f, 0, NRS_OBJ_RETIRED, REC };
	int fd;

	(void)state;
	open_punching(&f);
	f.svc.owal = &owal;
	owal_floor = OWSEG;		/* the WAL still scans it */
	seg_of = NRS_ADOPT_OWAL | OWSEG;
	st = bg_stream(&f, "s", NULL);
	bg_head(&f, st, 2000, 0);
	adopted_path(&f, path, sizeof(path));
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	memset(buf, 0xab, sizeof(buf));
	assert_int_equal(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	assert_int_equal(close(fd), 0);
	for (unsigned int k = 0; k < 2; k++)
		g[k] = adopted(&f, st->id, k, old);
	assert_int_equal(nrs_meta_obj_set_state(f.meta, g[0], NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, old), 0);
	l = lc_start(&f, 1000);
	assert_true(bg_wait(draining_bytes, &u));	/* a pass: -EBUSY */
	assert_int_equal(row_state(&f, g[0]), NRS_OBJ_DRAINING);
	assert_true(stored_at(&f, 4096));
	owal_floor = OWSEG + 1;		/* the object WAL let go of it */
	u.gen = g[0];
	assert_true(bg_wait(in_state, &u));
	assert_true(adopted_file(&f));		/* g[1] names it */
	assert_false(stored_at(&f, 4096));	/* g[0]'s bytes punched */
	assert_true(stored_at(&f, 64 + REC + 4096));
	assert_int_equal(nrs_meta_obj_set_state(f.meta, g[1], NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, old), 0);
	u.gen = g[1];
	assert_true(bg_wait(in_state, &u));
	nrs_lc_stop(l);
	assert_false(adopted_file(&f));		/* G7: one name, gone */
	seg_of = SEG;
	bg_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut),
		cmocka_unit_test(test_cut_forever),
		cmocka_unit_test(test_sat),
		cmocka_unit_test(test_lc_retention_time),
		cmocka_unit_test(test_lc_retention_bytes),
		cmocka_unit_test(test_lc_grace),
		cmocka_unit_test(test_lc_grace_forever),
		cmocka_unit_test(test_lc_delete_retried),
		cmocka_unit_test(test_lc_unneeded),
		cmocka_unit_test(test_lc_adopted),
		cmocka_unit_test(test_lc_adopted_owal),
		cmocka_unit_test(test_lc_adopted_sync),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
