/*
 * test_mat_adopt.c - write once (bg/mat_adopt.c) through the services seam
 * (bgfake.h: a real SQLite store, the real directory store, a real local
 * WAL), with the adopt upcall linking segments into that store.
 *
 * MZ10: a record of at least NRS_ADOPT_MIN is adopted once its segment is
 * sealed (the builder seals it), a smaller one between is copied, each run
 * one kind; an object-wal stream's records are never adopted.  MZ11: the
 * rows name (seg, off), the index serves ADOPT entries read back through
 * the reader, the file is the segment itself; a refused link copies the
 * records instead, in the same job, and for EXDEV turns adoption off.  MZ12: an orphan
 * adopted row goes, its file only when no other row names its segment, and
 * the WAL's own name of the segment stays.  MZ13: an object-wal stream's
 * big record (the fake's local WAL standing in for the object WAL) is
 * adopted without a link, its row naming the WAL object's key and the
 * record's byte in the store's file, read back from there; its orphan goes
 * alone, the WAL object stays.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bg/mat_priv.h"
#include "bg/materializer.h"
#include "bgfake.h"
#include "wal/wal.h"
#include "wal/walrec.h"

#define BIG	(NRS_ADOPT_MIN + 4096)

static struct nrs_mat *mat_start(struct bgfake *f)
{
	struct nrs_mat_opts o = {
		.min_bytes = 1, .max_age_ms = 3600 * 1000, .threads = 1,
		.retry_max_ms = 20, .compact_size = NRS_COMPACT_OFF,
	};
	struct nrs_mat *m = NULL;

	assert_int_equal(nrs_mat_start(&f->svc, &o, &m), 0);
	return m;
}

/* The committed rows of stream id, gen ascending (the caller frees). */
static struct nrs_obj_row *rows_of(struct bgfake *f, uint64_t id, size_t *n)
{
	struct nrs_obj_row *v = NULL;

	assert_int_equal(nrs_meta_obj_rows(f->meta, id, NRS_OBJ_COMMITTED, &v,
					   n), 0);
	return v;
}

/* A fresh bgfake with write once on, and its stream "s". */
static struct nrs_stream *open_adopting(struct bgfake *f)
{
	bg_open(f, "test_mat_adopt", true);
	bg_adopting(f);
	return bg_stream(f, "s", NULL);
}

/* At least min committed rows of stream id, every one of them copied. */
static void all_copied(struct bgfake *f, uint64_t id, size_t min)
{
	size_t n = 0;
	struct nrs_obj_row *v = rows_of(f, id, &n);

	assert_true(n >= min);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(v[i].seg, 0);
	free(v);
}

/* [at, at + len) of st reads back as fill, through the reader (an
 * adopted record: from the store's file, verified as a WAL record). */
static void read_back(struct bgfake *f, struct nrs_stream *st, uint64_t at,
		      uint32_t len, char fill)
{
	char *buf = malloc(len);

	assert_non_null(buf);
	assert_int_equal(nrs_reader_read(&f->reader, st, buf, len, at, false),
			 (ssize_t)len);
	for (uint32_t k = 0; k < len; k++)
		assert_int_equal(buf[k], fill);
	free(buf);
}

/* Is there a file at DIR/REL (its link count)? */
static bool has_file(struct bgfake *f, const char *rel, nlink_t *links)
{
	char path[4400];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s", f->dir, rel);
	if (stat(path, &sb) != 0)
		return false;
	if (links)
		*links = sb.st_nlink;
	return true;
}

/* MZ10, MZ11: big, small, big: adopted, copied, adopted, in that order;
 * the builder seals the current segment to adopt from it. */
static void test_adopt_choice(void **state)
{
	static const uint32_t len[] = { BIG, 1000, BIG };
	static const char fills[] = { 'a', 'b', 'c' };
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row *v;
	char key[NRS_OBJKEY_MAX], rel[NRS_OBJKEY_MAX + 16];
	size_t n = 0;
	uint64_t seg, end = 2 * (uint64_t)BIG + 1000;
	nlink_t links = 0;

	(void)state;
	st = open_adopting(&f);
	seg = bg_write(&f, st, len[0], fills[0]);
	bg_write(&f, st, len[1], fills[1]);
	bg_write(&f, st, len[2], fills[2]);
	m = mat_start(&f);
	bg_wait_materialized(st, end);
	nrs_mat_stop(m);
	v = rows_of(&f, st->id, &n);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].seg, seg);		/* adopted, in place */
	assert_int_equal(v[0].off, 64);			/* the first record */
	assert_int_equal(v[0].start, 0);
	assert_int_equal(v[0].end, BIG);
	assert_int_equal(v[0].length, nrs_walrec_total_len(BIG));
	assert_int_equal(v[1].seg, 0);			/* copied */
	assert_int_equal(v[1].start, BIG);
	assert_int_equal(v[1].end, BIG + 1000);
	assert_int_equal(v[2].seg, seg);
	assert_int_equal(v[2].off, 64 + nrs_walrec_total_len(BIG) +
			 nrs_walrec_total_len(1000));
	pthread_mutex_lock(&st->lock);
	assert_int_equal(st->index.n, 3);
	assert_int_equal(st->index.v[0].kind, NRS_TARGET_ADOPT);
	assert_int_equal(st->index.v[0].gen, v[0].gen);
	assert_int_equal(st->index.v[0].seg, seg);
	assert_int_equal(st->index.v[1].kind, NRS_TARGET_OBJ);
	assert_int_equal(st->index.v[2].kind, NRS_TARGET_ADOPT);
	assert_int_equal(st->index.v[2].off, v[2].off);
	assert_int_equal(st->wal_bytes, 0);
	pthread_mutex_unlock(&st->lock);
	read_back(&f, st, 0, len[0], fills[0]);	/* no block cache here: */
	read_back(&f, st, BIG + 1000, len[2], fills[2]);	/* adopted only */
	free(v);
	assert_true(f.seals >= 1);			/* MZ10: sealed first */
	assert_false(f.adopt_current);			/* never the current */
	assert_false(f.adopt_no_intent);		/* MZ11: rows first */
	assert_int_equal(f.adopt_seg, seg);
	assert_int_equal(atomic_load(&f.metrics.obj_adopted), 2);
	assert_int_equal(atomic_load(&f.metrics.obj_adopted_bytes), 2 * BIG);
	assert_int_equal(bg_rows(&f, st->id, NRS_OBJ_PREPARED), 0);
	nrs_objfmt_adopt_key(key, seg);
	snprintf(rel, sizeof(rel), "objects/%s", key);
	assert_true(has_file(&f, rel, &links));
	/* the segment itself: linked, or the only name left once reclaimed */
	assert_true(links >= 1);
	bg_close(&f);
}

/* MZ10, CO4: without owal_adopt an object-wal stream's big record is
 * copied. */
static void test_adopt_not_objwal(void **state)
{
	struct bgfake f;
	struct nrs_stream *st = open_adopting(&f);
	struct nrs_mat *m;

	(void)state;
	bg_write(&f, st, BIG, 'a');
	st->profile = NRS_PROFILE_OBJECT_WAL;	/* its records as if in owal */
	f.reader.owal = f.wal;
	m = mat_start(&f);
	bg_wait_materialized(st, BIG);
	nrs_mat_stop(m);
	all_copied(&f, st->id, 1);
	assert_int_equal(f.adopts, 0);
	bg_close(&f);
}

/* MZ11: a link refused with EXDEV: the records are copied, and adoption is
 * off for the rest of the run (one try only). */
static void test_adopt_refused(void **state)
{
	struct bgfake f;
	struct nrs_stream *st = open_adopting(&f);
	struct nrs_mat *m;

	(void)state;
	f.adopt_err = -EXDEV;
	bg_write(&f, st, BIG, 'a');
	bg_write(&f, st, BIG, 'b');
	m = mat_start(&f);
	bg_wait_materialized(st, 2 * (uint64_t)BIG);
	bg_write(&f, st, BIG, 'c');
	bg_wait_materialized(st, 3 * (uint64_t)BIG);
	nrs_mat_stop(m);
	all_copied(&f, st->id, 2);
	assert_int_equal(f.adopts, 1);
	assert_int_equal(bg_rows(&f, st->id, NRS_OBJ_PREPARED), 0);
	assert_int_equal(atomic_load(&f.metrics.obj_adopted), 0);
	bg_close(&f);
}

/* MZ11: a link that fails for this once (EIO): those records are copied
 * in the same job, and the next ones are adopted again. */
static void test_adopt_transient(void **state)
{
	struct bgfake f;
	struct nrs_stream *st = open_adopting(&f);
	struct nrs_mat *m;
	struct nrs_obj_row *v;
	size_t n = 0;

	(void)state;
	f.adopt_err = -EIO;
	bg_write(&f, st, BIG, 'a');
	m = mat_start(&f);
	bg_wait_materialized(st, BIG);
	all_copied(&f, st->id, 1);
	pthread_mutex_lock(&f.mu);
	f.adopt_err = 0;
	pthread_mutex_unlock(&f.mu);
	bg_write(&f, st, BIG, 'b');
	bg_wait_materialized(st, 2 * (uint64_t)BIG);
	nrs_mat_stop(m);
	v = rows_of(&f, st->id, &n);
	assert_int_equal(n, 2);
	assert_int_equal(v[0].seg, 0);
	assert_true(v[1].seg >= 1);
	free(v);
	assert_int_equal(bg_rows(&f, st->id, NRS_OBJ_PREPARED), 0);
	bg_close(&f);
}

/* A row of the stream at (seg, off) in state (prepared or committed). */
static uint64_t adopted_row(struct bgfake *f, uint64_t id, uint64_t start,
			    uint64_t seg, bool commit)
{
	static const unsigned char sha[32];
	struct nrs_obj_row o = {
		.stream_id = id, .start = start, .end = start + BIG,
		.length = nrs_walrec_total_len(BIG), .seg = seg, .off = 64,
		.ctime_ns = 1,
	};

	assert_int_equal(nrs_meta_obj_prepare(f->meta, &o), 0);
	if (commit)
		assert_int_equal(nrs_meta_obj_publish(f->meta, o.gen, sha), 0);
	return o.gen;
}

/* Link WAL segment seg into the store as the adopt upcall does. */
static void link_seg(struct bgfake *f, uint64_t seg)
{
	assert_int_equal(f->svc.adopt(f, seg), 0);
}

static bool orphans_gone(void *ctx)
{
	struct bgfake *f = ctx;

	return atomic_load(&f->metrics.obj_orphans_removed) >= 2;
}

static bool orphan_gone(void *ctx)
{
	struct bgfake *f = ctx;

	return atomic_load(&f->metrics.obj_orphans_removed) >= 1;
}

/* MZ12: two orphans: the one whose segment a committed row names goes
 * alone; the other takes the store's name of its segment with it; the
 * WAL's names of both stay. */
static void test_adopt_orphans(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o;
	char key[NRS_OBJKEY_MAX], rel[NRS_OBJKEY_MAX + 16];
	char wal1[64], wal2[64];
	uint64_t s1, s2, g_kept, g_orph1, g_orph2;

	(void)state;
	st = open_adopting(&f);
	s1 = bg_write(&f, st, BIG, 'a');
	assert_int_equal(nrs_wal_seal(f.wal, s1), 1);
	s2 = bg_write(&f, st, BIG, 'b');
	assert_true(s2 > s1);
	assert_int_equal(nrs_wal_seal(f.wal, s2), 1);
	g_kept = adopted_row(&f, 99, 0, s1, true);	/* another stream's */
	g_orph1 = adopted_row(&f, st->id, 0, s1, false);
	g_orph2 = adopted_row(&f, st->id, BIG, s2, false);
	link_seg(&f, s1);
	link_seg(&f, s2);
	snprintf(wal1, sizeof(wal1), "wal/%016" PRIx64 ".seg", s1);
	snprintf(wal2, sizeof(wal2), "wal/%016" PRIx64 ".seg", s2);
	atomic_store(&f.floor, 0);	/* the WAL GC keeps every segment */
	pthread_mutex_lock(&st->lock);
	st->materialized = st->head;	/* nothing due: only the orphans */
	pthread_mutex_unlock(&st->lock);
	m = mat_start(&f);
	assert_true(bg_wait(orphans_gone, &f));
	nrs_mat_stop(m);
	assert_false(bg_row(&f, g_orph1, &o));
	assert_false(bg_row(&f, g_orph2, &o));
	assert_true(bg_row(&f, g_kept, &o));
	nrs_objfmt_adopt_key(key, s1);
	snprintf(rel, sizeof(rel), "objects/%s", key);
	assert_true(has_file(&f, rel, NULL));		/* g_kept reads it */
	nrs_objfmt_adopt_key(key, s2);
	snprintf(rel, sizeof(rel), "objects/%s", key);
	assert_false(has_file(&f, rel, NULL));		/* nothing names it */
	assert_true(has_file(&f, wal1, NULL));		/* the WAL's own */
	assert_true(has_file(&f, wal2, NULL));
	bg_close(&f);
}

/* MZ13: the store's file of the WAL object a row with seg names: the
 * local segment seg's bytes behind 64 + NRS_WAL_OBJECT_HDR bytes, so that
 * its record at segment offset X is the file's byte 256 + X. */
static void owal_file(struct bgfake *f, uint64_t seg,
		      char rel[NRS_OBJKEY_MAX + 16])
{
	char key[NRS_OBJKEY_MAX], wal[4400], path[4400], dir[4400];
	char cmd[16000];

	nrs_objfmt_adopt_key(key, NRS_ADOPT_OWAL | seg);
	snprintf(rel, NRS_OBJKEY_MAX + 16, "objects/%s", key);
	assert_int_equal(nrs_wal_local_seg_path(f->wal, seg, wal, sizeof(wal)),
			 0);
	snprintf(path, sizeof(path), "%s/%s", f->dir, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && { head -c %d /dev/zero;"
		 " cat '%s'; } >'%s'", dir, 64 + NRS_WAL_OBJECT_HDR, wal, path);
	assert_int_equal(system(cmd), 0);
}

/* MZ13: adopted where the object WAL holds it, nothing linked. */
static void test_adopt_objwal(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row *v;
	char rel[NRS_OBJKEY_MAX + 16];
	size_t n = 0;
	uint64_t seg;

	(void)state;
	bg_open(&f, "test_mat_adopt", true);
	f.svc.owal_adopt = true;
	f.reader.store = f.store.real;
	st = bg_stream(&f, "s", NULL);
	st->profile = NRS_PROFILE_OBJECT_WAL;	/* its records as if in owal */
	f.reader.owal = f.wal;
	seg = bg_write(&f, st, BIG, 'a');
	bg_write(&f, st, 1000, 'b');
	owal_file(&f, seg, rel);	/* before the WAL GC takes it */
	m = mat_start(&f);
	bg_wait_materialized(st, BIG + 1000);
	nrs_mat_stop(m);
	v = rows_of(&f, st->id, &n);
	assert_int_equal(n, 2);
	assert_int_equal(v[0].seg, NRS_ADOPT_OWAL | seg);
	assert_int_equal(v[0].off, 64 + NRS_WAL_OBJECT_HDR + 64);
	assert_int_equal(v[0].length, nrs_walrec_total_len(BIG));
	assert_int_equal(v[1].seg, 0);		/* small: copied */
	free(v);
	assert_int_equal(f.adopts, 0);		/* nothing linked */
	read_back(&f, st, 0, BIG, 'a');		/* RA1, from there */
	bg_close(&f);
}

/* MZ13, MZ12: an orphan of a WAL object goes alone; the object stays. */
static void test_adopt_objwal_orphan(void **state)
{
	struct bgfake f;
	struct nrs_stream *st;
	struct nrs_mat *m;
	struct nrs_obj_row o;
	char rel[NRS_OBJKEY_MAX + 16];
	uint64_t seg, g;

	(void)state;
	st = open_adopting(&f);
	seg = bg_write(&f, st, BIG, 'a');
	owal_file(&f, seg, rel);
	g = adopted_row(&f, st->id, 0, NRS_ADOPT_OWAL | seg, false);
	pthread_mutex_lock(&st->lock);
	st->materialized = st->head;	/* nothing due: only the orphan */
	pthread_mutex_unlock(&st->lock);
	m = mat_start(&f);
	assert_true(bg_wait(orphan_gone, &f));
	nrs_mat_stop(m);
	assert_false(bg_row(&f, g, &o));
	assert_true(has_file(&f, rel, NULL));	/* the WAL's object */
	bg_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_adopt_choice),
		cmocka_unit_test(test_adopt_not_objwal),
		cmocka_unit_test(test_adopt_refused),
		cmocka_unit_test(test_adopt_transient),
		cmocka_unit_test(test_adopt_orphans),
		cmocka_unit_test(test_adopt_objwal),
		cmocka_unit_test(test_adopt_objwal_orphan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
