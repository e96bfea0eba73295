/*
 * test_meta_log.c - unit tests of the change log (src/meta/sqlite_log.c):
 * each logged call is handed out once, numbered in order, with the number
 * in the store's own transaction (ML1); a checkpoint's snapshot plus the
 * later changes, replayed in order, give the store as it was, also when
 * the stream heads moved by publication meanwhile, and a replay run twice
 * changes nothing (ML2); a gap, a damaged change or a copy that diverged
 * is -EUCLEAN with nothing applied; a change whose tables the store does
 * not have as the change does is refused, never skipped, and one recorded
 * against fewer columns (an older schema) applies (ML3).  The META record's payload around a
 * change: test_walrec.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "fixture_meta.h"
#include "meta/attrmask.h"
#include "meta/meta.h"

#define ROOT	NRS_ROOT_INO
#define NOW	1000000000000LL

static int fx_setup(void **state)
{
	*state = nrs_fixture_meta_new("test_meta_log", true);
	return *state ? 0 : -1;
}

static int fx_teardown(void **state)
{
	nrs_fixture_meta_free(*state);
	return 0;
}

static void publish(struct nrs_meta *m, uint64_t id, uint64_t head)
{
	struct nrs_stream_row r;
	struct nrs_head_update u;

	assert_int_equal(nrs_meta_stream_get(m, id, &r), 0);
	u = (struct nrs_head_update){
		.id = id, .old_version = r.version, .head = head,
		.version = r.version + 1, .epoch = r.epoch,
		.last_lsn = r.last_lsn + 1, .mtime_ns = NOW + 5,
	};
	assert_int_equal(nrs_meta_publish(m, &u, 1, false), 0);
}

/* The copy of f's snapshot taken now, at path2. */
static struct nrs_meta *snapshot_copy(struct nrs_fixture_meta *f)
{
	struct nrs_meta *m2 = NULL;
	void *buf = NULL;
	size_t len = 0;

	assert_int_equal(nrs_meta_snapshot(f->m, &buf, &len, NULL), 0);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), 0);
	free(buf);
	assert_int_equal(nrs_meta_open(f->path2, &m2), 0);
	return m2;
}

/* The later half of the changes: every kind of logged call. */
static uint64_t later_changes(struct nrs_fixture_meta *f, uint64_t dir)
{
	struct nrs_attr s, a = { .mode = 0600 };
	struct nrs_stream_row r;

	assert_int_equal(nrs_meta_create(f->m, dir, "p0", 0640, 1, 2, NOW, &s,
					 &r), 0);
	assert_int_equal(nrs_meta_create(f->m, dir, "p1", 0640, 1, 2, NOW,
					 NULL, NULL), 0);
	publish(f->m, r.id, 300);		/* not logged */
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 100), 0);
	publish(f->m, r.id, 700);
	assert_int_equal(nrs_meta_rename(f->m, dir, "p0", ROOT, "moved", 0,
					 NOW + 1, NULL), 0);
	assert_int_equal(nrs_meta_setattr(f->m, s.ino, &a, NRS_SET_MODE,
					  NOW + 2, NULL), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, s.ino, "user.k", "v1", 2, 0),
			 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, s.ino, "user.k", "v22", 3,
					    0), 0);
	assert_int_equal(nrs_meta_unlink(f->m, dir, "p1", NOW + 3, NULL), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, dir, NRS_RET_BYTES,
						1 << 20), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, dir, "sub", 0700, 0, 0, NOW,
					NULL), 0);
	assert_int_equal(nrs_meta_rmdir(f->m, dir, "sub", NOW + 4), 0);
	return r.id;
}

static void check_later(struct nrs_meta *m, uint64_t dir, uint64_t id,
			uint64_t head)
{
	struct nrs_attr s;
	struct nrs_stream_row r;
	uint64_t v = 0;
	char buf[8];

	assert_int_equal(nrs_meta_lookup(m, ROOT, "moved", &s), 0);
	assert_int_equal(s.mode & 07777, 0600);
	assert_int_equal(s.stream_id, id);
	assert_int_equal(nrs_meta_lookup(m, dir, "p0", NULL), -ENOENT);
	assert_int_equal(nrs_meta_lookup(m, dir, "p1", NULL), -ENOENT);
	assert_int_equal(nrs_meta_lookup(m, dir, "sub", NULL), -ENOENT);
	assert_int_equal(nrs_meta_xattr_get(m, s.ino, "user.k", buf,
					    sizeof(buf)), 3);
	assert_memory_equal(buf, "v22", 3);
	assert_int_equal(nrs_meta_get_retention(m, dir, NRS_RET_BYTES, &v), 0);
	assert_int_equal(v, 1 << 20);
	assert_int_equal(nrs_meta_stream_get(m, id, &r), 0);	/* CK2 */
	assert_int_equal(r.start, 100);
	assert_int_equal(r.head, head);
}

/* ML1: one change per logged call that changed rows, numbered 1, 2, ...;
 * the store holds the last number; reads and publishes take none. */
static void test_numbered(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct nrs_attr d;
	uint64_t seq = 0;

	assert_int_equal(nrs_meta_log_seq(f->m, &seq), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "kafka", 0750, 1, 2, NOW,
					&d), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "kafka", 0750, 1, 2, NOW,
					NULL), -EEXIST);	/* no change */
	later_changes(f, d.ino);
	assert_int_equal(f->n, 12);
	for (size_t i = 0; i < f->n; i++) {
		assert_int_equal(f->log[i].seq, i + 1);
		assert_non_null(f->log[i].p);
		assert_true(f->log[i].len > 0);
	}
	assert_int_equal(nrs_meta_log_seq(f->m, &seq), 0);
	assert_int_equal(seq, 12);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "kafka", &d), 0);
	assert_int_equal(f->n, 12);
}

/* ML2: snapshot + the later changes = the store; twice = once. */
static void test_replay(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct nrs_meta *m2;
	struct nrs_attr d;
	uint64_t id, seq = 0;
	size_t held;

	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "kafka", 0750, 1, 2, NOW,
					&d), 0);
	m2 = snapshot_copy(f);
	held = f->n;
	id = later_changes(f, d.ino);
	/* The copy published the stream's bytes (the object WAL's data
	 * records) up to 250, not 300, before the change that raises its
	 * start is replayed: the row differs from the one the change saw. */
	for (size_t i = 0; i < f->n; i++) {
		int rc = nrs_meta_log_apply(m2, f->log[i].seq, f->log[i].p,
					    f->log[i].len);

		assert_int_equal(rc, i < held ? 1 : 0);
		if (f->log[i].seq == held + 1)
			publish(m2, id, 250);
	}
	check_later(m2, d.ino, id, 250);
	assert_int_equal(nrs_meta_log_seq(m2, &seq), 0);
	assert_int_equal(seq, f->n);
	for (size_t i = 0; i < f->n; i++)		/* again: nothing */
		assert_int_equal(nrs_meta_log_apply(m2, f->log[i].seq,
						    f->log[i].p,
						    f->log[i].len), 1);
	check_later(m2, d.ino, id, 250);
	/* the copy goes on as a store: its rows pass their checksums */
	publish(m2, id, 900);
	assert_int_equal(nrs_meta_create(m2, ROOT, "new", 0640, 0, 0, NOW,
					 NULL, NULL), 0);
	nrs_meta_close(m2);
}

/* ML2: a gap, damage, or a copy that diverged: -EUCLEAN, nothing done. */
static void test_refused(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct nrs_meta *m2;
	struct nrs_attr d;
	unsigned char *bad;
	uint64_t seq = 0;

	m2 = snapshot_copy(f);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "a", 0750, 1, 2, NOW, &d),
			 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "b", 0750, 1, 2, NOW,
					NULL), 0);
	assert_int_equal(f->n, 2);
	/* a gap: change 2 onto a copy at 0 */
	assert_int_equal(nrs_meta_log_apply(m2, 2, f->log[1].p, f->log[1].len),
			 -EUCLEAN);
	/* change 1's bytes under number 2 after 1: does not move to 2 */
	assert_int_equal(nrs_meta_log_apply(m2, 1, f->log[0].p, f->log[0].len),
			 0);
	assert_int_equal(nrs_meta_log_apply(m2, 2, f->log[0].p, f->log[0].len),
			 -EUCLEAN);
	/* damaged bytes */
	bad = malloc(f->log[1].len);
	assert_non_null(bad);
	memcpy(bad, f->log[1].p, f->log[1].len);
	memset(bad, 0xff, f->log[1].len / 2 + 1);
	assert_int_equal(nrs_meta_log_apply(m2, 2, bad, f->log[1].len),
			 -EUCLEAN);
	free(bad);
	assert_int_equal(nrs_meta_log_apply(m2, 2, NULL, 0), -EUCLEAN);
	/* a copy that diverged: "b" made there by other means */
	assert_int_equal(nrs_meta_log_set(m2, NULL, NULL), 0);
	assert_int_equal(nrs_meta_mkdir(m2, ROOT, "b", 0700, 0, 0, NOW, NULL),
			 0);
	assert_int_equal(nrs_meta_log_apply(m2, 2, f->log[1].p, f->log[1].len),
			 -EUCLEAN);
	assert_int_equal(nrs_meta_log_seq(m2, &seq), 0);
	assert_int_equal(seq, 1);			/* nothing of it */
	nrs_meta_close(m2);
}

/* Run sql on the database at path, with no store open on it. */
static void raw_sql(const char *path, const char *sql)
{
	sqlite3 *db;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* The changes a reopened store hands out (the fixture's sink is set at
 * its open only): two at most. */
struct two {
	void *p[2];
	size_t len[2], n;
};

static void keep_two(void *ctx, uint64_t seq, const void *change, size_t len)
{
	struct two *t = ctx;

	(void)seq;
	if (t->n >= 2)
		return;
	t->p[t->n] = malloc(len);
	if (t->p[t->n])
		memcpy(t->p[t->n], change, len);
	t->len[t->n++] = len;
}

/* ML3: a change recorded against a table with a column this store's
 * lacks (a newer schema) is refused, not skipped; onto a table with a
 * column more (an older change after an upgrade) it applies. */
static void test_tables_fit(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct two t = { 0 };
	struct nrs_meta *m2;
	struct nrs_attr d, got;
	uint64_t seq = 9;
	char v[8];

	m2 = snapshot_copy(f);
	nrs_meta_close(m2);
	raw_sql(f->path2, "ALTER TABLE inodes ADD COLUMN later INTEGER");
	assert_int_equal(nrs_meta_open(f->path2, &m2), 0);
	nrs_meta_close(f->m);
	f->m = NULL;
	raw_sql(f->path, "ALTER TABLE xattrs ADD COLUMN newer INTEGER NOT NULL"
		" DEFAULT 0");
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
	assert_int_equal(nrs_meta_log_set(f->m, keep_two, &t), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "a", 0750, 1, 2, NOW, &d),
			 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, d.ino, "user.k", "v", 1, 0),
			 0);
	assert_int_equal(t.n, 2);
	assert_non_null(t.p[0]);
	assert_non_null(t.p[1]);
	/* inodes has a column more than the change: it fits */
	assert_int_equal(nrs_meta_log_apply(m2, 1, t.p[0], t.len[0]),
			 0);
	assert_int_equal(nrs_meta_lookup(m2, ROOT, "a", &got), 0);
	assert_int_equal(got.ino, d.ino);
	/* xattrs has a column less: refused, nothing of it */
	assert_int_equal(nrs_meta_log_apply(m2, 2, t.p[1], t.len[1]),
			 -EUCLEAN);
	assert_int_equal(nrs_meta_log_seq(m2, &seq), 0);
	assert_int_equal(seq, 1);
	nrs_meta_close(m2);
	/* the same change onto a store that has the column applies */
	m2 = NULL;
	raw_sql(f->path2, "ALTER TABLE xattrs ADD COLUMN newer INTEGER NOT NULL"
		" DEFAULT 0");
	assert_int_equal(nrs_meta_open(f->path2, &m2), 0);
	assert_int_equal(nrs_meta_log_apply(m2, 2, t.p[1], t.len[1]),
			 0);
	assert_int_equal(nrs_meta_xattr_get(m2, d.ino, "user.k", v, sizeof(v)),
			 1);
	nrs_meta_close(m2);
	free(t.p[0]);
	free(t.p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_numbered, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_replay, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_refused, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tables_fit, fx_setup,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
