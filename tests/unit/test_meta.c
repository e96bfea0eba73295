/*
 * test_meta.c - unit tests of the SQLite metadata store (src/meta/sqlite*.c):
 * namespace rules, persistence, cookies, xattrs, settings, head CAS, row
 * checksums and the schema upgrade.  Each test gets a fresh database in
 * its own mkdtemp directory.  Damage is made with SQLite itself (sql()),
 * on the file the store has closed.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fixture.h"
#include "meta/meta.h"
#include "util/crc32c.h"
#include "util/failpoint.h"

/* sqlite_priv.h SCHEMA_VERSION */
#define NRS_TEST_SCHEMA_VERSION 5

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE	(1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE		(1 << 1)
#endif

#define ROOT	NRS_ROOT_INO
#define NOW	1000000000000LL

/*
 * Count syncs: these definitions take the place of libc's for the shared
 * libsqlite3 (its calls go through the PLT), so a test can tell which calls
 * sync.  Built against a static or no-sync SQLite the count stays 0 and
 * test_sync_only_when_durable fails, which is what we want to know.
 */
static atomic_int sync_calls;

int fdatasync(int fd)
{
	atomic_fetch_add(&sync_calls, 1);
	return (int)syscall(SYS_fdatasync, fd);
}

int fsync(int fd)
{
	atomic_fetch_add(&sync_calls, 1);
	return (int)syscall(SYS_fsync, fd);
}

struct fx {
	char dir[64];
	char path[128];
	struct nrs_meta *m;
};

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (nrs_fixture_mkdtemp(f->dir, sizeof(f->dir), "test_meta")) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/meta.db", f->dir);
	if (nrs_meta_open(f->path, &f->m) != 0) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	nrs_meta_close(f->m);
	nrs_fixture_rmtree(f->dir);
	free(f);
	return 0;
}

static void reopen(struct fx *f)
{
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
}

static uint64_t mkdir_ok(struct nrs_meta *m, uint64_t parent, const char *name)
{
	struct nrs_attr a;

	assert_int_equal(nrs_meta_mkdir(m, parent, name, 0750, 10, 20, NOW, &a),
			 0);
	return a.ino;
}

static uint64_t create_ok(struct nrs_meta *m, uint64_t parent,
			  const char *name, struct nrs_stream_row *sr)
{
	struct nrs_attr a;
	struct nrs_stream_row r;

	assert_int_equal(nrs_meta_create(m, parent, name, 0640, 10, 20, NOW, &a,
					 &r), 0);
	if (sr)
		*sr = r;
	return a.ino;
}

/* Raise r's epoch as the pipeline and recovery do: a durable publish
 * whose CAS is on r's version, the other head fields as r has them. */
static int publish_epoch(struct nrs_meta *m, const struct nrs_stream_row *r,
			 uint64_t epoch)
{
	struct nrs_head_update u = {
		.id = r->id, .old_version = r->version, .head = r->head,
		.version = r->version, .epoch = epoch,
		.last_lsn = r->last_lsn, .mtime_ns = r->mtime_ns,
	};

	return nrs_meta_publish(m, &u, 1, true);
}

static struct nrs_attr getattr_ok(struct nrs_meta *m, uint64_t ino)
{
	struct nrs_attr a;

	assert_int_equal(nrs_meta_getattr(m, ino, &a), 0);
	return a;
}

/* ---- readdir collection ------------------------------------------------ */

struct listing {
	int n, stop_after;
	char names[16][NRS_NAME_MAX + 1];
	uint64_t ino[16], cookie[16];
};

static int collect(void *ctx, const char *name, const struct nrs_attr *a,
		   uint64_t cookie)
{
	struct listing *l = ctx;

	assert_true(l->n < 16);
	strcpy(l->names[l->n], name);
	l->ino[l->n] = a->ino;
	l->cookie[l->n] = cookie;
	l->n++;
	return l->stop_after && l->n >= l->stop_after;
}

static void list_dir(struct nrs_meta *m, uint64_t dir, uint64_t after,
		     struct listing *l)
{
	memset(l, 0, sizeof(*l));
	assert_int_equal(nrs_meta_readdir(m, dir, after, collect, l), 0);
}

/* ---- tests ------------------------------------------------------------- */

static void test_open_creates_root(void **state)
{
	struct fx *f = *state;
	struct nrs_attr a = getattr_ok(f->m, ROOT);
	struct listing l;
	uint64_t d, s;
	int p;

	assert_int_equal(a.ino, ROOT);
	assert_int_equal(a.mode, S_IFDIR | 0755);
	assert_int_equal(a.uid, geteuid());
	assert_int_equal(a.gid, getegid());
	assert_int_equal(a.nlink, 2);
	assert_int_equal(a.stream_id, 0);
	assert_true(a.mtime_ns > 0);
	list_dir(f->m, ROOT, 0, &l);
	assert_int_equal(l.n, 0);
	assert_int_equal(nrs_meta_counts(f->m, &d, &s), 0);
	assert_int_equal(d, 1);
	assert_int_equal(s, 0);
	assert_int_equal(nrs_meta_get_profile(f->m, ROOT, &p), 0);
	assert_int_equal(p, NRS_PROFILE_UNSET);
	/* reserved inodes do not exist */
	assert_int_equal(nrs_meta_getattr(f->m, 2, &a), -ENOENT);
	assert_int_equal(nrs_meta_getattr(f->m, 15, &a), -ENOENT);
}

static void test_mkdir_create_lookup(void **state)
{
	struct fx *f = *state;
	struct nrs_attr a, b;
	struct nrs_stream_row sr, sr2;
	uint64_t d, s, nd, ns;

	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "kafka", 01777 | S_IFREG,
					1, 2, NOW + 5, &a), 0);
	d = a.ino;
	assert_int_equal(d, NRS_FIRST_INO);
	assert_int_equal(a.mode, S_IFDIR | 01777);
	assert_int_equal(a.parent, ROOT);
	assert_int_equal(a.nlink, 2);
	assert_int_equal(a.uid, 1);
	assert_int_equal(a.gid, 2);
	assert_int_equal(a.mtime_ns, NOW + 5);
	b = getattr_ok(f->m, ROOT);
	assert_int_equal(b.nlink, 3);
	assert_int_equal(b.mtime_ns, NOW + 5);
	assert_int_equal(b.ctime_ns, NOW + 5);

	assert_int_equal(nrs_meta_create(f->m, d, "orders", 0644, 3, 4, NOW + 7,
					 &a, &sr), 0);
	s = a.ino;
	assert_int_equal(s, NRS_FIRST_INO + 1);
	assert_int_equal(a.mode, S_IFREG | 0644);
	assert_int_equal(a.nlink, 1);
	assert_int_equal(a.parent, d);
	assert_int_equal(a.stream_id, 1);
	assert_int_equal(sr.id, 1);
	assert_int_equal(sr.ino, s);
	assert_int_equal(sr.head, 0);
	assert_int_equal(sr.version, 0);
	assert_int_equal(sr.start, 0);
	assert_int_equal(sr.epoch, 0);
	assert_int_equal(sr.last_lsn, 0);
	assert_int_equal(sr.mtime_ns, NOW + 7);
	assert_int_equal(sr.profile, NRS_PROFILE_LOCAL_WAL);
	assert_false(sr.unlinked);
	assert_int_equal(nrs_meta_stream_get(f->m, 1, &sr2), 0);
	assert_int_equal(sr2.id, sr.id);
	assert_int_equal(sr2.ino, sr.ino);
	assert_int_equal(sr2.head + sr2.version + sr2.start + sr2.epoch +
			 sr2.last_lsn, 0);
	assert_int_equal(sr2.mtime_ns, sr.mtime_ns);
	assert_int_equal(sr2.profile, sr.profile);
	assert_false(sr2.unlinked);
	assert_int_equal(getattr_ok(f->m, d).nlink, 2);	/* a stream */
	assert_int_equal(getattr_ok(f->m, d).mtime_ns, NOW + 7);

	assert_int_equal(nrs_meta_lookup(f->m, d, "orders", &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	b = getattr_ok(f->m, s);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "kafka", &b), 0);
	assert_int_equal(b.ino, d);
	assert_int_equal(nrs_meta_counts(f->m, &nd, &ns), 0);
	assert_int_equal(nd, 2);
	assert_int_equal(ns, 1);
	/* NULL out parameters are allowed */
	assert_int_equal(nrs_meta_create(f->m, d, "x", 0600, 0, 0, NOW, NULL,
					 NULL), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, d, "y", 0700, 0, 0, NOW, NULL), 0);
}

static void test_errors(void **state)
{
	struct fx *f = *state;
	struct nrs_attr a;
	uint64_t d, s, e;

	d = mkdir_ok(f->m, ROOT, "d");
	s = create_ok(f->m, d, "s", NULL);
	e = mkdir_ok(f->m, d, "e");

	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "d", 0755, 0, 0, NOW, &a),
			 -EEXIST);
	assert_int_equal(nrs_meta_create(f->m, ROOT, "d", 0644, 0, 0, NOW, &a,
					 NULL), -EEXIST);
	assert_int_equal(nrs_meta_mkdir(f->m, d, "s", 0755, 0, 0, NOW, &a),
			 -EEXIST);
	assert_int_equal(nrs_meta_mkdir(f->m, 999, "x", 0755, 0, 0, NOW, &a),
			 -ENOENT);
	assert_int_equal(nrs_meta_create(f->m, 999, "x", 0644, 0, 0, NOW, &a,
					 NULL), -ENOENT);
	assert_int_equal(nrs_meta_mkdir(f->m, s, "x", 0755, 0, 0, NOW, &a),
			 -ENOTDIR);
	assert_int_equal(nrs_meta_create(f->m, s, "x", 0644, 0, 0, NOW, &a,
					 NULL), -ENOTDIR);
	assert_int_equal(nrs_meta_lookup(f->m, s, "x", &a), -ENOTDIR);
	assert_int_equal(nrs_meta_lookup(f->m, 999, "x", &a), -ENOENT);
	assert_int_equal(nrs_meta_lookup(f->m, d, "nope", &a), -ENOENT);
	assert_int_equal(nrs_meta_getattr(f->m, 999, &a), -ENOENT);
	assert_int_equal(nrs_meta_unlink(f->m, d, "e", NOW, &a), -EISDIR);
	assert_int_equal(nrs_meta_unlink(f->m, d, "nope", NOW, &a), -ENOENT);
	assert_int_equal(nrs_meta_unlink(f->m, s, "x", NOW, &a), -ENOTDIR);
	assert_int_equal(nrs_meta_rmdir(f->m, d, "s", NOW), -ENOTDIR);
	assert_int_equal(nrs_meta_rmdir(f->m, ROOT, "d", NOW), -ENOTEMPTY);
	assert_int_equal(nrs_meta_rmdir(f->m, d, "nope", NOW), -ENOENT);
	assert_int_equal(nrs_meta_rmdir(f->m, 999, "e", NOW), -ENOENT);
	assert_int_equal(nrs_meta_readdir(f->m, s, 0, collect, NULL), -ENOTDIR);
	assert_int_equal(nrs_meta_readdir(f->m, 999, 0, collect, NULL), -ENOENT);
	assert_int_equal(nrs_meta_setattr(f->m, 999, &a, NRS_SET_MODE, NOW, &a),
			 -ENOENT);

	/* names no entry may have */
	assert_int_equal(nrs_meta_mkdir(f->m, d, "", 0755, 0, 0, NOW, &a),
			 -EINVAL);
	assert_int_equal(nrs_meta_mkdir(f->m, d, ".", 0755, 0, 0, NOW, &a),
			 -EINVAL);
	assert_int_equal(nrs_meta_mkdir(f->m, d, "..", 0755, 0, 0, NOW, &a),
			 -EINVAL);
	assert_int_equal(nrs_meta_create(f->m, d, "a/b", 0644, 0, 0, NOW, &a,
					 NULL), -EINVAL);
	assert_int_equal(nrs_meta_lookup(f->m, d, "a/b", &a), -ENOENT);
	assert_int_equal(nrs_meta_lookup(f->m, d, "", &a), -ENOENT);

	/* a failed call changed nothing */
	assert_int_equal(getattr_ok(f->m, d).nlink, 3);
	assert_int_equal(getattr_ok(f->m, e).nlink, 2);
	assert_int_equal(getattr_ok(f->m, s).nlink, 1);
	assert_int_equal(nrs_meta_rmdir(f->m, d, "e", NOW), 0);
	assert_int_equal(nrs_meta_getattr(f->m, e, &a), -ENOENT);
	assert_int_equal(getattr_ok(f->m, d).nlink, 2);
}

static void test_name_bytes(void **state)
{
	struct fx *f = *state;
	char n255[NRS_NAME_MAX + 2];
	const char *odd[] = { "line\nbreak", "\xff\xfe\x80 bad utf8", "tab\t",
			      " ", "...", "\xc3\xa9t\xc3\xa9" };
	struct nrs_attr a;
	struct listing l;
	uint64_t d, ino[6];
	size_t i;

	d = mkdir_ok(f->m, ROOT, "d");
	for (i = 0; i < 6; i++)
		ino[i] = create_ok(f->m, d, odd[i], NULL);
	/* a prefix or a different byte is a different name */
	assert_int_equal(nrs_meta_lookup(f->m, d, "line", &a), -ENOENT);
	assert_int_equal(nrs_meta_lookup(f->m, d, "\xff\xfe\x81 bad utf8", &a),
			 -ENOENT);
	for (i = 0; i < 6; i++) {
		assert_int_equal(nrs_meta_lookup(f->m, d, odd[i], &a), 0);
		assert_int_equal(a.ino, ino[i]);
	}
	list_dir(f->m, d, 0, &l);
	assert_int_equal(l.n, 6);
	for (i = 0; i < 6; i++) {
		assert_string_equal(l.names[i], odd[i]);
		assert_int_equal(l.ino[i], ino[i]);
	}

	memset(n255, 'n', sizeof(n255));
	n255[NRS_NAME_MAX] = '\0';
	assert_int_equal(nrs_meta_mkdir(f->m, d, n255, 0755, 0, 0, NOW, &a), 0);
	assert_int_equal(nrs_meta_lookup(f->m, d, n255, &a), 0);
	n255[NRS_NAME_MAX] = 'n';
	n255[NRS_NAME_MAX + 1] = '\0';
	assert_int_equal(nrs_meta_mkdir(f->m, d, n255, 0755, 0, 0, NOW, &a),
			 -ENAMETOOLONG);
	assert_int_equal(nrs_meta_create(f->m, d, n255, 0644, 0, 0, NOW, &a,
					 NULL), -ENAMETOOLONG);
	assert_int_equal(nrs_meta_lookup(f->m, d, n255, &a), -ENAMETOOLONG);
	assert_int_equal(nrs_meta_rename(f->m, d, odd[0], d, n255, 0, NOW, NULL),
			 -ENAMETOOLONG);
}

static void test_persistence(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	struct nrs_head_update u = { 0 };
	struct nrs_attr a, b;
	char buf[16];
	uint64_t d, s, v;
	int p;

	d = mkdir_ok(f->m, ROOT, "d");
	s = create_ok(f->m, d, "s", &sr);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.ckpt", "42", 2, 0), 0);
	assert_int_equal(nrs_meta_set_profile(f->m, d, NRS_PROFILE_OBJECT_WAL),
			 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d, NRS_RET_MS, 3600000),
			 0);
	assert_int_equal(nrs_meta_set_retention(f->m, s, NRS_RET_BYTES, 0), 0);
	u.id = sr.id;
	u.head = 100;
	u.version = 1;
	u.epoch = 2;
	u.last_lsn = 9;
	u.mtime_ns = NOW + 100;
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	a = getattr_ok(f->m, s);

	reopen(f);
	b = getattr_ok(f->m, s);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "d", &b), 0);
	assert_int_equal(b.ino, d);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.ckpt", buf,
					    sizeof(buf)), 2);
	assert_memory_equal(buf, "42", 2);
	assert_int_equal(nrs_meta_get_profile(f->m, d, &p), 0);
	assert_int_equal(p, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_MS, &v), 0);
	assert_int_equal(v, 3600000);
	v = 7;
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_BYTES, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_meta_stream_get(f->m, sr.id, &sr), 0);
	assert_int_equal(sr.head, 100);
	assert_int_equal(sr.version, 1);
	assert_int_equal(sr.epoch, 2);
	assert_int_equal(sr.last_lsn, 9);
	assert_int_equal(sr.mtime_ns, NOW + 100);
	/* numbering continues after the reopen */
	assert_int_equal(create_ok(f->m, d, "t", &sr), s + 1);
	assert_int_equal(sr.id, 2);
	assert_int_equal(sr.profile, NRS_PROFILE_OBJECT_WAL);
}

static void test_ids_never_reused(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	struct nrs_attr a;
	uint64_t s, t, dd;

	s = create_ok(f->m, ROOT, "s", &sr);
	assert_int_equal(sr.id, 1);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s", NOW, &a), 0);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, 1, &sr), -ENOENT);
	t = create_ok(f->m, ROOT, "s", &sr);
	assert_int_equal(sr.id, 2);
	assert_true(t > s);
	dd = mkdir_ok(f->m, ROOT, "dd");
	assert_int_equal(nrs_meta_rmdir(f->m, ROOT, "dd", NOW), 0);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s", NOW, &a), 0);
	assert_int_equal(nrs_meta_forget_inode(f->m, t), 0);
	reopen(f);
	assert_int_equal(create_ok(f->m, ROOT, "s", &sr), dd + 1);
	assert_int_equal(sr.id, 3);
}

static void test_setattr(void **state)
{
	struct fx *f = *state;
	struct nrs_attr in = { 0 }, a;
	uint64_t s = create_ok(f->m, ROOT, "s", NULL);

	in.mode = S_IFDIR | 04711;
	in.uid = 77;
	in.gid = 88;
	in.atime_ns = 5;
	in.mtime_ns = 6;
	assert_int_equal(nrs_meta_setattr(f->m, s, &in, NRS_SET_MODE, NOW + 1,
					  &a), 0);
	assert_int_equal(a.mode, S_IFREG | 04711);	/* type kept */
	assert_int_equal(a.uid, 10);
	assert_int_equal(a.ctime_ns, NOW + 1);
	assert_int_equal(nrs_meta_setattr(f->m, s, &in, NRS_SET_UID |
					  NRS_SET_GID | NRS_SET_ATIME |
					  NRS_SET_MTIME, NOW + 2, NULL), 0);
	reopen(f);
	a = getattr_ok(f->m, s);
	assert_int_equal(a.mode, S_IFREG | 04711);
	assert_int_equal(a.uid, 77);
	assert_int_equal(a.gid, 88);
	assert_int_equal(a.atime_ns, 5);
	assert_int_equal(a.mtime_ns, 6);
	assert_int_equal(a.ctime_ns, NOW + 2);
}

/* core_append.c K1: NRS_SET_KILLPRIV clears S_ISUID, and S_ISGID only with
 * group-execute, from the stored mode, durably. */
static void test_setattr_killpriv(void **state)
{
	static const struct { uint32_t from, to; } cases[] = {
		{ 06777, 0777 }, { 06767, 02767 }, { 04755, 0755 },
		{ 02750, 0750 }, { 02740, 02740 }, { 0755, 0755 },
	};
	struct fx *f = *state;
	struct nrs_attr in = { 0 }, a;
	uint64_t s = create_ok(f->m, ROOT, "s", NULL);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		in.mode = cases[i].from;
		assert_int_equal(nrs_meta_setattr(f->m, s, &in, NRS_SET_MODE,
						  NOW, NULL), 0);
		assert_int_equal(nrs_meta_setattr(f->m, s, &in,
						  NRS_SET_KILLPRIV, NOW + 1, &a), 0);
		assert_int_equal(a.mode, S_IFREG | cases[i].to);
		reopen(f);
		a = getattr_ok(f->m, s);
		assert_int_equal(a.mode, S_IFREG | cases[i].to);
		assert_int_equal(a.ctime_ns, NOW + 1);
	}
}

static void test_rename_basic(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	struct nrs_attr a;
	uint64_t d1, d2, s, sub, rep = 99;

	d1 = mkdir_ok(f->m, ROOT, "d1");
	d2 = mkdir_ok(f->m, ROOT, "d2");
	s = create_ok(f->m, d1, "s", &sr);
	/* within a directory */
	assert_int_equal(nrs_meta_rename(f->m, d1, "s", d1, "t", 0, NOW + 1,
					 &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(nrs_meta_lookup(f->m, d1, "s", &a), -ENOENT);
	assert_int_equal(nrs_meta_lookup(f->m, d1, "t", &a), 0);
	assert_int_equal(a.ino, s);
	assert_int_equal(a.stream_id, sr.id);
	assert_int_equal(a.ctime_ns, NOW + 1);
	/* across directories: stream id kept, both parents touched */
	assert_int_equal(nrs_meta_rename(f->m, d1, "t", d2, "u", 0, NOW + 2,
					 &rep), 0);
	a = getattr_ok(f->m, s);
	assert_int_equal(a.parent, d2);
	assert_int_equal(a.stream_id, sr.id);
	assert_int_equal(getattr_ok(f->m, d1).mtime_ns, NOW + 2);
	assert_int_equal(getattr_ok(f->m, d2).ctime_ns, NOW + 2);
	assert_int_equal(getattr_ok(f->m, d1).nlink, 2);
	/* a directory across directories moves a link */
	sub = mkdir_ok(f->m, d1, "sub");
	assert_int_equal(getattr_ok(f->m, d1).nlink, 3);
	assert_int_equal(nrs_meta_rename(f->m, d1, "sub", d2, "sub", 0, NOW,
					 &rep), 0);
	assert_int_equal(getattr_ok(f->m, d1).nlink, 2);
	assert_int_equal(getattr_ok(f->m, d2).nlink, 3);
	assert_int_equal(getattr_ok(f->m, sub).parent, d2);
	/* a directory within its directory: no change */
	assert_int_equal(nrs_meta_rename(f->m, d2, "sub", d2, "sub2", 0, NOW,
					 &rep), 0);
	assert_int_equal(getattr_ok(f->m, d2).nlink, 3);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 4);
	/* NOREPLACE onto a free name works */
	assert_int_equal(nrs_meta_rename(f->m, d2, "u", ROOT, "top",
					 RENAME_NOREPLACE, NOW, &rep), 0);
	assert_int_equal(getattr_ok(f->m, s).parent, ROOT);
	/* errors of the source and destination directories */
	assert_int_equal(nrs_meta_rename(f->m, d1, "gone", d2, "x", 0, NOW,
					 &rep), -ENOENT);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "top", 999, "x", 0, NOW,
					 &rep), -ENOENT);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d1", s, "x", 0, NOW,
					 &rep), -ENOTDIR);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d1", ROOT, "a/b", 0, NOW,
					 &rep), -EINVAL);
	assert_int_equal(rep, 0);
}

static void test_rename_noop_flags(void **state)
{
	struct fx *f = *state;
	uint64_t s, rep = 99;
	struct nrs_attr a, b;

	s = create_ok(f->m, ROOT, "s", NULL);
	create_ok(f->m, ROOT, "t", NULL);
	a = getattr_ok(f->m, s);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "s", ROOT, "s", 0, NOW + 9,
					 &rep), 0);
	assert_int_equal(rep, 0);
	b = getattr_ok(f->m, s);
	assert_memory_equal(&a, &b, sizeof(a));	/* not even ctime */
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "s", ROOT, "t",
					 RENAME_NOREPLACE, NOW, &rep), -EEXIST);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "s", ROOT, "t",
					 RENAME_EXCHANGE, NOW, &rep), -EINVAL);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "s", ROOT, "u", 0x100, NOW,
					 &rep), -EINVAL);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "s", &a), 0);
	assert_int_equal(a.ino, s);
}

static void test_rename_into_subtree(void **state)
{
	struct fx *f = *state;
	struct nrs_attr a;
	uint64_t d, e, g, rep;

	d = mkdir_ok(f->m, ROOT, "d");
	e = mkdir_ok(f->m, d, "e");
	g = mkdir_ok(f->m, e, "g");
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", d, "x", 0, NOW, &rep),
			 -EINVAL);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", e, "x", 0, NOW, &rep),
			 -EINVAL);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", g, "x", 0, NOW, &rep),
			 -EINVAL);
	assert_int_equal(nrs_meta_rename(f->m, d, "e", g, "x", 0, NOW, &rep),
			 -EINVAL);
	/* onto an ancestor: that ancestor is not empty */
	assert_int_equal(nrs_meta_rename(f->m, e, "g", ROOT, "d", 0, NOW, &rep),
			 -ENOTEMPTY);
	/* moving up is fine */
	assert_int_equal(nrs_meta_rename(f->m, e, "g", ROOT, "g", 0, NOW, &rep),
			 0);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "g", &a), 0);
	assert_int_equal(a.ino, g);
	assert_int_equal(getattr_ok(f->m, e).nlink, 2);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 4);
}

static void test_rename_type_conflicts(void **state)
{
	struct fx *f = *state;
	struct nrs_attr a;
	uint64_t d, full, empty, s, rep;

	d = mkdir_ok(f->m, ROOT, "d");
	full = mkdir_ok(f->m, ROOT, "full");
	create_ok(f->m, full, "inside", NULL);
	empty = mkdir_ok(f->m, ROOT, "empty");
	s = create_ok(f->m, ROOT, "s", NULL);
	assert_int_equal(nrs_meta_xattr_set(f->m, empty, "user.k", "v", 1, 0),
			 0);

	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", ROOT, "s", 0, NOW,
					 &rep), -ENOTDIR);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "s", ROOT, "d", 0, NOW,
					 &rep), -EISDIR);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", ROOT, "full", 0, NOW,
					 &rep), -ENOTEMPTY);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 5);

	rep = 99;
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "d", ROOT, "empty", 0,
					 NOW + 3, &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(nrs_meta_getattr(f->m, empty, &a), -ENOENT);
	assert_int_equal(nrs_meta_xattr_list(f->m, empty, NULL, 0), -ENOENT);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "empty", &a), 0);
	assert_int_equal(a.ino, d);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "d", &a), -ENOENT);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 4);
	assert_int_equal(getattr_ok(f->m, ROOT).mtime_ns, NOW + 3);

	/* same for a directory coming from elsewhere */
	mkdir_ok(f->m, full, "sub");
	mkdir_ok(f->m, ROOT, "target");
	assert_int_equal(getattr_ok(f->m, full).nlink, 3);
	assert_int_equal(nrs_meta_rename(f->m, full, "sub", ROOT, "target", 0,
					 NOW, &rep), 0);
	assert_int_equal(getattr_ok(f->m, full).nlink, 2);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 5);
	assert_int_equal(getattr_ok(f->m, s).nlink, 1);
}

static int collect_ino(void *ctx, uint64_t ino)
{
	uint64_t *v = ctx;

	v[++v[0]] = ino;
	return 0;
}

static void test_rename_replace_stream(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row ra, rb;
	struct nrs_attr a;
	uint64_t d, sa, sb, rep = 0, found[8] = { 0 };

	d = mkdir_ok(f->m, ROOT, "d");
	sa = create_ok(f->m, ROOT, "a", &ra);
	sb = create_ok(f->m, d, "b", &rb);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "a", d, "b", 0, NOW + 4,
					 &rep), 0);
	assert_int_equal(rep, sb);
	assert_int_equal(nrs_meta_lookup(f->m, d, "b", &a), 0);
	assert_int_equal(a.ino, sa);
	assert_int_equal(a.stream_id, ra.id);
	a = getattr_ok(f->m, sb);
	assert_int_equal(a.nlink, 0);
	assert_int_equal(a.parent, 0);
	assert_int_equal(a.ctime_ns, NOW + 4);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &rb), 0);
	assert_true(rb.unlinked);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_false(ra.unlinked);
	assert_int_equal(nrs_meta_unlinked_foreach(f->m, collect_ino, found), 0);
	assert_int_equal(found[0], 1);
	assert_int_equal(found[1], sb);
	assert_int_equal(getattr_ok(f->m, d).nlink, 2);
}

static void test_readdir_cookies(void **state)
{
	struct fx *f = *state;
	const char *names[] = { "a", "b", "c", "d", "e" };
	struct listing l, l2;
	struct nrs_attr a;
	uint64_t d;
	int i;

	d = mkdir_ok(f->m, ROOT, "d");
	for (i = 0; i < 5; i++)
		create_ok(f->m, d, names[i], NULL);
	list_dir(f->m, d, 0, &l);
	assert_int_equal(l.n, 5);
	assert_true(l.cookie[0] >= 3);
	for (i = 0; i < 5; i++) {
		assert_string_equal(l.names[i], names[i]);
		if (i > 0)
			assert_true(l.cookie[i] > l.cookie[i - 1]);
	}
	/* the first cookie ever handed out is 3 */
	list_dir(f->m, ROOT, 0, &l2);
	assert_int_equal(l2.cookie[0], 3);

	/* stop early, then resume from the last cookie seen */
	memset(&l2, 0, sizeof(l2));
	l2.stop_after = 2;
	assert_int_equal(nrs_meta_readdir(f->m, d, 0, collect, &l2), 0);
	assert_int_equal(l2.n, 2);
	assert_int_equal(nrs_meta_unlink(f->m, d, "a", NOW, &a), 0);
	assert_int_equal(nrs_meta_unlink(f->m, d, "b", NOW, &a), 0);
	create_ok(f->m, d, "f", NULL);
	list_dir(f->m, d, l2.cookie[1], &l2);
	assert_int_equal(l2.n, 4);
	for (i = 0; i < 3; i++) {
		assert_string_equal(l2.names[i], names[i + 2]);
		assert_int_equal(l2.cookie[i], l.cookie[i + 2]);
	}
	assert_string_equal(l2.names[3], "f");
	assert_true(l2.cookie[3] > l.cookie[4]);
	/* a rename keeps the cookie; a recreated name gets a new one */
	assert_int_equal(nrs_meta_rename(f->m, d, "c", d, "cc", 0, NOW, NULL),
			 0);
	create_ok(f->m, d, "a", NULL);
	list_dir(f->m, d, l.cookie[1], &l2);
	assert_int_equal(l2.n, 5);
	assert_string_equal(l2.names[0], "cc");
	assert_int_equal(l2.cookie[0], l.cookie[2]);
	assert_string_equal(l2.names[4], "a");
	assert_true(l2.cookie[4] > l.cookie[0]);
	/* past the end, and a huge cookie */
	list_dir(f->m, d, l2.cookie[4], &l2);
	assert_int_equal(l2.n, 0);
	list_dir(f->m, d, UINT64_MAX, &l2);
	assert_int_equal(l2.n, 0);
}

static void test_dir_nlink(void **state)
{
	struct fx *f = *state;
	uint64_t d;

	d = mkdir_ok(f->m, ROOT, "d");
	mkdir_ok(f->m, d, "x");
	mkdir_ok(f->m, d, "y");
	create_ok(f->m, d, "s", NULL);
	assert_int_equal(getattr_ok(f->m, d).nlink, 4);
	assert_int_equal(getattr_ok(f->m, ROOT).nlink, 3);
	assert_int_equal(nrs_meta_rmdir(f->m, d, "x", NOW), 0);
	assert_int_equal(getattr_ok(f->m, d).nlink, 3);
	reopen(f);
	assert_int_equal(getattr_ok(f->m, d).nlink, 3);
}

static void test_xattrs(void **state)
{
	struct fx *f = *state;
	char name[NRS_XATTR_NAME_MAX + 2], buf[64], *big;
	uint64_t s = create_ok(f->m, ROOT, "s", NULL);

	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.a", buf, sizeof(buf)),
			 -ENODATA);
	assert_int_equal(nrs_meta_xattr_get(f->m, 999, "user.a", buf, 8),
			 -ENOENT);
	assert_int_equal(nrs_meta_xattr_set(f->m, 999, "user.a", "x", 1, 0),
			 -ENOENT);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.b", "hello", 5,
					    XATTR_CREATE), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.b", "again", 5,
					    XATTR_CREATE), -EEXIST);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", "x", 1,
					    XATTR_REPLACE), -ENODATA);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", "x", 1,
					    XATTR_CREATE | XATTR_REPLACE),
			 -EINVAL);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", NULL, 0, 0), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.a", buf, sizeof(buf)),
			 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.a", NULL, 0), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", NULL, 0), 5);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", buf, 4), -ERANGE);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.b", "bye", 3,
					    XATTR_REPLACE), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", buf, 3), 3);
	assert_memory_equal(buf, "bye", 3);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.b", "\0\1\2", 3, 0),
			 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", buf, 3), 3);
	assert_memory_equal(buf, "\0\1\2", 3);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "trusted.c", "c", 1, 0), 0);

	/* sorted, NUL-terminated; ERANGE when short */
	assert_int_equal(nrs_meta_xattr_list(f->m, s, NULL, 0), 24);
	memset(buf, '#', sizeof(buf));
	assert_int_equal(nrs_meta_xattr_list(f->m, s, buf, 23), -ERANGE);
	assert_int_equal(buf[0], '#');		/* untouched on error */
	assert_int_equal(nrs_meta_xattr_list(f->m, s, buf, 24), 24);
	assert_memory_equal(buf, "trusted.c\0user.a\0user.b\0", 24);
	assert_int_equal(nrs_meta_xattr_remove(f->m, s, "user.a"), 0);
	assert_int_equal(nrs_meta_xattr_remove(f->m, s, "user.a"), -ENODATA);
	assert_int_equal(nrs_meta_xattr_remove(f->m, 999, "user.a"), -ENOENT);
	assert_int_equal(nrs_meta_xattr_list(f->m, s, buf, sizeof(buf)), 17);
	assert_int_equal(nrs_meta_xattr_list(f->m, ROOT, buf, sizeof(buf)), 0);

	/* limits */
	big = calloc(1, NRS_XATTR_VALUE_MAX + 1);
	assert_non_null(big);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.big", big,
					    NRS_XATTR_VALUE_MAX, 0), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.big", NULL, 0),
			 NRS_XATTR_VALUE_MAX);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.big", big,
					    NRS_XATTR_VALUE_MAX + 1, 0), -E2BIG);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.big", NULL, 0),
			 NRS_XATTR_VALUE_MAX);
	free(big);
	memset(name, 'x', sizeof(name));
	name[NRS_XATTR_NAME_MAX] = '\0';
	assert_int_equal(nrs_meta_xattr_set(f->m, s, name, "v", 1, 0), 0);
	name[NRS_XATTR_NAME_MAX] = 'x';
	name[NRS_XATTR_NAME_MAX + 1] = '\0';
	assert_int_equal(nrs_meta_xattr_set(f->m, s, name, "v", 1, 0), -ERANGE);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, name, buf, 8), -ERANGE);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "", "v", 1, 0), -ERANGE);

	/* xattrs go with the inode */
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s", NOW, NULL), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", NULL, 0), 3);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), 0);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.b", NULL, 0),
			 -ENOENT);
}

/* MS2: per inode, a bound on the names and on their bytes; a set that adds
 * nothing always passes, a remove always works. */
static void test_xattr_bounds(void **state)
{
	struct fx *f = *state;
	uint64_t s = create_ok(f->m, ROOT, "s", NULL), t;
	char name[32], *big;
	int i;

	for (i = 0; i < NRS_XATTR_COUNT_MAX; i++) {
		snprintf(name, sizeof(name), "user.n%03d", i);
		assert_int_equal(nrs_meta_xattr_set(f->m, s, name, "v", 1, 0), 0);
	}
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.one-more", "v", 1, 0),
			 -ENOSPC);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.one-more", NULL, 0),
			 -ENODATA);
	/* the flags are answered first */
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.n000", "w", 1,
					    XATTR_CREATE), -EEXIST);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.one-more", "w", 1,
					    XATTR_REPLACE), -ENODATA);
	/* an existing name still takes a new value */
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.n000", "vvvv", 4, 0),
			 0);
	assert_int_equal(nrs_meta_xattr_remove(f->m, s, "user.n001"), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.one-more", "v", 1, 0),
			 0);
	/* the other inodes have their own bound */
	t = create_ok(f->m, ROOT, "t", NULL);
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.a", "v", 1, 0), 0);

	/* bytes: names plus values */
	big = calloc(1, NRS_XATTR_VALUE_MAX);
	assert_non_null(big);
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "user.big%d", i);
		assert_int_equal(nrs_meta_xattr_set(f->m, t, name, big,
						    NRS_XATTR_VALUE_MAX, 0), 0);
	}
	/* 3 * (9 + 65536) + 7: a fourth value of 65536 is past 256 KiB */
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.big3", big,
					    NRS_XATTR_VALUE_MAX, 0), -ENOSPC);
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.big3", big,
					    NRS_XATTR_BYTES_MAX - 3 * (9 + 65536) - 7 - 9,
					    0), 0);	/* exactly the bound */
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.x", "", 0, 0),
			 -ENOSPC);
	/* growing a value past it is refused, keeping or shrinking is not */
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.a", "vv", 2, 0),
			 -ENOSPC);
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.a", "w", 1,
					    XATTR_REPLACE), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.big0", big, 10, 0), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, t, "user.x", "", 0, 0), 0);
	free(big);
}

/* MS1: past the reserve, growth is -ENOSPC and changes nothing; removals
 * and in-place changes still work. */
static void test_space_reserve(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	struct nrs_attr a;
	uint64_t d, s, e, v;
	bool set = true;

	d = mkdir_ok(f->m, ROOT, "d");
	e = mkdir_ok(f->m, ROOT, "empty");
	s = create_ok(f->m, d, "s", &sr);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", "abcd", 4, 0), 0);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.b", "abcd", 4, 0), 0);
	/* more than any file system has free */
	assert_int_equal(nrs_meta_set_reserve(f->m, UINT64_MAX / 2), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "x", 0700, 0, 0, NOW, &a),
			 -ENOSPC);
	assert_int_equal(nrs_meta_create(f->m, d, "x", 0600, 0, 0, NOW, &a,
					 NULL), -ENOSPC);
	assert_int_equal(nrs_meta_lookup(f->m, d, "x", &a), -ENOENT);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.c", "v", 1, 0),
			 -ENOSPC);
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", "abcde", 5, 0),
			 -ENOSPC);
	assert_int_equal(nrs_meta_xattr_get(f->m, s, "user.c", NULL, 0),
			 -ENODATA);
	/* what adds nothing, changes in place or frees space */
	assert_int_equal(nrs_meta_xattr_set(f->m, s, "user.a", "ab", 2, 0), 0);
	assert_int_equal(nrs_meta_xattr_remove(f->m, s, "user.b"), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d, NRS_RET_MS, 5), 0);
	assert_int_equal(nrs_meta_rename(f->m, d, "s", ROOT, "s2", 0, NOW, NULL),
			 0);
	assert_int_equal(nrs_meta_rmdir(f->m, ROOT, "empty", NOW), 0);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s2", NOW, NULL), 0);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), 0);
	(void)e;
	/* space again */
	assert_int_equal(nrs_meta_set_reserve(f->m, 0), 0);
	assert_int_equal(nrs_meta_mkdir(f->m, ROOT, "x", 0700, 0, 0, NOW, &a), 0);
	assert_int_equal(nrs_meta_get_retention(f->m, a.ino, NRS_RET_MS, &v), 0);
	/* own retention, not inherited (core_xattr.c XA1) */
	assert_int_equal(nrs_meta_retention_is_set(f->m, d, NRS_RET_MS, &set), 0);
	assert_true(set);
	assert_int_equal(nrs_meta_retention_is_set(f->m, d, NRS_RET_BYTES, &set),
			 0);
	assert_false(set);
	set = true;
	assert_int_equal(nrs_meta_retention_is_set(f->m, a.ino, NRS_RET_MS, &set),
			 0);
	assert_false(set);
	assert_int_equal(nrs_meta_retention_is_set(f->m, 999, NRS_RET_MS, &set),
			 -ENOENT);
}

static void test_profile_inheritance(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	uint64_t a, b, c, s;
	int p;

	a = mkdir_ok(f->m, ROOT, "a");
	b = mkdir_ok(f->m, a, "b");
	c = mkdir_ok(f->m, b, "c");
	create_ok(f->m, c, "s0", &sr);
	assert_int_equal(sr.profile, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_meta_set_profile(f->m, a, NRS_PROFILE_OBJECT_WAL),
			 0);
	s = create_ok(f->m, c, "s1", &sr);
	assert_int_equal(sr.profile, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_get_profile(f->m, s, &p), 0);
	assert_int_equal(p, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_get_profile(f->m, c, &p), 0);
	assert_int_equal(p, NRS_PROFILE_UNSET);
	/* the nearest one wins, the directory itself first */
	assert_int_equal(nrs_meta_set_profile(f->m, b, NRS_PROFILE_LOCAL_WAL), 0);
	create_ok(f->m, c, "s2", &sr);
	assert_int_equal(sr.profile, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_meta_set_profile(f->m, c, NRS_PROFILE_OBJECT_WAL),
			 0);
	create_ok(f->m, c, "s3", &sr);
	assert_int_equal(sr.profile, NRS_PROFILE_OBJECT_WAL);
	/* a stream's own profile updates its stream row */
	assert_int_equal(nrs_meta_set_profile(f->m, s, NRS_PROFILE_LOCAL_WAL), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, getattr_ok(f->m, s).stream_id,
					     &sr), 0);
	assert_int_equal(sr.profile, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_meta_set_profile(f->m, s, NRS_PROFILE_UNSET),
			 -EINVAL);
	assert_int_equal(nrs_meta_set_profile(f->m, s, 3), -EINVAL);
	assert_int_equal(nrs_meta_set_profile(f->m, 999, NRS_PROFILE_LOCAL_WAL),
			 -ENOENT);
	assert_int_equal(nrs_meta_get_profile(f->m, 999, &p), -ENOENT);
	/* the effective one, in one call: own, else the nearest above */
	assert_int_equal(nrs_meta_effective_profile(f->m, ROOT, &p), 0);
	assert_int_equal(p, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_meta_effective_profile(f->m, c, &p), 0);
	assert_int_equal(p, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_effective_profile(f->m, s, &p), 0);
	assert_int_equal(p, NRS_PROFILE_LOCAL_WAL);	/* its own */
	assert_int_equal(nrs_meta_set_profile(f->m, c, NRS_PROFILE_LOCAL_WAL),
			 0);
	assert_int_equal(nrs_meta_effective_profile(f->m, c, &p), 0);
	assert_int_equal(p, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_meta_effective_profile(f->m, a, &p), 0);
	assert_int_equal(p, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_effective_profile(f->m, 999, &p), -ENOENT);
}

static void test_retention(void **state)
{
	struct fx *f = *state;
	uint64_t a, b, s, v;

	a = mkdir_ok(f->m, ROOT, "a");
	b = mkdir_ok(f->m, a, "b");
	s = create_ok(f->m, b, "s", NULL);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_BYTES, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_meta_set_retention(f->m, ROOT, NRS_RET_BYTES, 1000),
			 0);
	assert_int_equal(nrs_meta_set_retention(f->m, a, NRS_RET_BYTES, 500), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, a, NRS_RET_MS, 60000), 0);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_BYTES, &v), 0);
	assert_int_equal(v, 500);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_MS, &v), 0);
	assert_int_equal(v, 60000);
	assert_int_equal(nrs_meta_get_retention(f->m, ROOT, NRS_RET_MS, &v), 0);
	assert_int_equal(v, 0);
	/* an explicit 0 (keep forever) on the way up stops the walk */
	assert_int_equal(nrs_meta_set_retention(f->m, b, NRS_RET_BYTES, 0), 0);
	v = 1;
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_BYTES, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_meta_set_retention(f->m, s, NRS_RET_BYTES,
						UINT64_MAX), 0);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_BYTES, &v), 0);
	assert_true(v == UINT64_MAX);
	/* moving the stream changes what it inherits */
	assert_int_equal(nrs_meta_rename(f->m, b, "s", ROOT, "s", 0, NOW, NULL),
			 0);
	assert_int_equal(nrs_meta_get_retention(f->m, s, NRS_RET_MS, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_meta_get_retention(f->m, s, 2, &v), -EINVAL);
	assert_int_equal(nrs_meta_set_retention(f->m, s, 2, 1), -EINVAL);
	assert_int_equal(nrs_meta_get_retention(f->m, 999, NRS_RET_MS, &v),
			 -ENOENT);
	assert_int_equal(nrs_meta_set_retention(f->m, 999, NRS_RET_MS, 1),
			 -ENOENT);
}

static uint64_t ret_of(struct nrs_meta *m, uint64_t ino, int which)
{
	uint64_t v = 77;

	assert_int_equal(nrs_meta_get_retention(m, ino, which, &v), 0);
	return v;
}

/* Inodes read by retention walks since the last call. */
static uint64_t steps_since(struct nrs_meta *m, uint64_t *last)
{
	uint64_t now = nrs_meta_chain_steps(m), d = now - *last;

	*last = now;
	return d;
}

/* MT8: when nothing changed a get reads no inode, however deep; after a
 * change each directory is read once, not once per stream below it; every
 * kind of change is seen. */
#define MEMO_DEPTH	1100	/* more than one WALK_CHUNK */
#define MEMO_STREAMS	10
static void test_retention_memo(void **state)
{
	struct fx *f = *state;
	uint64_t d[MEMO_DEPTH], s[MEMO_STREAMS], last = 0, plain, ps;
	struct nrs_attr a;
	char name[16];
	int i;

	d[0] = mkdir_ok(f->m, ROOT, "top");
	for (i = 1; i < MEMO_DEPTH; i++)
		d[i] = mkdir_ok(f->m, d[i - 1], "d");
	for (i = 0; i < MEMO_STREAMS; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		s[i] = create_ok(f->m, d[MEMO_DEPTH - 1], name, NULL);
	}
	assert_int_equal(nrs_meta_set_retention(f->m, d[0], NRS_RET_MS, 1000), 0);
	steps_since(f->m, &last);
	for (i = 0; i < MEMO_STREAMS; i++)
		assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS), 1000);
	/* the chain once (and the root), then one inode per other stream */
	assert_int_equal(steps_since(f->m, &last), MEMO_DEPTH + 1 + MEMO_STREAMS);
	for (int pass = 0; pass < 3; pass++)
		for (i = 0; i < MEMO_STREAMS; i++) {
			assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS), 1000);
			assert_int_equal(ret_of(f->m, s[i], NRS_RET_BYTES), 0);
		}
	assert_int_equal(steps_since(f->m, &last), 0);

	/* a directory's setting reaches every stream below it */
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH / 2],
						NRS_RET_MS, 2000), 0);
	for (i = 0; i < MEMO_STREAMS; i++)
		assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS), 2000);
	assert_true(steps_since(f->m, &last) <= MEMO_DEPTH + 1 + MEMO_STREAMS);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH - 1],
						NRS_RET_BYTES, 5), 0);
	for (i = 0; i < MEMO_STREAMS; i++)
		assert_int_equal(ret_of(f->m, s[i], NRS_RET_BYTES), 5);
	steps_since(f->m, &last);
	for (i = 0; i < MEMO_STREAMS; i++)
		assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS), 2000);
	assert_int_equal(steps_since(f->m, &last), 0);

	/* one stream's own value: only it is read again */
	assert_int_equal(nrs_meta_set_retention(f->m, s[3], NRS_RET_MS, 7), 0);
	for (i = 0; i < MEMO_STREAMS; i++)
		assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS), i == 3 ? 7 : 2000);
	assert_int_equal(steps_since(f->m, &last), 1);

	/* a stream renamed out inherits from its new place */
	assert_int_equal(nrs_meta_rename(f->m, d[MEMO_DEPTH - 1], "s4", d[1],
					 "s4", 0, NOW, NULL), 0);
	assert_int_equal(ret_of(f->m, s[4], NRS_RET_MS), 1000);
	assert_int_equal(ret_of(f->m, s[4], NRS_RET_BYTES), 0);
	assert_int_equal(ret_of(f->m, s[5], NRS_RET_MS), 2000);

	/* a directory renamed: its whole subtree inherits from the new place */
	assert_int_equal(nrs_meta_rename(f->m, d[MEMO_DEPTH / 2 - 1], "d", ROOT,
					 "moved", 0, NOW, NULL), 0);
	for (i = 0; i < MEMO_STREAMS; i++)
		if (i != 4)
			assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS),
					 i == 3 ? 7 : 2000);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH / 2],
						NRS_RET_MS, 0), 0);
	for (i = 0; i < MEMO_STREAMS; i++)
		if (i != 4)
			assert_int_equal(ret_of(f->m, s[i], NRS_RET_MS),
					 i == 3 ? 7 : 0);
	assert_int_equal(nrs_meta_rename(f->m, ROOT, "moved", d[0], "back", 0,
					 NOW, NULL), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH / 2],
						NRS_RET_MS, 9), 0);
	assert_int_equal(ret_of(f->m, s[0], NRS_RET_MS), 9);
	assert_int_equal(nrs_meta_rename(f->m, d[0], "back", ROOT, "moved", 0,
					 NOW, NULL), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH / 2],
						NRS_RET_MS, 0), 0);
	assert_int_equal(ret_of(f->m, s[0], NRS_RET_MS), 0);	/* d[550]'s 0 */
	/* a setting high up reaches what was memoised below */
	plain = mkdir_ok(f->m, d[MEMO_DEPTH / 2], "plain");
	ps = create_ok(f->m, plain, "ps", NULL);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_MS), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, ROOT, NRS_RET_MS, 11), 0);
	assert_int_equal(ret_of(f->m, d[1], NRS_RET_MS), 1000);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_MS), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH / 2],
						NRS_RET_BYTES, 3), 0);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_BYTES), 3);
	assert_int_equal(ret_of(f->m, ps, NRS_RET_BYTES), 3);
	assert_int_equal(ret_of(f->m, ps, NRS_RET_MS), 0);
	assert_int_equal(nrs_meta_rename(f->m, d[MEMO_DEPTH / 2], "plain", ROOT,
					 "plain", 0, NOW, NULL), 0);
	assert_int_equal(ret_of(f->m, ps, NRS_RET_MS), 11);	/* below it */
	assert_int_equal(ret_of(f->m, ps, NRS_RET_BYTES), 0);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_MS), 11);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_BYTES), 0);

	/* unlinked: the stream keeps only its own values; forgotten: gone */
	assert_int_equal(nrs_meta_unlink(f->m, d[MEMO_DEPTH - 1], "s3", NOW, &a),
			 0);
	assert_int_equal(ret_of(f->m, s[3], NRS_RET_MS), 7);
	assert_int_equal(ret_of(f->m, s[3], NRS_RET_BYTES), 0);
	assert_int_equal(nrs_meta_set_retention(f->m, d[MEMO_DEPTH - 1],
						NRS_RET_MS, 13), 0);
	assert_int_equal(ret_of(f->m, s[5], NRS_RET_MS), 13);
	assert_int_equal(nrs_meta_unlink(f->m, d[MEMO_DEPTH - 1], "s5", NOW, &a),
			 0);
	assert_int_equal(ret_of(f->m, s[5], NRS_RET_MS), 0);
	assert_int_equal(nrs_meta_forget_inode(f->m, s[5]), 0);
	assert_int_equal(nrs_meta_get_retention(f->m, s[5], NRS_RET_MS, &last),
			 -ENOENT);
	/* and a reopened store walks again, to the same values */
	reopen(f);
	last = 0;
	assert_int_equal(ret_of(f->m, s[0], NRS_RET_BYTES), 5);
	assert_int_equal(ret_of(f->m, plain, NRS_RET_MS), 11);
	assert_int_equal(ret_of(f->m, s[4], NRS_RET_MS), 1000);
	assert_true(steps_since(f->m, &last) > 0);
}

static void test_publish_cas(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row ra, rb;
	struct nrs_head_update u[2];
	uint64_t sa, sb;
	struct nrs_attr a;

	sa = create_ok(f->m, ROOT, "a", &ra);
	sb = create_ok(f->m, ROOT, "b", &rb);
	assert_int_equal(nrs_meta_publish(f->m, NULL, 0, false), 0);
	memset(u, 0, sizeof(u));
	u[0].id = ra.id;
	u[0].old_version = 0;
	u[0].head = 10;
	u[0].version = 1;
	u[0].epoch = 1;
	u[0].last_lsn = 100;
	u[0].mtime_ns = NOW + 10;
	u[1] = u[0];
	u[1].id = rb.id;
	u[1].head = 20;
	u[1].version = 2;
	u[1].mtime_ns = NOW + 20;
	assert_int_equal(nrs_meta_publish(f->m, u, 2, false), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_int_equal(ra.head, 10);
	assert_int_equal(ra.version, 1);
	assert_int_equal(ra.epoch, 1);
	assert_int_equal(ra.last_lsn, 100);
	assert_int_equal(ra.mtime_ns, NOW + 10);
	a = getattr_ok(f->m, sa);
	assert_int_equal(a.mtime_ns, NOW + 10);
	assert_int_equal(a.ctime_ns, NOW + 10);
	assert_int_equal(getattr_ok(f->m, sb).mtime_ns, NOW + 20);

	/* a batch whose second CAS loses changes nothing, not even a */
	u[0].old_version = 1;
	u[0].head = 15;
	u[0].version = 2;
	u[0].mtime_ns = NOW + 30;
	u[1].old_version = 1;		/* b is at 2 */
	u[1].head = 25;
	u[1].version = 3;
	assert_int_equal(nrs_meta_publish(f->m, u, 2, true), -ESTALE);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_int_equal(ra.head, 10);
	assert_int_equal(ra.version, 1);
	assert_int_equal(getattr_ok(f->m, sa).mtime_ns, NOW + 10);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &rb), 0);
	assert_int_equal(rb.head, 20);
	assert_int_equal(rb.version, 2);
	/* unknown stream */
	u[1].id = 999;
	assert_int_equal(nrs_meta_publish(f->m, &u[1], 1, false), -ESTALE);
	/* the right versions go through, durable or not */
	u[1].id = rb.id;
	u[1].old_version = 2;
	assert_int_equal(nrs_meta_publish(f->m, u, 2, true), 0);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_int_equal(ra.head, 15);
	assert_int_equal(ra.version, 2);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &rb), 0);
	assert_int_equal(rb.head, 25);
	assert_int_equal(rb.version, 3);
}

/* A single head published unsynced is its UPDATE in autocommit
 * (sqlite_stream.c): a lost CAS, and a COMMIT that fails
 * (meta.before_commit), change nothing; a lost answer after it
 * (meta.after_commit) leaves it done. */
static void test_publish_one(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row r;
	struct nrs_head_update u = { 0 };

	create_ok(f->m, ROOT, "s", &r);
	u.id = r.id;
	u.head = 5;
	u.version = 1;
	u.epoch = 0;
	u.last_lsn = 3;
	u.mtime_ns = NOW + 5;
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	/* the same CAS again: lost */
	u.head = 9;
	u.version = 2;
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), -ESTALE);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(r.head, 5);
	assert_int_equal(r.version, 1);
	u.old_version = 1;
	assert_int_equal(nrs_failpoint_parse("meta.before_commit=error:EIO@1"),
			 0);
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), -EIO);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(r.head, 5);
	assert_int_equal(nrs_failpoint_parse("meta.after_commit=error:EIO@1"),
			 0);
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), -EIO);
	assert_int_equal(nrs_failpoint_parse(""), 0);
	/* it was done: a retry finds the CAS taken */
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), -ESTALE);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(r.head, 9);
	assert_int_equal(r.version, 2);
	assert_int_equal(r.last_lsn, 3);
	assert_int_equal(r.mtime_ns, NOW + 5);
}

static void test_start_epoch(void **state)
{
	struct fx *f = *state;
	struct nrs_head_update u = { 0 };
	struct nrs_stream_row r;

	create_ok(f->m, ROOT, "s", &r);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 1), -EINVAL);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 0), 0);
	u.id = r.id;
	u.head = 100;
	u.version = 1;
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 40), 0);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 39), -EINVAL);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 101), -EINVAL);
	assert_int_equal(nrs_meta_set_start(f->m, r.id, 100), 0);
	assert_int_equal(nrs_meta_set_start(f->m, 999, 0), -ENOENT);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(publish_epoch(f->m, &r, 5), 0);
	r.id = 999;
	assert_int_equal(publish_epoch(f->m, &r, 9), -ESTALE);
	r.id = u.id;
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(r.start, 100);
	assert_int_equal(r.epoch, 5);
	assert_int_equal(r.head, 100);
}

static int count_streams(void *ctx, const struct nrs_stream_row *s)
{
	uint64_t *v = ctx;

	v[++v[0]] = s->id;
	return 0;
}

static void test_unlinked_forget(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row r;
	struct nrs_attr a;
	uint64_t s, t, ids[8] = { 0 }, inos[8] = { 0 }, nd, ns;

	s = create_ok(f->m, ROOT, "s", &r);
	t = create_ok(f->m, ROOT, "t", NULL);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), -EBUSY);
	assert_int_equal(nrs_meta_forget_inode(f->m, ROOT), -EBUSY);
	assert_int_equal(nrs_meta_forget_inode(f->m, 999), -ENOENT);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s", NOW + 1, &a), 0);
	assert_int_equal(a.ino, s);
	assert_int_equal(a.nlink, 0);
	assert_int_equal(a.parent, 0);
	assert_int_equal(a.ctime_ns, NOW + 1);
	assert_int_equal(getattr_ok(f->m, ROOT).mtime_ns, NOW + 1);
	assert_int_equal(nrs_meta_lookup(f->m, ROOT, "s", &a), -ENOENT);
	assert_int_equal(nrs_meta_counts(f->m, &nd, &ns), 0);
	assert_int_equal(ns, 1);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_true(r.unlinked);
	/* unlinked streams are still listed, id ascending */
	assert_int_equal(nrs_meta_stream_foreach(f->m, count_streams, ids), 0);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 1);
	assert_int_equal(ids[2], 2);
	/* they survive a restart (a crash with open handles) */
	reopen(f);
	assert_int_equal(nrs_meta_unlinked_foreach(f->m, collect_ino, inos), 0);
	assert_int_equal(inos[0], 1);
	assert_int_equal(inos[1], s);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), 0);
	assert_int_equal(nrs_meta_getattr(f->m, s, &a), -ENOENT);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), -ENOENT);
	assert_int_equal(nrs_meta_forget_inode(f->m, s), -ENOENT);
	memset(inos, 0, sizeof(inos));
	assert_int_equal(nrs_meta_unlinked_foreach(f->m, collect_ino, inos), 0);
	assert_int_equal(inos[0], 0);
	assert_int_equal(getattr_ok(f->m, t).nlink, 1);
}

static int reenter(void *ctx, uint64_t ino)
{
	struct nrs_meta *m = ctx;
	struct nrs_attr a;

	assert_int_equal(nrs_meta_getattr(m, ino, &a), -EDEADLK);
	return 1;
}

static int fail_ino(void *ctx, uint64_t ino)
{
	(void)ctx, (void)ino;
	return -ENOMEM;
}

static int fail_stream(void *ctx, const struct nrs_stream_row *s)
{
	(void)ctx, (void)s;
	return -EIO;
}

static int fail_dirent(void *ctx, const char *name, const struct nrs_attr *a,
		       uint64_t cookie)
{
	(void)ctx, (void)name, (void)a, (void)cookie;
	return -EOVERFLOW;
}

static void test_callback_reentry(void **state)
{
	struct fx *f = *state;
	uint64_t s = create_ok(f->m, ROOT, "s", NULL);

	/* a negative callback result stops the listing and is its result */
	assert_int_equal(nrs_meta_readdir(f->m, ROOT, 0, fail_dirent, NULL),
			 -EOVERFLOW);
	assert_int_equal(nrs_meta_stream_foreach(f->m, fail_stream, NULL),
			 -EIO);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "s", NOW, NULL), 0);
	assert_int_equal(nrs_meta_unlinked_foreach(f->m, fail_ino, NULL),
			 -ENOMEM);
	assert_int_equal(nrs_meta_unlinked_foreach(f->m, reenter, f->m), 0);
	/* the store is still usable */
	assert_int_equal(nrs_meta_forget_inode(f->m, s), 0);
}

static void patch_byte(const char *path, off_t off, unsigned char v)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &v, 1, off), 1);
	close(fd);
}

static void test_newer_version_refused(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *m2 = NULL;

	nrs_meta_close(f->m);
	f->m = NULL;
	/* user_version: big-endian 32 bits at offset 60 of the header */
	patch_byte(f->path, 63, 0x7f);
	assert_int_equal(nrs_meta_open(f->path, &m2), -EPROTO);
	assert_null(m2);
	patch_byte(f->path, 63, NRS_TEST_SCHEMA_VERSION);
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
	assert_int_equal(getattr_ok(f->m, ROOT).ino, ROOT);
}

/* The page size in a database file's header: big-endian 16 bits at 16. */
static unsigned page_size_of(const char *path)
{
	unsigned char b[2];
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, b, 2, 16), 2);
	close(fd);
	return (unsigned)b[0] << 8 | b[1];
}

/* A new store has 1 KiB pages (sqlite_open.c: each publication commits
 * whole pages); one made with other pages keeps them and works. */
static void test_page_size(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row r;
	struct nrs_head_update u = { 0 };
	sqlite3 *db;

	create_ok(f->m, ROOT, "s", &r);
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(page_size_of(f->path), 1024);
	/* as made before: 4 KiB pages */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=DELETE;"
				      " PRAGMA page_size=4096; VACUUM;"
				      " PRAGMA journal_mode=WAL", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(page_size_of(f->path), 4096);
	reopen(f);
	u.id = r.id;
	u.head = 7;
	u.version = 1;
	u.last_lsn = 1;
	u.mtime_ns = NOW;
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	assert_int_equal(r.head, 7);
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(page_size_of(f->path), 4096);
	reopen(f);
}

static void test_not_a_database(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *m2 = NULL;
	char path[160], junk[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/junk.db", f->dir);
	memset(junk, 'j', sizeof(junk));
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	assert_int_equal(nrs_meta_open(path, &m2), -EUCLEAN);
	assert_null(m2);
	unlink(path);
	snprintf(path, sizeof(path), "%s/no/such/dir/x.db", f->dir);
	assert_int_equal(nrs_meta_open(path, &m2), -ENOENT);
	nrs_meta_close(NULL);
}

/* Several threads publishing and creating at once: every call serialised,
 * every CAS against the version it saw wins exactly once. */
struct worker {
	struct nrs_meta *m;
	uint64_t stream_id;
	int id, errors;
};

#define ROUNDS 200

static void *work(void *arg)
{
	struct worker *w = arg;
	struct nrs_head_update u = { 0 };
	char name[32];
	int i;

	u.id = w->stream_id;
	for (i = 0; i < ROUNDS; i++) {
		u.old_version = (uint64_t)i;
		u.version = (uint64_t)i + 1;
		u.head = (uint64_t)(i + 1) * 10;
		u.mtime_ns = NOW + i;
		if (nrs_meta_publish(w->m, &u, 1, false) != 0)
			w->errors++;
		if (i % 20 == 0) {
			snprintf(name, sizeof(name), "w%d-%d", w->id, i);
			if (nrs_meta_create(w->m, ROOT, name, 0600, 0, 0, NOW,
					    NULL, NULL) != 0)
				w->errors++;
		}
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct fx *f = *state;
	struct worker w[4];
	pthread_t th[4];
	struct nrs_stream_row r;
	uint64_t nd, ns;
	char name[8];
	int i;

	for (i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		create_ok(f->m, ROOT, name, &r);
		w[i].m = f->m;
		w[i].stream_id = r.id;
		w[i].id = i;
		w[i].errors = 0;
		assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
		assert_int_equal(nrs_meta_stream_get(f->m, w[i].stream_id, &r),
				 0);
		assert_int_equal(r.version, ROUNDS);
		assert_int_equal(r.head, ROUNDS * 10);
	}
	assert_int_equal(nrs_meta_counts(f->m, &nd, &ns), 0);
	assert_int_equal(nd, 1);
	assert_int_equal(ns, 4 + 4 * (ROUNDS / 20));
}

/* DESIGN.md 6: heads are published without a sync unless asked;
 * everything else is synced before the call returns. */
static void test_sync_only_when_durable(void **state)
{
	struct fx *f = *state;
	struct nrs_head_update u = { 0 };
	struct nrs_stream_row r;
	uint64_t s, i;
	int before;

	s = create_ok(f->m, ROOT, "s", &r);
	u.id = r.id;
	before = atomic_load(&sync_calls);
	for (i = 0; i < 10; i++) {
		u.old_version = i;
		u.version = u.head = i + 1;
		assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	}
	assert_int_equal(nrs_meta_getattr(f->m, s, &(struct nrs_attr){ 0 }), 0);
	assert_int_equal(atomic_load(&sync_calls), before);

	u.old_version = 10;
	u.version = 11;
#define SYNCS(call) do { \
		before = atomic_load(&sync_calls); \
		assert_int_equal(call, 0); \
		assert_true(atomic_load(&sync_calls) > before); \
	} while (0)
	SYNCS(nrs_meta_publish(f->m, &u, 1, true));
	SYNCS(nrs_meta_mkdir(f->m, ROOT, "d", 0700, 0, 0, NOW, NULL));
	SYNCS(nrs_meta_create(f->m, ROOT, "t", 0600, 0, 0, NOW, NULL, NULL));
	SYNCS(nrs_meta_rename(f->m, ROOT, "t", ROOT, "t2", 0, NOW, NULL));
	SYNCS(nrs_meta_xattr_set(f->m, s, "user.k", "v", 1, 0));
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
	SYNCS(publish_epoch(f->m, &r, 3));
	SYNCS(nrs_meta_set_start(f->m, r.id, 5));
	SYNCS(nrs_meta_unlink(f->m, ROOT, "t2", NOW, NULL));
#undef SYNCS
	/* and the connection is back to unsynced commits afterwards */
	u.old_version = 11;
	u.version = 12;
	before = atomic_load(&sync_calls);
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	assert_int_equal(atomic_load(&sync_calls), before);
}

static int count_inode(void *ctx, const struct nrs_attr *a)
{
	(void)a;
	(*(int *)ctx)++;
	return 0;
}

static int count_dirent(void *ctx, uint64_t parent, const void *name,
			size_t len, uint64_t ino)
{
	assert_int_equal(parent, ROOT);
	assert_int_equal(len, 1);
	assert_memory_equal(name, "d", 1);
	assert_true(ino >= NRS_FIRST_INO);
	(*(int *)ctx)++;
	return 0;
}

static int count_problem(void *ctx, const char *problem)
{
	(void)problem;
	(*(int *)ctx)++;
	return 0;
}

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY), out;
	ssize_t n;

	assert_true(in >= 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	close(out);
}

/* The offline tools' view: a read-only open writes nothing and lists
 * every row, also of a database a crash left with its -wal file. */
static void test_readonly_listing(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *ro = NULL;
	struct stat st0, st1;
	char p[200];
	int inodes = 0, dirents = 0, problems = 0;

	char cp[128], cpwal[128];

	mkdir_ok(f->m, ROOT, "d");
	snprintf(p, sizeof(p), "%s-wal", f->path);
	snprintf(cp, sizeof(cp), "%s/crash.db", f->dir);
	snprintf(cpwal, sizeof(cpwal), "%s/crash.db-wal", f->dir);
	copy_file(f->path, cp);		/* as a crash leaves it */
	copy_file(p, cpwal);
	assert_int_equal(stat(cpwal, &st0), 0);
	assert_true(st0.st_size > 0);
	assert_int_equal(nrs_meta_open_readonly(cp, &ro), 0);
	assert_int_equal(nrs_meta_inode_foreach(ro, count_inode, &inodes), 0);
	assert_int_equal(inodes, 2);
	nrs_meta_close(ro);
	assert_int_equal(stat(cpwal, &st1), 0);
	assert_int_equal(st0.st_size, st1.st_size);
	snprintf(p, sizeof(p), "%s-shm", cp);
	assert_int_equal(access(p, F_OK), -1);
	unlink(cp);
	unlink(cpwal);

	inodes = 0;
	nrs_meta_close(f->m);
	f->m = NULL;
	snprintf(p, sizeof(p), "%s/none.db", f->dir);
	assert_int_equal(nrs_meta_open_readonly(p, &ro), -ENOENT);
	assert_int_equal(stat(f->path, &st0), 0);
	assert_int_equal(nrs_meta_open_readonly(f->path, &ro), 0);
	assert_int_equal(nrs_meta_inode_foreach(ro, count_inode, &inodes), 0);
	assert_int_equal(inodes, 2);
	assert_int_equal(nrs_meta_dirent_foreach(ro, count_dirent, &dirents), 0);
	assert_int_equal(dirents, 1);
	assert_int_equal(nrs_meta_integrity_check(ro, count_problem, &problems),
			 0);
	assert_int_equal(problems, 0);
	assert_int_equal(nrs_meta_mkdir(ro, ROOT, "e", 0755, 0, 0, NOW, NULL),
			 -EROFS);
	nrs_meta_close(ro);
	assert_int_equal(stat(f->path, &st1), 0);
	assert_int_equal(st0.st_mtime, st1.st_mtime);
	assert_int_equal(st0.st_size, st1.st_size);
	snprintf(p, sizeof(p), "%s-shm", f->path);
	assert_int_equal(access(p, F_OK), -1);

	/* Another schema version is refused read-only too. */
	patch_byte(f->path, 63, 0x7f);
	assert_int_equal(nrs_meta_open_readonly(f->path, &ro), -EPROTO);
	patch_byte(f->path, 63, NRS_TEST_SCHEMA_VERSION);
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
}

static int collect_objs(void *ctx, const struct nrs_obj_row *o)
{
	struct nrs_obj_row *v = ctx;
	size_t n = 0;

	while (v[n].gen)
		n++;
	if (n >= 7)
		return -ENOSPC;
	v[n] = *o;
	return 0;
}

/* The state of generation gen, or 0 if there is no such row. */
static int obj_state(struct nrs_meta *m, uint64_t gen)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	int state = 0;

	assert_int_equal(nrs_meta_obj_rows(m, 0, 0, &v, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (v[i].gen == gen)
			state = v[i].state;
	free(v);
	return state;
}

static uint64_t obj_new(struct nrs_meta *m, bool publish)
{
	struct nrs_obj_row o = { .stream_id = 7, .start = 0, .end = 10,
				 .length = 50 };
	unsigned char sha[32] = { 1 };

	assert_int_equal(nrs_meta_obj_prepare(m, &o), 0);
	if (publish)
		assert_int_equal(nrs_meta_obj_publish(m, o.gen, sha), 0);
	return o.gen;
}

/*
 * A counting VFS: every call goes to SQLite's default VFS, and the syncs
 * of a "-wal" file are counted.  In WAL mode at synchronous=NORMAL a
 * commit writes its frames without a sync; at FULL (a TX_DURABLE
 * transaction, sqlite.c) the commit syncs the -wal file.  So a durable
 * operation is one that moves the count.
 */
struct cnt_file {
	sqlite3_file base;
	sqlite3_file *real;	/* right behind this struct */
	bool wal;
};

static sqlite3_vfs *cnt_real;
static sqlite3_vfs cnt_vfs;
static atomic_int cnt_wal_syncs;

#define REAL(f) (((struct cnt_file *)(f))->real)
static int c_close(sqlite3_file *f)
{ return REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK; }
static int c_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{ return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int c_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{ return REAL(f)->pMethods->xWrite(REAL(f), b, n, o); }
static int c_truncate(sqlite3_file *f, sqlite3_int64 n)
{ return REAL(f)->pMethods->xTruncate(REAL(f), n); }
static int c_sync(sqlite3_file *f, int flags)
{
	if (((struct cnt_file *)f)->wal)
		atomic_fetch_add(&cnt_wal_syncs, 1);
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int c_size(sqlite3_file *f, sqlite3_int64 *n)
{ return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int c_lock(sqlite3_file *f, int l)
{ return REAL(f)->pMethods->xLock(REAL(f), l); }
static int c_unlock(sqlite3_file *f, int l)
{ return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int c_reserved(sqlite3_file *f, int *r)
{ return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int c_fcntl(sqlite3_file *f, int op, void *a)
{ return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int c_sector(sqlite3_file *f)
{ return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int c_devchar(sqlite3_file *f)
{ return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int c_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{ return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p); }
static int c_shmlock(sqlite3_file *f, int off, int n, int flags)
{ return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags); }
static void c_shmbarrier(sqlite3_file *f)
{ REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int c_shmunmap(sqlite3_file *f, int del)
{ return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int c_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{ return REAL(f)->pMethods->xFetch(REAL(f), o, n, p); }
static int c_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{ return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static const sqlite3_io_methods cnt_io = {
	3, c_close, c_read, c_write, c_truncate, c_sync, c_size, c_lock,
	c_unlock, c_reserved, c_fcntl, c_sector, c_devchar, c_shmmap,
	c_shmlock, c_shmbarrier, c_shmunmap, c_fetch, c_unfetch,
};

static int c_open(sqlite3_vfs *v, const char *name, sqlite3_file *f,
		  int flags, int *out)
{
	struct cnt_file *c = (struct cnt_file *)f;
	size_t n = name ? strlen(name) : 0;
	int rc;

	(void)v;
	c->real = (sqlite3_file *)(c + 1);
	c->wal = n > 4 && strcmp(name + n - 4, "-wal") == 0;
	rc = cnt_real->xOpen(cnt_real, name, c->real, flags, out);
	c->base.pMethods = c->real->pMethods ? &cnt_io : NULL;
	return rc;
}

static void cnt_register(void)
{
	cnt_real = sqlite3_vfs_find(NULL);
	assert_non_null(cnt_real);
	cnt_vfs = *cnt_real;
	cnt_vfs.zName = "nrs-count";
	cnt_vfs.szOsFile = (int)sizeof(struct cnt_file) + cnt_real->szOsFile;
	cnt_vfs.xOpen = c_open;
	assert_int_equal(sqlite3_vfs_register(&cnt_vfs, 1), SQLITE_OK);
}

/*
 * DESIGN.md I7 (mat_object.c MZ4, walgc.c MZ5): an object generation's
 * intent and its publication are durable before they return, so that a
 * WAL segment reclaimed after them cannot outlive, across a power loss,
 * the row that says its bytes are in an object.  A head publication that
 * asks for no durability syncs nothing: the count tells the two apart.
 */
static void test_obj_durable(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row sr;
	struct nrs_head_update u = { 0 };
	struct nrs_obj_row o = { .stream_id = 7, .start = 0, .end = 10,
				 .length = 50 };
	unsigned char sha[32] = { 3 };
	int n;

	nrs_meta_close(f->m);
	cnt_register();
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
	create_ok(f->m, ROOT, "s", &sr);

	u.id = sr.id;
	u.head = 10;
	u.version = 1;
	u.mtime_ns = NOW;
	n = atomic_load(&cnt_wal_syncs);
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	assert_int_equal(atomic_load(&cnt_wal_syncs), n);

	assert_int_equal(nrs_meta_obj_prepare(f->m, &o), 0);
	assert_true(atomic_load(&cnt_wal_syncs) > n);
	n = atomic_load(&cnt_wal_syncs);
	assert_int_equal(nrs_meta_obj_publish(f->m, o.gen, sha), 0);
	assert_true(atomic_load(&cnt_wal_syncs) > n);

	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(sqlite3_vfs_unregister(&cnt_vfs), SQLITE_OK);
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
}

/*
 * objgen.c GS1, GS2: every line of the generation state machine, and
 * moves it does not list refused with -EINVAL and nothing changed.
 */
static void test_obj_transitions(void **state)
{
	struct fx *f = *state;
	unsigned char sha[32] = { 2 };
	uint64_t p, c, q, r, olds[1];
	static const struct { int from, to; } bad[] = {
		{ NRS_OBJ_PREPARED, NRS_OBJ_COMMITTED },	/* publish's */
		{ NRS_OBJ_PREPARED, NRS_OBJ_DRAINING },
		{ NRS_OBJ_PREPARED, NRS_OBJ_RETIRED },
		{ NRS_OBJ_PREPARED, NRS_OBJ_PREPARED },
		{ NRS_OBJ_COMMITTED, NRS_OBJ_RETIRED },	/* skips draining */
		{ NRS_OBJ_COMMITTED, NRS_OBJ_PREPARED },
		{ NRS_OBJ_COMMITTED, NRS_OBJ_QUARANTINED },
		{ NRS_OBJ_DRAINING, NRS_OBJ_COMMITTED },	/* back */
		{ NRS_OBJ_RETIRED, NRS_OBJ_DRAINING },	/* final */
		{ NRS_OBJ_QUARANTINED, NRS_OBJ_PREPARED },	/* final */
		{ 0, NRS_OBJ_PREPARED },
		{ NRS_OBJ_PREPARED, 9 },
		{ -1, NRS_OBJ_COMMITTED },
	};

	/* the legal lines: prepare, publish, replace, and set_state's three */
	p = obj_new(f->m, false);
	assert_int_equal(obj_state(f->m, p), NRS_OBJ_PREPARED);
	c = obj_new(f->m, true);
	assert_int_equal(obj_state(f->m, c), NRS_OBJ_COMMITTED);
	olds[0] = c;
	r = obj_new(f->m, false);
	assert_int_equal(nrs_meta_obj_replace(f->m, r, sha, olds, 1, 3), 0);
	assert_int_equal(obj_state(f->m, r), NRS_OBJ_COMMITTED);
	assert_int_equal(obj_state(f->m, c), NRS_OBJ_DRAINING);
	assert_int_equal(nrs_meta_obj_set_state(f->m, c, NRS_OBJ_DRAINING,
						NRS_OBJ_RETIRED, 4), 0);
	assert_int_equal(obj_state(f->m, c), NRS_OBJ_RETIRED);
	assert_int_equal(nrs_meta_obj_set_state(f->m, r, NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 5), 0);
	assert_int_equal(obj_state(f->m, r), NRS_OBJ_DRAINING);
	q = obj_new(f->m, false);
	assert_int_equal(nrs_meta_obj_set_state(f->m, q, NRS_OBJ_PREPARED,
						NRS_OBJ_QUARANTINED, 6), 0);
	assert_int_equal(obj_state(f->m, q), NRS_OBJ_QUARANTINED);

	/* GS2: a legal move from a state the row is not in */
	assert_int_equal(nrs_meta_obj_set_state(f->m, p, NRS_OBJ_DRAINING,
						NRS_OBJ_RETIRED, 7), -ESTALE);
	assert_int_equal(nrs_meta_obj_set_state(f->m, 999, NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 7), -ESTALE);

	/* GS1: each refused, whatever state the row is in */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t gens[] = { p, c, r, q };

		for (size_t g = 0; g < 4; g++)
			assert_int_equal(nrs_meta_obj_set_state(f->m, gens[g],
						bad[i].from, bad[i].to, 8),
					 -EINVAL);
	}
	assert_int_equal(obj_state(f->m, p), NRS_OBJ_PREPARED);
	assert_int_equal(obj_state(f->m, c), NRS_OBJ_RETIRED);
	assert_int_equal(obj_state(f->m, r), NRS_OBJ_DRAINING);
	assert_int_equal(obj_state(f->m, q), NRS_OBJ_QUARANTINED);
	assert_int_equal(nrs_meta_obj_transition(1, NRS_OBJ_COMMITTED,
						 NRS_OBJ_DRAINING), 0);
	assert_int_equal(nrs_meta_obj_transition(1, NRS_OBJ_RETIRED,
						 NRS_OBJ_COMMITTED), -EINVAL);
}

/* Object generations: intents, publication, states, per-stream listing. */
static void test_objects(void **state)
{
	struct fx *f = *state;
	struct nrs_obj_row a = { .stream_id = 3, .start = 0, .end = 100,
				 .length = 200, .ctime_ns = 5 };
	struct nrs_obj_row b = { .stream_id = 4, .start = 10, .end = 20,
				 .length = 90, .seg = 7,
				 .off = (1ULL << 40) + 64 };
	struct nrs_obj_row v[8];
	unsigned char sha[32];

	memset(sha, 0xab, sizeof(sha));
	assert_int_equal(nrs_meta_obj_prepare(f->m, &a), 0);
	assert_true(a.gen >= 1);
	assert_int_equal(a.state, NRS_OBJ_PREPARED);
	assert_int_equal(nrs_meta_obj_prepare(f->m, &b), 0);
	assert_true(b.gen > a.gen);	/* generations grow, never reused */
	b.end = b.start;
	assert_int_equal(nrs_meta_obj_prepare(f->m, &b), -EINVAL);

	assert_int_equal(nrs_meta_obj_publish(f->m, a.gen, sha), 0);
	assert_int_equal(nrs_meta_obj_publish(f->m, a.gen, sha), -ESTALE);
	assert_int_equal(nrs_meta_obj_set_state(f->m, b.gen, NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 9), -ESTALE);
	assert_int_equal(nrs_meta_obj_set_state(f->m, b.gen, NRS_OBJ_PREPARED,
						NRS_OBJ_QUARANTINED, 9), 0);

	reopen(f);	/* all of it is durable */
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 0, collect_objs, v), 0);
	assert_int_equal(v[0].gen, a.gen);
	assert_int_equal(v[0].state, NRS_OBJ_COMMITTED);
	assert_int_equal(v[0].stream_id, 3);
	assert_int_equal(v[0].end, 100);
	assert_int_equal(v[0].length, 200);
	assert_int_equal(v[0].ctime_ns, 5);
	assert_int_equal(v[0].mtime_ns, 5);
	assert_int_equal(v[1].mtime_ns, 9);
	assert_int_equal(v[0].seg, 0);	/* a copied object */
	assert_int_equal(v[0].off, 0);
	assert_int_equal(v[1].seg, 7);	/* an adopted record: where it is */
	assert_int_equal(v[1].off, (1ULL << 40) + 64);
	assert_memory_equal(v[0].sha256, sha, sizeof(sha));
	assert_int_equal(v[1].state, NRS_OBJ_QUARANTINED);
	assert_int_equal(v[2].gen, 0);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 4, collect_objs, v), 0);
	assert_int_equal(v[0].gen, b.gen);
	assert_int_equal(v[1].gen, 0);

	assert_int_equal(nrs_meta_obj_delete(f->m, b.gen), 0);
	assert_int_equal(nrs_meta_obj_delete(f->m, b.gen), 0);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 4, collect_objs, v), 0);
	assert_int_equal(v[0].gen, 0);
	/* a new intent never gets a deleted generation back */
	b.end = 30;
	assert_int_equal(nrs_meta_obj_prepare(f->m, &b), 0);
	assert_true(b.gen > a.gen + 1);
}

/* The _n forms: all the rows in one transaction, or none of them. */
static void test_obj_many(void **state)
{
	struct fx *f = *state;
	struct nrs_obj_row r[3] = {
		{ .stream_id = 1, .start = 0, .end = 10, .seg = 2, .off = 64 },
		{ .stream_id = 1, .start = 10, .end = 20, .seg = 2, .off = 128 },
		{ .stream_id = 1, .start = 20, .end = 20 },	/* empty */
	};
	struct nrs_obj_row v[8];

	assert_int_equal(nrs_meta_obj_prepare_n(f->m, r, 3), -EINVAL);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 0, collect_objs, v), 0);
	assert_int_equal(v[0].gen, 0);			/* none recorded */
	assert_int_equal(nrs_meta_obj_prepare_n(f->m, r, 2), 0);
	assert_true(r[1].gen > r[0].gen);
	assert_int_equal(r[1].state, NRS_OBJ_PREPARED);
	assert_int_equal(nrs_meta_obj_publish(f->m, r[1].gen, r[1].sha256), 0);
	assert_int_equal(nrs_meta_obj_publish_n(f->m, r, 2), -ESTALE);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 0, collect_objs, v), 0);
	assert_int_equal(v[0].state, NRS_OBJ_PREPARED);	/* not moved */
	assert_int_equal(nrs_meta_obj_set_state(f->m, r[1].gen,
						NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 3), 0);
	r[1].gen = 0;
	assert_int_equal(nrs_meta_obj_prepare_n(f->m, &r[1], 1), 0);
	assert_int_equal(nrs_meta_obj_publish_n(f->m, r, 2), 0);
	reopen(f);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 0, collect_objs, v), 0);
	assert_int_equal(v[0].state, NRS_OBJ_COMMITTED);
	assert_int_equal(v[2].state, NRS_OBJ_COMMITTED);
	assert_int_equal(v[2].off, 128);
}

/* nrs_meta_obj_rows: by stream, by state, both, neither; gen ascending. */
static void test_obj_rows(void **state)
{
	struct fx *f = *state;
	struct nrs_obj_row r[5], *v = NULL;
	unsigned char sha[32] = { 0 };
	size_t n = 99;

	assert_int_equal(nrs_meta_obj_rows(f->m, 0, 0, &v, &n), 0);
	assert_null(v);
	assert_int_equal(n, 0);
	for (int i = 0; i < 5; i++) {
		r[i] = (struct nrs_obj_row){ .stream_id = 1 + (uint64_t)i % 2,
					     .start = (uint64_t)i * 10,
					     .end = (uint64_t)i * 10 + 10,
					     .length = 100 };
		assert_int_equal(nrs_meta_obj_prepare(f->m, &r[i]), 0);
	}
	/* stream 1: r0 r2 r4; stream 2: r1 r3; r1 and r2 committed */
	assert_int_equal(nrs_meta_obj_publish(f->m, r[1].gen, sha), 0);
	assert_int_equal(nrs_meta_obj_publish(f->m, r[2].gen, sha), 0);

	assert_int_equal(nrs_meta_obj_rows(f->m, 0, 0, &v, &n), 0);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(v[i].gen, r[i].gen);
	free(v);
	assert_int_equal(nrs_meta_obj_rows(f->m, 0, NRS_OBJ_PREPARED, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].gen, r[0].gen);
	assert_int_equal(v[1].gen, r[3].gen);
	assert_int_equal(v[2].gen, r[4].gen);
	free(v);
	assert_int_equal(nrs_meta_obj_rows(f->m, 1, 0, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[1].gen, r[2].gen);
	free(v);
	assert_int_equal(nrs_meta_obj_rows(f->m, 2, NRS_OBJ_COMMITTED, &v, &n),
			 0);
	assert_int_equal(n, 1);
	assert_int_equal(v[0].gen, r[1].gen);
	assert_int_equal(v[0].state, NRS_OBJ_COMMITTED);
	free(v);
	v = NULL;
	assert_int_equal(nrs_meta_obj_rows(f->m, 3, 0, &v, &n), 0);
	assert_int_equal(n, 0);
	free(v);
}

/* A schema 2 database (no objects table, no metalog) is upgraded in
 * place. */
static void test_upgrade_from_2(void **state)
{
	struct fx *f = *state;
	struct nrs_obj_row a = { .stream_id = 1, .start = 0, .end = 1 };
	uint64_t d;
	sqlite3 *db;

	d = mkdir_ok(f->m, ROOT, "kept");
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "DROP TABLE objects;"
				      " DROP TABLE metalog;"
				      " PRAGMA user_version = 2;", NULL, NULL,
				      NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
	{
		struct nrs_attr la;

		assert_int_equal(nrs_meta_lookup(f->m, ROOT, "kept", &la), 0);
		assert_int_equal(la.ino, d);
	}
	assert_int_equal(nrs_meta_obj_prepare(f->m, &a), 0);
	reopen(f);
	assert_int_equal(nrs_meta_obj_prepare(f->m, &a), 0);
}


/* ---- row checksums and the schema upgrade (sqlite_crc.c CK1-CK4) ------- */

/* Run sql on the closed store's file with SQLite itself; returns the
 * first column of the first row as an integer (0 if none). */
static int64_t sql(struct fx *f, const char *fmt, ...)
{
	char text[512];
	sqlite3 *db = NULL;
	sqlite3_stmt *s;
	int64_t v = 0;
	const char *tail;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	for (tail = text; *tail;) {
		assert_int_equal(sqlite3_prepare_v2(db, tail, -1, &s, &tail),
				 SQLITE_OK);
		if (!s)
			break;
		while ((rc = sqlite3_step(s)) == SQLITE_ROW)
			v = sqlite3_column_int64(s, 0);
		assert_int_equal(rc, SQLITE_DONE);
		sqlite3_finalize(s);
	}
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	return v;
}

static void close_store(struct fx *f)
{
	nrs_meta_close(f->m);
	f->m = NULL;
}

/* The checksum as the SCHEMA comment defines it, computed here anew. */
static uint32_t expected_crc(const struct nrs_stream_row *r)
{
	uint64_t v[9] = { r->id, r->ino, r->head, r->version, r->start,
			  r->epoch, r->last_lsn, (uint64_t)r->profile,
			  r->unlinked };
	unsigned char buf[72];

	for (int i = 0; i < 9; i++)
		for (int b = 0; b < 8; b++)
			buf[8 * i + b] = (unsigned char)(v[i] >> (8 * b));
	return nrs_crc32c(0, buf, sizeof(buf));
}

struct seen {
	uint64_t ids[4];
	bool corrupt[4];
	int n;
};

static int see_stream(void *ctx, const struct nrs_stream_row *r)
{
	struct seen *s = ctx;

	assert_true(s->n < 4);
	s->ids[s->n] = r->id;
	s->corrupt[s->n++] = r->corrupt;
	return 0;
}

/* Two streams, a published; returns a's inode. */
static uint64_t two_streams(struct fx *f, struct nrs_stream_row *ra,
			    struct nrs_stream_row *rb)
{
	uint64_t sa = create_ok(f->m, ROOT, "a", ra);
	struct nrs_head_update u = {
		.id = ra->id, .head = 12288, .version = 3, .epoch = 2,
		.last_lsn = 7, .mtime_ns = NOW + 1,
	};

	create_ok(f->m, ROOT, "b", rb);
	assert_int_equal(nrs_meta_publish(f->m, &u, 1, false), 0);
	assert_int_equal(nrs_meta_set_start(f->m, ra->id, 4096), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, ra->id, ra), 0);
	return sa;
}

/* Every statement that writes a covered column leaves the checksum the
 * SCHEMA comment defines. */
static void test_row_crc_format(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row ra, rb;
	uint64_t sa = two_streams(f, &ra, &rb);

	assert_int_equal(publish_epoch(f->m, &ra, 9), 0);
	assert_int_equal(nrs_meta_set_profile(f->m, getattr_ok(f->m, sa).ino,
					      NRS_PROFILE_OBJECT_WAL), 0);
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "b", NOW, NULL), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &rb), 0);
	assert_false(ra.corrupt);
	assert_int_equal(ra.epoch, 9);
	assert_true(rb.unlinked);
	close_store(f);
	assert_int_equal(sql(f, "SELECT crc FROM streams WHERE id = %llu",
			     (unsigned long long)ra.id), expected_crc(&ra));
	assert_int_equal(sql(f, "SELECT crc FROM streams WHERE id = %llu",
			     (unsigned long long)rb.id), expected_crc(&rb));
	/* mtime_ns is not covered */
	sql(f, "UPDATE streams SET mtime_ns = 5 WHERE id = %llu",
	    (unsigned long long)ra.id);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &ra), 0);
	assert_int_equal(ra.mtime_ns, 5);
}

/* A changed value of any covered column, or of crc, is -EUCLEAN for that
 * stream alone; putting it back heals it. */
static void test_row_crc_each_column(void **state)
{
	static const char *const cols[] = {
		"ino", "head", "version", "start", "epoch", "last_lsn",
		"profile", "unlinked", "crc",
	};
	struct fx *f = *state;
	struct nrs_stream_row ra, rb, r;
	struct seen seen;

	two_streams(f, &ra, &rb);
	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
		close_store(f);
		sql(f, "UPDATE streams SET %s = %s + 16 WHERE id = %llu",
		    cols[i], cols[i], (unsigned long long)ra.id);
		reopen(f);
		assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &r), -EUCLEAN);
		assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &r), 0);
		memset(&seen, 0, sizeof(seen));
		assert_int_equal(nrs_meta_stream_foreach(f->m, see_stream,
							 &seen), 0);
		assert_int_equal(seen.n, 2);
		assert_int_equal(seen.ids[0], ra.id);
		assert_true(seen.corrupt[0]);
		assert_false(seen.corrupt[1]);
		close_store(f);
		sql(f, "UPDATE streams SET %s = %s - 16 WHERE id = %llu",
		    cols[i], cols[i], (unsigned long long)ra.id);
		reopen(f);
		assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &r), 0);
		assert_memory_equal(&r, &ra, sizeof(r));
	}
	/* the id itself, and a value that is no longer an integer */
	close_store(f);
	sql(f, "UPDATE streams SET id = 77 WHERE id = %llu;"
	    "UPDATE streams SET head = 'x' WHERE id = %llu",
	    (unsigned long long)ra.id, (unsigned long long)rb.id);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, 77, &r), -EUCLEAN);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &r), -EUCLEAN);
}

/* CK2: nothing but unlink and forget changes a damaged row; the other
 * streams, also of the same batch, are not held back. */
static void test_row_crc_damaged_row(void **state)
{
	struct fx *f = *state;
	struct nrs_stream_row ra, rb, r;
	struct nrs_head_update u[2];
	struct seen seen = { 0 };
	uint64_t sa = two_streams(f, &ra, &rb);

	close_store(f);
	sql(f, "UPDATE streams SET head = 8192 WHERE id = %llu",
	    (unsigned long long)ra.id);
	reopen(f);
	memset(u, 0, sizeof(u));
	u[0].id = rb.id;
	u[0].head = 10;
	u[0].version = 1;
	u[1].id = ra.id;
	u[1].old_version = ra.version;
	u[1].head = ra.head + 10;
	u[1].version = ra.version + 1;
	assert_int_equal(nrs_meta_publish(f->m, u, 2, false), -EUCLEAN);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &r), 0);
	assert_int_equal(r.head, 0);		/* the batch is all or nothing */
	assert_int_equal(nrs_meta_publish(f->m, u, 1, false), 0);
	assert_int_equal(nrs_meta_set_start(f->m, ra.id, 8192), -EUCLEAN);
	assert_int_equal(publish_epoch(f->m, &ra, 99), -EUCLEAN);
	assert_int_equal(nrs_meta_set_profile(f->m, sa, NRS_PROFILE_LOCAL_WAL),
			 -EUCLEAN);
	/* the name can go; the row stays damaged until it is forgotten */
	assert_int_equal(nrs_meta_unlink(f->m, ROOT, "a", NOW, NULL), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &r), -EUCLEAN);
	assert_int_equal(nrs_meta_stream_foreach(f->m, see_stream, &seen), 0);
	assert_true(seen.corrupt[0]);
	assert_int_equal(nrs_meta_forget_inode(f->m, sa), 0);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &r), -ENOENT);
	assert_int_equal(nrs_meta_stream_get(f->m, rb.id, &r), 0);
	assert_int_equal(r.head, 10);
}
/* Schema 4 (objects without seg and off) is upgraded in place: its rows
 * stay, copied objects (seg 0, off 0), and new rows carry both. */
static void test_upgrade_from_4(void **state)
{
	struct fx *f = *state;
	struct nrs_obj_row a = { .stream_id = 1, .start = 0, .end = 1 };
	struct nrs_obj_row b = { .stream_id = 2, .start = 5, .end = 9,
				 .seg = 3, .off = 4096 };
	struct nrs_obj_row v[4];

	assert_int_equal(nrs_meta_obj_prepare(f->m, &a), 0);
	close_store(f);
	sql(f, "ALTER TABLE objects DROP COLUMN seg;"
	    " ALTER TABLE objects DROP COLUMN off; PRAGMA user_version = 4");
	reopen(f);
	assert_int_equal(nrs_meta_obj_prepare(f->m, &b), 0);
	reopen(f);
	memset(v, 0, sizeof(v));
	assert_int_equal(nrs_meta_obj_foreach(f->m, 0, collect_objs, v), 0);
	assert_int_equal(v[0].gen, a.gen);
	assert_int_equal(v[0].seg, 0);
	assert_int_equal(v[0].off, 0);
	assert_int_equal(v[1].gen, b.gen);
	assert_int_equal(v[1].seg, 3);
	assert_int_equal(v[1].off, 4096);
	close_store(f);
	assert_int_equal(sql(f, "PRAGMA user_version"), NRS_TEST_SCHEMA_VERSION);
	reopen(f);
}

/* Schema 1 (no crc column) is upgraded by the first read-write open, in
 * one transaction; a read-only open refuses it. */
static void test_upgrade_from_1(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *ro = NULL;
	struct nrs_stream_row ra, rb, r;
	struct seen seen = { 0 };

	two_streams(f, &ra, &rb);
	close_store(f);
	sql(f, "ALTER TABLE streams DROP COLUMN crc; DROP TABLE objects;"
	    " DROP TABLE metalog; PRAGMA user_version = 1");
	assert_int_equal(sql(f, "SELECT count(*) FROM pragma_table_info("
			     "'streams') WHERE name = 'crc'"), 0);
	assert_int_equal(nrs_meta_open_readonly(f->path, &ro), -EPROTO);
	assert_null(ro);
	reopen(f);
	assert_int_equal(nrs_meta_stream_get(f->m, ra.id, &r), 0);
	assert_memory_equal(&r, &ra, sizeof(r));
	assert_int_equal(nrs_meta_stream_foreach(f->m, see_stream, &seen), 0);
	assert_int_equal(seen.n, 2);
	assert_false(seen.corrupt[0] || seen.corrupt[1]);
	close_store(f);
	assert_int_equal(sql(f, "PRAGMA user_version"), NRS_TEST_SCHEMA_VERSION);
	assert_int_equal(sql(f, "SELECT crc FROM streams WHERE id = %llu",
			     (unsigned long long)ra.id), expected_crc(&ra));
	/* and the upgraded store works as a new one */
	assert_int_equal(nrs_meta_open_readonly(f->path, &ro), 0);
	nrs_meta_close(ro);
	reopen(f);
	assert_int_equal(publish_epoch(f->m, &rb, 4), 0);
	create_ok(f->m, ROOT, "c", &r);
	assert_int_equal(nrs_meta_stream_get(f->m, r.id, &r), 0);
}

/* CK4: damage to the structure (here a dirents page) refuses the open. */
static void test_quick_check_refuses(void **state)
{
	struct fx *f = *state;
	int64_t page, size;
	char name[8];

	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		mkdir_ok(f->m, ROOT, name);
	}
	close_store(f);
	size = sql(f, "PRAGMA page_size");
	page = sql(f, "SELECT rootpage FROM sqlite_master"
		   " WHERE name = 'dirents'");
	assert_true(page > 1);
	patch_byte(f->path, (off_t)((page - 1) * size), 0x42);	/* type */
	assert_int_equal(nrs_meta_open(f->path, &f->m), -EUCLEAN);
	assert_null(f->m);
}

static mode_t mode_of(const char *path, const char *sfx)
{
	char p[200];
	struct stat st;

	snprintf(p, sizeof(p), "%s%s", path, sfx);
	assert_int_equal(stat(p, &st), 0);
	return st.st_mode & 07777;
}

/* fileio.h DM1: the database and its -wal are 0600 whatever the umask
 * (exclusive locking: no -shm); one an older version left 0644 is made
 * 0600. */
static void test_file_modes(void **state)
{
	struct fx *f = *state;
	mode_t old = umask(0);
	char path[160];

	snprintf(path, sizeof(path), "%s/m0.db", f->dir);
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(nrs_meta_open(path, &f->m), 0);
	mkdir_ok(f->m, NRS_ROOT_INO, "d");	/* the -wal gets a frame */
	assert_int_equal(mode_of(path, ""), 0600);
	assert_int_equal(mode_of(path, "-wal"), 0600);
	nrs_meta_close(f->m);
	f->m = NULL;
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(nrs_meta_open(path, &f->m), 0);
	assert_int_equal(mode_of(path, ""), 0600);
	umask(old);
	nrs_meta_close(f->m);
	f->m = NULL;
	for (int i = 0; i < 3; i++) {
		char p[200];

		snprintf(p, sizeof(p), "%s%s", path,
			 i == 0 ? "" : i == 1 ? "-wal" : "-shm");
		unlink(p);
	}
	assert_int_equal(nrs_meta_open(f->path, &f->m), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_creates_root),
		T(test_mkdir_create_lookup),
		T(test_errors),
		T(test_name_bytes),
		T(test_persistence),
		T(test_ids_never_reused),
		T(test_setattr),
		T(test_setattr_killpriv),
		T(test_rename_basic),
		T(test_rename_noop_flags),
		T(test_rename_into_subtree),
		T(test_rename_type_conflicts),
		T(test_rename_replace_stream),
		T(test_readdir_cookies),
		T(test_dir_nlink),
		T(test_xattrs),
		T(test_xattr_bounds),
		T(test_space_reserve),
		T(test_profile_inheritance),
		T(test_retention),
		T(test_retention_memo),
		T(test_publish_cas),
		T(test_publish_one),
		T(test_start_epoch),
		T(test_unlinked_forget),
		T(test_callback_reentry),
		T(test_newer_version_refused),
		T(test_not_a_database),
		T(test_page_size),
		T(test_file_modes),
		T(test_threads),
		T(test_sync_only_when_durable),
		T(test_readonly_listing),
		T(test_objects),
		T(test_obj_transitions),
		T(test_obj_durable),
		T(test_obj_rows),
		T(test_upgrade_from_2),
		T(test_row_crc_format),
		T(test_row_crc_each_column),
		T(test_row_crc_damaged_row),
		T(test_upgrade_from_1),
		T(test_upgrade_from_4),
		T(test_obj_many),
		T(test_quick_check_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
