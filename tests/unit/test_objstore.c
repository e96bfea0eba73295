/*
 * test_objstore.c - the object store providers against objstore.h.
 *
 * Run plainly, it tests the embedded directory store (objstore_dir.c), the
 * key rule, and the parts of the S3 provider that need no S3 server: URL
 * and option checks, credentials, a port nobody listens on, a server that
 * never answers.  Run with NRS_S3_URL set (tests/unit/test_objstore_s3.sh
 * starts s3rver and does that), it runs the same contract cases against
 * that real S3 server instead, plus what only S3 has: Content-MD5
 * refusals, rejected keys, TLS verification (NRS_S3_TLS_URL: an https
 * s3rver with a self-signed certificate, NRS_S3_TLS_CA).  Nothing skips: a wrapper that
 * cannot start its server fails.
 *
 * Environment of the S3 run: NRS_S3_URL, NRS_S3_ACCESS_KEY,
 * NRS_S3_SECRET_KEY; NRS_S3_TLS_URL and NRS_S3_TLS_CA (its certificate).
 * The contract is signed V4 (libcurl).  s3rver takes any V4 signature and
 * checks V2 ones, so there the wrong-key case is signed V2; with
 * NRS_S3_CHECKS=v4 (moto_server, which checks V4: test_objstore_s3.sh
 * starts one too) it is signed V4, and the TLS case is left out.
 * NRS_S3_STYLE=virtual runs it all virtual-hosted (BUCKET.HOST: the URL's
 * host is then "localhost", which libcurl resolves, with its subdomains,
 * to loopback).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objstore.h"

/* ---- helpers ----------------------------------------------------------- */

struct fx {
	char root[PATH_MAX];	/* scratch directory */
	char dir[PATH_MAX + 16];	/* the dir store, root/objects */
	struct nrs_objstore *st;
	bool s3;
};

/* An object's bytes and digests. */
struct obj {
	unsigned char *buf;
	size_t len;
	unsigned char md5[NRS_MD5_LEN];
	unsigned char sha256[NRS_SHA256_LEN];
};

static void digest(const void *buf, size_t len, unsigned char *md5,
		   unsigned char *sha256)
{
	unsigned int n;

	assert_int_equal(EVP_Digest(buf, len, md5, &n, EVP_md5(), NULL), 1);
	assert_int_equal(n, NRS_MD5_LEN);
	assert_int_equal(EVP_Digest(buf, len, sha256, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, NRS_SHA256_LEN);
}

/* len bytes that depend on seed (an xorshift stream), with digests. */
static struct obj obj_make(size_t len, uint64_t seed)
{
	struct obj o = { .len = len };
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	o.buf = malloc(len ? len : 1);
	assert_non_null(o.buf);
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		o.buf[i] = (unsigned char)x;
	}
	digest(o.buf, len, o.md5, o.sha256);
	return o;
}

static int obj_put(struct nrs_objstore *st, const char *key,
		   const struct obj *o)
{
	return nrs_obj_put(st, key, o->buf, o->len, o->md5, o->sha256);
}

/* The object under key is exactly o: head proves it, get returns it. */
static void assert_stored(struct nrs_objstore *st, const char *key,
			  const struct obj *o)
{
	struct nrs_obj_meta m;
	unsigned char *back = malloc(o->len + 1);

	assert_non_null(back);
	assert_int_equal(nrs_obj_head(st, key, &m), 0);
	assert_int_equal(m.length, o->len);
	assert_true(m.has_sha256);
	assert_memory_equal(m.sha256, o->sha256, NRS_SHA256_LEN);
	assert_int_equal(nrs_obj_get(st, key, 0, back, o->len + 1),
			 (ssize_t)o->len);
	if (o->len)
		assert_memory_equal(back, o->buf, o->len);
	free(back);
}

/* There is no object under key: head and get say so, and change nothing. */
static void assert_absent(struct nrs_objstore *st, const char *key)
{
	struct nrs_obj_meta m = { .length = 42 };
	unsigned char buf[8] = { 7 };

	assert_int_equal(nrs_obj_head(st, key, &m), -ENOENT);
	assert_int_equal(m.length, 42);
	assert_int_equal(nrs_obj_get(st, key, 0, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(nrs_obj_get(st, key, 0, buf, 0), -ENOENT);
	assert_int_equal(buf[0], 7);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void scratch(struct fx *f)
{
	assert_int_equal(nrs_fixture_mkdtemp(f->root, sizeof(f->root),
					     "test_objstore"), 0);
	snprintf(f->dir, sizeof(f->dir), "%s/objects", f->root);
}

/* The signature the server checks: NRS_S3_CHECKS=v4 (moto) or v2
 * (s3rver, which takes any V4 signature: the default). */
static enum nrs_s3_sig checked_sig(void)
{
	const char *v = getenv("NRS_S3_CHECKS");

	return v && strcmp(v, "v4") == 0 ? NRS_S3_V4 : NRS_S3_V2;
}

/* NRS_S3_STYLE=virtual: the contract runs virtual-hosted. */
static enum nrs_s3_style test_style(void)
{
	const char *v = getenv("NRS_S3_STYLE");

	return v && strcmp(v, "virtual") == 0 ? NRS_S3_VIRTUAL : NRS_S3_PATH;
}

/* An S3 store at url with the server's keys (NRS_S3_*), or with access
 * as the access key if not NULL; signed V4. */
static int open_s3(const char *url, int timeout_ms, const char *access,
		   struct nrs_objstore **out)
{
	const char *secret = getenv("NRS_S3_SECRET_KEY");
	struct nrs_s3_opts o = {
		.url = url,
		.access_key = access ? access : getenv("NRS_S3_ACCESS_KEY"),
		.secret_key = secret ? secret : "no-secret",
		.timeout_ms = timeout_ms,
		.style = test_style(),
	};

	return nrs_objstore_s3_open(&o, out);
}

enum store_kind { NO_STORE, DIR_STORE, S3_STORE };

/* A scratch directory, and a store of that kind in it (dir) or at
 * NRS_S3_URL (s3). */
static int setup_kind(void **state, enum store_kind kind)
{
	struct fx *f = calloc(1, sizeof(*f));
	int rc = 0;

	if (!f)
		return -1;
	scratch(f);
	f->s3 = kind == S3_STORE;
	if (kind == DIR_STORE)
		rc = nrs_objstore_dir_open(f->dir, &f->st);
	else if (kind == S3_STORE)
		rc = open_s3(getenv("NRS_S3_URL"), 10000, NULL, &f->st);
	if (rc != 0) {
		nrs_fixture_rmtree(f->root);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup_dir(void **state)
{
	return setup_kind(state, DIR_STORE);
}

static int setup_s3(void **state)
{
	return setup_kind(state, S3_STORE);
}

static int setup_none(void **state)
{
	return setup_kind(state, NO_STORE);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	nrs_obj_close(f->st);
	rc = nrs_fixture_rmtree(f->root);
	free(f);
	return rc;
}

/* Keys unique to this process, so runs against one bucket never meet. */
static const char *key_of(char buf[NRS_OBJKEY_MAX], const char *name)
{
	snprintf(buf, NRS_OBJKEY_MAX, "t%ld/%s", (long)getpid(), name);
	return buf;
}

/* ---- the contract, for every provider ---------------------------------- */

static void test_put_head_get(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(3u << 20 | 12345, 1);	/* > 1 curl buffer */
	unsigned char buf[4096];
	char k[NRS_OBJKEY_MAX];

	key_of(k, "a");
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_stored(f->st, k, &o);

	/* ranges: at 0, in the middle, one byte, the last bytes */
	assert_int_equal(nrs_obj_get(f->st, k, 0, buf, 100), 100);
	assert_memory_equal(buf, o.buf, 100);
	assert_int_equal(nrs_obj_get(f->st, k, 1000003, buf, sizeof(buf)),
			 (ssize_t)sizeof(buf));
	assert_memory_equal(buf, o.buf + 1000003, sizeof(buf));
	assert_int_equal(nrs_obj_get(f->st, k, 77, buf, 1), 1);
	assert_int_equal(buf[0], o.buf[77]);
	/* short only at the end; 0 at or past it */
	assert_int_equal(nrs_obj_get(f->st, k, o.len - 10, buf, sizeof(buf)), 10);
	assert_memory_equal(buf, o.buf + o.len - 10, 10);
	assert_int_equal(nrs_obj_get(f->st, k, o.len, buf, sizeof(buf)), 0);
	assert_int_equal(nrs_obj_get(f->st, k, o.len + 5000, buf, sizeof(buf)), 0);
	assert_int_equal(nrs_obj_get(f->st, k, 5, buf, 0), 0);

	/* the same bytes again under the same key (an uncertain put retried) */
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_stored(f->st, k, &o);
	free(o.buf);
}

static void test_empty_object(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(0, 2);
	unsigned char buf[8];
	char k[NRS_OBJKEY_MAX];

	key_of(k, "empty");
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_stored(f->st, k, &o);
	assert_int_equal(nrs_obj_get(f->st, k, 0, buf, sizeof(buf)), 0);
	assert_int_equal(nrs_obj_get(f->st, k, 3, buf, sizeof(buf)), 0);
	free(o.buf);
}

static void test_missing(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(10, 3);
	char k[NRS_OBJKEY_MAX];

	key_of(k, "never/put");
	assert_absent(f->st, k);
	assert_int_equal(nrs_obj_del(f->st, k), 0);
	/* a prefix of other keys is no object either */
	key_of(k, "dir/x");
	assert_int_equal(obj_put(f->st, k, &o), 0);
	key_of(k, "dir");
	assert_absent(f->st, k);
	assert_int_equal(nrs_obj_del(f->st, k), 0);
	key_of(k, "dir/x");
	assert_stored(f->st, k, &o);	/* and deleting it touched nothing */
	free(o.buf);
}

static void test_delete(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(1000, 4);
	char k[NRS_OBJKEY_MAX];

	key_of(k, "gone");
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_int_equal(nrs_obj_del(f->st, k), 0);
	assert_absent(f->st, k);
	assert_int_equal(nrs_obj_del(f->st, k), 0);
	/* and it can come back */
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_stored(f->st, k, &o);
	free(o.buf);
}

static void test_subdir_keys(void **state)
{
	struct fx *f = *state;
	struct obj a = obj_make(5000, 5), b = obj_make(7000, 6);
	char ka[NRS_OBJKEY_MAX], kb[NRS_OBJKEY_MAX];

	key_of(ka, "s/00000000000000a1/0000000000000000-0000000000001388-g0000000000000001");
	key_of(kb, "s/00000000000000a1/deeper/still/b");
	assert_int_equal(obj_put(f->st, ka, &a), 0);
	assert_int_equal(obj_put(f->st, kb, &b), 0);
	assert_stored(f->st, ka, &a);
	assert_stored(f->st, kb, &b);
	assert_int_equal(nrs_obj_del(f->st, kb), 0);
	assert_absent(f->st, kb);
	assert_stored(f->st, ka, &a);
	assert_int_equal(nrs_obj_del(f->st, ka), 0);
	assert_absent(f->st, ka);
	/* directories a delete emptied come back on demand */
	assert_int_equal(obj_put(f->st, kb, &b), 0);
	assert_stored(f->st, kb, &b);
	free(a.buf);
	free(b.buf);
}

static void test_no_sha256(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(333, 7);
	struct nrs_obj_meta m;
	char k[NRS_OBJKEY_MAX];

	key_of(k, "nosha");
	assert_int_equal(nrs_obj_put(f->st, k, o.buf, o.len, o.md5, NULL), 0);
	assert_int_equal(nrs_obj_head(f->st, k, &m), 0);
	assert_int_equal(m.length, o.len);
	assert_false(m.has_sha256);
	free(o.buf);
}

/* The embedded store never looks at an MD5: it says so, and takes none. */
static void test_dir_no_md5(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(70000, 8);
	char k[NRS_OBJKEY_MAX];

	assert_false(nrs_obj_wants_md5(f->st));
	key_of(k, "nomd5");
	assert_int_equal(nrs_obj_put(f->st, k, o.buf, o.len, NULL, o.sha256), 0);
	assert_stored(f->st, k, &o);
	free(o.buf);
}

static const char *const bad_keys[] = {
	"", "/a", "a/", "a//b", ".", "..", "a/..", "../a", "a/../b", "./a",
	".tmp/1-1", "a/.hidden", "a b", "a\\b", "a?b", "a%2fb", "ä",
	"a\nb",
};

static void test_bad_keys(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(10, 8);
	struct nrs_obj_meta m;
	char longkey[NRS_OBJKEY_MAX + 1];

	for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
		const char *k = bad_keys[i];

		assert_false(nrs_objkey_is_valid(k));
		assert_int_equal(obj_put(f->st, k, &o), -EINVAL);
		assert_int_equal(nrs_obj_head(f->st, k, &m), -EINVAL);
		assert_int_equal(nrs_obj_get(f->st, k, 0, o.buf, o.len), -EINVAL);
		assert_int_equal(nrs_obj_del(f->st, k), -EINVAL);
	}
	/* components of 63 characters: file names stay short (s3rver adds
	 * a suffix to each object's name) */
	memset(longkey, 'k', NRS_OBJKEY_MAX);
	for (int i = 63; i < NRS_OBJKEY_MAX; i += 64)
		longkey[i] = '/';
	longkey[NRS_OBJKEY_MAX] = '\0';
	assert_int_equal(obj_put(f->st, longkey, &o), -EINVAL);
	longkey[NRS_OBJKEY_MAX - 1] = '\0';	/* the longest valid key */
	assert_true(nrs_objkey_is_valid(longkey));
	assert_int_equal(obj_put(f->st, longkey, &o), 0);
	assert_stored(f->st, longkey, &o);
	assert_int_equal(nrs_obj_del(f->st, longkey), 0);
	free(o.buf);
}

#define PUT_THREADS	8

struct putter {
	struct nrs_objstore *st;
	int id, n;
	int failures;
};

static void *putter_main(void *arg)
{
	struct putter *p = arg;
	char k[NRS_OBJKEY_MAX], name[64];

	for (int i = 0; i < p->n; i++) {
		/* some keys of their own, one shared by every thread (all
		 * put the same bytes under it, as objstore.h requires) */
		struct obj o = obj_make(20000 + (size_t)i * 3,
					i % 4 == 0 ? 1000 + (uint64_t)i
						   : (uint64_t)(p->id * 1000 + i));

		if (i % 4 == 0)
			snprintf(name, sizeof(name), "shared/%d", i);
		else
			snprintf(name, sizeof(name), "t%d/%d", p->id, i);
		if (obj_put(p->st, key_of(k, name), &o) != 0)
			p->failures++;
		free(o.buf);
	}
	return NULL;
}

static void run_putters(struct nrs_objstore *st, int per_thread)
{
	pthread_t t[PUT_THREADS];
	struct putter p[PUT_THREADS];
	char k[NRS_OBJKEY_MAX], name[64];

	for (int i = 0; i < PUT_THREADS; i++) {
		p[i] = (struct putter){ .st = st, .id = i, .n = per_thread };
		assert_int_equal(pthread_create(&t[i], NULL, putter_main, &p[i]), 0);
	}
	for (int i = 0; i < PUT_THREADS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(p[i].failures, 0);
	}
	for (int id = 0; id < PUT_THREADS; id++) {
		for (int i = 0; i < per_thread; i++) {
			struct obj o = obj_make(20000 + (size_t)i * 3,
						i % 4 == 0 ? 1000 + (uint64_t)i
							   : (uint64_t)(id * 1000 + i));

			if (i % 4 == 0)
				snprintf(name, sizeof(name), "shared/%d", i);
			else
				snprintf(name, sizeof(name), "t%d/%d", id, i);
			assert_stored(st, key_of(k, name), &o);
			free(o.buf);
		}
	}
}

static void test_concurrent_puts(void **state)
{
	struct fx *f = *state;

	run_putters(f->st, f->s3 ? 6 : 40);
}

/* ---- the directory store only ------------------------------------------ */

static void path_of(char *out, size_t n, const struct fx *f, const char *key)
{
	snprintf(out, n, "%s/%s", f->dir, key);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

static void test_dir_layout(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(1000, 9);
	char p[PATH_MAX * 2];
	struct stat st;

	assert_int_equal(obj_put(f->st, "s/1/x", &o), 0);
	path_of(p, sizeof(p), f, "s/1/x");
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 64 + 1000);	/* header + bytes */
	/* a delete removes the directories it empties, and only those */
	assert_int_equal(obj_put(f->st, "s/2/y", &o), 0);
	assert_int_equal(nrs_obj_del(f->st, "s/1/x"), 0);
	path_of(p, sizeof(p), f, "s/1");
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(errno, ENOENT);
	path_of(p, sizeof(p), f, "s/2");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(nrs_obj_del(f->st, "s/2/y"), 0);
	path_of(p, sizeof(p), f, "s");
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(stat(f->dir, &st), 0);	/* never the store itself */
	free(o.buf);
}

static void test_dir_leftover_tmp(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(100, 10);
	struct nrs_obj_meta m;
	char p[PATH_MAX * 2];
	struct stat st;

	/* what a crash in the middle of a put leaves */
	path_of(p, sizeof(p), f, ".tmp/4242-7");
	write_file(p, o.buf, o.len);
	/* and dot-names elsewhere: no key can reach them */
	assert_int_equal(obj_put(f->st, "s/9/real", &o), 0);
	path_of(p, sizeof(p), f, "s/9/.4242-8");
	write_file(p, o.buf, o.len);
	assert_int_equal(nrs_obj_head(f->st, ".tmp/4242-7", &m), -EINVAL);
	assert_int_equal(nrs_obj_head(f->st, "4242-7", &m), -ENOENT);
	assert_int_equal(nrs_obj_head(f->st, "s/9/.4242-8", &m), -EINVAL);
	/* reopening clears .tmp, and touches nothing else */
	nrs_obj_close(f->st);
	f->st = NULL;
	assert_int_equal(nrs_objstore_dir_open(f->dir, &f->st), 0);
	path_of(p, sizeof(p), f, ".tmp/4242-7");
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_stored(f->st, "s/9/real", &o);
	/* a delete leaves a directory another name still holds */
	assert_int_equal(nrs_obj_del(f->st, "s/9/real"), 0);
	path_of(p, sizeof(p), f, "s/9/.4242-8");
	assert_int_equal(stat(p, &st), 0);
	free(o.buf);
}

static void test_dir_damaged_header(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(5000, 11);
	struct nrs_obj_meta m;
	char p[PATH_MAX * 2];
	unsigned char buf[16];
	int fd;

	assert_int_equal(obj_put(f->st, "damaged", &o), 0);
	path_of(p, sizeof(p), f, "damaged");
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 30), 1);	/* in the SHA-256 */
	/* no proof, but the bytes and their count are still there */
	assert_int_equal(nrs_obj_head(f->st, "damaged", &m), 0);
	assert_int_equal(m.length, o.len);
	assert_false(m.has_sha256);
	assert_int_equal(nrs_obj_get(f->st, "damaged", 100, buf, sizeof(buf)),
			 (ssize_t)sizeof(buf));
	assert_memory_equal(buf, o.buf + 100, sizeof(buf));
	/* a put of the same bytes repairs it (DESIGN.md 6) */
	assert_int_equal(obj_put(f->st, "damaged", &o), 0);
	assert_stored(f->st, "damaged", &o);
	/* a cut file: the header's length disagrees */
	assert_int_equal(close(fd), 0);
	assert_int_equal(truncate(p, 64 + 4000), 0);
	assert_int_equal(nrs_obj_head(f->st, "damaged", &m), 0);
	assert_int_equal(m.length, 4000);
	assert_false(m.has_sha256);
	/* shorter than a header */
	assert_int_equal(truncate(p, 10), 0);
	assert_int_equal(nrs_obj_head(f->st, "damaged", &m), 0);
	assert_int_equal(m.length, 0);
	assert_false(m.has_sha256);
	assert_int_equal(nrs_obj_get(f->st, "damaged", 0, buf, sizeof(buf)), 0);
	free(o.buf);
}

/* What nrs_objstore_dir_foreach saw, one "name size reg" per line. */
struct seen {
	char text[1024];
	size_t len;
	int stop_at;		/* return 1 at this call (0: never) */
	int calls;
};

static int see(void *ctx, const struct nrs_objfile *of)
{
	struct seen *s = ctx;

	s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len,
				   "%s %" PRIu64 " %d\n", of->name, of->size,
				   of->is_reg);
	assert_true(of->mtime_ns > 0);
	return ++s->calls == s->stop_at;
}

static void test_dir_list(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(100, 14);
	struct seen s = { .len = 0 };
	struct nrs_objstore *ro;
	char p[PATH_MAX * 2];

	assert_int_equal(obj_put(f->st, "s/1/a", &o), 0);
	assert_int_equal(obj_put(f->st, "b", &o), 0);
	path_of(p, sizeof(p), f, ".tmp/4242-9");	/* the store's own */
	write_file(p, o.buf, o.len);
	path_of(p, sizeof(p), f, "s/1/.hidden");	/* no key's name */
	write_file(p, o.buf, 3);
	path_of(p, sizeof(p), f, "s/stray");		/* not a key, listed */
	write_file(p, o.buf, 5);
	path_of(p, sizeof(p), f, "s/link");
	assert_int_equal(symlink("stray", p), 0);
	path_of(p, sizeof(p), f, "s/empty");		/* an empty directory */
	assert_int_equal(mkdir(p, 0700), 0);
	/* The read-only store lists the same; order is the directory's. */
	assert_int_equal(nrs_objstore_dir_open_readonly(f->dir, &ro), 0);
	assert_int_equal(nrs_objstore_dir_foreach(ro, see, &s), 0);
	print_message("%s", s.text);
	assert_int_equal(s.calls, 4);
	assert_non_null(strstr(s.text, "s/1/a 164 1\n"));
	assert_non_null(strstr(s.text, "b 164 1\n"));
	assert_non_null(strstr(s.text, "s/stray 5 1\n"));
	assert_non_null(strstr(s.text, "s/link 5 0\n"));
	/* A non-zero return stops it. */
	s = (struct seen){ .stop_at = 2 };
	assert_int_equal(nrs_objstore_dir_foreach(ro, see, &s), 1);
	assert_int_equal(s.calls, 2);
	nrs_obj_close(ro);
	free(o.buf);
}

static void test_dir_open(void **state)
{
	struct fx *f = *state;
	struct nrs_objstore *st;
	char p[PATH_MAX * 2];

	/* missing parents are made */
	snprintf(p, sizeof(p), "%s/a/b/c", f->root);
	assert_int_equal(nrs_objstore_dir_open(p, &st), 0);
	assert_string_equal(st->ops->name, "dir");
	nrs_obj_close(st);
	assert_int_equal(nrs_objstore_dir_open("", &st), -EINVAL);
	/* a file where the directory should be */
	snprintf(p, sizeof(p), "%s/file", f->root);
	write_file(p, "x", 1);
	assert_int_equal(nrs_objstore_dir_open(p, &st), -ENOTDIR);
	nrs_obj_close(NULL);
}

/* ---- S3 without a server: options, URLs, credentials, no answer ------- */

static void test_s3_urls(void **state)
{
	static const char *const bad[] = {
		"", "ftp://h/bucket", "http://", "http:///bucket", "http://h",
		"http://h/", "http://h/bucket/key", "http://h:0/bucket",
		"http://h:65536/bucket", "http://h:/bucket", "http://h:x/bucket",
		"http://user@h/bucket", "http://h/bu", "http://h/Bucket!",
		"http://h/bucket?x=1", "http://[]/bucket", "http://[::1/bucket",
		"HTTP//h/bucket", "http://h//bucket", "http://h/bucket//",
	};
	static const char *const good[] = {
		"http://127.0.0.1:1/bucket", "https://s3.example.com/my-bucket/",
		"http://[::1]:9000/bkt", "https://localhost/a.b_c-d",
	};
	struct nrs_s3_opts o = { .access_key = "a", .secret_key = "s" };
	struct nrs_objstore *st;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.url = bad[i];
		assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		o.url = good[i];
		assert_int_equal(nrs_objstore_s3_open(&o, &st), 0);
		assert_string_equal(st->ops->name, "s3");
		nrs_obj_close(st);
	}
	o.url = good[0];
	o.access_key = "";
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.access_key = "a";
	o.secret_key = NULL;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.secret_key = "s";
	o.timeout_ms = -1;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.timeout_ms = 0;
	o.url = NULL;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	/* a CA file must be there */
	o.url = good[1];
	o.ca_file = "/nonexistent/ca.pem";
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -ENOENT);
}

static void creds_file(const char *path, const char *text, mode_t mode)
{
	write_file(path, text, strlen(text));
	assert_int_equal(chmod(path, mode), 0);
}

static void test_s3_credentials(void **state)
{
	struct fx *f = *state;
	char p[PATH_MAX * 2], *a = NULL, *k = NULL, *t = NULL;

	snprintf(p, sizeof(p), "%s/creds", f->root);
	creds_file(p, "# test\n  AWS_ACCESS_KEY_ID=AKID \r\n"
		      "AWS_SECRET_ACCESS_KEY=se=cret/+x\nOTHER=1\n", 0600);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), 0);
	assert_string_equal(a, "AKID");
	assert_string_equal(k, "se=cret/+x");
	assert_null(t);
	free(a);
	free(k);
	a = k = NULL;
	/* a session token line (STS credentials) */
	creds_file(p, "AWS_ACCESS_KEY_ID=AKID\nAWS_SECRET_ACCESS_KEY=s\n"
		      "AWS_SESSION_TOKEN=tok/en+1=\n", 0600);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), 0);
	assert_string_equal(t, "tok/en+1=");
	free(a);
	free(k);
	free(t);
	a = k = t = NULL;
	/* readable or writable by others: refused */
	assert_int_equal(chmod(p, 0644), 0);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), -EPERM);
	assert_int_equal(chmod(p, 0620), 0);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), -EPERM);
	assert_int_equal(chmod(p, 0400), 0);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), 0);
	free(a);
	free(k);
	free(t);
	a = k = t = NULL;
	/* a directory is no credentials file */
	assert_int_equal(nrs_s3_credentials(f->root, &a, &k, &t), -EPERM);
	/* missing file, or a file without both lines */
	snprintf(p, sizeof(p), "%s/none", f->root);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), -ENOENT);
	creds_file(p, "AWS_ACCESS_KEY_ID=AKID\nAWS_SECRET_ACCESS_KEY=\n", 0600);
	assert_int_equal(nrs_s3_credentials(p, &a, &k, &t), -ENOENT);
	assert_null(a);
	assert_null(k);
	/* the environment, when there is no file */
	assert_int_equal(unsetenv("AWS_ACCESS_KEY_ID"), 0);
	assert_int_equal(setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1), 0);
	assert_int_equal(nrs_s3_credentials(NULL, &a, &k, &t), -ENOENT);
	assert_int_equal(setenv("AWS_ACCESS_KEY_ID", "env-id", 1), 0);
	assert_int_equal(nrs_s3_credentials(NULL, &a, &k, &t), 0);
	assert_string_equal(a, "env-id");
	assert_string_equal(k, "env-secret");
	free(a);
	free(k);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

/* A TCP port on 127.0.0.1; listening (backlog only, never accepting) if
 * listen_fd is not NULL, else closed again: nobody listens there. */
static int local_port(int *listen_fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	if (listen_fd) {
		assert_int_equal(listen(fd, 16), 0);
		*listen_fd = fd;
	} else {
		close(fd);
	}
	return ntohs(sa.sin_port);
}

static void test_s3_refused(void **state)
{
	struct obj o = obj_make(100, 12);
	struct nrs_objstore *st;
	struct nrs_obj_meta m;
	char url[64];
	double t0;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/bucket", local_port(NULL));
	assert_int_equal(open_s3(url, 20000, "a", &st), 0);
	t0 = now_s();
	assert_int_equal(obj_put(st, "k", &o), -ECONNREFUSED);
	assert_int_equal(nrs_obj_head(st, "k", &m), -ECONNREFUSED);
	assert_int_equal(nrs_obj_get(st, "k", 0, o.buf, 10), -ECONNREFUSED);
	assert_int_equal(nrs_obj_del(st, "k"), -ECONNREFUSED);
	/* each retried a few times within about a second (s3_curl.c SR1),
	 * never until the 20 s timeout */
	assert_true(now_s() - t0 < 6.0);
	/* A bucket is never listed. */
	assert_int_equal(nrs_objstore_dir_foreach(st, see, NULL), -EOPNOTSUPP);
	nrs_obj_close(st);
	free(o.buf);
}

static void test_s3_no_answer(void **state)
{
	struct obj o = obj_make(100, 13);
	struct nrs_objstore *st;
	struct nrs_obj_meta m;
	char url[64];
	double t0, dt;
	int lfd;

	(void)state;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/bucket", local_port(&lfd));
	assert_int_equal(open_s3(url, 300, "a", &st), 0);
	t0 = now_s();
	assert_int_equal(obj_put(st, "k", &o), -ETIMEDOUT);
	dt = now_s() - t0;
	assert_true(dt >= 0.29 && dt < 2.0);
	t0 = now_s();
	assert_int_equal(nrs_obj_head(st, "k", &m), -ETIMEDOUT);
	assert_int_equal(nrs_obj_get(st, "k", 0, o.buf, 10), -ETIMEDOUT);
	assert_true(now_s() - t0 < 3.0);
	nrs_obj_close(st);
	close(lfd);
	free(o.buf);
}

/* ---- S3 against a real server ------------------------------------------ */

static void test_s3_bad_md5(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(70000, 14), other = obj_make(70000, 15);
	char k[NRS_OBJKEY_MAX];

	assert_true(nrs_obj_wants_md5(f->st));	/* the MD5 travels */
	key_of(k, "bad-md5");
	/* the MD5 of other bytes: the server refuses the body */
	assert_int_equal(nrs_obj_put(f->st, k, o.buf, o.len, other.md5,
				     o.sha256), -EIO);
	assert_absent(f->st, k);
	/* and a refused put leaves an old object as it was */
	assert_int_equal(obj_put(f->st, k, &o), 0);
	assert_int_equal(nrs_obj_put(f->st, k, other.buf, other.len, o.md5,
				     other.sha256), -EIO);
	assert_stored(f->st, k, &o);
	/* no MD5 at all is taken (nothing to check against) */
	key_of(k, "no-md5");
	assert_int_equal(nrs_obj_put(f->st, k, o.buf, o.len, NULL, o.sha256), 0);
	assert_stored(f->st, k, &o);
	free(o.buf);
	free(other.buf);
}

static void test_s3_wrong_keys(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(100, 16);
	struct nrs_objstore *st;
	struct nrs_obj_meta m;
	char k[NRS_OBJKEY_MAX];
	struct nrs_s3_opts opts = {
		.url = getenv("NRS_S3_URL"),
		.access_key = getenv("NRS_S3_ACCESS_KEY"),
		.secret_key = "not-the-secret",
		.signature = checked_sig(),
	};

	key_of(k, "creds");
	assert_int_equal(obj_put(f->st, k, &o), 0);
	/* a wrong secret: the signature does not match */
	assert_int_equal(nrs_objstore_s3_open(&opts, &st), 0);
	assert_int_equal(obj_put(st, k, &o), -EACCES);
	assert_int_equal(nrs_obj_get(st, k, 0, o.buf, 10), -EACCES);
	assert_int_equal(nrs_obj_del(st, k), -EACCES);
	nrs_obj_close(st);
	/* an unknown access key */
	opts.access_key = "NOBODY";
	opts.secret_key = getenv("NRS_S3_SECRET_KEY");
	assert_int_equal(nrs_objstore_s3_open(&opts, &st), 0);
	assert_int_equal(obj_put(st, k, &o), -EACCES);
	/* HEAD has no body to name the error: 403 */
	assert_int_equal(nrs_obj_head(st, k, &m), -EACCES);
	nrs_obj_close(st);
	assert_stored(f->st, k, &o);	/* nothing happened to it */
	free(o.buf);
}

static void test_s3_no_bucket(void **state)
{
	struct fx *f = *state;
	struct obj o = obj_make(100, 17);
	struct nrs_objstore *st;
	const char *base = getenv("NRS_S3_URL"), *slash;
	char url[512];

	(void)f;
	slash = base ? strrchr(base, '/') : NULL;
	if (!slash) {
		fail_msg("NRS_S3_URL is not set");
		return;
	}
	snprintf(url, sizeof(url), "%.*s/no-such-bucket", (int)(slash - base),
		 base);
	assert_int_equal(open_s3(url, 10000, NULL, &st), 0);
	assert_int_equal(obj_put(st, "k", &o), -EIO);
	nrs_obj_close(st);
	free(o.buf);
}

/* An S3 store at url, verifying the server with ca_file. */
static int open_s3_ca(const char *url, const char *ca_file,
		      struct nrs_objstore **out)
{
	struct nrs_s3_opts o = {
		.url = url,
		.access_key = getenv("NRS_S3_ACCESS_KEY"),
		.secret_key = getenv("NRS_S3_SECRET_KEY"),
		.ca_file = ca_file,
		.timeout_ms = 10000,
	};

	return nrs_objstore_s3_open(&o, out);
}

static void test_s3_tls_verified(void **state)
{
	struct obj o = obj_make(100000, 18);
	struct nrs_objstore *st;
	struct nrs_obj_meta m;
	const char *url = getenv("NRS_S3_TLS_URL");
	const char *ca = getenv("NRS_S3_TLS_CA");
	char host_url[128];

	(void)state;
	if (!url || !ca) {
		fail_msg("NRS_S3_TLS_URL or NRS_S3_TLS_CA is not set");
		return;
	}
	assert_int_equal(strncmp(url, "https://127.0.0.1:", 18), 0);
	/* s3rver over TLS, its certificate signed by no CA we trust: refused
	 * (libs3 2.0 alone would take it) */
	assert_int_equal(open_s3_ca(url, NULL, &st), 0);
	assert_int_equal(obj_put(st, "k", &o), -EIO);
	assert_int_equal(nrs_obj_head(st, "k", &m), -EIO);
	nrs_obj_close(st);
	/* with that certificate as the CA file: served */
	assert_int_equal(open_s3_ca(url, ca, &st), 0);
	assert_int_equal(obj_put(st, "k", &o), 0);
	assert_stored(st, "k", &o);
	nrs_obj_close(st);
	/* the same server and CA under a name the certificate lacks */
	snprintf(host_url, sizeof(host_url), "https://localhost:%s", url + 18);
	assert_int_equal(open_s3_ca(host_url, ca, &st), 0);
	assert_int_equal(nrs_obj_head(st, "k", &m), -EIO);
	nrs_obj_close(st);
	/* the plain server is not disturbed by any of it */
	assert_int_equal(open_s3_ca(getenv("NRS_S3_URL"), ca, &st), 0);
	assert_int_equal(obj_put(st, "k", &o), 0);
	assert_stored(st, "k", &o);
	nrs_obj_close(st);
	free(o.buf);
}

/* ---- main --------------------------------------------------------------- */

#define CONTRACT(setup)                                                   \
	cmocka_unit_test_setup_teardown(test_put_head_get, setup, teardown), \
	cmocka_unit_test_setup_teardown(test_empty_object, setup, teardown), \
	cmocka_unit_test_setup_teardown(test_missing, setup, teardown),      \
	cmocka_unit_test_setup_teardown(test_delete, setup, teardown),       \
	cmocka_unit_test_setup_teardown(test_subdir_keys, setup, teardown),  \
	cmocka_unit_test_setup_teardown(test_no_sha256, setup, teardown),    \
	cmocka_unit_test_setup_teardown(test_bad_keys, setup, teardown),     \
	cmocka_unit_test_setup_teardown(test_concurrent_puts, setup, teardown)

int main(void)
{
	const struct CMUnitTest local[] = {
		CONTRACT(setup_dir),
		cmocka_unit_test_setup_teardown(test_dir_layout, setup_dir, teardown),
		cmocka_unit_test_setup_teardown(test_dir_leftover_tmp, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_no_md5, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_list, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_damaged_header,
						setup_dir, teardown),
		cmocka_unit_test_setup_teardown(test_dir_open, setup_none,
						teardown),
		cmocka_unit_test(test_s3_urls),
		cmocka_unit_test_setup_teardown(test_s3_credentials, setup_none,
						teardown),
		cmocka_unit_test(test_s3_refused),
		cmocka_unit_test(test_s3_no_answer),
	};
	const struct CMUnitTest s3[] = {
		CONTRACT(setup_s3),
		cmocka_unit_test_setup_teardown(test_s3_bad_md5, setup_s3, teardown),
		cmocka_unit_test_setup_teardown(test_s3_wrong_keys, setup_s3,
						teardown),
		cmocka_unit_test_setup_teardown(test_s3_no_bucket, setup_s3,
						teardown),
		cmocka_unit_test(test_s3_tls_verified),
	};

	/* moto 5.2 checks neither Content-MD5 nor x-amz-content-sha256
	 * against the body (seen with curl): no bad-MD5 case there; the
	 * headers' values are checked by test_s3_curl. */
	const struct CMUnitTest moto[] = {
		CONTRACT(setup_s3),
		cmocka_unit_test_setup_teardown(test_s3_wrong_keys, setup_s3,
						teardown),
		cmocka_unit_test_setup_teardown(test_s3_no_bucket, setup_s3,
						teardown),
	};

	if (getenv("NRS_S3_URL") && getenv("NRS_S3_CHECKS"))
		return cmocka_run_group_tests_name("objstore_moto", moto, NULL,
						   NULL);
	if (getenv("NRS_S3_URL"))
		return cmocka_run_group_tests_name("objstore_s3", s3, NULL, NULL);
	return cmocka_run_group_tests_name("objstore", local, NULL, NULL);
}
