/*
 * test_pipeline.c - the commit pipeline: ordering, batching, the commit
 * chain, conditional appends, fencing and failure handling.
 *
 * The WAL provider is a mock that keeps batches in memory (its writes and
 * syncs can be held or made to fail, and it checks that nothing is
 * published before it is synced); the metadata store is the real SQLite one in a
 * temporary directory, since the head CAS is what is under test.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "commit/pipeline.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "stream/table.h"
#include "util/metrics.h"
#include "wal/wal.h"
#include "wal/walrec.h"

/* ---- a mock WAL: one growing buffer, one "segment" -------------------- */

/* Calls of one kind (writes, syncs) can be held, and waited for. */
struct gate {
	bool hold;		/* calls wait while set */
	bool waiting;		/* a call is waiting */
};

struct mock_wal {
	struct nrs_wal base;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned char *buf;
	size_t len, cap;
	size_t synced;		/* bytes [0, synced) are durable */
	unsigned int batches, syncs, cuts, seals;
	int fail_next;		/* error for the next write */
	int fail_sync;		/* error for the next sync */
	struct gate write_gate, sync_gate;
};

/* Lock m->lock and pass g: wait while it is held, saying so. */
static void gate_pass(struct mock_wal *m, struct gate *g)
{
	pthread_mutex_lock(&m->lock);
	g->waiting = true;
	pthread_cond_broadcast(&m->cond);
	while (g->hold)
		pthread_cond_wait(&m->cond, &m->lock);
	g->waiting = false;
}

static int mock_write(struct nrs_wal *w, const struct iovec *iov, int iovcnt,
		      struct nrs_wal_pos *pos)
{
	struct mock_wal *m = (struct mock_wal *)w;
	int err = 0;

	gate_pass(m, &m->write_gate);
	if (m->fail_next) {
		err = m->fail_next;
		m->fail_next = 0;
		goto out;
	}
	pos->seg = 1;
	pos->off = m->len;
	for (int i = 0; i < iovcnt; i++) {
		if (m->len + iov[i].iov_len > m->cap) {
			m->cap = (m->len + iov[i].iov_len) * 2;
			m->buf = realloc(m->buf, m->cap);
			assert_non_null(m->buf);
		}
		memcpy(m->buf + m->len, iov[i].iov_base, iov[i].iov_len);
		m->len += iov[i].iov_len;
	}
	m->batches++;
	pthread_cond_broadcast(&m->cond);
out:
	pthread_mutex_unlock(&m->lock);
	return err;
}

static int mock_sync(struct nrs_wal *w, struct nrs_wal_pos end)
{
	struct mock_wal *m = (struct mock_wal *)w;
	int err = 0;

	gate_pass(m, &m->sync_gate);
	assert_true(end.off <= m->len);
	if (m->fail_sync) {
		err = m->fail_sync;
		m->fail_sync = 0;
	} else {
		m->syncs++;
		if (end.off > m->synced)
			m->synced = (size_t)end.off;
	}
	pthread_mutex_unlock(&m->lock);
	return err;
}

static int mock_cut(struct nrs_wal *w, struct nrs_wal_pos pos, int why)
{
	struct mock_wal *m = (struct mock_wal *)w;

	(void)why;
	pthread_mutex_lock(&m->lock);
	assert_true(pos.off >= m->synced);	/* never a durable byte */
	assert_true(pos.off <= m->len);
	m->len = (size_t)pos.off;
	m->cuts++;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static ssize_t mock_read(struct nrs_wal *w, struct nrs_wal_pos pos, void *buf,
			 size_t len)
{
	struct mock_wal *m = (struct mock_wal *)w;

	pthread_mutex_lock(&m->lock);
	if (pos.off > m->len)
		len = 0;
	else if (len > m->len - pos.off)
		len = m->len - pos.off;
	memcpy(buf, m->buf + pos.off, len);
	pthread_mutex_unlock(&m->lock);
	return (ssize_t)len;
}

static int mock_scan(struct nrs_wal *w, nrs_wal_scan_cb cb, void *ctx)
{
	(void)w; (void)cb; (void)ctx;
	return 0;
}

static void mock_stats(struct nrs_wal *w, struct nrs_wal_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->bytes = ((struct mock_wal *)w)->len;
}

static int mock_seal(struct nrs_wal *w, uint64_t seg)
{
	struct mock_wal *m = (struct mock_wal *)w;

	(void)seg;
	pthread_mutex_lock(&m->lock);
	m->seals++;
	pthread_mutex_unlock(&m->lock);
	return 1;
}

static void mock_close(struct nrs_wal *w)
{
	(void)w;
}

static const struct nrs_wal_ops mock_ops = {
	.name = "mock", .write = mock_write, .sync = mock_sync, .cut = mock_cut,
	.read = mock_read,
	.scan = mock_scan, .stats = mock_stats, .seal = mock_seal,
	.close = mock_close,
};

/* ---- fixture ---------------------------------------------------------- */

struct fix {
	char dir[64];
	struct mock_wal wal;
	struct mock_wal wal2;	/* test_wal_per_profile's second WAL */
	struct nrs_meta *meta;
	struct nrs_metrics metrics;
	struct nrs_pipeline *p;
	struct nrs_stream *st[2];
	bool fences;		/* restart_at: cfg.fence_records (PL9) */
};

static void put(struct nrs_stream *st)
{
	nrs_stream_put(st);
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct nrs_pipeline_cfg cfg;
	char path[128];

	assert_non_null(f);
	assert_int_equal(nrs_fixture_mkdtemp(f->dir, sizeof(f->dir),
					     "test_pipeline"), 0);
	snprintf(path, sizeof(path), "%s/meta.db", f->dir);
	assert_int_equal(nrs_meta_open(path, &f->meta), 0);
	f->wal.base.ops = &mock_ops;
	pthread_mutex_init(&f->wal.lock, NULL);
	pthread_cond_init(&f->wal.cond, NULL);
	nrs_metrics_init(&f->metrics);
	for (int i = 0; i < 2; i++) {
		struct nrs_stream_row row;
		struct nrs_attr a;
		char name[8];

		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(nrs_meta_create(f->meta, NRS_ROOT_INO, name, 0644,
						 0, 0, 1, &a, &row), 0);
		f->st[i] = nrs_stream_new(&row);
		assert_non_null(f->st[i]);
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.wal = &f->wal.base;
	cfg.meta = f->meta;
	cfg.metrics = &f->metrics;
	cfg.next_lsn = 1;
	cfg.put = put;
	assert_int_equal(nrs_pipeline_start(&cfg, &f->p), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	nrs_pipeline_stop(f->p);
	nrs_stream_put(f->st[0]);
	nrs_stream_put(f->st[1]);
	nrs_meta_close(f->meta);
	free(f->wal.buf);
	free(f->wal2.buf);
	assert_int_equal(nrs_fixture_rmtree(f->dir), 0);
	free(f);
	return 0;
}

/* ---- requests --------------------------------------------------------- */

struct treq {
	struct nrs_req req;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int err;
	char data[64];
	struct mock_wal *check;	/* if set: its synced bytes at the ack */
	size_t synced_at_ack;
	unsigned int seq;	/* its place among all replies, from 1 */
};

static atomic_uint reply_seq;

static void treq_done(struct nrs_req *r, int err)
{
	struct treq *t = (struct treq *)r;

	if (t->check) {
		pthread_mutex_lock(&t->check->lock);
		t->synced_at_ack = t->check->synced;
		pthread_mutex_unlock(&t->check->lock);
	}
	pthread_mutex_lock(&t->lock);
	t->seq = atomic_fetch_add(&reply_seq, 1) + 1;
	t->err = err;
	t->done = true;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static struct treq *make_req(struct fix *f, int s, enum nrs_req_kind kind,
			     uint64_t epoch, uint64_t expect, const char *data)
{
	struct treq *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	t->req.kind = kind;
	t->req.st = f->st[s];
	atomic_fetch_add(&f->st[s]->refs, 1);
	t->req.epoch = epoch;
	t->req.expect = expect;
	if (data) {
		snprintf(t->data, sizeof(t->data), "%s", data);
		t->req.data = t->data;
		t->req.len = strlen(t->data);
	}
	t->req.done = treq_done;
	return t;
}

static struct treq *submit(struct fix *f, int s, enum nrs_req_kind kind,
			   uint64_t epoch, uint64_t expect, const char *data)
{
	struct treq *t = make_req(f, s, kind, epoch, expect, data);

	nrs_pipeline_submit(f->p, &t->req);
	return t;
}

/* Wait for t; return its error and offset; free it. */
static int wait_req(struct treq *t, uint64_t *offset)
{
	int err;

	pthread_mutex_lock(&t->lock);
	while (!t->done)
		pthread_cond_wait(&t->cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
	err = t->err;
	if (offset)
		*offset = t->req.offset;
	free(t);
	return err;
}

/* Hold (or release) the mock WAL's calls behind g. */
static void hold(struct fix *f, struct gate *g, bool on)
{
	pthread_mutex_lock(&f->wal.lock);
	g->hold = on;
	pthread_cond_broadcast(&f->wal.cond);
	pthread_mutex_unlock(&f->wal.lock);
}

/* Wait until a call waits at g. */
static void wait_held(struct fix *f, const struct gate *g)
{
	pthread_mutex_lock(&f->wal.lock);
	while (!g->waiting)
		pthread_cond_wait(&f->wal.cond, &f->wal.lock);
	pthread_mutex_unlock(&f->wal.lock);
}

/* Wait until the mock WAL has taken n writes. */
static void wait_batches(struct fix *f, unsigned int n)
{
	pthread_mutex_lock(&f->wal.lock);
	while (f->wal.batches < n)
		pthread_cond_wait(&f->wal.cond, &f->wal.lock);
	pthread_mutex_unlock(&f->wal.lock);
}

static bool req_done(struct treq *t)
{
	bool done;

	pthread_mutex_lock(&t->lock);
	done = t->done;
	pthread_mutex_unlock(&t->lock);
	return done;
}

/* Decode every record in mock WAL m into out (max n); returns count. */
static size_t decode_wal(struct mock_wal *m, struct nrs_walrec *out, size_t n)
{
	size_t off = 0, k = 0;

	while (off < m->len && k < n) {
		struct nrs_walrec r;
		size_t hl;

		assert_int_equal(nrs_walrec_decode_hdr(m->buf + off,
						       m->len - off, &r), 0);
		hl = nrs_walrec_hdr_len(r.len);
		assert_int_equal(nrs_walrec_verify_chunks(m->buf + off, &r, 0,
				 nrs_walrec_nchunks(r.len), m->buf + off + hl,
				 NULL), 0);
		out[k++] = r;
		off += nrs_walrec_total_len(r.len);
	}
	assert_int_equal(off, m->len);
	return k;
}

static size_t decode_all(struct fix *f, struct nrs_walrec *out, size_t n)
{
	return decode_wal(&f->wal, out, n);
}

/* ---- tests ------------------------------------------------------------ */

static void test_order_and_batch(void **state)
{
	struct fix *f = *state;
	struct treq *t[41];
	struct nrs_walrec recs[64] = { 0 };
	struct nrs_stream_row row;
	uint64_t off, want[2] = { 0, 0 };
	size_t n;

	/* Hold the first batch in the WAL so the next 40 queue up. */
	hold(f, &f->wal.write_gate, true);
	t[0] = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "first");
	wait_held(f, &f->wal.write_gate);
	for (int i = 1; i <= 40; i++) {
		char data[16];

		snprintf(data, sizeof(data), "r%02d", i);
		t[i] = submit(f, i % 2, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, data);
	}
	hold(f, &f->wal.write_gate, false);
	assert_int_equal(wait_req(t[0], &off), 0);
	assert_int_equal(off, 0);
	want[0] = 5;
	for (int i = 1; i <= 40; i++) {
		assert_int_equal(wait_req(t[i], &off), 0);
		/* submission order within a stream, back to back */
		assert_int_equal(off, want[i % 2]);
		want[i % 2] += 3;
	}
	/* two batches: the held one, then all 40 as one group commit */
	assert_int_equal(f->wal.batches, 2);
	assert_int_equal(nrs_counter(&f->metrics.batches), 2);
	n = decode_all(f, recs, 64);
	assert_int_equal(n, 3);		/* one record per stream per batch */
	assert_int_equal(recs[0].stream_id, f->st[0]->id);
	assert_int_equal(recs[1].n_appends + recs[2].n_appends, 40);
	/* the commit chain: stream 0's second record names its first */
	for (size_t i = 1; i < n; i++) {
		assert_true(recs[i].lsn > recs[i - 1].lsn);
		if (recs[i].stream_id == f->st[0]->id) {
			assert_int_equal(recs[i].prev_lsn, recs[0].lsn);
			assert_int_equal(recs[i].base, 5);
		} else {
			assert_int_equal(recs[i].prev_lsn, 0);
			assert_int_equal(recs[i].base, 0);
		}
	}
	/* published: memory and the store agree; version counts appends */
	assert_int_equal(f->st[0]->head, 5 + 20 * 3);
	assert_int_equal(f->st[0]->version, 21);
	assert_int_equal(f->st[1]->version, 20);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[0]->id, &row), 0);
	assert_int_equal(row.head, 65);
	assert_int_equal(row.version, 21);
	assert_int_equal(row.last_lsn, f->st[0]->last_lsn);
	assert_int_equal(f->st[0]->index.n, 2);
	assert_true(nrs_index_check(&f->st[0]->index));
}

/* Restart the fixture's pipeline with cfg.lead as given, issuing LSNs
 * from next_lsn (0: the next after the streams' last ones). */
static void restart_at(struct fix *f, bool lead, size_t max_batch,
		       size_t group_sync_min, uint64_t next_lsn)
{
	struct nrs_pipeline_cfg cfg;

	nrs_pipeline_stop(f->p);
	memset(&cfg, 0, sizeof(cfg));
	cfg.wal = &f->wal.base;
	cfg.meta = f->meta;
	cfg.metrics = &f->metrics;
	cfg.next_lsn = next_lsn ? next_lsn :
		       1 + f->st[0]->last_lsn + f->st[1]->last_lsn;
	cfg.put = put;
	cfg.lead = lead;
	cfg.max_batch_bytes = max_batch;
	cfg.group_sync_min = group_sync_min;
	cfg.fence_records = f->fences;
	assert_int_equal(nrs_pipeline_start(&cfg, &f->p), 0);
}

static void restart_sync(struct fix *f, bool lead, size_t max_batch,
			 size_t group_sync_min)
{
	restart_at(f, lead, max_batch, group_sync_min, 0);
}

static void restart(struct fix *f, bool lead, size_t max_batch)
{
	restart_sync(f, lead, max_batch, 0);
}

static void *lead_one(void *arg)
{
	struct treq *t = arg;
	struct nrs_pipeline *p = t->req.cookie;

	assert_true(nrs_pipeline_try_lead(p));
	nrs_pipeline_submit(p, &t->req);
	nrs_pipeline_lead(p, &t->req);
	return NULL;
}

/*
 * nrs_pipeline_try_lead: an idle pipeline gives the caller the commit
 * role, and the batch is completed before nrs_pipeline_lead returns; while
 * the role is held, other requests queue (no second leader, the committer
 * thread waits) and follow in order once it is given back; with cfg.lead
 * off, nobody leads.
 */
static void test_lead(void **state)
{
	struct fix *f = *state;
	struct treq *t, *u, *v;
	pthread_t th;
	uint64_t off;

	restart(f, true, 0);
	t = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "lead");
	assert_true(nrs_pipeline_try_lead(f->p));
	nrs_pipeline_submit(f->p, &t->req);
	assert_false(t->done);
	nrs_pipeline_lead(f->p, &t->req);
	assert_true(t->done);		/* in this thread, before returning */
	assert_int_equal(wait_req(t, &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(f->st[0]->head, 4);

	/* a leader held in the WAL; two more requests queue behind it */
	hold(f, &f->wal.write_gate, true);
	t = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "held");
	t->req.cookie = f->p;
	assert_int_equal(pthread_create(&th, NULL, lead_one, t), 0);
	wait_held(f, &f->wal.write_gate);
	u = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "next");
	assert_false(nrs_pipeline_try_lead(f->p));
	nrs_pipeline_submit(f->p, &u->req);
	v = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "other");
	nrs_pipeline_submit(f->p, &v->req);
	assert_int_equal(f->wal.batches, 1);	/* nobody else writes */
	hold(f, &f->wal.write_gate, false);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(wait_req(t, &off), 0);
	assert_int_equal(off, 4);
	assert_int_equal(wait_req(u, &off), 0);
	assert_int_equal(off, 8);
	assert_int_equal(wait_req(v, &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(f->wal.batches, 3);	/* lead, held lead, the queue */
	assert_int_equal(f->st[0]->head, 12);
	assert_int_equal(f->st[0]->version, 3);

	/* the leader's request behind two batches' worth (4-byte batches):
	 * written, in order, by the time nrs_pipeline_lead returns */
	restart(f, true, 4);
	assert_true(nrs_pipeline_try_lead(f->p));
	assert_false(nrs_pipeline_try_lead(f->p));	/* one leader */
	u = submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "aaaa");
	v = submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "bbbb");
	t = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "cccc");
	nrs_pipeline_submit(f->p, &t->req);
	assert_int_equal(f->wal.batches, 3);	/* the committer waits */
	nrs_pipeline_lead(f->p, &t->req);
	assert_int_equal(f->wal.batches, 6);
	assert_int_equal(wait_req(u, &off), 0);
	assert_int_equal(off, 5);
	assert_int_equal(wait_req(v, &off), 0);
	assert_int_equal(off, 9);
	assert_int_equal(wait_req(t, &off), 0);
	assert_int_equal(off, 13);

	restart(f, false, 0);
	t = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "no");
	assert_false(nrs_pipeline_try_lead(f->p));
	nrs_pipeline_submit(f->p, &t->req);
	assert_int_equal(wait_req(t, &off), 0);
	assert_int_equal(off, 17);
}

static void test_conditional(void **state)
{
	struct fix *f = *state;
	uint64_t off;

	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 0, "abc"),
				  &off), 0);
	assert_int_equal(off, 0);
	/* not the head: refused, nothing written */
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 0, "xyz"),
				  NULL), -ESPIPE);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 7, "xyz"),
				  NULL), -ESPIPE);
	assert_int_equal(f->st[0]->head, 3);
	assert_int_equal(f->st[0]->version, 1);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 3, "def"),
				  &off), 0);
	assert_int_equal(off, 3);
	assert_int_equal(nrs_counter(&f->metrics.espipe), 2);
}

/* PL1: LSNs and heads never wrap.  The last LSN (walrec.h) is issued;
 * after it every append fails -EOVERFLOW and changes nothing; an append
 * that would take the head past NRS_HEAD_MAX fails -EFBIG. */
static void test_lsn_and_head_bounds(void **state)
{
	struct fix *f = *state;
	uint64_t off;

	restart_at(f, false, 0, 0, NRS_WALREC_LSN_MAX);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "abc"), &off), 0);
	assert_int_equal(f->st[0]->last_lsn, NRS_WALREC_LSN_MAX);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "def"), NULL), -EOVERFLOW);
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "def"), NULL), -EOVERFLOW);
	assert_int_equal(f->st[0]->head, 3);
	assert_int_equal(f->st[0]->version, 1);
	assert_int_equal(f->st[1]->head, 0);

	f->st[1]->head = f->st[1]->ord_head = NRS_HEAD_MAX - 2;
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "abc"), NULL), -EFBIG);
	f->st[1]->head = f->st[1]->ord_head = 0;
}

static void test_conditional_in_one_batch(void **state)
{
	struct fix *f = *state;
	struct treq *a, *b, *c;

	/* Three conditional appends for offset 0 in one batch: one wins. */
	hold(f, &f->wal.write_gate, true);
	a = submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "x");
	wait_held(f, &f->wal.write_gate);
	b = submit(f, 0, NRS_REQ_APPEND, 0, 0, "bb");
	c = submit(f, 0, NRS_REQ_APPEND, 0, 0, "cc");
	hold(f, &f->wal.write_gate, false);
	assert_int_equal(wait_req(a, NULL), 0);
	assert_int_equal(wait_req(b, NULL), 0);
	assert_int_equal(wait_req(c, NULL), -ESPIPE);
	assert_int_equal(f->st[0]->head, 2);
}

static void test_fence(void **state)
{
	struct fix *f = *state;
	struct nrs_stream_row row;
	struct treq *a, *fence, *b, *c;

	hold(f, &f->wal.write_gate, true);
	a = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "old0");
	wait_held(f, &f->wal.write_gate);
	/* next batch: an old-epoch append ordered before the fence completes,
	 * one ordered after it fails, a new-epoch one succeeds */
	b = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "old1");
	fence = submit(f, 0, NRS_REQ_FENCE, 5, 0, NULL);
	c = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "old2");
	hold(f, &f->wal.write_gate, false);
	assert_int_equal(wait_req(a, NULL), 0);
	assert_int_equal(wait_req(b, NULL), 0);
	assert_int_equal(wait_req(fence, NULL), 0);
	assert_int_equal(wait_req(c, NULL), -ESTALE);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 5, NRS_EXPECT_ANY,
					 "new"), NULL), 0);
	assert_int_equal(f->st[0]->head, 11);
	assert_int_equal(f->st[0]->epoch, 5);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[0]->id, &row), 0);
	assert_int_equal(row.epoch, 5);
	/* lower: EINVAL; equal: a no-op */
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_FENCE, 4, 0, NULL), NULL),
			 -EINVAL);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_FENCE, 5, 0, NULL), NULL),
			 0);
	assert_int_equal(nrs_counter(&f->metrics.estale), 1);
}

/* PL9: with fence records, a fence that raises the epoch is a record of
 * no bytes at the head, beside the chain: the next append names the same
 * predecessor; an equal epoch writes nothing; without them (test_fence)
 * a fence writes nothing. */
static void test_fence_records(void **state)
{
	struct fix *f = *state;
	struct nrs_walrec recs[8] = { 0 };
	struct nrs_stream_row row;
	size_t n;

	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_FENCE, 2, 0, NULL),
				  NULL), 0);
	assert_int_equal(decode_all(f, recs, 8), 0);
	f->fences = true;
	restart(f, false, 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 2,
					 NRS_EXPECT_ANY, "ab"), NULL), 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_FENCE, 3, 0, NULL),
				  NULL), 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_FENCE, 3, 0, NULL),
				  NULL), 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 3,
					 NRS_EXPECT_ANY, "cd"), NULL), 0);
	n = decode_all(f, recs, 8);
	assert_int_equal(n, 3);
	assert_int_equal(recs[1].kind, NRS_WALREC_DATA);
	assert_int_equal(recs[1].stream_id, f->st[0]->id);
	assert_int_equal(recs[1].len, 0);
	assert_int_equal(recs[1].n_appends, 0);
	assert_int_equal(recs[1].base, 2);
	assert_int_equal(recs[1].epoch, 3);
	assert_int_equal(recs[1].prev_lsn, recs[0].lsn);
	assert_true(recs[1].lsn > recs[0].lsn);
	assert_int_equal(recs[2].prev_lsn, recs[0].lsn);	/* beside */
	assert_int_equal(recs[2].epoch, 3);
	assert_int_equal(f->st[0]->last_lsn, recs[2].lsn);
	assert_int_equal(f->st[0]->head, 4);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[0]->id, &row), 0);
	assert_int_equal(row.epoch, 3);
	assert_int_equal(f->st[0]->index.n, 2);	/* the fence is not indexed */
}

static void test_wal_failure_resets(void **state)
{
	struct fix *f = *state;
	uint64_t off;

	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "keep"), NULL), 0);
	f->wal.fail_next = -ENOSPC;
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "lost"), NULL), -ENOSPC);
	assert_int_equal(f->st[0]->head, 4);
	/* the failed append left no trace: the next one gets its offset */
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 4, "next"),
				  &off), 0);
	assert_int_equal(off, 4);
	assert_false(nrs_pipeline_failed(f->p));
	assert_int_equal(nrs_counter(&f->metrics.wal_errors), 1);
}

/*
 * Group sync for batches of any size (PL2).  Batch a held in the WAL's
 * write while b queues; then a's sync is held: b is written while a
 * syncs, and neither is completed before a sync covers it.
 */
static void hold_a_sync_b_written(struct fix *f, struct treq **a,
				  struct treq **b)
{
	restart_sync(f, false, 0, 1);
	hold(f, &f->wal.write_gate, true);
	*a = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "aaaa");
	wait_held(f, &f->wal.write_gate);
	*b = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "bbbbbb");
	hold(f, &f->wal.sync_gate, true);
	hold(f, &f->wal.write_gate, false);
	wait_held(f, &f->wal.sync_gate);	/* a, at the syncer */
	wait_batches(f, 2);	/* b written meanwhile */
	assert_false(req_done(*a));
	assert_false(req_done(*b));
	assert_int_equal(f->wal.synced, 0);
	assert_int_equal(f->st[0]->head, 0);
}

static void test_sync_overlaps_write(void **state)
{
	struct fix *f = *state;
	struct treq *a, *b;
	uint64_t off;

	hold_a_sync_b_written(f, &a, &b);
	hold(f, &f->wal.sync_gate, false);
	assert_int_equal(wait_req(a, &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(wait_req(b, &off), 0);
	assert_int_equal(off, 4);
	assert_true(f->wal.syncs >= 1);	/* b's, or one for both */
	assert_int_equal(f->wal.synced, f->wal.len);
	assert_int_equal(f->wal.cuts, 0);
	assert_int_equal(f->st[0]->head, 10);
	assert_int_equal(f->st[0]->version, 2);
}

/* a's sync fails: a and b (ordered on top of it) fail, both are cut, and
 * the next append gets a's offset. */
static void test_sync_failure_fails_next(void **state)
{
	struct fix *f = *state;
	struct nrs_walrec recs[4];
	uint64_t off;
	struct treq *a, *b;

	hold_a_sync_b_written(f, &a, &b);
	pthread_mutex_lock(&f->wal.lock);
	f->wal.fail_sync = -EIO;
	pthread_mutex_unlock(&f->wal.lock);
	hold(f, &f->wal.sync_gate, false);
	assert_int_equal(wait_req(a, NULL), -EIO);
	assert_int_equal(wait_req(b, NULL), -EIO);
	assert_int_equal(f->wal.cuts, 1);
	assert_int_equal(f->wal.len, 0);
	assert_int_equal(f->st[0]->head, 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, 0, "next"),
				  &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(f->st[0]->head, 4);
	assert_int_equal(f->st[0]->version, 1);
	/* the new record starts the chain afresh */
	assert_int_equal(decode_all(f, recs, 4), 1);
	assert_int_equal(recs[0].base, 0);
	assert_int_equal(recs[0].prev_lsn, 0);
	assert_false(nrs_pipeline_failed(f->p));
	assert_int_equal(nrs_counter(&f->metrics.wal_errors), 1);
}

/* A lone append whose (inline) sync fails: cut, failed, no trace. */
static void test_sync_failure_alone(void **state)
{
	struct fix *f = *state;
	uint64_t off;

	restart_sync(f, true, 0, 1);	/* nothing to overlap: inline */
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "keep"), NULL), 0);
	f->wal.fail_sync = -EIO;
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "lost"), NULL), -EIO);
	assert_int_equal(f->wal.cuts, 1);
	assert_int_equal(f->wal.len, f->wal.synced);
	assert_int_equal(f->st[1]->head, 4);
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, 4, "next"),
				  &off), 0);
	assert_int_equal(off, 4);
	assert_false(nrs_pipeline_failed(f->p));
}

/* PL6: the WAL is sealed only by the commit role, and only when idle. */
static void test_seal_idle(void **state)
{
	struct fix *f = *state;
	struct treq *t;
	pthread_t th;
	uint64_t off;

	restart(f, true, 0);
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 0), 1);	/* idle */
	assert_int_equal(f->wal.seals, 1);
	/* a thread holds the commit role (nothing queued yet): no seal */
	assert_true(nrs_pipeline_try_lead(f->p));
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 0), 0);
	nrs_pipeline_lead(f->p, NULL);
	assert_int_equal(f->wal.seals, 1);
	/* an append in the middle of its WAL write: no seal */
	hold(f, &f->wal.write_gate, true);
	t = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "held");
	t->req.cookie = f->p;
	assert_int_equal(pthread_create(&th, NULL, lead_one, t), 0);
	wait_held(f, &f->wal.write_gate);
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 0), 0);
	assert_int_equal(f->wal.seals, 1);
	hold(f, &f->wal.write_gate, false);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(wait_req(t, &off), 0);
	/* the role given back: idle again, unless it must be idle longer */
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 3600000000000ull), 0);
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 0), 1);
	assert_int_equal(f->wal.seals, 2);
}

/* PL6: the role free, but batches written and not synced: no seal. */
static void test_seal_unsynced(void **state)
{
	struct fix *f = *state;
	struct treq *a, *b;

	hold_a_sync_b_written(f, &a, &b);
	assert_int_equal(nrs_pipeline_wal_seal(f->p, 1, 0), 0);
	hold(f, &f->wal.sync_gate, false);
	assert_int_equal(wait_req(a, NULL), 0);
	assert_int_equal(wait_req(b, NULL), 0);
	/* b's reply comes before the thread that completed it gives the
	 * commit role back: the seal is made once it has (10 s at most) */
	for (int i = 0; i < 10000 && nrs_pipeline_wal_seal(f->p, 1, 0) == 0;
	     i++)
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	assert_int_equal(f->wal.seals, 1);
}

static void test_lost_cas_fails_pipeline(void **state)
{
	struct fix *f = *state;
	struct nrs_head_update u = { 0 };

	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "one"), NULL), 0);
	/* someone else moves the head behind the pipeline's back */
	u.id = f->st[0]->id;
	u.old_version = 1;
	u.head = 100;
	u.version = 2;
	assert_int_equal(nrs_meta_publish(f->meta, &u, 1, false), 0);
	assert_int_equal(wait_req(submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "two"), NULL), -EIO);
	assert_true(nrs_pipeline_failed(f->p));
	/* the published view was not moved by the failed batch */
	assert_int_equal(f->st[0]->head, 3);
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "x"), NULL), -EIO);
}

/* Wait for t's ack; return its error and the synced bytes of t->check
 * then; free it. */
static int wait_acked(struct treq *t, size_t *synced)
{
	pthread_mutex_lock(&t->lock);
	while (!t->done)
		pthread_cond_wait(&t->cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
	*synced = t->synced_at_ack;
	return wait_req(t, NULL);
}

/*
 * PW1: with a WAL per profile, each stream's appends go to the WAL of its
 * profile (stream 0: local-wal, the default; stream 1: a second WAL behind
 * object-wal), a batch goes to one WAL, and each request is acknowledged
 * only once its own WAL has synced it.
 */
/* Restart with two WALs: stream 0's profile (local-wal) on f->wal, the
 * default; stream 1's (object-wal) on f->wal2. */
static void restart_two_wals(struct fix *f, size_t group_sync_min)
{
	struct mock_wal *b = &f->wal2;
	struct nrs_pipeline_cfg cfg;

	b->base.ops = &mock_ops;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	pthread_mutex_lock(&f->st[1]->lock);
	f->st[1]->profile = NRS_PROFILE_OBJECT_WAL;
	pthread_mutex_unlock(&f->st[1]->lock);
	nrs_pipeline_stop(f->p);
	memset(&cfg, 0, sizeof(cfg));
	cfg.wal = &f->wal.base;
	cfg.profile_wal[NRS_PROFILE_OBJECT_WAL] = &b->base;
	cfg.meta = f->meta;
	cfg.metrics = &f->metrics;
	cfg.next_lsn = 1;
	cfg.put = put;
	cfg.group_sync_min = group_sync_min;
	cfg.fence_records = f->fences;
	assert_int_equal(nrs_pipeline_start(&cfg, &f->p), 0);
}

static void test_wal_per_profile(void **state)
{
	struct fix *f = *state;
	struct mock_wal *a = &f->wal, *b = &f->wal2;
	struct nrs_walrec ra[8], rb[8];
	struct treq *x, *t0, *t1;
	size_t synced;

	restart_two_wals(f, 0);

	/* a batch held in a's write, so that the next cut off the queue
	 * holds requests of both streams, stream 1's first */
	hold(f, &a->write_gate, true);
	x = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "x");
	wait_held(f, &a->write_gate);
	t1 = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "bb");
	t1->check = b;
	nrs_pipeline_submit(f->p, &t1->req);
	t0 = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "aaa");
	t0->check = a;
	nrs_pipeline_submit(f->p, &t0->req);
	hold(f, &a->write_gate, false);
	assert_int_equal(wait_req(x, NULL), 0);
	assert_int_equal(wait_acked(t1, &synced), 0);
	assert_int_equal(synced, b->len);	/* its own WAL synced it */
	assert_int_equal(wait_acked(t0, &synced), 0);
	assert_int_equal(synced, a->len);
	/* each stream's records in its own WAL, one batch each */
	assert_int_equal(decode_wal(a, ra, 8), 2);
	assert_int_equal(ra[0].stream_id, f->st[0]->id);
	assert_int_equal(ra[1].stream_id, f->st[0]->id);
	assert_int_equal(ra[1].base, 1);
	assert_int_equal(decode_wal(b, rb, 8), 1);
	assert_int_equal(rb[0].stream_id, f->st[1]->id);
	assert_int_equal(rb[0].len, 2);
	assert_int_equal(a->batches, 2);
	assert_int_equal(b->batches, 1);

	/* b's sync held: stream 1's append is written there, not acked */
	pthread_mutex_lock(&b->lock);
	b->sync_gate.hold = true;
	pthread_mutex_unlock(&b->lock);
	t1 = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "cc");
	t1->check = b;
	nrs_pipeline_submit(f->p, &t1->req);
	pthread_mutex_lock(&b->lock);
	while (!b->sync_gate.waiting)
		pthread_cond_wait(&b->cond, &b->lock);
	assert_int_equal(b->batches, 2);
	assert_false(req_done(t1));
	b->sync_gate.hold = false;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	assert_int_equal(wait_acked(t1, &synced), 0);
	assert_int_equal(synced, b->len);
	assert_int_equal(a->batches, 2);
	assert_int_equal(f->st[1]->head, 4);
}

/*
 * PW1 with PL2's failure rule: a batch of stream 0 (WAL a) at the syncer,
 * one of stream 1 (WAL b) written behind it; a's sync fails.  Both fail,
 * and each WAL is cut back to its own first unsynced batch: nothing of the
 * failed batches is left in either.
 */
static void test_sync_failure_cuts_each_wal(void **state)
{
	struct fix *f = *state;
	struct mock_wal *a = &f->wal, *b = &f->wal2;
	struct treq *t0, *t1;
	uint64_t off;

	restart_two_wals(f, 1);		/* every batch overlaps: the syncer */
	hold(f, &a->write_gate, true);
	t0 = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "aaaa");
	wait_held(f, &a->write_gate);
	t1 = submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "bbbbbb");
	hold(f, &a->sync_gate, true);
	hold(f, &a->write_gate, false);
	wait_held(f, &a->sync_gate);	/* t0's batch at the syncer */
	pthread_mutex_lock(&b->lock);
	while (b->batches < 1)		/* t1's written meanwhile */
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	assert_false(req_done(t1));
	pthread_mutex_lock(&a->lock);
	a->fail_sync = -EIO;
	pthread_mutex_unlock(&a->lock);
	hold(f, &a->sync_gate, false);
	assert_int_equal(wait_req(t0, NULL), -EIO);
	assert_int_equal(wait_req(t1, NULL), -EIO);
	assert_int_equal(a->cuts, 1);
	assert_int_equal(a->len, 0);
	pthread_mutex_lock(&b->lock);
	assert_int_equal(b->cuts, 1);
	assert_int_equal(b->len, 0);
	assert_int_equal(b->synced, 0);
	pthread_mutex_unlock(&b->lock);
	assert_int_equal(f->st[1]->head, 0);
	/* stream 1 starts again at 0, in its own WAL */
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, 0, "next"),
				  &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(b->synced, b->len);
	assert_false(nrs_pipeline_failed(f->p));
}

/* ---- PL20, PL21: group publication ---------------------------------- */

/*
 * A recording metadata store: the SQLite one, with publish wrapped.  Its
 * calls are recorded; while hold is set a call waits (saying so); fail_at
 * (1-based) answers that call with fail instead of publishing.
 */
#define REC_CALLS	8
#define REC_UPDS	4

struct rec_call {
	size_t n;
	bool durable;
	struct nrs_head_update u[REC_UPDS];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const struct nrs_meta_ops *real;
	struct nrs_meta_ops ops;
	struct rec_call calls[REC_CALLS];
	unsigned int ncalls, fail_at;
	int fail;
	bool hold, waiting;
} rec = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int rec_publish(struct nrs_meta *m, const struct nrs_head_update *u,
		       size_t n, bool durable)
{
	struct rec_call *c;
	unsigned int k;

	pthread_mutex_lock(&rec.lock);
	k = ++rec.ncalls;
	assert_true(k <= REC_CALLS);
	c = &rec.calls[k - 1];
	c->n = n;
	c->durable = durable;
	memcpy(c->u, u, (n < REC_UPDS ? n : REC_UPDS) * sizeof(*u));
	rec.waiting = true;
	pthread_cond_broadcast(&rec.cond);
	while (rec.hold)
		pthread_cond_wait(&rec.cond, &rec.lock);
	rec.waiting = false;
	pthread_mutex_unlock(&rec.lock);
	if (k == rec.fail_at)
		return rec.fail;
	return rec.real->publish(m, u, n, durable);
}

/* Wrap f's store (until it is closed); the first publish is held. */
static void rec_wrap(struct fix *f)
{
	pthread_mutex_lock(&rec.lock);
	rec.real = f->meta->ops;
	rec.ops = *rec.real;
	rec.ops.publish = rec_publish;
	rec.ncalls = rec.fail_at = 0;
	rec.fail = 0;
	rec.hold = true;
	rec.waiting = false;
	pthread_mutex_unlock(&rec.lock);
	f->meta->ops = &rec.ops;
}

static void rec_release(void)
{
	pthread_mutex_lock(&rec.lock);
	rec.hold = false;
	pthread_cond_broadcast(&rec.cond);
	pthread_mutex_unlock(&rec.lock);
}

/* The update of stream id in call c (failing the test if none). */
static const struct nrs_head_update *rec_upd(const struct rec_call *c,
					     uint64_t id)
{
	for (size_t i = 0; i < c->n && i < REC_UPDS; i++)
		if (c->u[i].id == id)
			return &c->u[i];
	fail_msg("no update of stream %llu", (unsigned long long)id);
	return NULL;
}

/* Submit t as a batch of its own, led by this thread: handed to the
 * publisher (which is busy) by the time this returns. */
static void lead_batch(struct fix *f, struct treq *t)
{
	while (!nrs_pipeline_try_lead(f->p))
		sched_yield();		/* the committer gives the role back */
	nrs_pipeline_submit(f->p, &t->req);
	nrs_pipeline_lead(f->p, &t->req);
}

/*
 * Hold the publisher in the transaction of *a (stream 0, "a", a batch of
 * its own, by the committer) alone: the request queued behind it so that
 * the committer hands it on (a conditional append that fails -ESPIPE,
 * with nothing to write or publish) joins the next group, whenever the
 * publisher takes it (*e: the caller waits for it, after rec_release).
 * Then *b (stream 0, "bb") as the next batch, led by this thread; the
 * caller leads more, then rec_release().
 */
static void group_start(struct fix *f, struct treq **a, struct treq **b,
			struct treq **e)
{
	restart(f, true, 0);
	rec_wrap(f);
	hold(f, &f->wal.write_gate, true);
	*a = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "a");
	wait_held(f, &f->wal.write_gate);
	*e = submit(f, 0, NRS_REQ_APPEND, 0, 100, "x");
	hold(f, &f->wal.write_gate, false);
	pthread_mutex_lock(&rec.lock);
	while (!rec.waiting)
		pthread_cond_wait(&rec.cond, &rec.lock);
	assert_int_equal(rec.ncalls, 1);
	assert_int_equal(rec.calls[0].n, 1);
	assert_int_equal(rec.calls[0].u[0].head, 1);	/* a's, alone */
	pthread_mutex_unlock(&rec.lock);
	lead_batch(f, *b = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				    "bb"));
}

static unsigned int seq_of(struct treq *t)
{
	unsigned int seq;

	pthread_mutex_lock(&t->lock);
	while (!t->done)
		pthread_cond_wait(&t->cond, &t->lock);
	seq = t->seq;
	pthread_mutex_unlock(&t->lock);
	return seq;
}

/*
 * PL20: three synced batches waiting at the publisher (stream 0, 1, 0)
 * are published with one transaction, one update per stream: stream 0's
 * CAS from its view before the first of them, its values after the last;
 * no fence, no sync; the replies follow in batch order.
 */
static void test_group_publication(void **state)
{
	struct fix *f = *state;
	struct treq *t[4], *e;
	const struct nrs_head_update *u;
	struct nrs_stream_row row;
	uint64_t off, b0 = nrs_counter(&f->metrics.batches);
	uint64_t p0 = nrs_counter(&f->metrics.publications);
	unsigned int seq[4];

	group_start(f, &t[0], &t[1], &e);
	lead_batch(f, t[2] = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "ccc"));
	lead_batch(f, t[3] = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "dddd"));
	for (int i = 0; i < 4; i++)
		assert_false(req_done(t[i]));	/* nothing before its publish */
	rec_release();
	assert_int_equal(wait_req(e, NULL), -ESPIPE);	/* failed in PL1 */
	for (int i = 0; i < 4; i++)
		seq[i] = seq_of(t[i]);
	for (int i = 1; i < 4; i++)
		assert_true(seq[i] > seq[i - 1]);	/* PL5 in batch order */
	assert_int_equal(wait_req(t[0], &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(wait_req(t[1], &off), 0);
	assert_int_equal(off, 1);
	assert_int_equal(wait_req(t[2], &off), 0);
	assert_int_equal(off, 0);
	assert_int_equal(wait_req(t[3], &off), 0);
	assert_int_equal(off, 3);
	assert_int_equal(rec.ncalls, 2);	/* a's, then the group's */
	assert_int_equal(rec.calls[1].n, 2);	/* one update per stream */
	assert_false(rec.calls[1].durable);
	u = rec_upd(&rec.calls[1], f->st[0]->id);
	assert_int_equal(u->old_version, 1);	/* after a */
	assert_int_equal(u->version, 3);
	assert_int_equal(u->head, 7);
	u = rec_upd(&rec.calls[1], f->st[1]->id);
	assert_int_equal(u->old_version, 0);
	assert_int_equal(u->head, 3);
	/* e's batch, unless it went with b's */
	assert_in_range(nrs_counter(&f->metrics.batches) - b0, 4, 5);
	assert_int_equal(nrs_counter(&f->metrics.publications) - p0, 2);
	/* applied: memory and the store agree */
	assert_int_equal(f->st[0]->head, 7);
	assert_int_equal(f->st[0]->version, 3);
	assert_int_equal(f->st[1]->head, 3);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[0]->id, &row), 0);
	assert_int_equal(row.head, 7);
	assert_int_equal(row.version, 3);
	assert_int_equal(row.last_lsn, f->st[0]->last_lsn);
	assert_true(nrs_index_check(&f->st[0]->index));
	assert_false(nrs_pipeline_failed(f->p));
}

/* PL20: a group syncs if any of its batches holds a fence, not only its
 * first: here the middle one of three. */
static void test_group_fence_syncs(void **state)
{
	struct fix *f = *state;
	struct treq *t[4], *e;
	struct nrs_stream_row row;

	group_start(f, &t[0], &t[1], &e);
	lead_batch(f, t[2] = make_req(f, 1, NRS_REQ_FENCE, 3, 0, NULL));
	lead_batch(f, t[3] = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "dddd"));
	rec_release();
	assert_int_equal(wait_req(e, NULL), -ESPIPE);	/* failed in PL1 */
	for (int i = 0; i < 4; i++)
		assert_int_equal(wait_req(t[i], NULL), 0);
	assert_int_equal(rec.ncalls, 2);
	assert_false(rec.calls[0].durable);	/* a's: no fence */
	assert_int_equal(rec.calls[1].n, 2);
	assert_true(rec.calls[1].durable);
	assert_int_equal(rec_upd(&rec.calls[1], f->st[1]->id)->epoch, 3);
	assert_int_equal(f->st[1]->epoch, 3);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[1]->id, &row), 0);
	assert_int_equal(row.epoch, 3);
}

/* PL21: a group whose transaction fails (a lost CAS) fails every batch of
 * it, and every later one; nothing of it is applied. */
static void test_group_failure(void **state)
{
	struct fix *f = *state;
	struct treq *t[4], *e;
	struct nrs_stream_row row;

	group_start(f, &t[0], &t[1], &e);
	lead_batch(f, t[2] = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "ccc"));
	lead_batch(f, t[3] = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "dddd"));
	pthread_mutex_lock(&rec.lock);
	rec.fail_at = 2;
	rec.fail = -ESTALE;
	pthread_mutex_unlock(&rec.lock);
	rec_release();
	assert_int_equal(wait_req(e, NULL), -ESPIPE);	/* failed in PL1 */
	assert_int_equal(wait_req(t[0], NULL), 0);
	for (int i = 1; i < 4; i++)
		assert_int_equal(wait_req(t[i], NULL), -EIO);
	assert_int_equal(rec.ncalls, 2);
	assert_int_equal(rec.calls[1].n, 2);
	assert_true(nrs_pipeline_failed(f->p));
	assert_int_equal(f->st[0]->head, 1);	/* a's only */
	assert_int_equal(f->st[1]->head, 0);
	assert_int_equal(nrs_meta_stream_get(f->meta, f->st[0]->id, &row), 0);
	assert_int_equal(row.head, 1);
	assert_int_equal(wait_req(submit(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
					 "later"), NULL), -EIO);
}

/* PL21: a batch whose sync failed (PL2) waits at the publisher behind a
 * good one: it is published alone, with its error, never in the good
 * one's group (whose error, none, it would take, and whose transaction
 * would move heads over bytes the WAL cut). */
static void test_group_stops_at_failed_batch(void **state)
{
	struct fix *f = *state;
	struct treq *t[5], *e;
	uint64_t off;

	group_start(f, &t[0], &t[1], &e);
	pthread_mutex_lock(&f->wal.lock);
	f->wal.fail_sync = -EIO;		/* c's, by this thread */
	pthread_mutex_unlock(&f->wal.lock);
	lead_batch(f, t[2] = make_req(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "ccc"));
	lead_batch(f, t[3] = make_req(f, 1, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY,
				      "dd"));
	rec_release();
	assert_int_equal(wait_req(e, NULL), -ESPIPE);
	assert_int_equal(wait_req(t[0], NULL), 0);
	assert_int_equal(wait_req(t[1], &off), 0);
	assert_int_equal(off, 1);
	assert_int_equal(wait_req(t[2], NULL), -EIO);
	assert_int_equal(wait_req(t[3], &off), 0);
	assert_int_equal(off, 0);
	assert_false(nrs_pipeline_failed(f->p));
	assert_int_equal(f->st[0]->head, 3);	/* a and b, not c */
	t[4] = submit(f, 0, NRS_REQ_APPEND, 0, NRS_EXPECT_ANY, "e");
	assert_int_equal(wait_req(t[4], &off), 0);
	assert_int_equal(off, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_order_and_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wal_per_profile, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sync_failure_cuts_each_wal,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_conditional, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lead, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lsn_and_head_bounds,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_conditional_in_one_batch,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_fence, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fence_records, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wal_failure_resets, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sync_overlaps_write, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sync_failure_fails_next,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_sync_failure_alone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_seal_idle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_unsynced, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lost_cas_fails_pipeline, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_group_publication, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_group_fence_syncs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_group_failure, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_group_stops_at_failed_batch,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
