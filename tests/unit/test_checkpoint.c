/*
 * test_checkpoint.c - unit tests of metadata checkpoints in the object
 * store: the formats (bg/ckptfmt.c), the store side (bg/checkpoint.c
 * KP1-KP7) and the service (bg/ckpt_service.c KC1, KC2), through the
 * services seam with bgfake's store: a real SQLite store and a directory
 * object store behind switches that make it fail as a remote one does.
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
#include <unistd.h>

#include "bg/checkpoint.h"
#include "bg/ckptfmt.h"
#include "bgfake.h"
#include "fixture.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "util/metrics.h"

#define NOW	1000000000000LL

/* ---- helpers ------------------------------------------------------------ */

static void key_of(uint64_t seq, char key[NRS_OBJKEY_MAX])
{
	assert_true(nrs_ckptfmt_key(key, seq) > 0);
}

/* The namespace the tests restore: /kafka/orders with an xattr. */
static void build_ns(struct nrs_meta *m, const char *name)
{
	struct nrs_attr d, s;
	struct nrs_stream_row r;

	if (nrs_meta_lookup(m, NRS_ROOT_INO, "kafka", &d) != 0)
		assert_int_equal(nrs_meta_mkdir(m, NRS_ROOT_INO, "kafka", 0750,
						1, 2, NOW, &d), 0);
	assert_int_equal(nrs_meta_create(m, d.ino, name, 0640, 1, 2, NOW, &s,
					 &r), 0);
	assert_int_equal(nrs_meta_xattr_set(m, s.ino, "user.owner", name,
					    strlen(name), 0), 0);
}

static bool has_stream(struct nrs_meta *m, const char *name)
{
	struct nrs_attr d, s;
	char v[64];
	ssize_t n;

	if (nrs_meta_lookup(m, NRS_ROOT_INO, "kafka", &d) != 0 ||
	    nrs_meta_lookup(m, d.ino, name, &s) != 0)
		return false;
	n = nrs_meta_xattr_get(m, s.ino, "user.owner", v, sizeof(v));
	return n == (ssize_t)strlen(name) && memcmp(v, name, (size_t)n) == 0;
}

/* Write checkpoint seq of f's store as it is now, proven; and the pointer
 * when ptr.  covered: its header's. */
static void write_ckpt(struct bgfake *f, uint64_t seq, uint64_t covered,
		       bool ptr)
{
	struct nrs_ckpt_hdr h = { .seq = seq, .covered = covered, .epoch = 0,
				  .created_ns = NOW };
	unsigned char sha[NRS_SHA256_LEN];
	char key[NRS_OBJKEY_MAX];
	void *db = NULL, *obj = NULL;
	size_t len = 0, olen = 0;

	assert_int_equal(nrs_meta_snapshot(f->meta, &db, &len, NULL), 0);
	h.db_len = len;
	assert_int_equal(nrs_ckptfmt_build(&h, db, &obj, &olen), 0);
	assert_int_equal(nrs_objfmt_digest(obj, olen, sha, NULL), 0);
	key_of(seq, key);
	assert_int_equal(nrs_ckpt_put_proven(f->store.real, key, obj, olen,
					     NULL, sha), 0);
	if (ptr) {
		struct nrs_ckpt_ptr p = { .seq = seq, .length = olen };

		memcpy(p.sha256, sha, sizeof(sha));
		assert_int_equal(nrs_ckpt_put_pointer(f->store.real, &p), 0);
	}
	free(obj);
	free(db);
}

/* Restore into a fresh directory under f's and open it. */
static struct nrs_meta *restore(struct bgfake *f, const char *sub,
				uint64_t *covered)
{
	char dir[4200], path[4300];
	struct nrs_meta *m;

	snprintf(dir, sizeof(dir), "%s/%s", f->dir, sub);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(nrs_ckpt_restore(&f->store.s, dir, covered, NULL), 0);
	snprintf(path, sizeof(path), "%s/meta.db", dir);
	assert_int_equal(nrs_meta_open(path, &m), 0);
	return m;
}

/* Replace the object under key by buf (the SHA-256 of sha_of, or of buf
 * when sha_of is NULL), behind the store's back. */
static void overwrite(struct bgfake *f, const char *key, const void *buf,
		      size_t len, const void *sha_of, size_t sha_len)
{
	unsigned char sha[NRS_SHA256_LEN];

	assert_int_equal(nrs_objfmt_digest(sha_of ? sha_of : buf,
					   sha_of ? sha_len : len, sha, NULL),
			 0);
	assert_int_equal(nrs_obj_del(f->store.real, key), 0);
	assert_int_equal(nrs_obj_put(f->store.real, key, buf, len, NULL, sha),
			 0);
}

/* The object under key, whole (malloc'd). */
static void *fetch(struct bgfake *f, const char *key, size_t *len)
{
	struct nrs_obj_meta m;
	void *buf;

	assert_int_equal(nrs_obj_head(f->store.real, key, &m), 0);
	buf = malloc((size_t)m.length);
	assert_non_null(buf);
	assert_int_equal(nrs_obj_get(f->store.real, key, 0, buf,
				     (size_t)m.length), (ssize_t)m.length);
	*len = (size_t)m.length;
	return buf;
}

/* ---- the format ---------------------------------------------------------- */

static void test_format(void **state)
{
	struct nrs_ckpt_hdr h = { .seq = 7, .covered = 99, .epoch = 3,
				  .db_len = 3 * NRS_CKPT_BLOCK + 10,
				  .created_ns = NOW }, r;
	struct nrs_ckpt_ptr p = { .seq = 5, .length = 1234 }, q;
	unsigned char pb[NRS_CKPT_PTR_LEN];
	unsigned char *db = malloc((size_t)h.db_len), *obj;
	size_t len = 0, hl;
	const void *d;
	char key[NRS_OBJKEY_MAX];

	(void)state;
	for (size_t i = 0; i < h.db_len; i++)
		db[i] = (unsigned char)(i * 7);
	assert_int_equal(nrs_ckptfmt_key(key, 0x1f), 21);
	assert_string_equal(key, "ckpt/000000000000001f");
	assert_int_equal(nrs_ckptfmt_key(key, 0), -EINVAL);
	assert_int_equal(nrs_ckptfmt_build(&h, db, (void **)&obj, &len), 0);
	assert_int_equal(len, nrs_ckptfmt_len(h.db_len));
	assert_int_equal(nrs_ckptfmt_parse(obj, len, &r, &d), 0);
	assert_int_equal(r.seq, 7);
	assert_int_equal(r.covered, 99);
	assert_int_equal(r.epoch, 3);
	assert_int_equal(r.db_len, h.db_len);
	assert_memory_equal(d, db, (size_t)h.db_len);
	hl = len - (size_t)h.db_len;
	/* every part is checked: header, table, each block, the length */
	{
		const size_t at[] = { 0, 20, 67, 68, 72, hl - 1, hl,
				      hl + NRS_CKPT_BLOCK + 3, len - 1 };

		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			obj[at[i]] ^= 0x10;
			assert_int_equal(nrs_ckptfmt_parse(obj, len, &r, &d),
					 -EUCLEAN);
			obj[at[i]] ^= 0x10;
		}
	}
	assert_int_equal(nrs_ckptfmt_parse(obj, len - 1, &r, &d), -EUCLEAN);
	assert_int_equal(nrs_ckptfmt_parse(obj, 10, &r, &d), -EUCLEAN);
	free(obj);
	h.seq = 0;
	assert_int_equal(nrs_ckptfmt_build(&h, db, (void **)&obj, &len),
			 -EINVAL);
	free(db);
	/* the pointer */
	memset(p.sha256, 0xab, sizeof(p.sha256));
	nrs_ckptfmt_ptr_encode(pb, &p);
	assert_int_equal(nrs_ckptfmt_ptr_decode(pb, sizeof(pb), &q), 0);
	assert_int_equal(q.seq, 5);
	assert_int_equal(q.length, 1234);
	assert_memory_equal(q.sha256, p.sha256, sizeof(q.sha256));
	pb[40] ^= 1;
	assert_int_equal(nrs_ckptfmt_ptr_decode(pb, sizeof(pb), &q), -EUCLEAN);
	pb[40] ^= 1;
	assert_int_equal(nrs_ckptfmt_ptr_decode(pb, sizeof(pb) - 1, &q),
			 -EUCLEAN);
}

/* ---- the store side ---------------------------------------------------- */

/* Round trip: streams, xattrs, namespace; covered comes back. */
static void test_restore_round_trip(void **state)
{
	struct bgfake f;
	struct nrs_meta *m;
	uint64_t covered = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	assert_int_equal(nrs_ckpt_restore(&f.store.s, f.dir, NULL, NULL),
			 -ENOENT);
	build_ns(f.meta, "orders");
	write_ckpt(&f, 1, 41, true);
	build_ns(f.meta, "later");
	m = restore(&f, "r1", &covered);
	assert_int_equal(covered, 41);
	assert_true(has_stream(m, "orders"));
	assert_false(has_stream(m, "later"));
	nrs_meta_close(m);
	/* SN2: never over a database */
	assert_int_equal(nrs_ckpt_restore(&f.store.s, f.dir, NULL, NULL),
			 -EEXIST);
	bg_close(&f);
}

/* KP4: the pointer lags (a crash between a PUT and the pointer): the
 * newest is found by HEADs past it. */
static void test_pointer_lag(void **state)
{
	struct bgfake f;
	struct nrs_meta *m;
	uint64_t top = 0, ptr = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, &ptr), 0);
	assert_int_equal(top, 0);
	build_ns(f.meta, "a");
	write_ckpt(&f, 1, 1, true);
	build_ns(f.meta, "b");
	write_ckpt(&f, 2, 2, false);
	build_ns(f.meta, "c");
	write_ckpt(&f, 3, 3, false);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, &ptr), 0);
	assert_int_equal(top, 3);
	assert_int_equal(ptr, 1);
	m = restore(&f, "r", NULL);
	assert_true(has_stream(m, "c"));
	nrs_meta_close(m);
	bg_close(&f);
}

/* KP4: a damaged pointer stops the find: never guess. */
static void test_pointer_damaged(void **state)
{
	struct bgfake f;
	uint64_t top = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	write_ckpt(&f, 1, 1, true);
	overwrite(&f, NRS_CKPT_LATEST_KEY, "garbage", 7, NULL, 0);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, NULL), -EUCLEAN);
	assert_int_equal(nrs_ckpt_restore(&f.store.s, f.dir, NULL, NULL),
			 -EUCLEAN);
	bg_close(&f);
}

/* KP5, KP6: a newest checkpoint whose bytes fail their SHA-256, or whose
 * block fails its CRC (the SHA-256 matching the damaged bytes), is
 * refused and the one before it used; none usable is -EUCLEAN. */
static void test_damaged_newest(void **state)
{
	struct bgfake f;
	struct nrs_meta *m;
	char key[NRS_OBJKEY_MAX];
	unsigned char *buf, *bad;
	uint64_t covered = 0;
	size_t len;

	(void)state;
	for (int variant = 0; variant < 2; variant++) {
		bg_open(&f, "test_checkpoint", false);
		build_ns(f.meta, "old");
		write_ckpt(&f, 1, 10, true);
		build_ns(f.meta, "new");
		write_ckpt(&f, 2, 20, true);
		key_of(2, key);
		buf = fetch(&f, key, &len);
		bad = malloc(len);
		assert_non_null(bad);
		memcpy(bad, buf, len);
		bad[len - 100] ^= 0x01;	/* a database byte */
		if (variant == 0)	/* good bytes, another SHA-256 */
			overwrite(&f, key, buf, len, bad, len);
		else			/* a SHA-256 that matches: the CRC */
			overwrite(&f, key, bad, len, NULL, 0);
		m = restore(&f, "r", &covered);
		assert_int_equal(covered, 10);
		assert_true(has_stream(m, "old"));
		assert_false(has_stream(m, "new"));
		nrs_meta_close(m);
		/* the one before damaged too: nothing usable */
		free(buf);
		key_of(1, key);
		buf = fetch(&f, key, &len);
		buf[80] ^= 0x01;
		overwrite(&f, key, buf, len, NULL, 0);
		assert_int_equal(nrs_ckpt_restore(&f.store.s, f.dir, NULL,
						  NULL), -EUCLEAN);
		free(buf);
		free(bad);
		bg_close(&f);
	}
}

/* ---- the service -------------------------------------------------------- */

struct waitc {
	struct bgfake *f;
	uint64_t n;
};

static bool taken_n(void *ctx)
{
	struct waitc *w = ctx;

	return nrs_counter(&w->f->metrics.ckpt_taken) >= w->n;
}

static bool deleted_n(void *ctx)
{
	struct waitc *w = ctx;

	return nrs_counter(&w->f->metrics.ckpt_deleted) >= w->n;
}

static uint64_t covered_cb(void *ctx)
{
	return *(uint64_t *)ctx;
}

static struct nrs_ckpt *svc_start_every(struct bgfake *f, uint64_t *covered,
					uint64_t grace_ms, uint64_t every_ms)
{
	struct nrs_ckpt_opts o = {
		.interval_ms = every_ms, .grace_ms = grace_ms,
		.covered = covered ? covered_cb : NULL, .ctx = covered,
	};
	struct nrs_ckpt *k = NULL;

	assert_int_equal(nrs_ckpt_start(&f->svc, &o, &k), 0);
	assert_non_null(k);
	return k;
}

static struct nrs_ckpt *svc_start(struct bgfake *f, uint64_t *covered,
				  uint64_t grace_ms)
{
	return svc_start_every(f, covered, grace_ms, 20);
}

/* The service writes checkpoints, then the pointer; an idle store is not
 * written again; KC1: the covered position is the callback's. */
static void test_service(void **state)
{
	struct bgfake f;
	struct nrs_ckpt *k;
	struct nrs_meta *m;
	struct waitc w = { &f, 1 };
	uint64_t covered = 77, got = 0, top = 0, ptr = 0;
	char key[NRS_OBJKEY_MAX];

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	build_ns(f.meta, "orders");
	k = svc_start(&f, &covered, 3600000);
	assert_true(bg_wait(taken_n, &w));
	/* idle: skipped, not written again */
	while (nrs_counter(&f.metrics.ckpt_skipped) < 3)
		usleep(10000);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_taken), 1);
	covered = 78;
	build_ns(f.meta, "more");
	w.n = 2;
	assert_true(bg_wait(taken_n, &w));
	nrs_ckpt_stop(k);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_last_seq), 2);
	assert_true(nrs_counter(&f.metrics.ckpt_last_bytes) > 4096);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, &ptr), 0);
	assert_int_equal(top, 2);
	assert_int_equal(ptr, 2);
	key_of(2, key);
	assert_int_equal(bg_puts_of(&f, key), 1);
	m = restore(&f, "r", &got);
	assert_int_equal(got, 78);
	assert_true(has_stream(m, "more"));
	nrs_meta_close(m);
	bg_close(&f);
}

/* KP1 after a crash between the PUT and the pointer: a new service goes
 * on after the newest it finds, never writes other bytes under it. */
static void test_service_after_crash(void **state)
{
	struct bgfake f;
	struct nrs_ckpt *k;
	struct waitc w = { &f, 1 };
	char key[NRS_OBJKEY_MAX];
	uint64_t top = 0, ptr = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	write_ckpt(&f, 1, 0, true);
	build_ns(f.meta, "x");
	write_ckpt(&f, 2, 0, false);	/* the crash came before the pointer */
	k = svc_start(&f, NULL, 3600000);
	assert_true(bg_wait(taken_n, &w));
	usleep(200000);		/* KP7: ckpt/1 may go, not before the grace */
	nrs_ckpt_stop(k);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_deleted), 0);
	key_of(1, key);
	assert_true(bg_has(&f, key, NULL));
	key_of(2, key);
	assert_int_equal(bg_puts_of(&f, key), 0);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_last_seq), 3);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, &ptr), 0);
	assert_int_equal(top, 3);
	assert_int_equal(ptr, 3);
	bg_close(&f);
}

/* KC2, KP2: PUTs not proven are sent again, the same bytes under the
 * same key; other bytes under a key: quarantined, the next seq used. */
static void test_service_retry_quarantine(void **state)
{
	struct bgfake f;
	struct nrs_ckpt *k;
	struct waitc w = { &f, 1 };
	char key[NRS_OBJKEY_MAX];
	uint64_t top = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	f.store.drop = 3;	/* answered, not kept: HEAD finds none */
	k = svc_start_every(&f, NULL, 3600000, 3600000);
	nrs_ckpt_kick(k);	/* one, then only the retries (KC2) */
	assert_true(bg_wait(taken_n, &w));
	nrs_ckpt_stop(k);
	key_of(1, key);
	assert_int_equal(bg_puts_of(&f, key), 4);
	assert_true(nrs_counter(&f.metrics.ckpt_retries) >= 3);
	bg_close(&f);

	bg_open(&f, "test_checkpoint", false);
	f.store.lie_first = true;
	k = svc_start(&f, NULL, 3600000);
	assert_true(bg_wait(taken_n, &w));
	nrs_ckpt_stop(k);
	key_of(1, key);
	assert_int_equal(bg_puts_of(&f, key), 1);	/* never again */
	assert_int_equal(nrs_counter(&f.metrics.ckpt_quarantined), 1);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_last_seq), 2);
	assert_int_equal(nrs_ckpt_find(&f.store.s, &top, NULL), 0);
	assert_int_equal(top, 2);
	bg_close(&f);
}

/* KP7: the newest two are kept, older ones deleted after the grace
 * period; the newest is still found and restored. */
static void test_service_prunes(void **state)
{
	struct bgfake f;
	struct nrs_ckpt *k;
	struct nrs_meta *m;
	struct waitc w = { &f, 4 };
	char key[NRS_OBJKEY_MAX];
	uint64_t len;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	k = svc_start(&f, NULL, 1);
	for (int i = 0; i < 4; i++) {
		char name[16];
		struct waitc one = { &f, (uint64_t)i + 1 };

		snprintf(name, sizeof(name), "s%d", i);
		build_ns(f.meta, name);
		assert_true(bg_wait(taken_n, &one));
	}
	assert_true(bg_wait(taken_n, &w));
	w.n = 2;
	assert_true(bg_wait(deleted_n, &w));
	usleep(200000);		/* a third would have gone by now */
	nrs_ckpt_stop(k);
	for (uint64_t s = 1; s <= 4; s++) {
		key_of(s, key);
		assert_int_equal(bg_has(&f, key, &len), s >= 3);
	}
	m = restore(&f, "r", NULL);
	assert_true(has_stream(m, "s3"));
	nrs_meta_close(m);
	bg_close(&f);
}

/* KP7 after a burst: more checkpoints within one grace period than any
 * list would hold (the NS1 syncs of many namespace changes): every one
 * but the newest two is deleted in the end, none forgotten. */
static void test_service_prunes_burst(void **state)
{
	enum { N = 80 };
	struct bgfake f;
	struct nrs_ckpt *k;
	struct waitc w = { &f, N - 2 };
	char key[NRS_OBJKEY_MAX];
	uint64_t last;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	k = svc_start_every(&f, NULL, 1500, 1);
	for (int i = 0; i < N; i++) {
		char name[16];
		struct waitc one = { &f, (uint64_t)i + 1 };

		snprintf(name, sizeof(name), "b%d", i);
		build_ns(f.meta, name);
		nrs_ckpt_kick(k);	/* not a nap of IDLE_MS after a skip */
		assert_true(bg_wait(taken_n, &one));
	}
	assert_true(bg_wait(deleted_n, &w));
	nrs_ckpt_stop(k);
	last = nrs_counter(&f.metrics.ckpt_last_seq);
	assert_true(last >= N);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_deleted), last - 2);
	for (uint64_t s = 1; s <= last; s++) {
		key_of(s, key);
		assert_int_equal(bg_has(&f, key, NULL), s >= last - 1);
	}
	bg_close(&f);
}

/* The bytes trigger: no timer, checkpoint_bytes of object-WAL data. */
static void test_service_bytes(void **state)
{
	struct bgfake f;
	struct nrs_ckpt_opts o = { .bytes = 1000, .grace_ms = 1 };
	struct nrs_ckpt *k = NULL;
	struct waitc w = { &f, 1 };

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	assert_int_equal(nrs_ckpt_start(&f.svc, &(struct nrs_ckpt_opts){ 0 },
					&k), 0);
	assert_null(k);			/* both triggers off: no thread */
	nrs_ckpt_wal_bytes(NULL, 5);	/* NULL ok */
	assert_int_equal(nrs_ckpt_start(&f.svc, &o, &k), 0);
	nrs_ckpt_wal_bytes(k, 600);
	usleep(300000);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_taken), 0);
	nrs_ckpt_wal_bytes(k, 600);
	assert_true(bg_wait(taken_n, &w));
	nrs_ckpt_stop(k);
	bg_close(&f);
}

/* KC3: a sync returns only once a checkpoint whose snapshot began after
 * it is stored: each change made before a sync is in the store when the
 * sync returns, with no periodic checkpoint to help. */
static void test_service_sync(void **state)
{
	struct bgfake f;
	struct nrs_ckpt *k;
	struct nrs_meta *m;
	uint64_t got = 0;

	(void)state;
	bg_open(&f, "test_checkpoint", false);
	k = svc_start_every(&f, NULL, 3600000, 3600000);
	assert_int_equal(nrs_ckpt_sync(NULL, 10), 0);	/* NULL ok */
	build_ns(f.meta, "first");
	assert_int_equal(nrs_ckpt_sync(k, 20000), 0);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_taken), 1);
	build_ns(f.meta, "second");
	assert_int_equal(nrs_ckpt_sync(k, 20000), 0);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_taken), 2);
	build_ns(f.meta, "third");
	assert_int_equal(nrs_ckpt_sync(k, 20000), 0);
	assert_int_equal(nrs_counter(&f.metrics.ckpt_taken), 3);
	nrs_ckpt_stop(k);
	m = restore(&f, "r", &got);
	assert_true(has_stream(m, "third"));
	nrs_meta_close(m);
	bg_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_restore_round_trip),
		cmocka_unit_test(test_pointer_lag),
		cmocka_unit_test(test_pointer_damaged),
		cmocka_unit_test(test_damaged_newest),
		cmocka_unit_test(test_service),
		cmocka_unit_test(test_service_after_crash),
		cmocka_unit_test(test_service_retry_quarantine),
		cmocka_unit_test(test_service_prunes),
		cmocka_unit_test(test_service_prunes_burst),
		cmocka_unit_test(test_service_bytes),
		cmocka_unit_test(test_service_sync),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
