/*
 * test_wal_object.c - the object WAL (wal_object.c OW1-OW8, wal_object_gc.c
 * OW18, OWG1-OWG2) over the real embedded directory store, behind a wrapper that
 * injects the faults an object store has: PUTs that fail, answers lost
 * after the bytes were stored, a store that does not answer, other bytes
 * under a key.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_owal.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/clock.h"
#include "util/crc32c.h"
#include "wal/wal.h"
#include "wal/walrec.h"
#include "wal_append.h"

/* ---- a store with faults ------------------------------------------------ */

struct faulty {
	struct nrs_objstore base;
	struct nrs_objstore *real;
	atomic_int fail_puts;		/* the next n PUTs fail, nothing stored */
	atomic_int lose_answers;	/* the next n PUTs store, then fail */
	atomic_bool down;		/* every call: -ECONNREFUSED */
	atomic_int puts;		/* PUTs of objects (not of a run's marker,
					 * OW11, nor seal, SL1) that reached the
					 * real store */
	const char *squat;		/* PUTs of this key answer 0, store
					 * nothing: another writer's bytes
					 * stay there */
	atomic_bool stall_next;		/* the next PUT waits for release */
	atomic_int stall_puts;		/* PUTs of that PUT's key that reached
					 * the real store: its hedges */
	pthread_mutex_t stall_lock;	/* guards stall_key */
	char stall_key[256];
	atomic_bool odd_head;		/* the next HEAD of an object shows 0
					 * bytes: a PUT half written in place */
	atomic_bool release;
	atomic_int stalled;		/* PUTs waiting now */
	atomic_bool hide_seal;		/* the next HEAD of a run's seal: not
					 * there (another scan's lands just
					 * after it) */
};

static struct faulty *fy(struct nrs_objstore *s)
{
	return (struct faulty *)s;
}

static int f_put(struct nrs_objstore *s, const char *key, const void *buf,
		 size_t len, const unsigned char md5[NRS_MD5_LEN],
		 const unsigned char sha[NRS_SHA256_LEN])
{
	struct faulty *f = fy(s);
	int err;

	if (atomic_load(&f->down))
		return -ECONNREFUSED;
	if (f->squat && strcmp(key, f->squat) == 0)
		return 0;
	if (atomic_exchange(&f->stall_next, false)) {
		pthread_mutex_lock(&f->stall_lock);
		snprintf(f->stall_key, sizeof(f->stall_key), "%s", key);
		pthread_mutex_unlock(&f->stall_lock);
		atomic_fetch_add(&f->stalled, 1);
		while (!atomic_load(&f->release))
			usleep(1000);
		atomic_fetch_sub(&f->stalled, 1);
	}
	if (atomic_load(&f->fail_puts) > 0) {
		atomic_fetch_sub(&f->fail_puts, 1);
		return -EIO;
	}
	err = nrs_obj_put(f->real, key, buf, len, md5, sha);
	if (strcmp(key + strlen(key) - 11, "/0000000000") != 0 &&
	    strcmp(key + strlen(key) - 5, "/seal") != 0)
		atomic_fetch_add(&f->puts, 1);	/* not a marker nor a seal */
	pthread_mutex_lock(&f->stall_lock);
	if (strcmp(key, f->stall_key) == 0)
		atomic_fetch_add(&f->stall_puts, 1);
	pthread_mutex_unlock(&f->stall_lock);
	if (!err && atomic_load(&f->lose_answers) > 0) {
		atomic_fetch_sub(&f->lose_answers, 1);
		return -ETIMEDOUT;
	}
	return err;
}

static int f_head(struct nrs_objstore *s, const char *key,
		  struct nrs_obj_meta *out)
{
	int err;

	if (atomic_load(&fy(s)->down))
		return -ECONNREFUSED;
	if (strcmp(key + strlen(key) - 5, "/seal") == 0 &&
	    atomic_exchange(&fy(s)->hide_seal, false))
		return -ENOENT;
	err = nrs_obj_head(fy(s)->real, key, out);
	if (!err && strcmp(key + strlen(key) - 11, "/0000000000") != 0 &&
	    atomic_exchange(&fy(s)->odd_head, false))
		out->length = 0;
	return err;
}

static int f_put_cond(struct nrs_objstore *s, const char *key,
		      const void *buf, size_t len,
		      const unsigned char md5[NRS_MD5_LEN],
		      const unsigned char sha[NRS_SHA256_LEN],
		      const char *if_match, char etag[NRS_ETAG_MAX])
{
	if (atomic_load(&fy(s)->down))
		return -ECONNREFUSED;
	return nrs_obj_put_cond(fy(s)->real, key, buf, len, md5, sha, if_match,
				etag);
}

static ssize_t f_get(struct nrs_objstore *s, const char *key, uint64_t off,
		     void *buf, size_t len)
{
	if (atomic_load(&fy(s)->down))
		return -ECONNREFUSED;
	return nrs_obj_get(fy(s)->real, key, off, buf, len);
}

static int f_del(struct nrs_objstore *s, const char *key)
{
	if (atomic_load(&fy(s)->down))
		return -ECONNREFUSED;
	return nrs_obj_del(fy(s)->real, key);
}

static void f_close(struct nrs_objstore *s)
{
	(void)s;
}

static const struct nrs_objstore_ops faulty_ops = {
	.name = "faulty", .put = f_put, .put_cond = f_put_cond, .head = f_head,
	.get = f_get, .del = f_del, .close = f_close,
};

/* ---- fixture -------------------------------------------------------------- */

struct fx {
	struct nrs_fixture_owal d;	/* d.store: the real store */
	struct faulty store;		/* the WAL's, wrapping d.store */
	bool gate_open;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || nrs_fixture_owal_open(&f->d, "owal")) {
		free(f);
		return -1;
	}
	f->store.base.ops = &faulty_ops;
	f->store.real = f->d.store;
	pthread_mutex_init(&f->store.stall_lock, NULL);
	f->gate_open = true;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc = nrs_fixture_owal_close(&f->d);

	free(f);
	return rc;
}

static bool gate(void *ctx)
{
	return ((struct fx *)ctx)->gate_open;
}

static uint64_t cache_bytes;	/* 0: the default */
static struct nrs_wal_progress *progress;	/* RP1; NULL: none */
static uint64_t flush_bytes;	/* 0: the default */
static uint64_t linger_ms = 5;
static uint64_t grace_ms;	/* 0: reclaim at once */
static uint64_t named_seg;	/* OW18: the object a generation names */

static int named(void *ctx, uint64_t seg)
{
	(void)ctx;
	return seg == named_seg;
}

static struct nrs_wal *wopen(struct fx *f, unsigned int inflight,
			     uint64_t timeout_ms)
{
	struct nrs_wal_object_opts o = {
		.store = &f->store.base, .dir = f->d.state,
		.inflight_max = inflight, .timeout_ms = timeout_ms,
		.cache_bytes = cache_bytes, .flush_bytes = flush_bytes,
		.linger_ms = linger_ms, .grace_ms = grace_ms,
		.may_ack = gate, .may_ack_ctx = f,
		.progress = progress,
		.named = named_seg ? named : NULL,
	};
	struct nrs_wal *w = NULL;

	assert_int_equal(nrs_wal_object_open(&o, &w), 0);
	return w;
}

/* A whole record whose bytes derive from lsn. */
struct rec {
	unsigned char *buf;
	size_t len;
};

static struct rec mkrec(uint64_t lsn, uint32_t plen)
{
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = 9,
		.base = (lsn - 1) * plen, .len = plen, .n_appends = 1,
		.epoch = 1, .prev_lsn = lsn - 1,
	};
	size_t hl = nrs_walrec_hdr_len(plen);
	struct rec x;
	struct iovec iov;

	x.len = nrs_walrec_total_len(plen);
	x.buf = calloc(1, x.len);
	assert_non_null(x.buf);
	for (uint32_t i = 0; i < plen; i++)
		x.buf[hl + i] = (unsigned char)(lsn * 31 + i * 7);
	iov.iov_base = x.buf + hl;
	iov.iov_len = plen;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, x.buf, hl),
			 (ssize_t)hl);
	return x;
}

static int append(struct nrs_wal *w, uint64_t lsn, struct nrs_wal_pos *pos)
{
	struct rec r = mkrec(lsn, 3000);
	struct iovec iov = { r.buf, r.len };
	int err = nrs_wal_append(w, &iov, 1, pos);

	free(r.buf);
	return err;
}

struct seen {
	size_t n;
	uint64_t lsn[64];
	struct nrs_wal_pos pos[64];
	bool ok[64];
};

static int collect(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct seen *s = ctx;

	if (s->n == 64)
		return -ENOSPC;
	s->lsn[s->n] = ri->rec.lsn;
	s->pos[s->n] = ri->pos;
	s->ok[s->n++] = ri->data_ok;
	return 0;
}

static void scan(struct fx *f, struct seen *s)
{
	struct nrs_wal *w = wopen(f, 4, 2000);

	memset(s, 0, sizeof(*s));
	assert_int_equal(nrs_wal_scan(w, collect, s), 0);
	nrs_wal_close(w);
}

static void expect_lsns(const struct seen *s, const uint64_t *want, size_t n)
{
	assert_int_equal(s->n, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(s->lsn[i], want[i]);
		assert_true(s->ok[i]);
	}
}

/* ---- tests ---------------------------------------------------------------- */

/* OW1, OW8: appends are objects; read back before and after a reopen. */
static void test_roundtrip(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos[3];
	struct rec r = mkrec(2, 3000);
	unsigned char buf[8192];
	struct nrs_wal_stats st;
	struct seen s;
	const uint64_t want[] = { 1, 2, 3 };

	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	assert_true(pos[0].seg < pos[1].seg && pos[1].seg < pos[2].seg);
	assert_int_equal(nrs_wal_read(w, pos[1], buf, sizeof(buf)),
			 (ssize_t)r.len);
	assert_memory_equal(buf, r.buf, r.len);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, 3);
	assert_int_equal(st.cur_seg, 0);
	nrs_wal_close(w);

	cache_bytes = 1;	/* keeps no proven object: reads GET */
	w = wopen(f, 4, 5000);
	cache_bytes = 0;
	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	expect_lsns(&s, want, 3);
	assert_int_equal(s.pos[1].seg, pos[1].seg);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(nrs_wal_read(w, pos[1], buf, sizeof(buf)),
			 (ssize_t)r.len);
	assert_memory_equal(buf, r.buf, r.len);
	nrs_wal_close(w);
	free(r.buf);
}

/* OW1, OB1: a PUT whose answer was lost is proven by HEAD: one object. */
static void test_lost_answer(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos;
	struct seen s;
	const uint64_t want[] = { 1 };

	atomic_store(&f->store.lose_answers, 1);
	assert_int_equal(append(w, 1, &pos), 0);
	assert_int_equal(atomic_load(&f->store.puts), 1);
	nrs_wal_close(w);
	scan(f, &s);
	expect_lsns(&s, want, 1);
}

/* OW2: failed PUTs are sent again until proven, within the deadline. */
static void test_retry(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 10000);
	struct nrs_wal_pos pos;

	atomic_store(&f->store.fail_puts, 3);
	assert_int_equal(append(w, 1, &pos), 0);
	assert_int_equal(atomic_load(&f->store.fail_puts), 0);
	nrs_wal_close(w);
}

/* OW2, OW4: a sync that times out fails; its object, which lands later,
 * is recorded abandoned by the next one and never scanned. */
static void test_abandon(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 300);
	struct nrs_wal_pos pos;
	struct seen s;
	const uint64_t want[] = { 1, 3 };

	assert_int_equal(append(w, 1, &pos), 0);
	atomic_store(&f->store.down, true);
	assert_int_equal(append(w, 2, &pos), -ETIMEDOUT);	/* cut */
	usleep(400000);		/* PUTs after the cut fail too, for a while */
	atomic_store(&f->store.down, false);
	/* OW2: the abandoned object is still PUT, and lands */
	for (int i = 0; i < 200 && atomic_load(&f->store.puts) < 2; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&f->store.puts), 2);
	assert_int_equal(append(w, 3, &pos), 0);
	nrs_wal_close(w);
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* OW3: every open that writes is a new run; keys are never reused. */
static void test_runs(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	struct nrs_wal_pos a, b;
	struct seen s;
	const uint64_t want[] = { 1, 2 };

	w = wopen(f, 4, 5000);
	assert_int_equal(append(w, 1, &a), 0);
	nrs_wal_close(w);
	w = wopen(f, 4, 5000);
	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	assert_int_equal(append(w, 2, &b), 0);
	nrs_wal_close(w);
	assert_true(b.seg >> 40 == (a.seg >> 40) + 1);
	scan(f, &s);
	expect_lsns(&s, want, 2);
	assert_int_equal(atomic_load(&f->store.puts), 2);
}

/* OW7, OW6: reclaim deletes below a durable floor; a scan starts there. */
static void test_reclaim(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos[5];
	struct nrs_obj_meta m;
	char key[NRS_OBJKEY_MAX];
	uint64_t bytes = 0;
	struct seen s;
	const uint64_t want[] = { 4, 5 };

	for (uint64_t i = 0; i < 5; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 3);
	assert_true(bytes > 9000);
	nrs_wal_close(w);
	snprintf(key, sizeof(key), "owal/%06" PRIx64 "/%010" PRIx64,
		 pos[0].seg >> 40, pos[0].seg & (((uint64_t)1 << 40) - 1));
	assert_int_equal(nrs_obj_head(f->d.store, key, &m), -ENOENT);
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* Is the object of segment seg in the store? */
static bool stored(struct fx *f, uint64_t seg)
{
	char key[NRS_OBJKEY_MAX];
	struct nrs_obj_meta m;

	nrs_wal_object_key(key, seg);
	return nrs_obj_head(f->d.store, key, &m) == 0;
}

/* OW18: the floor moves over an object a generation names, which stays
 * in the store (not counted as reclaimed); its neighbours go; stats()
 * tell the floor. */
static void test_reclaim_named(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	struct nrs_wal_pos pos[4];
	struct nrs_wal_stats st;
	uint64_t bytes = 0;

	named_seg = 1;		/* set before the open: the hook is taken */
	w = wopen(f, 4, 5000);
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	named_seg = pos[1].seg;
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 2);
	named_seg = 0;
	nrs_wal_stats(w, &st);
	assert_int_equal(st.floor, pos[3].seg);
	nrs_wal_close(w);
	assert_false(stored(f, pos[0].seg));
	assert_true(stored(f, pos[1].seg));
	assert_false(stored(f, pos[2].seg));
	assert_true(stored(f, pos[3].seg));
}

/* Sleep until the first object waiting out its grace may go (OWG1). */
static void wait_due(struct nrs_wal *w)
{
	struct nrs_wal_stats st;

	nrs_wal_stats(w, &st);
	assert_true(st.reclaim_due_ns > 0);
	while (nrs_now_mono_ns() < st.reclaim_due_ns)
		usleep(10000);
}

/* OWG1: a reclaimable object is deleted only grace_ms after a reclaim
 * first found it so; one found needed again starts over.  OWG2: nothing
 * while the owner gate is closed. */
static void test_reclaim_grace(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[4];
	struct nrs_wal_stats st;
	uint64_t bytes = 0, t0;
	struct nrs_wal *w;

	grace_ms = 300;
	w = wopen(f, 4, 5000);
	grace_ms = 0;
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	t0 = nrs_now_mono_ns();
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, 4);		/* all held */
	assert_true(st.reclaim_due_ns >= t0 + 300 * 1000000ull);
	assert_true(stored(f, pos[0].seg) && stored(f, pos[2].seg));
	/* 1 and 2 are needed again: their grace starts over later */
	assert_int_equal(nrs_wal_reclaim(w, pos[1].seg, &bytes), 0);
	wait_due(w);
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 1);
	assert_false(stored(f, pos[0].seg));
	assert_true(stored(f, pos[1].seg) && stored(f, pos[2].seg));
	/* OWG2: once the gate closes, nothing goes, the floor stays */
	wait_due(w);
	f->gate_open = false;
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, 3);
	assert_true(stored(f, pos[1].seg) && stored(f, pos[2].seg));
	f->gate_open = true;
	assert_int_equal(nrs_wal_reclaim(w, pos[3].seg, &bytes), 2);
	assert_false(stored(f, pos[1].seg) || stored(f, pos[2].seg));
	assert_true(stored(f, pos[3].seg));
	nrs_wal_stats(w, &st);
	assert_int_equal(st.reclaim_due_ns, 0);
	nrs_wal_close(w);
}

/* OW12: one HEAD that shows other bytes (a PUT of ours half written in
 * place) does not quarantine: the next attempt proves the object. */
static void test_odd_head(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos;

	assert_int_equal(append(w, 1, &pos), 0);
	atomic_store(&f->store.odd_head, true);
	assert_int_equal(append(w, 2, &pos), 0);
	assert_false(atomic_load(&f->store.odd_head));
	assert_int_equal(append(w, 3, &pos), 0);
	nrs_wal_close(w);
}

/* OW1: other bytes under the key are quarantined; the WAL then refuses. */
static void test_quarantine(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	unsigned char junk[100] = { 1 }, sha[NRS_SHA256_LEN];
	struct nrs_wal_pos pos;

	assert_int_equal(nrs_objfmt_digest(junk, sizeof(junk), sha, NULL), 0);
	/* run 1, seq 1: what the first write will use */
	assert_int_equal(nrs_obj_put(f->d.store, "owal/000001/0000000001", junk,
				     sizeof(junk), NULL, sha), 0);
	f->store.squat = "owal/000001/0000000001";
	assert_int_equal(append(w, 1, &pos), -EIO);
	assert_int_equal(append(w, 2, &pos), -EIO);
	nrs_wal_close(w);
}

/* OW8: a damaged object is not used; the others are. */
static void test_damaged(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos;
	unsigned char b[4096];
	char path[8192];
	struct seen s;
	const uint64_t want[] = { 1, 3 };
	int fd;

	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(append(w, i + 1, &pos), 0);
	nrs_wal_close(w);
	snprintf(path, sizeof(path), "%s/owal/000001/0000000002", f->d.objs);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, b, 1, 1000), 1);
	b[0] ^= 0x40;
	assert_int_equal(pwrite(fd, b, 1, 1000), 1);
	close(fd);
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* OW5, OW8: a run's objects past a gap of fewer than inflight_max
 * missing keys are found. */
static void test_gap(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos[4];
	char path[8192];
	struct seen s;
	const uint64_t want[] = { 1, 4 };

	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	nrs_wal_close(w);
	/* as if seqs 2 and 3 never landed (in flight at a crash) */
	for (int q = 2; q <= 3; q++) {
		snprintf(path, sizeof(path), "%s/owal/000001/%010x",
			 f->d.objs, q);
		assert_int_equal(unlink(path), 0);
	}
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* OW14: a run written with a window of 16 leaves a gap of 10 (cut
 * objects whose PUTs never landed, the objects after them acknowledged);
 * a scan by a mount with a window of 4 still finds what is past it, and
 * a window above the most a scan crosses is refused. */
static void test_gap_wider_window(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_object_opts o = {
		.store = &f->store.base, .dir = f->d.state,
		.inflight_max = NRS_WAL_OBJECT_INFLIGHT_MAX + 1,
	};
	struct nrs_wal *w = wopen(f, 16, 5000);
	struct nrs_wal_pos pos;
	char path[8192];
	struct seen s;
	const uint64_t want[] = { 1, 12 };

	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(append(w, i + 1, &pos), 0);
	nrs_wal_close(w);
	for (int q = 2; q <= 11; q++) {
		snprintf(path, sizeof(path), "%s/owal/000001/%010x",
			 f->d.objs, q);
		assert_int_equal(unlink(path), 0);
	}
	scan(f, &s);			/* a window of 4 */
	expect_lsns(&s, want, 2);
	w = NULL;
	assert_int_equal(nrs_wal_object_open(&o, &w), -EINVAL);
	assert_null(w);
}

/* OW1, I8: once the owner gate closes, nothing more is acknowledged. */
static void test_gate(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos;

	assert_int_equal(append(w, 1, &pos), 0);
	f->gate_open = false;
	assert_int_equal(append(w, 2, &pos), -ESTALE);
	nrs_wal_close(w);
}

/* OW5: at most inflight_max unproven objects; a write past waits, then
 * fails with nothing written. */
static void test_window(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 2, 300);
	struct rec r = mkrec(1, 100);
	struct iovec iov = { r.buf, r.len };
	struct nrs_wal_pos pos;
	uint64_t t0;

	flush_bytes = 1;		/* every batch an object */
	nrs_wal_close(w);
	w = wopen(f, 2, 300);
	flush_bytes = 0;
	assert_int_equal(append(w, 1, &pos), 0);	/* the run's marker */
	atomic_store(&f->store.down, true);
	assert_int_equal(nrs_wal_write(w, &iov, 1, &pos), 0);
	assert_int_equal(nrs_wal_write(w, &iov, 1, &pos), 0);
	t0 = nrs_now_mono_ns();
	assert_int_equal(nrs_wal_write(w, &iov, 1, &pos), -ETIMEDOUT);
	assert_true(nrs_now_mono_ns() - t0 >= 250000000ull);
	atomic_store(&f->store.down, false);
	nrs_wal_close(w);
	free(r.buf);
}

static void write_rec(struct nrs_wal *w, uint64_t lsn, struct nrs_wal_pos *pos,
		      struct nrs_wal_pos *end)
{
	struct rec r = mkrec(lsn, 3000);
	struct iovec iov = { r.buf, r.len };

	assert_int_equal(nrs_wal_write(w, &iov, 1, pos), 0);
	*end = *pos;
	end->off += r.len;
	free(r.buf);
}

/* OW9: batches written while an object is open share it; one sync seals
 * it after the linger, and proves both. */
static void test_flush(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos a, b, ea, eb;
	struct nrs_wal *w;
	struct seen s;
	const uint64_t want[] = { 1, 2 };

	w = wopen(f, 4, 5000);
	write_rec(w, 1, &a, &ea);
	write_rec(w, 2, &b, &eb);
	assert_int_equal(a.seg, b.seg);
	assert_int_equal(b.off, ea.off);
	assert_int_equal(nrs_wal_sync(w, eb), 0);
	assert_int_equal(atomic_load(&f->store.puts), 1);
	nrs_wal_close(w);
	scan(f, &s);
	expect_lsns(&s, want, 2);
	/* flush_bytes: an object that reached it is sealed at once */
	flush_bytes = 3000;
	w = wopen(f, 4, 5000);
	flush_bytes = 0;
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	write_rec(w, 3, &a, &ea);
	write_rec(w, 4, &b, &eb);
	assert_true(a.seg < b.seg);
	assert_int_equal(nrs_wal_sync(w, eb), 0);
	nrs_wal_close(w);
}

/* OW9: an object that reached flush_bytes is PUT at once, before any
 * sync; one below it waits for the linger after the previous seal (OW13:
 * the first seal of a WAL does not wait). */
static void test_seal_at_size(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos a, ea;
	struct nrs_wal *w;
	uint64_t t0;

	flush_bytes = 3000;
	linger_ms = 60000;
	w = wopen(f, 4, 5000);
	flush_bytes = 0;
	linger_ms = 5;
	write_rec(w, 1, &a, &ea);	/* 3000 payload bytes and a header */
	for (int i = 0; i < 500 && atomic_load(&f->store.puts) < 1; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&f->store.puts), 1);
	assert_int_equal(nrs_wal_sync(w, ea), 0);
	nrs_wal_close(w);

	linger_ms = 300;
	w = wopen(f, 4, 5000);
	linger_ms = 5;
	write_rec(w, 2, &a, &ea);
	t0 = nrs_now_mono_ns();
	assert_int_equal(nrs_wal_sync(w, ea), 0);
	write_rec(w, 3, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), 0);
	assert_true(nrs_now_mono_ns() - t0 >= 250000000ull);	/* lingered */
	nrs_wal_close(w);
}

/* OW10: a PUT that stalls past the hedge delay is sent again; the
 * hedge proves the object while the first PUT still hangs. */
static void test_hedge(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos, a, ea;
	struct nrs_wal *w;
	int puts;

	linger_ms = 0;
	w = wopen(f, 4, 20000);
	for (uint64_t i = 1; i <= 10; i++)	/* the latency it measures */
		assert_int_equal(append(w, i, &pos), 0);
	/* On a loaded machine one of those may have been hedged too, and
	 * that hedge may still land after this: count the PUTs of the
	 * stalled object's own key. */
	atomic_store(&f->store.stall_next, true);
	write_rec(w, 11, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), 0);
	assert_int_equal(atomic_load(&f->store.stalled), 1);	/* still */
	puts = atomic_load(&f->store.stall_puts);
	atomic_store(&f->store.release, true);
	nrs_wal_close(w);
	linger_ms = 5;
	assert_int_equal(puts, 1);				/* a hedge */
	assert_int_equal(atomic_load(&f->store.stall_puts), 2);
}

/* OW7: an object not yet proven holds the floor: never dropped. */
static void test_reclaim_unproven(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos a, ea;
	struct nrs_wal_stats st;
	uint64_t bytes = 0;
	struct nrs_wal *w;

	flush_bytes = 1;
	w = wopen(f, 4, 300);
	flush_bytes = 0;
	assert_int_equal(append(w, 9, &a), 0);		/* the run's marker */
	atomic_store(&f->store.down, true);
	write_rec(w, 1, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), -ETIMEDOUT);
	/* the proven object below goes (its DELETE fails: the store is
	 * down; owed, OWG3, not counted); the unproven one stays */
	assert_int_equal(nrs_wal_reclaim(w, a.seg + 1, &bytes), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, 1);
	assert_int_equal(st.inflight, 1);
	atomic_store(&f->store.down, false);
	/* OW2: the PUT goes on after its sync gave up */
	for (int i = 0; i < 1000 && atomic_load(&f->store.puts) < 2; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&f->store.puts), 2);
	nrs_wal_close(w);
}

/* OW4: a cut inside the open object drops its bytes, nothing sent. */
static void test_cut_open(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos a, b, c, ea, eb, ec;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct seen s;
	const uint64_t want[] = { 1, 3 };

	write_rec(w, 1, &a, &ea);
	write_rec(w, 2, &b, &eb);
	assert_int_equal(nrs_wal_cut(w, b, -EIO), 0);
	write_rec(w, 3, &c, &ec);
	assert_int_equal(c.seg, a.seg);
	assert_int_equal(c.off, b.off);
	assert_int_equal(nrs_wal_sync(w, ec), 0);
	nrs_wal_close(w);
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* OW4: records cut out of an object already proven (its sync refused by
 * the owner gate) are recorded abandoned from their offset on. */
static void test_cut_partial(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos a, b, c, ea, eb, ec;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct seen s;
	const uint64_t want[] = { 1, 3 };

	write_rec(w, 1, &a, &ea);
	write_rec(w, 2, &b, &eb);
	assert_int_equal(nrs_wal_sync(w, ea), 0);
	f->gate_open = false;
	assert_int_equal(nrs_wal_sync(w, eb), -ESTALE);
	assert_int_equal(nrs_wal_cut(w, b, -ESTALE), 0);
	f->gate_open = true;
	write_rec(w, 3, &c, &ec);
	assert_true(c.seg > b.seg);
	assert_int_equal(nrs_wal_sync(w, ec), 0);
	nrs_wal_close(w);
	scan(f, &s);
	expect_lsns(&s, want, 2);
}

/* A state file saying floor 0, last run `run` (wal_object_scan.c OW6). */
static void put_state(struct fx *f, uint64_t run)
{
	unsigned char st[32] = "NRSOWST1";
	char path[8192];
	uint32_t crc;
	int fd;

	st[16] = (unsigned char)run;
	crc = nrs_crc32c(0, st, 24);
	for (int i = 0; i < 4; i++)
		st[24 + i] = (unsigned char)(crc >> (8 * i));
	snprintf(path, sizeof(path), "%s/state", f->d.state);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, st, sizeof(st)), (ssize_t)sizeof(st));
	close(fd);
}

/* OW11: runs past the one the state file names are found by their
 * markers, across a run that took its number and died before its
 * marker (no marker, no object). */
static void test_later_runs(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos;
	struct nrs_obj_meta m;
	struct nrs_wal *w;
	struct seen s;
	const uint64_t want[] = { 1, 2 };

	w = wopen(f, 4, 5000);
	assert_int_equal(append(w, 1, &pos), 0);
	nrs_wal_close(w);
	assert_int_equal(pos.seg >> 40, 1);
	put_state(f, 2);		/* run 2 took its number, then died */
	w = wopen(f, 4, 5000);
	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	assert_int_equal(append(w, 2, &pos), 0);
	nrs_wal_close(w);
	assert_int_equal(pos.seg >> 40, 3);
	assert_int_equal(nrs_obj_head(f->d.store, "owal/000003/0000000000",
				      &m), 0);
	assert_int_equal(m.length, 32);
	put_state(f, 1);		/* as old as run 1: a checkpoint's */
	w = wopen(f, 4, 5000);
	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	expect_lsns(&s, want, 2);
	assert_int_equal(append(w, 3, &pos), 0);
	assert_int_equal(pos.seg >> 40, 4);	/* after every run found */
	nrs_wal_close(w);
}

/* OW6: a damaged state file stops the open. */
static void test_bad_state(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_object_opts o = { .store = &f->store.base,
					 .dir = f->d.state };
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_pos pos;
	char path[8192];
	int fd;

	assert_int_equal(append(w, 1, &pos), 0);
	nrs_wal_close(w);
	snprintf(path, sizeof(path), "%s/state", f->d.state);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 16), 1);	/* the last run */
	close(fd);
	w = NULL;
	assert_int_equal(nrs_wal_object_open(&o, &w), -EUCLEAN);
	assert_null(w);
}

/* Open a WAL on the state directory f->d.root/NAME, as a new data directory
 * recovering the bucket would (nrs_wal_object_state_init from floor 0). */
static struct nrs_wal *wopen_new(struct fx *f, const char *name)
{
	struct nrs_wal_object_opts o = {
		.store = &f->store.base, .inflight_max = 4,
		.timeout_ms = 5000, .linger_ms = linger_ms,
		.may_ack = gate, .may_ack_ctx = f,
	};
	char dir[8192];
	struct nrs_wal *w = NULL;

	snprintf(dir, sizeof(dir), "%s/%s", f->d.root, name);
	assert_int_equal(nrs_wal_object_state_init(dir, 0), 0);
	o.dir = dir;
	assert_int_equal(nrs_wal_object_open(&o, &w), 0);
	return w;
}

/* Move run 1's objects lo..hi out of the store (still in flight) or back
 * (landing late). */
static void move_objs(struct fx *f, int lo, int hi, bool back)
{
	char in[8192], out[8192];

	snprintf(out, sizeof(out), "%s/late", f->d.root);
	(void)mkdir(out, 0700);
	for (int q = lo; q <= hi; q++) {
		snprintf(in, sizeof(in), "%s/owal/000001/%010x", f->d.objs, q);
		snprintf(out, sizeof(out), "%s/late/%d", f->d.root, q);
		assert_int_equal(back ? rename(out, in) : rename(in, out), 0);
	}
}

static void scan_wal(struct nrs_wal *w, struct seen *s)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(nrs_wal_scan(w, collect, s), 0);
}

/*
 * A takeover: run 1 wrote lsns 1..n, one object each, and objects lo..hi
 * were still in flight when the new owner (state in owal2) scanned: it
 * finds first[] and, if ack, acknowledges n + 1 in run 2.  Then the late
 * PUTs land.
 */
static void takeover(struct fx *f, uint64_t n, int lo, int hi,
		     const uint64_t *first, size_t nfirst, bool ack)
{
	struct nrs_wal_pos pos;
	struct nrs_obj_meta m;
	struct nrs_wal *w;
	struct seen s;

	w = wopen(f, 4, 5000);
	for (uint64_t i = 1; i <= n; i++)
		assert_int_equal(append(w, i, &pos), 0);
	nrs_wal_close(w);
	assert_int_equal(pos.seg, (1ull << 40) | n);
	move_objs(f, lo, hi, false);
	w = wopen_new(f, "owal2");
	scan_wal(w, &s);
	expect_lsns(&s, first, nfirst);
	assert_int_equal(nrs_obj_head(f->d.store, "owal/000001/seal", &m), 0);
	if (ack) {
		assert_int_equal(append(w, n + 1, &pos), 0);
		assert_int_equal(pos.seg >> 40, 2);
	}
	nrs_wal_close(w);
	move_objs(f, lo, hi, true);
}

/* The next recovery (state in NAME) finds want[]. */
static void recover_finds(struct fx *f, const char *name,
			  const uint64_t *want, size_t n)
{
	struct nrs_wal *w = wopen_new(f, name);
	struct seen s;

	scan_wal(w, &s);
	expect_lsns(&s, want, n);
	nrs_wal_close(w);
}

/* The next recovery (state in NAME) is refused a damaged seal (SL2). */
static void scan_refused(struct fx *f, const char *name)
{
	struct nrs_wal *w = wopen_new(f, name);
	struct seen s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), -EUCLEAN);
	assert_int_equal(s.n, 0);
	nrs_wal_close(w);
}

/*
 * SL1, SL3: objects 3-8 of the old owner land after the new owner's scan
 * sealed run 1 at seq 2.  The next recovery, fsck's read-only scan and a
 * restart of the old data directory ignore every one of them -- also 7
 * and 8, beyond the inflight_max seqs OW4 abandons -- and return the
 * record the new owner acknowledged.
 */
static void test_late_after_takeover(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_object_opts ro = { .store = &f->store.base,
					  .read_only = true };
	struct nrs_wal *w;
	char dir[8192];
	struct seen s;
	const uint64_t old[] = { 1, 2 }, want[] = { 1, 2, 9 };

	takeover(f, 8, 3, 8, old, 2, true);
	recover_finds(f, "owal3", want, 3);
	snprintf(dir, sizeof(dir), "%s/owal2", f->d.root);
	ro.dir = dir;
	assert_int_equal(nrs_wal_object_open(&ro, &w), 0);	/* fsck */
	scan_wal(w, &s);
	expect_lsns(&s, want, 3);
	nrs_wal_close(w);
	w = wopen(f, 4, 5000);			/* the old data directory */
	scan_wal(w, &s);
	expect_lsns(&s, want, 3);
	nrs_wal_close(w);
}

/* SL4, SL3: a gap the new owner's scan crossed (object 3 in flight) is a
 * hole of its seal: when 3 lands, no later scan walks it before 4. */
static void test_late_in_gap(void **state)
{
	const uint64_t first[] = { 1, 2, 4 }, want[] = { 1, 2, 4, 5 };

	takeover(*state, 4, 3, 3, first, 3, true);
	recover_finds(*state, "owal3", want, 4);
}

/* SL2: a seal already stored counts, and one that fails its checks stops
 * the scan rather than let it guess where the run ends. */
static void test_seal_kept(void **state)
{
	struct fx *f = *state;
	const uint64_t want[] = { 1 };
	unsigned char buf[256], sha[NRS_SHA256_LEN];
	uint32_t crc;
	ssize_t n;

	takeover(f, 3, 2, 3, want, 1, false);	/* sealed at seq 1 */
	recover_finds(f, "owal3", want, 1);	/* finds 1-3, but the seal */
	/* its end raised to 3, under the SHA-256 of the true bytes */
	n = nrs_obj_get(f->d.store, "owal/000001/seal", 0, buf, sizeof(buf));
	assert_true(n > 40);
	assert_int_equal(nrs_objfmt_digest(buf, (size_t)n, sha, NULL), 0);
	buf[24] = 3;			/* a valid seal: its CRC made again */
	crc = nrs_crc32c(0, buf, (size_t)n - 8);
	for (int i = 0; i < 4; i++)
		buf[n - 8 + i] = (unsigned char)(crc >> (8 * i));
	assert_int_equal(nrs_obj_put(f->d.store, "owal/000001/seal", buf,
				     (size_t)n, NULL, sha), 0);
	scan_refused(f, "owal4");
	/* its CRC broken, under its own SHA-256 */
	buf[n - 8] ^= 1;
	assert_int_equal(nrs_objfmt_digest(buf, (size_t)n, sha, NULL), 0);
	assert_int_equal(nrs_obj_put(f->d.store, "owal/000001/seal", buf,
				     (size_t)n, NULL, sha), 0);
	scan_refused(f, "owal5");
}

/* SL2: another scan's seal that lands between our read and our PUT is
 * refused our bytes (If-None-Match), and counts: objects 2 and 3, which
 * it does not name, are not returned. */
static void test_seal_adopted(void **state)
{
	struct fx *f = *state;
	const uint64_t want[] = { 1 };

	takeover(f, 3, 2, 3, want, 1, false);	/* their seal: seq 1 */
	atomic_store(&f->store.hide_seal, true);
	recover_finds(f, "owal3", want, 1);
	assert_false(atomic_load(&f->store.hide_seal));
}

/* RP1: the scan counts each object it reads; lines at most once a second,
 * and the done line always. */
static void test_progress(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 5000);
	struct nrs_wal_progress p = { .what = "test" };
	struct nrs_wal_pos pos[3];
	struct seen s;
	const uint64_t want[] = { 1, 2, 3 };

	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(append(w, i + 1, &pos[i]), 0);
	nrs_wal_close(w);
	progress = &p;
	w = wopen(f, 4, 5000);
	progress = NULL;
	memset(&s, 0, sizeof(s));
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	nrs_wal_close(w);
	expect_lsns(&s, want, 3);
	assert_int_equal(p.objects, 3);
	assert_true(p.bytes > 3 * 3000);
	assert_int_equal(p.lines, 0);		/* well under a second */
	for (int i = 0; i < 1000; i++)
		nrs_wal_progress_tick(&p, false);
	assert_int_equal(p.lines, 0);
	nrs_wal_progress_tick(&p, true);
	assert_int_equal(p.lines, 1);
	nrs_wal_progress_tick(NULL, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abandon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reclaim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_named, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_grace, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_quarantine, setup, teardown),
		cmocka_unit_test_setup_teardown(test_odd_head, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gap_wider_window, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_gate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cut_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_at_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_unproven, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hedge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_later_runs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cut_partial, setup, teardown),
		cmocka_unit_test_setup_teardown(test_late_after_takeover, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_late_in_gap, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_seal_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_adopted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
