/*
 * test_bcache_stream.c - the block cache's streaming GET (bcache_fill.c,
 * BS1-BS4) against a store whose get_stream hands the body to the sink in
 * pieces of odd sizes, can hold the body at a byte until the test lets it
 * go, cut it there, or send it again from its start as a retry does: a
 * reader waiting for a block takes it while the GET that brings it is
 * held (BS2), a body cut in the middle fails only the blocks past the cut
 * (BS1), a bad block k fails k alone (BS1), the memory tier's bound holds
 * under a GET larger than the tier (BS3), a resent body lands once (BS4),
 * a header is there for its waiters before its GET ends (BS5).
 * No sleeps: a reader that does not wake is caught by a generous hang
 * guard, not timed.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obj/bcache.h"
#include "obj/objfmt.h"

#define BLK	((uint64_t)NRS_OBJ_BLOCK)
#define PIECE	7001	/* bytes per sink call: never block-aligned */
#define NONE	UINT64_MAX

/* A store of one object, streaming. */
struct smock {
	struct nrs_objstore s;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char key[NRS_OBJKEY_MAX];
	unsigned char *buf;
	size_t len;
	unsigned gets;
	uint64_t last_off;	/* offset of the last GET */
	uint64_t hold_at;	/* the next GET waits before this byte... */
	bool held;		/* ...and says so here, until released */
	uint64_t cut_at;	/* the next GET fails -EIO before this byte */
	uint64_t resend_at;	/* the next GET starts over at this byte */
	struct nrs_bcache *c;	/* to watch while the body comes */
	uint64_t peak_mem;
};

static int sm_put(struct nrs_objstore *s, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	struct smock *m = (struct smock *)s;

	(void)md5;
	(void)sha256;
	free(m->buf);
	m->buf = malloc(len);
	assert_non_null(m->buf);
	memcpy(m->buf, buf, len);
	m->len = len;
	snprintf(m->key, sizeof(m->key), "%s", key);
	return 0;
}

static int sm_head(struct nrs_objstore *s, const char *key,
		   struct nrs_obj_meta *out)
{
	(void)s;
	(void)key;
	(void)out;
	return -ENOENT;
}

/* The range [off, off + len) clipped to the object: its length. */
static size_t sm_range(struct smock *m, const char *key, uint64_t off,
		       size_t len, unsigned *gets)
{
	pthread_mutex_lock(&m->lock);
	*gets = ++m->gets;
	m->last_off = off;
	pthread_mutex_unlock(&m->lock);
	assert_string_equal(key, m->key);
	if (off >= m->len)
		return 0;
	return m->len - off < len ? m->len - off : len;
}

static ssize_t sm_get(struct nrs_objstore *s, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	struct smock *m = (struct smock *)s;
	unsigned gets;
	size_t n = sm_range(m, key, off, len, &gets);

	memcpy(buf, m->buf + off, n);
	return (ssize_t)n;
}

/* Before byte at of a GET: hold, cut or resend once, as the test set. */
static int sm_event(struct smock *m, uint64_t at, size_t *pos)
{
	int err = 0;

	pthread_mutex_lock(&m->lock);
	if (at >= m->hold_at) {
		m->hold_at = NONE;
		m->held = true;
		pthread_cond_broadcast(&m->cond);
		while (m->held)
			pthread_cond_wait(&m->cond, &m->lock);
	}
	if (at >= m->cut_at) {
		m->cut_at = NONE;
		err = -EIO;
	}
	if (at >= m->resend_at) {
		m->resend_at = NONE;
		*pos = 0;	/* BS4: a retry sends it all again */
	}
	pthread_mutex_unlock(&m->lock);
	return err;
}

static ssize_t sm_get_stream(struct nrs_objstore *s, const char *key,
			     uint64_t off, size_t len, nrs_obj_sink_fn sink,
			     void *arg)
{
	struct smock *m = (struct smock *)s;
	unsigned gets;
	size_t n = sm_range(m, key, off, len, &gets), pos = 0;
	unsigned char piece[PIECE];

	while (pos < n) {
		size_t k = n - pos < PIECE ? n - pos : PIECE;
		struct nrs_bcache_stats st;
		int err = sm_event(m, off + pos, &pos);

		if (err)
			return err;
		k = n - pos < PIECE ? n - pos : PIECE;
		memcpy(piece, m->buf + off + pos, k);	/* as libcurl's buffer */
		err = sink(arg, pos, piece, k);
		if (err)
			return err;
		pos += k;
		nrs_bcache_stats(m->c, &st);
		pthread_mutex_lock(&m->lock);
		if (st.mem_bytes > m->peak_mem)
			m->peak_mem = st.mem_bytes;
		pthread_mutex_unlock(&m->lock);
	}
	return (ssize_t)n;
}

static int sm_del(struct nrs_objstore *s, const char *key)
{
	(void)s;
	(void)key;
	return 0;
}

static void sm_close(struct nrs_objstore *s)
{
	struct smock *m = (struct smock *)s;

	free(m->buf);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct nrs_objstore_ops sm_ops = {
	.name = "stream-mock",
	.put = sm_put,
	.head = sm_head,
	.get = sm_get,
	.get_stream = sm_get_stream,
	.del = sm_del,
	.close = sm_close,
};

static unsigned char byte_at(uint64_t x)
{
	uint64_t v = (x + 1) * 0x9e3779b97f4a7c15ull;

	v ^= v >> 31;
	v *= 0x94d049bb133111ebull;
	return (unsigned char)(v >> 29);
}

/* A store holding one object of nblk blocks at stream 7, from 0; and a
 * cache of mem bytes (readahead 1 MiB) reading through it. */
static struct smock *setup_obj(struct nrs_objhdr *h, uint32_t nblk,
			       uint64_t mem)
{
	struct smock *m = calloc(1, sizeof(*m));
	struct nrs_bcache_opts o = { .mem_bytes = mem, .readahead = 1 << 20 };
	uint64_t plen = (uint64_t)nblk * BLK;
	size_t hl = nrs_objfmt_hdr_len(plen);
	unsigned char *b = malloc(hl + plen);
	char key[NRS_OBJKEY_MAX];

	assert_non_null(m);
	assert_non_null(b);
	m->s.ops = &sm_ops;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	m->hold_at = m->cut_at = m->resend_at = NONE;
	*h = (struct nrs_objhdr){ .stream_id = 7, .start = 0, .end = plen,
				  .gen = 1 };
	for (uint64_t i = 0; i < plen; i++)
		b[hl + i] = byte_at(i);
	assert_int_equal(nrs_objfmt_seal(b, h), 0);
	assert_true(nrs_objfmt_key(key, h) > 0);
	assert_int_equal(nrs_obj_put(&m->s, key, b, hl + plen, NULL, NULL), 0);
	free(b);
	assert_int_equal(nrs_bcache_open(&o, &m->s, &m->c), 0);
	return m;
}

static void teardown_obj(struct smock *m)
{
	assert_true(nrs_bcache_check(m->c));
	nrs_bcache_close(m->c);
	nrs_obj_close(&m->s);
}

static int read_check(struct smock *m, const struct nrs_objhdr *h,
		      uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len);
	int err;

	assert_non_null(buf);
	err = nrs_bcache_read(m->c, h, off, len, buf);
	for (size_t i = 0; !err && i < len; i++)
		if (buf[i] != byte_at(off + i))
			fail_msg("offset %" PRIu64 ": wrong byte", off + i);
	free(buf);
	return err;
}

static unsigned gets_of(struct smock *m)
{
	unsigned n;

	pthread_mutex_lock(&m->lock);
	n = m->gets;
	pthread_mutex_unlock(&m->lock);
	return n;
}

struct rd {
	struct smock *m;
	const struct nrs_objhdr *h;
	uint64_t off;
	size_t len;
	int err;
	bool done;
};

static void *reader(void *arg)
{
	struct rd *r = arg;

	r->err = read_check(r->m, r->h, r->off, r->len);
	pthread_mutex_lock(&r->m->lock);
	r->done = true;
	pthread_cond_broadcast(&r->m->cond);
	pthread_mutex_unlock(&r->m->lock);
	return NULL;
}

/* Wait (lock held) on m->cond until *flag, or a minute: a hang guard. */
static bool wait_flag(struct smock *m, const bool *flag)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 60;
	while (!*flag)
		if (pthread_cond_timedwait(&m->cond, &m->lock, &dl))
			return *flag;
	return true;
}

/* Start reader a, wait until its GET is held, start reader b: did b end
 * while a's GET was still held?  Both are joined. */
static bool held_read(struct smock *m, struct rd *a, struct rd *b)
{
	pthread_t ta, tb;
	bool ok;

	assert_int_equal(pthread_create(&ta, NULL, reader, a), 0);
	pthread_mutex_lock(&m->lock);
	assert_true(wait_flag(m, &m->held));
	pthread_mutex_unlock(&m->lock);
	assert_int_equal(pthread_create(&tb, NULL, reader, b), 0);
	pthread_mutex_lock(&m->lock);
	ok = wait_flag(m, &b->done);
	m->held = false;		/* let a's GET end either way */
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(tb, NULL);
	pthread_join(ta, NULL);
	return ok;
}

/* BS2: a reader waiting for block 3 of another's GET takes it while that
 * GET is held past block 4, not when it ends. */
static void test_woken_per_block(void **state)
{
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 64, 0);
	size_t hl = nrs_objfmt_hdr_len(h.end);
	struct rd a = { .m = m, .h = &h, .off = 2 * BLK, .len = 8 * BLK };
	struct rd b = { .m = m, .h = &h, .off = 3 * BLK + 5, .len = 100 };

	(void)state;
	/* the header, far from a's read: a's is no sequential one */
	assert_int_equal(read_check(m, &h, 63 * BLK, 10), 0);
	m->hold_at = hl + 5 * BLK;	/* a's GET: blocks 2..4 come, then hold */
	assert_true(held_read(m, &a, &b));
	assert_int_equal(b.err, 0);
	assert_int_equal(a.err, 0);
	teardown_obj(m);
}

/* BS2: a block that landed while memory had no room for it leaves its
 * flight: a reader wanting it fetches it itself, while the GET that
 * brought it is still held. */
static void test_dropped_block_leaves_flight(void **state)
{
	uint64_t budget = 4 * (BLK + 256) + 4096;
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 64, budget);
	size_t hl = nrs_objfmt_hdr_len(h.end);
	struct rd a = { .m = m, .h = &h, .off = 20 * BLK, .len = 16 * BLK };
	struct rd b = { .m = m, .h = &h, .off = 21 * BLK + 5, .len = 100 };

	(void)state;
	assert_int_equal(read_check(m, &h, 63 * BLK, 10), 0);	/* header */
	m->hold_at = hl + 32 * BLK;	/* blocks 20..31 come, 21 is gone */
	assert_true(held_read(m, &a, &b));
	assert_int_equal(b.err, 0);
	assert_int_equal(a.err, 0);
	teardown_obj(m);
}

/* BS5: a reader waiting for the header another reader's GET brings
 * takes it, and the blocks it wants, while that GET is held past them. */
static void test_header_published_early(void **state)
{
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 64, 0);
	size_t hl = nrs_objfmt_hdr_len(h.end);
	struct rd a = { .m = m, .h = &h, .off = 0, .len = 16 * BLK };
	struct rd b = { .m = m, .h = &h, .off = 2 * BLK + 5, .len = 100 };

	(void)state;
	m->hold_at = hl + 4 * BLK;	/* the header, blocks 0..3, then hold */
	assert_true(held_read(m, &a, &b));
	assert_int_equal(b.err, 0);
	assert_int_equal(a.err, 0);
	teardown_obj(m);
}

/* BS1: a body cut after block 4 keeps the header and blocks 0..4; the
 * reader fetches blocks 5.. itself, from block 5. */
static void test_cut_body(void **state)
{
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 16, 0);
	size_t hl = nrs_objfmt_hdr_len(h.end);

	(void)state;
	m->cut_at = hl + 5 * BLK + 100;
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), 0);
	assert_int_equal(gets_of(m), 2);
	assert_int_equal(m->last_off, hl + 5 * BLK);
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), 0);	/* all held */
	assert_int_equal(gets_of(m), 2);
	teardown_obj(m);
}

/* BS1: a bad block k = 3 fails the read that wants it and no other: the
 * blocks after it landed, and only block 3 is fetched again. */
static void test_bad_block_k(void **state)
{
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 16, 0);
	size_t hl = nrs_objfmt_hdr_len(h.end);
	struct nrs_bcache_stats st;

	(void)state;
	m->buf[hl + 3 * BLK + 17] ^= 0x40;
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), -EBADMSG);
	nrs_bcache_stats(m->c, &st);
	assert_int_equal(st.bad_blocks, 1);
	assert_int_equal(read_check(m, &h, 4 * BLK, 12 * BLK), 0);
	assert_int_equal(gets_of(m), 1);	/* the blocks after 3 landed */
	assert_int_equal(read_check(m, &h, 3 * BLK, 10), -EBADMSG);
	assert_true(gets_of(m) >= 2);	/* block 3 did not */
	m->buf[hl + 3 * BLK + 17] ^= 0x40;	/* mended: it comes now */
	assert_int_equal(read_check(m, &h, 3 * BLK, 10), 0);
	teardown_obj(m);
}

/* BS3: a GET of 16 blocks into a tier with room for about 4 never takes
 * the tier over its budget while the body comes. */
static void test_mem_bound(void **state)
{
	uint64_t budget = 4 * (BLK + 256) + 4096;
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 16, budget);

	(void)state;
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), 0);
	assert_int_equal(gets_of(m), 1);
	assert_true(m->peak_mem > 0);
	assert_true(m->peak_mem <= budget);
	assert_true(nrs_bcache_check(m->c));
	teardown_obj(m);
}

/* BS4: a body sent again from its start mid-way (a retry) lands once. */
static void test_resent_body(void **state)
{
	struct nrs_objhdr h;
	struct smock *m = setup_obj(&h, 16, 0);
	size_t hl = nrs_objfmt_hdr_len(h.end);

	(void)state;
	m->resend_at = hl + 7 * BLK + 3;
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), 0);
	assert_int_equal(gets_of(m), 1);
	assert_int_equal(read_check(m, &h, 0, 16 * BLK), 0);
	assert_int_equal(gets_of(m), 1);
	teardown_obj(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_woken_per_block),
		cmocka_unit_test(test_dropped_block_leaves_flight),
		cmocka_unit_test(test_header_published_early),
		cmocka_unit_test(test_cut_body),
		cmocka_unit_test(test_bad_block_k),
		cmocka_unit_test(test_mem_bound),
		cmocka_unit_test(test_resent_body),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
