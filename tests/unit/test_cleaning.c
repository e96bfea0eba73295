/*
 * test_cleaning.c - which adopted file the cleaning rule picks
 * (bg/cleaning.c CL1-CL3), through the services seam (bgfake.h: a real
 * SQLite store and the real directory store, its file adopted by a link
 * from a WAL name of the test's own).
 *
 * CL1: a file is picked once its prepared and committed rows add up to
 * less than a quarter of its size, not at a quarter or more, not when no
 * live row names it; CL2: never while the WAL's name of it is there; and
 * what is picked is what compaction's plan asks about (nrs_mat_clean_wants:
 * adopted entries of that segment only).  CL3's pace (a choice a second)
 * is seen as a second call within the second changing nothing.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bg/mat_priv.h"
#include "bgfake.h"
#include "stream/index.h"

#define SEG	5
#define REC	8192		/* bytes of each record in the fake segment */
#define NREC	8

/* The fake segment: 64 header bytes and NREC records of REC bytes, at
 * path (the WAL's name), adopted by the store as w/<SEG>. */
static void segment_file(struct bgfake *f, const char *path)
{
	bg_adopted_segment(f, path, SEG, 64 + NREC * REC);
}

/* The path of segment SEG's file in the store, into path. */
static const char *adopted_path(struct bgfake *f, char *path, size_t size)
{
	char key[NRS_OBJKEY_MAX];

	nrs_objfmt_adopt_key(key, SEG);
	snprintf(path, size, "%s/objects/%s", f->dir, key);
	return path;
}

/* A committed row of stream id for record k of the segment. */
static uint64_t adopted(struct bgfake *f, uint64_t id, unsigned int k)
{
	static const unsigned char sha[NRS_SHA256_LEN];
	struct nrs_obj_row o = {
		.stream_id = id, .start = REC * (uint64_t)k,
		.end = REC * (uint64_t)k + REC, .length = REC, .seg = SEG,
		.off = 64 + (uint64_t)k * REC, .ctime_ns = 1,
	};

	assert_int_equal(nrs_meta_obj_prepare(f->meta, &o), 0);
	assert_int_equal(nrs_meta_obj_publish(f->meta, o.gen, sha), 0);
	return o.gen;
}

static void to_state(struct bgfake *f, uint64_t gen, int from, int to)
{
	assert_int_equal(nrs_meta_obj_set_state(f->meta, gen, from, to, 1), 0);
}

/* A choice now, whatever the pace; the segment picked. */
static uint64_t choose_now(struct nrs_mat *m)
{
	m->clean_at_ns = 0;
	nrs_mat_clean_choose(m);
	return atomic_load(&m->clean_seg);
}

static void test_clean_choice(void **state)
{
	struct bgfake f;
	struct nrs_mat m;
	struct nrs_stream *st;
	char wal_name[4200], path[4200 + NRS_OBJKEY_MAX];
	uint64_t g[NREC];
	struct nrs_index_ent e = { .kind = NRS_TARGET_ADOPT, .seg = SEG };

	(void)state;
	bg_open(&f, "test_cleaning", false);
	f.reader.store = f.store.real;	/* as bg_adopting: the embedded one */
	memset(&m, 0, sizeof(m));
	m.svc = &f.svc;
	pthread_mutex_init(&m.lock, NULL);
	st = bg_stream(&f, "s", NULL);
	snprintf(wal_name, sizeof(wal_name), "%s/seg", f.dir);
	segment_file(&f, wal_name);
	for (unsigned int k = 0; k < NREC; k++)
		g[k] = adopted(&f, st->id, k);
	assert_int_equal(choose_now(&m), 0);		/* all live */
	for (unsigned int k = 0; k < NREC - 3; k++)
		to_state(&f, g[k], NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING);
	assert_int_equal(unlink(wal_name), 0);
	assert_int_equal(choose_now(&m), 0);		/* 3/8 live */
	to_state(&f, g[NREC - 3], NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING);
	assert_int_equal(link(adopted_path(&f, path, sizeof(path)), wal_name),
			 0);
	assert_int_equal(choose_now(&m), 0);		/* CL2: the WAL's */
	assert_int_equal(unlink(wal_name), 0);
	assert_int_equal(choose_now(&m), SEG);		/* 2/8: CL1 */
	assert_true(nrs_mat_clean_wants(&m, &e));
	e.seg = SEG + 1;
	assert_false(nrs_mat_clean_wants(&m, &e));
	e = (struct nrs_index_ent){ .kind = NRS_TARGET_OBJ, .seg = SEG };
	assert_false(nrs_mat_clean_wants(&m, &e));
	/* CL3: within the second the choice stands */
	to_state(&f, g[NREC - 2], NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING);
	to_state(&f, g[NREC - 1], NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING);
	nrs_mat_clean_choose(&m);
	assert_int_equal(atomic_load(&m.clean_seg), SEG);
	/* no live row: G7's, not cleaning's */
	assert_int_equal(choose_now(&m), 0);
	pthread_mutex_destroy(&m.lock);
	bg_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_choice),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
