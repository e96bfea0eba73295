/*
 * test_snapshot.c - unit tests of the store as bytes (src/meta/
 * sqlite_ckpt.c): a snapshot installed into an empty directory gives the
 * same namespace, streams, xattrs and objects (SN1), taken while another
 * thread publishes; an install never replaces a database and refuses
 * damaged bytes or a newer schema version (SN2); bytes of every older
 * schema are installed upgraded, all or nothing (SN3).  test_snapshot_10k
 * prints how long a snapshot of 10,000 streams holds the store's lock.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fixture_meta.h"
#include "schema_undo.h"
#include "meta/meta.h"

#define ROOT	NRS_ROOT_INO
#define NOW	1000000000000LL

static int fx_setup(void **state)
{
	*state = nrs_fixture_meta_new("test_snapshot", false);
	return *state ? 0 : -1;
}

static int fx_teardown(void **state)
{
	nrs_fixture_meta_free(*state);
	return 0;
}

static uint64_t make_stream(struct nrs_meta *m, uint64_t parent,
			    const char *name, uint64_t head)
{
	struct nrs_attr a;
	struct nrs_stream_row r;
	struct nrs_head_update u;

	assert_int_equal(nrs_meta_create(m, parent, name, 0640, 10, 20, NOW,
					 &a, &r), 0);
	u = (struct nrs_head_update){
		.id = r.id, .old_version = r.version, .head = head,
		.version = r.version + 1, .epoch = 3, .last_lsn = 7,
		.mtime_ns = NOW + 5,
	};
	assert_int_equal(nrs_meta_publish(m, &u, 1, false), 0);
	return a.ino;
}

/* The state test_round_trip builds, checked on m. */
static void check_state(struct nrs_meta *m, uint64_t head)
{
	struct nrs_attr d, s, gone;
	struct nrs_stream_row r;
	struct nrs_obj_row *o = NULL;
	char v[16];
	size_t n = 0;

	assert_int_equal(nrs_meta_lookup(m, ROOT, "kafka", &d), 0);
	assert_int_equal(d.mode, S_IFDIR | 0750);
	assert_int_equal(nrs_meta_lookup(m, d.ino, "orders-renamed", &s), 0);
	assert_int_equal(nrs_meta_lookup(m, d.ino, "orders", &gone), -ENOENT);
	assert_int_equal(nrs_meta_xattr_get(m, s.ino, "user.k", v, sizeof(v)),
			 5);
	assert_memory_equal(v, "value", 5);
	assert_int_equal(nrs_meta_stream_get(m, s.stream_id, &r), 0);
	assert_int_equal(r.head, head);
	assert_int_equal(r.epoch, 3);
	assert_int_equal(r.profile, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_obj_rows(m, s.stream_id, 0, &o, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(o[0].state, NRS_OBJ_PREPARED);
	assert_int_equal(o[0].end, 100);
	assert_int_equal(o[0].seg, 9);	/* schema 5: where the record is */
	assert_int_equal(o[0].off, 8192);
	free(o);
}

static void build_state(struct nrs_meta *m)
{
	struct nrs_attr d, s;
	struct nrs_obj_row o = { .start = 0, .end = 100, .length = 200,
				 .seg = 9, .off = 8192 };

	assert_int_equal(nrs_meta_mkdir(m, ROOT, "kafka", 0750, 1, 2, NOW, &d),
			 0);
	assert_int_equal(nrs_meta_set_profile(m, d.ino, NRS_PROFILE_OBJECT_WAL),
			 0);
	make_stream(m, d.ino, "orders", 4096);
	assert_int_equal(nrs_meta_rename(m, d.ino, "orders", d.ino,
					 "orders-renamed", 0, NOW, NULL), 0);
	assert_int_equal(nrs_meta_lookup(m, d.ino, "orders-renamed", &s), 0);
	assert_int_equal(nrs_meta_xattr_set(m, s.ino, "user.k", "value", 5, 0),
			 0);
	o.stream_id = s.stream_id;
	assert_int_equal(nrs_meta_obj_prepare(m, &o), 0);
}

/* SN1: the copy is the store; SN2: installed, it opens as it was. */
static void test_round_trip(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct nrs_meta_snap_stats st;
	struct nrs_meta *m2;
	void *buf = NULL;
	size_t len = 0;

	build_state(f->m);
	assert_int_equal(nrs_meta_snapshot(f->m, &buf, &len, &st), 0);
	assert_true(len >= 4096);
	assert_int_equal(st.bytes, len);
	assert_true(st.steps >= 1);
	/* later changes are not in it */
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "later", 0755, 0, 0, NOW,
					NULL), 0);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), 0);
	free(buf);
	assert_int_equal(nrs_meta_open(f->path2, &m2), 0);
	check_state(m2, 4096);
	assert_int_equal(nrs_meta_lookup(m2, ROOT, "later", NULL), -ENOENT);
	/* and the copy is a store that works */
	assert_int_equal(nrs_meta_mkdir(m2, ROOT, "new", 0755, 0, 0, NOW, NULL),
			 0);
	nrs_meta_close(m2);
}

/* SN2: never over an existing database (or its -wal). */
static void test_install_never_replaces(void **state)
{
	struct nrs_fixture_meta *f = *state;
	char wal[160];
	void *buf = NULL;
	size_t len = 0;
	FILE *fp;

	assert_int_equal(nrs_meta_snapshot(f->m, &buf, &len, NULL), 0);
	assert_int_equal(nrs_meta_install(f->path, buf, len), -EEXIST);
	snprintf(wal, sizeof(wal), "%s-wal", f->path2);
	fp = fopen(wal, "w");
	assert_non_null(fp);
	fclose(fp);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), -EEXIST);
	assert_int_equal(access(f->path2, F_OK), -1);
	unlink(wal);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), 0);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), -EEXIST);
	free(buf);
}

/* SN2: damaged bytes and another schema version are refused, and leave
 * nothing behind. */
static void test_install_refuses(void **state)
{
	struct nrs_fixture_meta *f = *state;
	unsigned char *buf = NULL;
	size_t len = 0;

	for (int i = 0; i < 200; i++) {
		char name[32];

		snprintf(name, sizeof(name), "s%d", i);
		make_stream(f->m, ROOT, name, (uint64_t)i);
	}
	assert_int_equal(nrs_meta_snapshot(f->m, (void **)&buf, &len, NULL), 0);
	/* user_version (offset 60, big-endian) */
	buf[63] ^= 0x40;
	assert_int_equal(nrs_meta_install(f->path2, buf, len), -EPROTO);
	buf[63] ^= 0x40;
	/* not a database */
	assert_int_equal(nrs_meta_install(f->path2, buf + 1, len - 512),
			 -EUCLEAN);
	/* a damaged b-tree page: the second page's type byte */
	buf[4096] ^= 0xff;
	assert_int_equal(nrs_meta_install(f->path2, buf, len), -EUCLEAN);
	buf[4096] ^= 0xff;
	assert_int_equal(access(f->path2, F_OK), -1);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), 0);
	free(buf);
}

static int64_t bytes_version(const unsigned char *b)
{
	return (int64_t)b[60] << 24 | b[61] << 16 | b[62] << 8 | b[63];
}

/* A copy of buf (of schema cur) taken down to schema v by SQL. */
static unsigned char *old_schema(const unsigned char *buf, size_t len,
				 int64_t cur, int64_t v, const char *extra,
				 size_t *out_len)
{
	unsigned char *img = sqlite3_malloc64(len), *ser, *out;
	sqlite3_int64 size = 0;
	char sql[64];
	sqlite3 *db;

	assert_non_null(img);
	memcpy(img, buf, len);
	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	assert_int_equal(sqlite3_deserialize(db, "main", img, (int64_t)len,
					     (int64_t)len,
					     SQLITE_DESERIALIZE_FREEONCLOSE |
					     SQLITE_DESERIALIZE_RESIZEABLE),
			 SQLITE_OK);
	for (int64_t k = cur - 1; k >= v; k--)
		assert_int_equal(sqlite3_exec(db, nrs_schema_undo[k], NULL,
					      NULL, NULL), SQLITE_OK);
	if (extra)
		assert_int_equal(sqlite3_exec(db, extra, NULL, NULL, NULL),
				 SQLITE_OK);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld", (long long)v);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	ser = sqlite3_serialize(db, "main", &size, 0);
	assert_non_null(ser);
	out = malloc((size_t)size);
	assert_non_null(out);
	memcpy(out, ser, (size_t)size);
	out[18] = out[19] = 1;
	sqlite3_free(ser);
	sqlite3_close(db);
	*out_len = (size_t)size;
	return out;
}

/* The tables, columns and indexes of the database at path, as text. */
static char *schema_text(const char *path)
{
	static const char q[] = "SELECT group_concat(x, ';') FROM (SELECT"
		" m.type || ' ' || m.name || ' ' || coalesce(p.name, '') || ' '"
		" || coalesce(p.type, '') || ' ' || coalesce(p.pk, '') || ' ' ||"
		" coalesce(p.\"notnull\", '') || ' ' || coalesce(p.dflt_value, '')"
		" AS x FROM sqlite_master m LEFT JOIN pragma_table_info(m.name)"
		" p WHERE m.type = 'table' OR m.type = 'index'"
		" ORDER BY m.name, p.cid)";
	sqlite3_stmt *s;
	sqlite3 *db;
	char *text;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY,
					 NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, q, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	text = strdup((const char *)sqlite3_column_text(s, 0));
	assert_non_null(text);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return text;
}

/* SN3: a checkpoint of each older schema is installed upgraded to ours:
 * on disk at our version before anything opens it (a read-only open,
 * which cannot upgrade, takes it), with the tables a new store has, and
 * the namespace, xattrs and stream rows (checksums right) it held. */
static void test_install_older_schema(void **state)
{
	struct nrs_fixture_meta *f = *state;
	unsigned char *buf = NULL, *old, head[100];
	char path[160], *want, *got;
	struct nrs_attr d, s;
	struct nrs_stream_row r;
	struct nrs_meta *m2;
	int64_t cur;
	uint64_t seq = 1;
	size_t len = 0, olen;
	char v[16];
	FILE *fp;

	build_state(f->m);
	assert_int_equal(nrs_meta_snapshot(f->m, (void **)&buf, &len, NULL), 0);
	cur = bytes_version(buf);
	assert_int_equal(NRS_SCHEMA_UNDO_N, cur);		/* one undo per step */
	snprintf(path, sizeof(path), "%s/fresh.db", f->dir);
	assert_int_equal(nrs_meta_install(path, buf, len), 0);
	want = schema_text(path);
	for (int64_t ver = 1; ver < cur; ver++) {
		old = old_schema(buf, len, cur, ver, NULL, &olen);
		assert_int_equal(bytes_version(old), ver);
		snprintf(path, sizeof(path), "%s/v%lld.db", f->dir,
			 (long long)ver);
		assert_int_equal(nrs_meta_install(path, old, olen), 0);
		free(old);
		fp = fopen(path, "rb");
		assert_non_null(fp);
		assert_int_equal(fread(head, 1, sizeof(head), fp),
				 sizeof(head));
		fclose(fp);
		assert_int_equal(bytes_version(head), cur);
		got = schema_text(path);
		assert_string_equal(got, want);
		free(got);
		assert_int_equal(nrs_meta_open_readonly(path, &m2), 0);
		assert_int_equal(nrs_meta_lookup(m2, ROOT, "kafka", &d), 0);
		assert_int_equal(nrs_meta_lookup(m2, d.ino, "orders-renamed",
						 &s), 0);
		assert_int_equal(nrs_meta_xattr_get(m2, s.ino, "user.k", v,
						    sizeof(v)), 5);
		assert_int_equal(nrs_meta_stream_get(m2, s.stream_id, &r), 0);
		assert_int_equal(r.head, 4096);
		assert_int_equal(r.epoch, 3);
		assert_int_equal(nrs_meta_log_seq(m2, &seq), 0);
		assert_int_equal(seq, 0);	/* the log starts at 4 */
		nrs_meta_close(m2);
	}
	free(want);
	/* all or nothing: an upgrade that fails (schema 3 claimed, but the
	 * table 3 -> 4 adds is there) writes nothing */
	old = old_schema(buf, len, cur, cur, "PRAGMA user_version = 3",
			 &olen);
	old[63] = 3;
	snprintf(path, sizeof(path), "%s/bad.db", f->dir);
	assert_true(nrs_meta_install(path, old, olen) < 0);
	assert_int_equal(access(path, F_OK), -1);
	/* a newer schema stays refused, and 0 with tables */
	old[63] = (unsigned char)(cur + 1);
	assert_int_equal(nrs_meta_install(path, old, olen), -EPROTO);
	old[63] = 0;
	assert_int_equal(nrs_meta_install(path, old, olen), -EUCLEAN);
	assert_int_equal(access(path, F_OK), -1);
	free(old);
	free(buf);
}

struct pub {
	struct nrs_meta *m;
	uint64_t id;
	atomic_bool stop;
	uint64_t n;
};

static void *publisher(void *arg)
{
	struct pub *p = arg;
	struct nrs_stream_row r;

	while (!atomic_load(&p->stop)) {
		struct nrs_head_update u;

		if (nrs_meta_stream_get(p->m, p->id, &r) != 0)
			break;
		u = (struct nrs_head_update){
			.id = r.id, .old_version = r.version,
			.head = r.head + 10, .version = r.version + 10,
			.epoch = r.epoch, .last_lsn = r.last_lsn + 1,
			.mtime_ns = NOW,
		};
		if (nrs_meta_publish(p->m, &u, 1, false) != 0)
			break;
		p->n++;
	}
	return NULL;
}

/*
 * Under load (SN1): 10,000 streams, one thread publishing heads throughout;
 * the copy opens, and every stream row in it passes its checksum.  Prints
 * the longest hold of the lock (what one publish waited at most).
 */
static int count_row(void *ctx, const struct nrs_stream_row *s)
{
	uint64_t *n = ctx;

	assert_false(s->corrupt);
	(*n)++;
	return 0;
}

static void test_snapshot_10k(void **state)
{
	struct nrs_fixture_meta *f = *state;
	struct nrs_meta_snap_stats st;
	struct pub p = { .m = f->m };
	struct nrs_attr a;
	struct nrs_meta *m2;
	pthread_t t;
	void *buf = NULL;
	size_t len = 0;
	uint64_t rows = 0;

	for (int i = 0; i < 10000; i++) {
		char name[32];

		snprintf(name, sizeof(name), "stream-%05d", i);
		make_stream(f->m, ROOT, name, (uint64_t)i * 100);
	}
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "stream-00000", &a), 0);
	p.id = a.stream_id;
	assert_int_equal(pthread_create(&t, NULL, publisher, &p), 0);
	assert_int_equal(nrs_meta_snapshot(f->m, &buf, &len, &st), 0);
	atomic_store(&p.stop, true);
	pthread_join(t, NULL);
	printf("# snapshot of 10000 streams: %zu bytes, %llu pages in %llu"
	       " steps, %.3f ms in all, the lock held at most %.3f ms;"
	       " %llu publishes ran meanwhile\n", len,
	       (unsigned long long)st.pages, (unsigned long long)st.steps,
	       st.total_ns / 1e6, st.max_hold_ns / 1e6,
	       (unsigned long long)p.n);
	assert_true(st.steps > 1);
	assert_int_equal(nrs_meta_install(f->path2, buf, len), 0);
	free(buf);
	assert_int_equal(nrs_meta_open(f->path2, &m2), 0);
	assert_int_equal(nrs_meta_stream_foreach(m2, count_row, &rows), 0);
	assert_int_equal(rows, 10000);
	nrs_meta_close(m2);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
	const struct CMUnitTest tests[] = {
		T(test_round_trip),
		T(test_install_never_replaces),
		T(test_install_refuses),
		T(test_install_older_schema),
		T(test_snapshot_10k),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
