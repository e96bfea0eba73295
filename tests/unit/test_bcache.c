/*
 * test_bcache.c - verified reads through the block cache, against an
 * in-memory object store that counts GETs, records their sizes, fails on
 * request, holds GETs at a gate and lets a test rot stored bytes: reads at
 * every alignment, hits, read-ahead GET sizes, a block two readers miss at
 * once fetched once while the second's prefetch reads on, prefetches
 * (several GETs in flight for one reader, failures that fail no read, a
 * small memory tier, close with GETs held, into the objects that follow),
 * corrupt blocks and headers, the memory budget, the disk tier (eviction,
 * rot, reuse, budget, lock), forget, and concurrent readers.  Tests wait
 * for prefetches with nrs_bcache_drain() or the gate, never with sleeps.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/bcache.h"
#include "obj/objfmt.h"
#include "util/crc32c.h"
#include "util/le.h"

#define KIB	1024ull
#define MIB	(1024ull * 1024)
#define BLK	((uint64_t)NRS_OBJ_BLOCK)
#define MAX_GETS	4096

/* ---- the mock store --------------------------------------------------- */

struct mobj {
	char key[NRS_OBJKEY_MAX];
	unsigned char *buf;
	size_t len;
	struct mobj *next;
};

struct mock {
	struct nrs_objstore s;
	pthread_mutex_t lock;
	struct mobj *objs;
	unsigned gets;
	size_t get_len[MAX_GETS];	/* bytes asked for, per GET */
	int fail;			/* GETs return this, if < 0... */
	uint64_t fail_from;		/* ...those at or past this offset */
	bool gated;			/* GETs wait while set... */
	uint64_t gate_from;		/* ...those at or past this offset */
	unsigned at_gate;		/* GETs waiting */
	pthread_cond_t gate;		/* gated or at_gate changed */
};

static struct mobj *mock_find(struct mock *m, const char *key)
{
	for (struct mobj *o = m->objs; o; o = o->next)
		if (strcmp(o->key, key) == 0)
			return o;
	return NULL;
}

static int mock_put(struct nrs_objstore *s, const char *key, const void *buf,
		    size_t len, const unsigned char md5[NRS_MD5_LEN],
		    const unsigned char sha256[NRS_SHA256_LEN])
{
	struct mock *m = (struct mock *)s;
	struct mobj *o = calloc(1, sizeof(*o));

	(void)md5;
	(void)sha256;
	assert_non_null(o);
	o->buf = malloc(len);
	assert_non_null(o->buf);
	memcpy(o->buf, buf, len);
	o->len = len;
	snprintf(o->key, sizeof(o->key), "%s", key);
	pthread_mutex_lock(&m->lock);
	o->next = m->objs;
	m->objs = o;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mock_head(struct nrs_objstore *s, const char *key,
		     struct nrs_obj_meta *out)
{
	struct mock *m = (struct mock *)s;
	struct mobj *o;

	pthread_mutex_lock(&m->lock);
	o = mock_find(m, key);
	if (o) {
		memset(out, 0, sizeof(*out));
		out->length = o->len;
	}
	pthread_mutex_unlock(&m->lock);
	return o ? 0 : -ENOENT;
}

static ssize_t mock_get(struct nrs_objstore *s, const char *key, uint64_t off,
			void *buf, size_t len)
{
	struct mock *m = (struct mock *)s;
	struct mobj *o;
	ssize_t n;

	pthread_mutex_lock(&m->lock);
	if (m->gets < MAX_GETS)
		m->get_len[m->gets] = len;
	m->gets++;
	m->at_gate++;
	pthread_cond_broadcast(&m->gate);
	while (m->gated && off >= m->gate_from)
		pthread_cond_wait(&m->gate, &m->lock);
	m->at_gate--;
	o = mock_find(m, key);
	if (m->fail < 0 && off >= m->fail_from) {
		n = m->fail;
	} else if (!o) {
		n = -ENOENT;
	} else {
		n = off >= o->len ? 0 : (ssize_t)(o->len - off < len ?
						  o->len - off : len);
		if (n > 0)
			memcpy(buf, o->buf + off, (size_t)n);
	}
	pthread_mutex_unlock(&m->lock);
	return n;
}

static int mock_del(struct nrs_objstore *s, const char *key)
{
	struct mock *m = (struct mock *)s;
	struct mobj **p;

	pthread_mutex_lock(&m->lock);
	for (p = &m->objs; *p; p = &(*p)->next) {
		if (strcmp((*p)->key, key) == 0) {
			struct mobj *o = *p;

			*p = o->next;
			free(o->buf);
			free(o);
			break;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static void mock_close(struct nrs_objstore *s)
{
	struct mock *m = (struct mock *)s;

	while (m->objs) {
		struct mobj *o = m->objs;

		m->objs = o->next;
		free(o->buf);
		free(o);
	}
	pthread_cond_destroy(&m->gate);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct nrs_objstore_ops mock_ops = {
	.name = "mock",
	.put = mock_put,
	.head = mock_head,
	.get = mock_get,
	.del = mock_del,
	.close = mock_close,
};

static struct mock *mock_new(void)
{
	struct mock *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->s.ops = &mock_ops;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->gate, NULL);
	return m;
}

/* The stored bytes of h's object, for a test to rot and mend. */
static unsigned char *mock_bytes(struct mock *m, const struct nrs_objhdr *h)
{
	char key[NRS_OBJKEY_MAX];
	struct mobj *o;

	assert_true(nrs_objfmt_key(key, h) > 0);
	o = mock_find(m, key);
	assert_non_null(o);
	return o->buf;
}

static unsigned mock_gets(struct mock *m)
{
	unsigned n;

	pthread_mutex_lock(&m->lock);
	n = m->gets;
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* ---- objects ---------------------------------------------------------- */

/* The byte at logical offset x of stream s: not periodic, so a block read
 * from the wrong place never passes for the right one. */
static unsigned char byte_at(uint64_t s, uint64_t x)
{
	uint64_t v = (x + 1) * 0x9e3779b97f4a7c15ull ^ s * 0xbf58476d1ce4e5b9ull;

	v ^= v >> 31;
	v *= 0x94d049bb133111ebull;
	return (unsigned char)(v >> 29);
}

/* Seal an object holding payload_of's bytes for range r, stored under the
 * key of as. */
static void put_obj_as(struct mock *m, const struct nrs_objhdr *r,
		       const struct nrs_objhdr *as)
{
	uint64_t plen = r->end - r->start;
	size_t hl = nrs_objfmt_hdr_len(plen);
	unsigned char *b = malloc(hl + plen);
	char key[NRS_OBJKEY_MAX];

	assert_non_null(b);
	for (uint64_t i = 0; i < plen; i++)
		b[hl + i] = byte_at(r->stream_id, r->start + i);
	assert_int_equal(nrs_objfmt_seal(b, r), 0);
	assert_true(nrs_objfmt_key(key, as) > 0);
	assert_int_equal(nrs_obj_put(&m->s, key, b, hl + plen, NULL, NULL), 0);
	free(b);
}

static void put_obj(struct mock *m, const struct nrs_objhdr *h)
{
	put_obj_as(m, h, h);
}

/* n objects of size bytes each, one after another from offset 0 of stream
 * id (generation 1), into h[0..n) and the store. */
static void put_objs(struct mock *m, struct nrs_objhdr *h, int n,
		     uint64_t id, uint64_t size)
{
	for (int i = 0; i < n; i++) {
		h[i] = (struct nrs_objhdr){ .stream_id = id,
					    .start = (uint64_t)i * size,
					    .end = (uint64_t)(i + 1) * size,
					    .gen = 1 };
		put_obj(m, &h[i]);
	}
}

/* Read [off, off + len) through c and compare with the expected bytes. */
static void check_read(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	assert_int_equal(nrs_bcache_read(c, h, off, len, buf), 0);
	assert_true(nrs_bcache_check(c));
	for (size_t i = 0; i < len; i++)
		if (buf[i] != byte_at(h->stream_id, off + i))
			fail_msg("stream %" PRIu64 " offset %" PRIu64
				 ": wrong byte", h->stream_id, off + i);
	free(buf);
}

/*
 * check_read, then wait for what it set off.  A prefetch thread writes a
 * block to the disk tier after it put it in memory, so the read may be
 * served before the file exists: a test that counts files or disk bytes
 * waits for the prefetches first (on a busy machine they lag behind).
 */
static void read_landed(struct nrs_bcache *c, const struct nrs_objhdr *h,
			uint64_t off, size_t len)
{
	check_read(c, h, off, len);
	nrs_bcache_drain(c);
}

static struct nrs_bcache_stats stats(struct nrs_bcache *c)
{
	struct nrs_bcache_stats st;

	nrs_bcache_stats(c, &st);
	return st;
}

static struct nrs_bcache *open_cache(struct mock *m, uint64_t mem,
				     const char *dir, uint64_t disk,
				     uint32_t readahead)
{
	struct nrs_bcache_opts o = {
		.mem_bytes = mem, .disk_dir = dir, .disk_bytes = disk,
		.readahead = readahead,
	};
	struct nrs_bcache *c = NULL;

	assert_int_equal(nrs_bcache_open(&o, &m->s, &c), 0);
	assert_non_null(c);
	return c;
}

/* ---- tests ------------------------------------------------------------ */

static void test_alignments(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 3, .start = 1000003,
				.end = 1000003 + 3 * BLK + 1000, .gen = 1 };
	static const size_t lens[] = { 1, 2, 4095, BLK - 1, BLK, BLK + 1,
				       2 * BLK + 3 };
	static const uint32_t ras[] = { BLK, 3 * BLK, MIB };

	put_obj(m, &h);
	for (uint64_t edge = 0; edge <= 3 * BLK; edge += BLK) {
		for (int d = -2; d <= 2; d++) {
			uint64_t rel = edge + (uint64_t)(int64_t)d;

			if ((int64_t)edge + d < 0)
				continue;
			for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]);
			     k++) {
				uint64_t len = lens[k];
				struct nrs_bcache *c;

				if (rel + len > h.end - h.start)
					len = h.end - h.start - rel;
				c = open_cache(m, 0, NULL, 0,
					       ras[(edge / BLK + k) % 3]);
				check_read(c, &h, h.start + rel, len);
				check_read(c, &h, h.start + rel, len);
				nrs_bcache_close(c);
			}
		}
	}
	/* The whole object, its last byte, and nothing. */
	{
		struct nrs_bcache *c = open_cache(m, 0, NULL, 0, 0);

		check_read(c, &h, h.start, h.end - h.start);
		check_read(c, &h, h.end - 1, 1);
		assert_int_equal(nrs_bcache_read(c, &h, h.end, 0, NULL), 0);
		nrs_bcache_close(c);
	}
}

static void test_hit_needs_no_get(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 4, .start = 0, .end = 3 * BLK,
				.gen = 2 };
	struct nrs_bcache *c;
	struct nrs_bcache_stats st;
	unsigned gets;

	put_obj(m, &h);
	c = open_cache(m, 0, NULL, 0, 0);
	check_read(c, &h, 100, 2 * BLK);
	gets = mock_gets(m);
	assert_int_equal(gets, 1);	/* header and blocks: one GET (B8) */
	st = stats(c);
	assert_int_equal(st.get_requests, gets);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.misses, 3);

	check_read(c, &h, 100, 2 * BLK);
	check_read(c, &h, BLK + 7, 10);
	assert_int_equal(mock_gets(m), gets);
	st = stats(c);
	assert_int_equal(st.hits, 4);
	assert_int_equal(st.misses, 3);
	assert_int_equal(st.bad_blocks, 0);
	assert_true(st.mem_bytes > 3 * BLK);
	nrs_bcache_close(c);
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * GETs [from, from + n) asked for the lengths want[0..n), in any order:
 * prefetch threads send theirs concurrently, and on a busy machine one
 * planned later may reach the store first.
 */
static void expect_get_lens(const struct mock *m, unsigned from,
			    const size_t *want, unsigned n)
{
	size_t got[8], exp[8];

	assert_true(n <= 8 && from + n <= MAX_GETS);
	memcpy(got, m->get_len + from, n * sizeof(*got));
	memcpy(exp, want, n * sizeof(*exp));
	qsort(got, n, sizeof(*got), cmp_size);
	qsort(exp, n, sizeof(*exp), cmp_size);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(got[i], exp[i]);
}

static void test_readahead(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 5, .start = 4096,
				.end = 4096 + 4 * MIB + 3 * BLK + 5,
				.gen = 1 };
	uint64_t plen = h.end - h.start;
	struct nrs_bcache *c;
	struct nrs_bcache_stats st;
	unsigned gets;

	put_obj(m, &h);

	/* Sequential in 128 KiB reads: the header with the first 1 MiB in
	 * one GET (B8), then the rest in one (BA3: 4 MiB after the first,
	 * cut at the object's end). */
	c = open_cache(m, 0, NULL, 0, 0);
	for (uint64_t at = 0; at < plen; at += 128 * KIB)
		check_read(c, &h, h.start + at,
			   plen - at < 128 * KIB ? plen - at : 128 * KIB);
	gets = mock_gets(m);
	assert_int_equal(gets, 2);
	assert_int_equal(m->get_len[0], nrs_objfmt_hdr_len(plen) + MIB);
	assert_int_equal(m->get_len[1], 3 * MIB + 3 * BLK + 5);
	/* A prefetch's bytes are counted when its GET ends, which may be
	 * after the read its blocks answered (BS1): wait for it. */
	nrs_bcache_drain(c);
	st = stats(c);
	assert_int_equal(st.get_bytes, nrs_objfmt_hdr_len(plen) + plen);
	nrs_bcache_close(c);

	/* The same reads arriving in pairs out of order (as the kernel's
	 * concurrent requests do) still read ahead: a handful of GETs, and
	 * no byte fetched twice. */
	c = open_cache(m, 0, NULL, 0, 0);
	for (uint64_t at = 0; at < plen; at += 256 * KIB) {
		for (int k = 1; k >= 0; k--) {
			uint64_t o = at + (uint64_t)k * 128 * KIB;

			if (o < plen)
				check_read(c, &h, h.start + o, plen - o < 128 * KIB ?
					   plen - o : 128 * KIB);
		}
	}
	assert_true(mock_gets(m) - gets <= 1 + 6);
	st = stats(c);
	assert_int_equal(st.get_bytes, nrs_objfmt_hdr_len(plen) + plen);
	nrs_bcache_close(c);
	gets = mock_gets(m);

	/* With a readahead of 1 MiB, the window stays at 1 MiB. */
	c = open_cache(m, 0, NULL, 0, MIB);
	for (uint64_t at = 0; at < plen; at += 128 * KIB)
		check_read(c, &h, h.start + at,
			   plen - at < 128 * KIB ? plen - at : 128 * KIB);
	assert_int_equal(mock_gets(m), gets + 5);
	assert_int_equal(m->get_len[gets], nrs_objfmt_hdr_len(plen) + MIB);
	expect_get_lens(m, gets + 1, (const size_t[]){ MIB, MIB, MIB,
						       3 * BLK + 5 }, 4);
	nrs_bcache_close(c);
	gets = mock_gets(m);

	/* A read at the start, which might be the first of many, fetches
	 * one window, with the header: no more unless the reader goes on. */
	c = open_cache(m, 0, NULL, 0, 0);
	check_read(c, &h, h.start, 4096);
	nrs_bcache_drain(c);
	assert_int_equal(mock_gets(m), gets + 1);
	assert_int_equal(m->get_len[gets], nrs_objfmt_hdr_len(plen) + MIB);
	nrs_bcache_close(c);
	gets = mock_gets(m);

	/* A read in the middle fetches only what it wants... */
	c = open_cache(m, 0, NULL, 0, 0);
	check_read(c, &h, h.start + 2 * MIB + 100, 4096);
	nrs_bcache_drain(c);
	assert_int_equal(mock_gets(m), gets + 2);
	assert_int_equal(m->get_len[gets + 1], BLK);
	/* ...and one that continues it reads ahead, up to 1 MiB. */
	check_read(c, &h, h.start + 2 * MIB + 100 + 4096, 2 * BLK);
	assert_int_equal(mock_gets(m), gets + 3);
	assert_int_equal(m->get_len[gets + 2], MIB);
	/* A wide random read needs as few GETs as the readahead allows:
	 * one, up to the blocks cached above. */
	check_read(c, &h, h.start + 10, 2 * MIB);
	assert_int_equal(mock_gets(m), gets + 4);
	assert_int_equal(m->get_len[gets + 3], 2 * MIB);
	nrs_bcache_close(c);
}

struct gated_read {
	struct nrs_bcache *c;
	const struct nrs_objhdr *h;
	uint64_t off;
	size_t len;
	int err;
	pthread_t t;
};

static void *gated_reader(void *arg)
{
	struct gated_read *g = arg;
	unsigned char *buf = malloc(g->len);

	g->err = buf ? nrs_bcache_read(g->c, g->h, g->off, g->len, buf)
		     : -ENOMEM;
	for (size_t i = 0; buf && !g->err && i < g->len; i++)
		if (buf[i] != byte_at(g->h->stream_id, g->off + i))
			g->err = -EILSEQ;
	free(buf);
	return NULL;
}

/* Hold GETs at the gate until n of them wait there.  The deadline is no
 * timing: a cache that works gets there at once, one that does not would
 * otherwise hang the suite. */
static void gate_wait(struct mock *m, unsigned n)
{
	struct timespec dl;
	int err = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 120;
	pthread_mutex_lock(&m->lock);
	while (m->at_gate < n && err != ETIMEDOUT)
		err = pthread_cond_timedwait(&m->gate, &m->lock, &dl);
	pthread_mutex_unlock(&m->lock);
	if (err == ETIMEDOUT)
		fail_msg("%u GETs never waited at the gate together", n);
}

static void gate_set(struct mock *m, bool gated, int fail)
{
	pthread_mutex_lock(&m->lock);
	m->gated = gated;
	m->fail = fail;
	pthread_cond_broadcast(&m->gate);
	pthread_mutex_unlock(&m->lock);
}

/* Gate and fail only GETs at or past these offsets of an object. */
static void gate_from(struct mock *m, uint64_t gate_at, uint64_t fail_at)
{
	pthread_mutex_lock(&m->lock);
	m->gate_from = gate_at;
	m->fail_from = fail_at;
	pthread_mutex_unlock(&m->lock);
}

/* Where block idx of h's object starts in the object. */
static uint64_t blk_off(const struct nrs_objhdr *h, uint32_t idx)
{
	return nrs_objfmt_hdr_len(h->end - h->start) + idx * BLK;
}

/* Reader a's GET of blocks 10-11 is held; reader b, continuing it, wants
 * blocks 11-12: b sends no GET for block 11, whose flight it waits for,
 * but its prefetch fetches from block 12 on; no block is fetched twice.
 * If the GETs fail, b fetches its block for itself (and never hangs), and
 * fails, having asked for it. */
static void test_flights(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 70, .start = 0, .end = 40 * BLK,
				.gen = 1 };
	struct gated_read a, b;
	struct nrs_bcache *c;
	uint64_t bytes;
	unsigned gets;

	put_obj(m, &h);
	for (int fail = 0; fail >= -EIO; fail -= EIO) {
		c = open_cache(m, 0, NULL, 0, 0);
		check_read(c, &h, h.end - 1, 1);	/* the header, cached */
		gets = mock_gets(m);
		bytes = stats(c).get_bytes;
		gate_set(m, true, 0);
		a = (struct gated_read){ .c = c, .h = &h, .off = 10 * BLK + 5,
					 .len = 2 * BLK - 5 };
		assert_int_equal(pthread_create(&a.t, NULL, gated_reader, &a), 0);
		gate_wait(m, 1);		/* a's GET of blocks 10-11 */
		b = (struct gated_read){ .c = c, .h = &h, .off = 11 * BLK,
					 .len = 2 * BLK };
		assert_int_equal(pthread_create(&b.t, NULL, gated_reader, &b), 0);
		gate_wait(m, 2);		/* b's prefetch, of 12-27 */
		gate_set(m, false, fail);
		assert_int_equal(pthread_join(a.t, NULL), 0);
		assert_int_equal(pthread_join(b.t, NULL), 0);
		nrs_bcache_drain(c);
		assert_int_equal(a.err, fail);
		assert_int_equal(b.err, fail);
		if (!fail) {
			assert_int_equal(mock_gets(m), gets + 2);
			assert_int_equal(m->get_len[gets], 2 * BLK);
			assert_int_equal(m->get_len[gets + 1], 16 * BLK);
			assert_int_equal(stats(c).get_bytes - bytes, 18 * BLK);
		} else {
			/* a's, b's prefetch, then b's own */
			assert_int_equal(mock_gets(m), gets + 3);
		}
		assert_true(nrs_bcache_check(c));
		nrs_bcache_close(c);
		gate_set(m, false, 0);
	}
}

/* A sequential reader has several GETs in flight at once, ahead of it:
 * here four, of readahead bytes each, while it waits for the first; and
 * none fetches a block twice. */
static void test_prefetch_parallel(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 71, .start = 0, .end = 64 * BLK,
				.gen = 1 };
	struct gated_read a;
	struct nrs_bcache *c;
	uint64_t bytes;
	unsigned gets;

	put_obj(m, &h);
	c = open_cache(m, 0, NULL, 0, 4 * BLK);
	check_read(c, &h, h.end - 1, 1);	/* the header, block 63 */
	gets = mock_gets(m);
	bytes = stats(c).get_bytes;
	gate_set(m, true, 0);
	a = (struct gated_read){ .c = c, .h = &h, .off = 0, .len = 8 * BLK };
	assert_int_equal(pthread_create(&a.t, NULL, gated_reader, &a), 0);
	gate_wait(m, 4);			/* blocks 0-15, in fours */
	assert_int_equal(mock_gets(m), gets + 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(m->get_len[gets + i], 4 * BLK);
	assert_true(nrs_bcache_check(c));
	gate_set(m, false, 0);
	assert_int_equal(pthread_join(a.t, NULL), 0);
	assert_int_equal(a.err, 0);
	for (uint64_t at = 8 * BLK; at < h.end; at += 8 * BLK)
		check_read(c, &h, at, 8 * BLK);
	nrs_bcache_drain(c);
	assert_int_equal(stats(c).get_bytes - bytes, 63 * BLK);
	assert_true(nrs_bcache_check(c));
	nrs_bcache_close(c);
}

/* Prefetches that fail (a store error, a bad block) fail no read: the
 * reader that set them off gets its bytes, a reader of the bytes they
 * failed to fetch fetches them itself, and fails only if its own GET
 * does; nothing bad is cached. */
static void test_prefetch_failure(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 72, .start = 0, .end = 64 * BLK,
				.gen = 1 };
	static unsigned char buf[4 * BLK];
	struct gated_read a;
	struct nrs_bcache *c;
	unsigned char *stored;
	unsigned gets;

	put_obj(m, &h);
	c = open_cache(m, 0, NULL, 0, 4 * BLK);
	check_read(c, &h, h.end - 1, 1);
	gate_from(m, blk_off(&h, 8), blk_off(&h, 8));
	gate_set(m, true, 0);
	a = (struct gated_read){ .c = c, .h = &h, .off = 0, .len = 8 * BLK };
	assert_int_equal(pthread_create(&a.t, NULL, gated_reader, &a), 0);
	assert_int_equal(pthread_join(a.t, NULL), 0);
	assert_int_equal(a.err, 0);		/* blocks 0-7 landed */
	gate_wait(m, 2);			/* the prefetches of 8-15 */
	gate_set(m, false, -EIO);		/* fail */
	nrs_bcache_drain(c);
	assert_true(nrs_bcache_check(c));
	/* A reader of those bytes asks the store itself: still failing, it
	 * fails; mended, it reads. */
	gets = mock_gets(m);
	assert_int_equal(nrs_bcache_read(c, &h, 8 * BLK, BLK, buf), -EIO);
	nrs_bcache_drain(c);
	/* its own GET, and its prefetch of 16-19 */
	assert_int_equal(mock_gets(m), gets + 2);
	gate_set(m, false, 0);
	gate_from(m, 0, 0);
	for (uint64_t at = 8 * BLK; at < h.end; at += 4 * BLK)
		check_read(c, &h, at, 4 * BLK);
	assert_int_equal(stats(c).bad_blocks, 0);
	nrs_bcache_close(c);

	/* A bad block in a prefetch: counted, not cached, fails the one
	 * read that wants it. */
	stored = mock_bytes(m, &h);
	stored[blk_off(&h, 20) + 99] ^= 0x10;
	c = open_cache(m, 0, NULL, 0, 4 * BLK);
	for (uint64_t at = 0; at < 20 * BLK; at += 4 * BLK)
		check_read(c, &h, at, 4 * BLK);
	nrs_bcache_drain(c);
	assert_int_equal(stats(c).bad_blocks, 1);
	assert_int_equal(nrs_bcache_read(c, &h, 20 * BLK, 4 * BLK, buf),
			 -EBADMSG);
	nrs_bcache_drain(c);
	assert_true(stats(c).bad_blocks >= 2);
	check_read(c, &h, 24 * BLK, 4 * BLK);
	stored[blk_off(&h, 20) + 99] ^= 0x10;
	check_read(c, &h, 20 * BLK, 4 * BLK);
	nrs_bcache_close(c);
}

/* With a memory tier of a few blocks, a sequential reader's prefetches
 * stay within it and never evict what it has yet to read: every block is
 * fetched once. */
static void test_prefetch_budget(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 73, .start = 0, .end = 64 * BLK,
				.gen = 1 };
	const uint64_t budget = 12 * (BLK + 256) + 4096;
	struct nrs_bcache *c;

	put_obj(m, &h);
	c = open_cache(m, budget, NULL, 0, 4 * BLK);
	for (uint64_t at = 0; at < h.end; at += 2 * BLK) {
		check_read(c, &h, at, 2 * BLK);
		assert_true(stats(c).mem_bytes <= budget);
	}
	nrs_bcache_drain(c);
	assert_true(nrs_bcache_check(c));
	assert_int_equal(stats(c).get_bytes,
			 nrs_objfmt_hdr_len(h.end - h.start) + h.end - h.start);
	nrs_bcache_close(c);
}

/* Named by the reader as the objects that follow, the next objects of a
 * stream are prefetched while a sequential reader is still in the one
 * before, and no block nor header is fetched twice.  A GET at an object's
 * start (the header and first run of h[0], then of h[1]) passes the gate;
 * h[1]'s second run waits there beside h[0]'s.  (Before B8 this test
 * waited for h[1]'s header at the gate twice: the two prefetches into
 * h[1] each fetched it.) */
static void test_prefetch_follow(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h[3];
	size_t hl = nrs_objfmt_hdr_len(8 * BLK);
	struct gated_read a;
	struct nrs_bcache *c;
	uint64_t bytes = 0;
	unsigned gets;

	put_objs(m, h, 3, 75, 8 * BLK);
	c = open_cache(m, 0, NULL, 0, 4 * BLK);
	nrs_bcache_follow(c, &h[0], &h[1], 2);
	gets = mock_gets(m);
	gate_from(m, 1, 0);			/* not at an object's start */
	gate_set(m, true, 0);
	a = (struct gated_read){ .c = c, .h = &h[0], .off = 0, .len = 8 * BLK };
	assert_int_equal(pthread_create(&a.t, NULL, gated_reader, &a), 0);
	gate_wait(m, 2);	/* h[0]'s second run, h[1]'s second */
	gate_set(m, false, 0);
	assert_int_equal(pthread_join(a.t, NULL), 0);
	assert_int_equal(a.err, 0);
	nrs_bcache_follow(c, &h[1], &h[2], 1);
	for (uint64_t at = 8 * BLK; at < 16 * BLK; at += 4 * BLK)
		check_read(c, &h[1], at, 4 * BLK);
	nrs_bcache_drain(c);
	for (uint64_t at = 16 * BLK; at < 24 * BLK; at += 4 * BLK)
		check_read(c, &h[2], at, 4 * BLK);
	nrs_bcache_drain(c);
	for (unsigned i = gets; i < mock_gets(m); i++)
		bytes += m->get_len[i];
	assert_int_equal(bytes, 24 * BLK + 3 * hl);
	/* A hint that does not follow is ignored. */
	nrs_bcache_follow(c, &h[0], &h[2], 1);
	nrs_bcache_follow(c, &h[2], &h[0], 1);
	nrs_bcache_follow(c, &h[0], NULL, 0);
	assert_true(nrs_bcache_check(c));
	nrs_bcache_close(c);
}

/* At gate: wait up to ms for n GETs there; true if they came. */
static bool gate_reached(struct mock *m, unsigned n, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		bool there;

		pthread_mutex_lock(&m->lock);
		there = m->at_gate >= n;
		pthread_mutex_unlock(&m->lock);
		if (there)
			return true;
		usleep(10000);
	}
	return false;
}

/* B8: a reader that misses a header another reader is fetching waits for
 * it rather than fetching it again; if that GET fails, it fetches for
 * itself (and fails on its own) rather than hang. */
static void test_header_once(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 77, .start = 0, .end = 64 * BLK,
				.gen = 1 };
	struct gated_read a, b;
	struct nrs_bcache *c;
	unsigned gets;
	bool dup;

	put_obj(m, &h);
	for (int fail = 0; fail >= -EIO; fail -= EIO) {
		c = open_cache(m, 0, NULL, 0, 0);
		gets = mock_gets(m);
		gate_set(m, true, 0);
		/* far apart, neither at the start: no run, no prefetch */
		a = (struct gated_read){ .c = c, .h = &h, .off = 2 * BLK,
					 .len = 100 };
		assert_int_equal(pthread_create(&a.t, NULL, gated_reader, &a), 0);
		gate_wait(m, 1);		/* a's header GET */
		b = (struct gated_read){ .c = c, .h = &h, .off = 40 * BLK,
					 .len = 100 };
		assert_int_equal(pthread_create(&b.t, NULL, gated_reader, &b), 0);
		/* b waits for a's header, sends no GET of its own */
		dup = gate_reached(m, 2, 300);
		gate_set(m, false, fail);
		assert_int_equal(pthread_join(a.t, NULL), 0);
		assert_int_equal(pthread_join(b.t, NULL), 0);
		assert_false(dup);
		assert_int_equal(a.err, fail);
		assert_int_equal(b.err, fail);
		/* a's header and block; b's block; failing: b's header too */
		assert_int_equal(mock_gets(m), gets + (fail ? 2 : 3));
		assert_true(nrs_bcache_check(c));
		nrs_bcache_close(c);
	}
}

/* Two objects of size bytes of stream id in h[0..2) and the store, a
 * cache over them (tier mem, readahead ra; 0: the defaults) told that
 * h[1] follows h[0]; *gets = the GETs sent so far. */
static struct nrs_bcache *open_followed(struct mock *m, struct nrs_objhdr *h,
					uint64_t id, uint64_t size,
					uint64_t mem, uint32_t ra,
					unsigned *gets)
{
	struct nrs_bcache *c;

	put_objs(m, h, 2, id, size);
	c = open_cache(m, mem, NULL, 0, ra);
	nrs_bcache_follow(c, &h[0], &h[1], 1);
	*gets = mock_gets(m);
	return c;
}

/* B8: a read from an object's start fetches its header and first window
 * in one GET; so does a prefetch into the next object, with its run. */
static void test_header_with_first_run(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h[2];
	size_t hl = nrs_objfmt_hdr_len(4 * BLK);
	unsigned gets;
	struct nrs_bcache *c = open_followed(m, h, 78, 4 * BLK, 0, 4 * BLK,
					     &gets);

	check_read(c, &h[0], 0, 4 * BLK);
	nrs_bcache_drain(c);			/* the prefetch into h[1] */
	check_read(c, &h[1], 4 * BLK, 4 * BLK);
	nrs_bcache_drain(c);
	assert_int_equal(mock_gets(m), gets + 2);
	assert_int_equal(m->get_len[gets], hl + 4 * BLK);
	assert_int_equal(m->get_len[gets + 1], hl + 4 * BLK);
	assert_int_equal(stats(c).misses, 4);
	nrs_bcache_close(c);
}

/* BA1, BA2, BA3: a sequential reader's window is the readahead unless a
 * third of the bytes that may be read ahead is less; the first one is
 * SEQ_FIRST (1 MiB), with the header; then (BA3) each RA_GROW (4) times
 * the one before: 4 MiB, then the rest of that object, then whole
 * windows.  With the defaults (BA2: 128 MiB, 16 MiB) an object of the
 * default size (16 MiB) that the reader reaches by prefetch comes whole
 * in one GET with its header; with a 64 MiB tier BA1 cuts the window to
 * 170 blocks (10.6 MiB), and it comes in two. */
static void test_prefetch_window(void **state)
{
	static const struct {
		uint64_t mem;
		unsigned n;		/* GETs after the first */
		unsigned next;		/* which one has h[1]'s header */
		size_t lens[7];
	} cases[] = {
		{ 0, 3, 2, { 4 * MIB, 11 * MIB, 16 * MIB } },
		{ 64 * MIB, 5, 3, { 64 * BLK, 170 * BLK, 6 * BLK, 170 * BLK,
				    86 * BLK } },
	};
	struct mock *m = *state;
	size_t hl = nrs_objfmt_hdr_len(16 * MIB);

	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct nrs_objhdr h[2];
		size_t lens[7];
		unsigned gets;
		struct nrs_bcache *c = open_followed(m, h, 79 + k, 16 * MIB,
						     cases[k].mem, 0, &gets);

		for (int i = 0; i < 2; i++)
			for (uint64_t at = h[i].start; at < h[i].end;
			     at += 128 * KIB)
				check_read(c, &h[i], at, 128 * KIB);
		nrs_bcache_drain(c);
		assert_int_equal(mock_gets(m), gets + 1 + cases[k].n);
		assert_int_equal(m->get_len[gets], hl + MIB);
		memcpy(lens, cases[k].lens, sizeof(lens));
		lens[cases[k].next] += hl;	/* with h[1]'s first run */
		expect_get_lens(m, gets + 1, lens, cases[k].n);
		assert_int_equal(stats(c).bad_blocks, 0);
		nrs_bcache_close(c);
	}
}

/* BA3: a reader that stops just past its first window (1 MiB, which came
 * with the header) has had the next window, 4 MiB, fetched ahead, and
 * nothing more: not the rest of the object and the next one (31 MiB). */
static void test_prefetch_stops_early(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h[2];
	size_t hl = nrs_objfmt_hdr_len(16 * MIB);
	unsigned gets;
	struct nrs_bcache *c = open_followed(m, h, 81, 16 * MIB, 0, 0, &gets);

	for (uint64_t at = 0; at < MIB + 128 * KIB; at += 128 * KIB)
		check_read(c, &h[0], at, 128 * KIB);
	nrs_bcache_drain(c);
	assert_int_equal(mock_gets(m), gets + 2);
	assert_int_equal(m->get_len[gets], hl + MIB);
	assert_int_equal(m->get_len[gets + 1], 4 * MIB);
	assert_int_equal(stats(c).get_bytes, hl + 5 * MIB);
	nrs_bcache_close(c);
}

/* BA3: a run whose first GET is a prefetch (the header was cached: here
 * by a read of the last block) grows its windows as one whose first came
 * with the header: 1 MiB, 4 MiB, then the rest of the object, up to the
 * block held. */
static void test_prefetch_first_window_once(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h;
	unsigned gets;
	struct nrs_bcache *c;

	put_objs(m, &h, 1, 82, 16 * MIB);
	c = open_cache(m, 0, NULL, 0, 0);
	check_read(c, &h, h.end - BLK, BLK);	/* header, then that block */
	gets = mock_gets(m);
	for (uint64_t at = 0; at < h.end - BLK; at += 128 * KIB)
		check_read(c, &h, at, 128 * KIB);
	nrs_bcache_drain(c);
	assert_int_equal(mock_gets(m), gets + 3);
	expect_get_lens(m, gets, (const size_t[]){ MIB, 4 * MIB,
						   11 * MIB - BLK }, 3);
	nrs_bcache_close(c);
}

/* A following object's header entry, cached but unreferenced and the
 * least recently used, may be evicted by the room a prefetch into that
 * object makes: the prefetch must not hold on to it (it looked it up
 * before making room once; the sanitizers caught the use after free). */
static void test_prefetch_follow_evicts_header(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h[2];
	const uint64_t budget = 20 * (BLK + 256) + 4096;
	struct nrs_bcache *c;

	put_objs(m, h, 2, 76, 16 * BLK);
	c = open_cache(m, budget, NULL, 0, 4 * BLK);
	check_read(c, &h[1], 20 * BLK, BLK);	/* h[1]'s header, oldest */
	nrs_bcache_follow(c, &h[0], &h[1], 1);
	for (uint64_t at = 0; at < h[0].end; at += 2 * BLK) {
		check_read(c, &h[0], at, 2 * BLK);
		assert_true(stats(c).mem_bytes <= budget);
	}
	for (uint64_t at = h[1].start; at < h[1].end; at += 2 * BLK)
		check_read(c, &h[1], at, 2 * BLK);
	nrs_bcache_drain(c);
	assert_true(nrs_bcache_check(c));
	nrs_bcache_close(c);
}

static void *closer(void *arg)
{
	nrs_bcache_close(arg);
	return NULL;
}

/* Closing with prefetches held in their GETs waits for them and frees
 * everything (the sanitizers' leak check says so), whether they succeed
 * or fail. */
static void test_prefetch_close(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 74, .start = 0, .end = 64 * BLK,
				.gen = 1 };
	struct nrs_bcache *c;
	pthread_t t;

	put_obj(m, &h);
	for (int fail = 0; fail >= -EIO; fail -= EIO) {
		c = open_cache(m, 0, NULL, 0, 4 * BLK);
		check_read(c, &h, h.end - 1, 1);
		gate_from(m, blk_off(&h, 8), 0);
		gate_set(m, true, 0);
		check_read(c, &h, 0, 8 * BLK);
		gate_wait(m, 2);
		assert_int_equal(pthread_create(&t, NULL, closer, c), 0);
		gate_set(m, false, fail);
		assert_int_equal(pthread_join(t, NULL), 0);
		gate_set(m, false, 0);
		gate_from(m, 0, 0);
	}
}

static void test_corrupt_block(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 6, .start = 0, .end = 4 * BLK,
				.gen = 1 };
	size_t hl = nrs_objfmt_hdr_len(h.end - h.start);
	static unsigned char buf[2 * BLK];
	unsigned char *stored;
	struct nrs_bcache *c;
	struct nrs_bcache_stats st;
	unsigned gets;

	put_obj(m, &h);
	stored = mock_bytes(m, &h);
	stored[hl + 2 * BLK + 777] ^= 0x40;
	c = open_cache(m, 0, NULL, 0, 0);

	/* Block 0 reads ahead over the bad block 2: counted, no error. */
	check_read(c, &h, 0, 100);
	nrs_bcache_drain(c);
	st = stats(c);
	assert_int_equal(st.bad_blocks, 1);
	/* Reading it fails, every time from the store: never cached.  (The
	 * prefetches were planned to the object's end by the first read:
	 * these reads fetch for themselves.) */
	gets = mock_gets(m);
	assert_int_equal(nrs_bcache_read(c, &h, 2 * BLK + 5, 10, buf),
			 -EBADMSG);
	assert_int_equal(nrs_bcache_read(c, &h, 2 * BLK + 5, 10, buf),
			 -EBADMSG);
	assert_int_equal(mock_gets(m), gets + 2);
	/* A read spanning it fails too. */
	assert_int_equal(nrs_bcache_read(c, &h, BLK, 2 * BLK, buf), -EBADMSG);
	nrs_bcache_drain(c);
	st = stats(c);
	assert_int_equal(st.bad_blocks, 4);
	/* The others still read. */
	check_read(c, &h, 0, 2 * BLK);
	check_read(c, &h, 3 * BLK, BLK);
	/* Mended, it reads: nothing bad was cached. */
	stored[hl + 2 * BLK + 777] ^= 0x40;
	check_read(c, &h, 0, h.end);
	assert_int_equal(stats(c).bad_blocks, 4);
	nrs_bcache_close(c);
}

static void test_bad_objects(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 7, .start = 0, .end = 2 * BLK,
				.gen = 1 };
	struct nrs_objhdr other = h, missing = h, trunc = h, rot = h;
	unsigned char buf[64], *stored;
	struct nrs_bcache *c;

	/* Under h's key, the object of another generation, another range. */
	other.gen = 2;
	put_obj_as(m, &other, &h);
	other = h;
	other.end = 2 * BLK - 1;
	missing.gen = 9;
	put_obj_as(m, &other, &missing);
	c = open_cache(m, 0, NULL, 0, 0);
	assert_int_equal(nrs_bcache_read(c, &h, 0, 10, buf), -EBADMSG);
	assert_int_equal(nrs_bcache_read(c, &missing, 0, 10, buf), -EBADMSG);
	assert_int_equal(stats(c).bad_blocks, 2);

	/* Missing; store failing. */
	missing.gen = 10;
	assert_int_equal(nrs_bcache_read(c, &missing, 0, 10, buf), -ENOENT);
	rot.gen = 3;
	put_obj(m, &rot);
	m->fail = -ETIMEDOUT;
	assert_int_equal(nrs_bcache_read(c, &rot, 0, 10, buf), -ETIMEDOUT);
	m->fail = 0;

	/* Header rot, table rot. */
	stored = mock_bytes(m, &rot);
	stored[20] ^= 1;
	assert_int_equal(nrs_bcache_read(c, &rot, 0, 10, buf), -EBADMSG);
	stored[20] ^= 1;
	stored[NRS_OBJ_FIXED + 1] ^= 1;
	assert_int_equal(nrs_bcache_read(c, &rot, 0, 10, buf), -EBADMSG);
	stored[NRS_OBJ_FIXED + 1] ^= 1;
	check_read(c, &rot, 0, 10);

	/* A newer format version: refused, not misread. */
	trunc.gen = 4;
	put_obj(m, &trunc);
	stored = mock_bytes(m, &trunc);
	nrs_le16_put(stored + 4, 2);	/* as a newer writer would */
	nrs_le32_put(stored + 60, nrs_crc32c(0, stored, 60));
	assert_int_equal(nrs_bcache_read(c, &trunc, 0, 10, buf), -EPROTO);

	/* Cut short: the header is fine, the last block is missing. */
	trunc.gen = 5;
	put_obj(m, &trunc);
	{
		char key[NRS_OBJKEY_MAX];
		struct mobj *o;

		nrs_objfmt_key(key, &trunc);
		o = mock_find(m, key);
		o->len -= 3;
	}
	check_read(c, &trunc, 0, BLK);
	assert_int_equal(nrs_bcache_read(c, &trunc, BLK, 10, buf), -EBADMSG);
	nrs_bcache_close(c);
}

static void test_mem_budget(void **state)
{
	struct mock *m = *state;
	const uint64_t budget = 512 * KIB;
	struct nrs_objhdr h[20];
	struct nrs_bcache *c;
	struct nrs_bcache_stats st;

	for (int i = 0; i < 20; i++) {
		h[i] = (struct nrs_objhdr){ .stream_id = 100 + (uint64_t)i,
					    .start = 5, .end = 5 + 200 * KIB,
					    .gen = 1 };
		put_obj(m, &h[i]);
	}
	c = open_cache(m, budget, NULL, 0, 0);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 20; i++) {
			check_read(c, &h[i], 5, 200 * KIB);
			assert_true(stats(c).mem_bytes <= budget);
		}
	}
	st = stats(c);
	assert_true(st.mem_bytes > budget / 2);
	assert_int_equal(st.disk_hits, 0);
	/* Smaller than one block: no block fits, reads still work. */
	nrs_bcache_close(c);
	c = open_cache(m, 1000, NULL, 0, 0);
	check_read(c, &h[0], 5, 200 * KIB);
	check_read(c, &h[0], 5, 200 * KIB);
	assert_true(stats(c).mem_bytes <= 1000);
	assert_int_equal(stats(c).hits, 0);
	nrs_bcache_close(c);
}

/* ---- the disk tier ---------------------------------------------------- */

static char *make_tmpdir(void)
{
	char *dir = malloc(PATH_MAX);

	assert_non_null(dir);
	assert_int_equal(nrs_fixture_mkdtemp(dir, PATH_MAX, "test_bcache"), 0);
	return dir;
}

static void rm_tree(const char *dir)
{
	assert_int_equal(nrs_fixture_rmtree(dir), 0);
}

/* Files in dir whose names end in .blk, and their bytes. */
static unsigned count_blk(const char *dir, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[4096];
	unsigned n = 0;
	struct stat st;

	assert_non_null(d);
	*bytes = 0;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);

		if (l < 4 || strcmp(de->d_name + l - 4, ".blk") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		assert_int_equal(stat(path, &st), 0);
		*bytes += (uint64_t)st.st_size;
		n++;
	}
	closedir(d);
	return n;
}

static void blk_path(char *path, size_t size, const char *dir,
		     const struct nrs_objhdr *h, uint32_t idx)
{
	snprintf(path, size,
		 "%s/%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64
		 "-%08" PRIx32 ".blk", dir, h->stream_id, h->start, h->end,
		 h->gen, idx);
}

static void flip_file_byte(const char *path, off_t at)
{
	unsigned char b;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x08;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static void test_disk_tier(void **state)
{
	struct mock *m = *state;
	char *dir = make_tmpdir();
	struct nrs_objhdr a = { .stream_id = 20, .start = 0, .end = MIB,
				.gen = 1 };
	struct nrs_objhdr b = { .stream_id = 21, .start = 0, .end = MIB,
				.gen = 1 };
	struct nrs_bcache *c, *c2 = NULL;
	struct nrs_bcache_opts o = { .disk_dir = dir };
	struct nrs_bcache_stats st;
	char path[4096];
	unsigned gets;
	uint64_t bytes;
	int fd;

	put_obj(m, &a);
	put_obj(m, &b);
	/* Memory holds about half an object. */
	c = open_cache(m, 600 * KIB, dir, 64 * MIB, 0);
	assert_int_equal(nrs_bcache_open(&o, &m->s, &c2), -EBUSY);
	read_landed(c, &a, 0, MIB);
	assert_int_equal(count_blk(dir, &bytes), 16);
	assert_int_equal(bytes, MIB);
	read_landed(c, &b, 0, MIB);		/* evicts a from memory */
	assert_int_equal(stats(c).disk_bytes, 2 * MIB);

	/* a comes back from disk: at most its header is fetched. */
	gets = mock_gets(m);
	read_landed(c, &a, 0, MIB);
	assert_true(mock_gets(m) <= gets + 1);
	st = stats(c);
	assert_true(st.disk_hits >= 8);

	/* Rot on disk is caught and the block refetched from the store. */
	read_landed(c, &b, 0, MIB);		/* evicts a again */
	blk_path(path, sizeof(path), dir, &a, 3);
	flip_file_byte(path, 1234);
	gets = mock_gets(m);
	read_landed(c, &a, 0, MIB);
	assert_int_equal(stats(c).bad_blocks, st.bad_blocks + 1);
	assert_true(mock_gets(m) >= gets + 1);
	assert_true(mock_gets(m) <= gets + 2);	/* header, block 3 */
	/* The bad file was replaced by the verified block. */
	read_landed(c, &b, 0, MIB);
	read_landed(c, &a, 3 * BLK, BLK);
	assert_int_equal(stats(c).bad_blocks, st.bad_blocks + 1);
	nrs_bcache_close(c);

	/* Reopened: the blocks are reused, verified; leftovers of a crash go,
	 * files that are not ours stay. */
	snprintf(path, sizeof(path), "%s/.tmp-1-1", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/README", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	blk_path(path, sizeof(path), dir, &b, 5);
	flip_file_byte(path, 0);
	c = open_cache(m, 0, dir, 64 * MIB, 0);
	assert_int_equal(stats(c).disk_bytes, 2 * MIB);
	snprintf(path, sizeof(path), "%s/.tmp-1-1", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/README", dir);
	assert_int_equal(access(path, F_OK), 0);
	gets = mock_gets(m);
	read_landed(c, &a, 0, MIB);
	read_landed(c, &b, 0, MIB);
	st = stats(c);
	assert_int_equal(st.disk_hits, 31);
	assert_int_equal(st.bad_blocks, 1);
	assert_int_equal(mock_gets(m), gets + 3);	/* 2 headers, b's 5 */
	nrs_bcache_close(c);
	rm_tree(dir);
	free(dir);
}

static void test_disk_budget(void **state)
{
	struct mock *m = *state;
	char *dir = make_tmpdir();
	const uint64_t budget = 10 * BLK;
	struct nrs_objhdr h[6];
	struct nrs_bcache *c;
	uint64_t bytes;

	c = open_cache(m, 2 * BLK, dir, budget, 0);
	for (int i = 0; i < 6; i++) {
		h[i] = (struct nrs_objhdr){ .stream_id = 30 + (uint64_t)i,
					    .start = 0, .end = 3 * BLK + 1,
					    .gen = 1 };
		put_obj(m, &h[i]);
		read_landed(c, &h[i], 0, 3 * BLK + 1);
		assert_true(stats(c).disk_bytes <= budget);
		count_blk(dir, &bytes);
		assert_true(bytes <= budget);
	}
	for (int i = 0; i < 6; i++)
		read_landed(c, &h[i], 0, 3 * BLK + 1);
	nrs_bcache_close(c);
	rm_tree(dir);
	free(dir);
}

static void test_forget(void **state)
{
	struct mock *m = *state;
	char *dir = make_tmpdir();
	struct nrs_objhdr a = { .stream_id = 40, .start = 7, .end = 7 + 3 * BLK,
				.gen = 1 };
	struct nrs_objhdr b = a;
	struct nrs_bcache *c;
	uint64_t bytes, mem_b;
	unsigned gets;

	b.gen = 2;
	put_obj(m, &a);
	put_obj(m, &b);
	c = open_cache(m, 0, dir, 0, 0);
	read_landed(c, &b, 7, 3 * BLK);
	mem_b = stats(c).mem_bytes;
	read_landed(c, &a, 7, 3 * BLK);
	assert_int_equal(count_blk(dir, &bytes), 6);
	nrs_bcache_forget(c, &a);
	assert_true(nrs_bcache_check(c));
	assert_int_equal(stats(c).mem_bytes, mem_b);
	assert_int_equal(stats(c).disk_bytes, 3 * BLK);
	assert_int_equal(count_blk(dir, &bytes), 3);
	gets = mock_gets(m);
	read_landed(c, &a, 7, 10);
	assert_true(mock_gets(m) > gets);
	gets = mock_gets(m);
	read_landed(c, &b, 7, 3 * BLK);
	assert_int_equal(mock_gets(m), gets);
	/* Forgetting what was never cached, or nonsense, is harmless. */
	b.gen = 77;
	nrs_bcache_forget(c, &b);
	b.gen = 0;
	nrs_bcache_forget(c, &b);
	nrs_bcache_forget(c, NULL);
	nrs_bcache_close(c);
	rm_tree(dir);
	free(dir);
}

/* ---- concurrent readers ----------------------------------------------- */

struct worker {
	struct nrs_bcache *c;
	const struct nrs_objhdr *objs;
	int nobjs;
	unsigned seed;
	int bad;
};

static void *reader(void *arg)
{
	struct worker *w = arg;
	unsigned char *buf = malloc(3 * BLK);

	if (!buf) {
		w->bad++;
		return NULL;
	}
	for (int i = 0; i < 300; i++) {
		const struct nrs_objhdr *h = &w->objs[rand_r(&w->seed) %
						      (unsigned)w->nobjs];
		uint64_t plen = h->end - h->start;
		uint64_t rel = (uint64_t)rand_r(&w->seed) % plen;
		size_t len = (size_t)rand_r(&w->seed) % (3 * BLK) + 1;

		if (len > plen - rel)
			len = plen - rel;
		if (nrs_bcache_read(w->c, h, h->start + rel, len, buf)) {
			w->bad++;
			continue;
		}
		for (size_t k = 0; k < len; k++)
			if (buf[k] != byte_at(h->stream_id, h->start + rel + k))
				w->bad++;
	}
	free(buf);
	return NULL;
}

static void run_readers(struct nrs_bcache *c, const struct nrs_objhdr *objs,
			int nobjs)
{
	pthread_t t[8];
	struct worker w[8];

	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){ .c = c, .objs = objs, .nobjs = nobjs,
					.seed = 1234u + (unsigned)i };
		assert_int_equal(pthread_create(&t[i], NULL, reader, &w[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].bad, 0);
	}
}

static void test_threads(void **state)
{
	struct mock *m = *state;
	char *dir = make_tmpdir();
	struct nrs_objhdr objs[4];
	struct nrs_bcache *c;

	for (int i = 0; i < 4; i++) {
		objs[i] = (struct nrs_objhdr){ .stream_id = 50 + (uint64_t)i,
					       .start = 11,
					       .end = 11 + 9 * BLK + 4321,
					       .gen = 1 };
		put_obj(m, &objs[i]);
	}
	/* A small memory tier, so readers evict under each other. */
	c = open_cache(m, 6 * BLK, NULL, 0, 2 * BLK);
	run_readers(c, objs, 4);
	assert_true(nrs_bcache_check(c));
	assert_true(stats(c).mem_bytes <= 6 * BLK);
	nrs_bcache_close(c);
	/* And with a small disk tier behind it. */
	c = open_cache(m, 4 * BLK, dir, 12 * BLK, 0);
	run_readers(c, objs, 4);
	assert_true(nrs_bcache_check(c));
	assert_true(stats(c).disk_bytes <= 12 * BLK);
	nrs_bcache_close(c);
	rm_tree(dir);
	free(dir);
}

static void test_bad_args(void **state)
{
	struct mock *m = *state;
	struct nrs_objhdr h = { .stream_id = 60, .start = 100, .end = 200,
				.gen = 1 };
	struct nrs_objhdr bad = h;
	struct nrs_bcache *c = NULL;
	struct nrs_bcache_opts o = { .disk_dir = "/nonexistent/dir/x" };
	unsigned char buf[200];

	put_obj(m, &h);
	assert_int_equal(nrs_bcache_open(NULL, NULL, &c), -EINVAL);
	assert_int_equal(nrs_bcache_open(NULL, &m->s, NULL), -EINVAL);
	assert_int_equal(nrs_bcache_open(&o, &m->s, &c), -ENOENT);
	assert_null(c);
	assert_int_equal(nrs_bcache_open(NULL, &m->s, &c), 0);
	assert_int_equal(nrs_bcache_read(c, &h, 99, 1, buf), -EINVAL);
	assert_int_equal(nrs_bcache_read(c, &h, 150, 51, buf), -EINVAL);
	assert_int_equal(nrs_bcache_read(c, &h, 201, 0, buf), -EINVAL);
	assert_int_equal(nrs_bcache_read(c, &h, 150, 10, NULL), -EINVAL);
	assert_int_equal(nrs_bcache_read(c, NULL, 150, 10, buf), -EINVAL);
	bad.gen = 0;
	assert_int_equal(nrs_bcache_read(c, &bad, 150, 10, buf), -EINVAL);
	bad = h;
	bad.end = bad.start;
	assert_int_equal(nrs_bcache_read(c, &bad, 100, 0, buf), -EINVAL);
	assert_int_equal(mock_gets(m), 0);
	check_read(c, &h, 100, 100);
	nrs_bcache_close(c);
	nrs_bcache_close(NULL);
}

static int setup(void **state)
{
	*state = mock_new();
	return 0;
}

static int teardown(void **state)
{
	nrs_obj_close(*state);
	return 0;
}

#define T(test)	cmocka_unit_test_setup_teardown(test, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_alignments),
		T(test_hit_needs_no_get),
		T(test_readahead),
		T(test_flights),
		T(test_prefetch_parallel),
		T(test_prefetch_failure),
		T(test_prefetch_budget),
		T(test_prefetch_close),
		T(test_prefetch_follow),
		T(test_header_once),
		T(test_header_with_first_run),
		T(test_prefetch_window),
		T(test_prefetch_stops_early),
		T(test_prefetch_first_window_once),
		T(test_prefetch_follow_evicts_header),
		T(test_corrupt_block),
		T(test_bad_objects),
		T(test_mem_budget),
		T(test_disk_tier),
		T(test_disk_budget),
		T(test_forget),
		T(test_threads),
		T(test_bad_args),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
