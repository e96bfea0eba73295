/*
 * pipeline.c - ordering and group commit of appends (DESIGN.md section 1,
 * events 1 and 2; section 3's append semantics; section 5 local-wal).
 *
 * One committer thread takes everything queued (up to max_batch_bytes) as a
 * batch and runs it through five steps.  Each step's failure rule is given
 * beside it; the numbers are cited in the code.
 *
 *  P1 Order.  Requests are taken in submission order.  A fence raises the
 *     stream's ordering epoch (a value below it is -EINVAL, equal is a
 *     no-op).  An append whose handle epoch is below the stream's ordering
 *     epoch fails -ESTALE; a conditional append whose expected offset is not
 *     the ordering head fails -ESPIPE; both fail at once and change nothing.
 *     Otherwise the append gets offset = ordering head, and the head moves by
 *     its length.  Appends of one stream in one batch become one WAL record
 *     (a fence starts a new record, so one record has one epoch); each record
 *     gets the next LSN and names the stream's previous commit (prev_lsn):
 *     the commit chain.
 *  P2 Write.  Every record of the batch goes to the WAL provider as one
 *     write and one sync.  On failure the provider has undone the write (or
 *     refuses all later writes), so the batch's requests fail with its error
 *     and each stream's ordering view is reset to its published view.
 *  P3 Publish.  One metadata transaction moves every head of the batch from
 *     (head, version) to the new values by compare-and-set.  It syncs only
 *     when the batch holds a fence (epochs must survive power loss; heads are
 *     re-published from the WAL by recovery).  Transient errors are retried
 *     for a while.  A lost CAS, or an error that outlives the retries, leaves
 *     records durable in the WAL that are not published: later appends would
 *     build a second chain from the same head, and recovery could re-publish
 *     the first over the second (losing acknowledged bytes, I1).  So the
 *     pipeline then fails the batch with -EIO and refuses every later append
 *     (it "fails"); a remount recovers (DESIGN.md section 6, I3).
 *  P4 Apply.  The published view of each stream (head, version, epoch,
 *     index entries) is updated under the stream lock: readers see the new
 *     bytes only now, and only bytes the metadata store has published (I4).
 *  P5 Reply.  Each request's callback runs; then the commit hook (page cache
 *     invalidation in the FUSE layer).
 *
 * Appends to one stream are therefore published in the order they were
 * submitted, and a request is completed only after both its WAL write is
 * durable and its head is published.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "meta.h"
#include "metrics.h"
#include "pipeline.h"
#include "stream.h"
#include "wal.h"

#define DEFAULT_MAX_BATCH	(16u << 20)
#define PUBLISH_RETRIES		40
#define PUBLISH_BACKOFF_NS	50000000L	/* 50 ms, doubling to 800 ms */

struct batch_rec {
	struct nrs_stream *st;
	struct nrs_walrec rec;
	size_t first_req, last_req;	/* indexes into reqs, linked by rnext */
	size_t total;			/* bytes on disk */
	uint64_t seg, off;		/* where it starts, once written */
};

struct nrs_pipeline {
	struct nrs_pipeline_cfg cfg;
	pthread_t thread;

	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	/* protected by qlock */
	struct nrs_req *qhead, **qtail;
	bool stopping;

	atomic_bool failed;

	/* committer thread only */
	uint64_t next_lsn;
	struct nrs_req **reqs;
	size_t *rnext;			/* next request of the same record */
	size_t nreqs, cap_reqs, cap_rnext;
	struct batch_rec *recs;
	size_t nrecs, cap_recs;
	struct nrs_head_update *upds;
	struct nrs_stream **upd_st;
	uint64_t *upd_old_head;
	bool *upd_inval;		/* the commit hook is owed a call */
	size_t nupds, cap_upds;
	struct iovec *iov;
	size_t cap_iov;
	unsigned char *hdrs;
	size_t cap_hdrs;
};

static const unsigned char zero_pad[NRS_WALREC_ALIGN];

uint64_t nrs_now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t nrs_now_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Grow *arr (elements of size sz) to hold at least want; 0 or -ENOMEM. */
static int grow(void **arr, size_t *cap, size_t want, size_t sz)
{
	size_t n = *cap ? *cap : 64;
	void *p;

	if (want <= *cap)
		return 0;
	while (n < want)
		n *= 2;
	p = realloc(*arr, n * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

static void complete(struct nrs_pipeline *p, struct nrs_req *r, int err)
{
	struct nrs_stream *st = r->st;
	struct nrs_metrics *m = p->cfg.metrics;

	if (m && r->kind == NRS_REQ_APPEND) {
		if (err == 0) {
			nrs_count(&m->appends, 1);
			nrs_count(&m->append_bytes, r->len);
			nrs_hist_observe(&m->commit_latency,
					 (nrs_now_mono_ns() - r->t_submit_ns) / 1000);
		} else {
			nrs_count(&m->append_errors, 1);
			if (err == -ESPIPE)
				nrs_count(&m->espipe, 1);
			else if (err == -ESTALE)
				nrs_count(&m->estale, 1);
		}
	} else if (m && err == 0) {
		nrs_count(&m->fences, 1);
	}
	r->done(r, err);
	p->cfg.put(st);
}

void nrs_pipeline_submit(struct nrs_pipeline *p, struct nrs_req *r)
{
	r->next = NULL;
	r->err = 0;
	r->t_submit_ns = nrs_now_mono_ns();
	if (atomic_load(&p->failed)) {
		complete(p, r, -EIO);
		return;
	}
	pthread_mutex_lock(&p->qlock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->qlock);
		complete(p, r, -EIO);
		return;
	}
	*p->qtail = r;
	p->qtail = &r->next;
	pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

bool nrs_pipeline_failed(struct nrs_pipeline *p)
{
	return atomic_load(&p->failed);
}

/*
 * Take a batch off the queue: everything queued, cut after the request
 * that reaches max_batch_bytes.  Returns false when stopping and empty.
 */
static bool take_batch(struct nrs_pipeline *p, struct nrs_req **list)
{
	struct nrs_req *r, *last = NULL;
	size_t bytes = 0;

	pthread_mutex_lock(&p->qlock);
	while (!p->qhead && !p->stopping)
		pthread_cond_wait(&p->qcond, &p->qlock);
	if (!p->qhead) {
		pthread_mutex_unlock(&p->qlock);
		return false;
	}
	for (r = p->qhead; r; r = r->next) {
		last = r;
		bytes += r->len;
		if (bytes >= p->cfg.max_batch_bytes)
			break;
	}
	*list = p->qhead;
	p->qhead = last->next;
	if (!p->qhead)
		p->qtail = &p->qhead;
	last->next = NULL;
	pthread_mutex_unlock(&p->qlock);
	return true;
}

/* The stream's slot in this batch's head updates, created on first use. */
static int upd_slot(struct nrs_pipeline *p, struct nrs_stream *st)
{
	struct nrs_head_update *u;

	if (st->batch_upd >= 0)
		return st->batch_upd;
	if (grow((void **)&p->upds, &p->cap_upds, p->nupds + 1, sizeof(*p->upds)))
		return -ENOMEM;
	/* the parallel arrays follow cap_upds; grow them to the same size */
	{
		struct nrs_stream **s = realloc(p->upd_st, p->cap_upds * sizeof(*s));

		if (!s)
			return -ENOMEM;
		p->upd_st = s;
	}
	{
		uint64_t *h = realloc(p->upd_old_head,
				      p->cap_upds * sizeof(*h));

		if (!h)
			return -ENOMEM;
		p->upd_old_head = h;
	}
	{
		bool *v = realloc(p->upd_inval, p->cap_upds * sizeof(*v));

		if (!v)
			return -ENOMEM;
		p->upd_inval = v;
	}
	u = &p->upds[p->nupds];
	pthread_mutex_lock(&st->lock);
	u->id = st->id;
	u->old_version = st->version;
	p->upd_old_head[p->nupds] = st->head;
	pthread_mutex_unlock(&st->lock);
	p->upd_st[p->nupds] = st;
	st->batch_upd = (int)p->nupds++;
	return st->batch_upd;
}

/* P1 for one append; returns 0 or the error to complete it with. */
static int order_append(struct nrs_pipeline *p, struct nrs_req *r, size_t ri)
{
	struct nrs_stream *st = r->st;
	struct batch_rec *br;
	int err;

	if (r->epoch < st->ord_epoch)
		return -ESTALE;
	if (r->expect != NRS_EXPECT_ANY && r->expect != st->ord_head)
		return -ESPIPE;
	if (r->len > NRS_WALREC_MAX_LEN ||
	    st->ord_head + r->len < st->ord_head)
		return -EFBIG;
	err = upd_slot(p, st);
	if (err < 0)
		return err;
	if (st->batch_slot >= 0 &&
	    p->recs[st->batch_slot].rec.len + r->len > NRS_WALREC_MAX_LEN)
		st->batch_slot = -1;	/* start another record */
	if (st->batch_slot < 0) {
		if (grow((void **)&p->recs, &p->cap_recs, p->nrecs + 1,
			 sizeof(*p->recs)))
			return -ENOMEM;
		br = &p->recs[p->nrecs];
		memset(br, 0, sizeof(*br));
		br->st = st;
		br->rec.kind = NRS_WALREC_DATA;
		br->rec.lsn = p->next_lsn++;
		br->rec.stream_id = st->id;
		br->rec.base = st->ord_head;
		br->rec.epoch = st->ord_epoch;
		br->rec.prev_lsn = st->ord_lsn;
		br->first_req = ri;
		st->ord_lsn = br->rec.lsn;
		st->batch_slot = (int)p->nrecs++;
	} else {
		br = &p->recs[st->batch_slot];
		p->rnext[br->last_req] = ri;
	}
	br->last_req = ri;
	p->rnext[ri] = SIZE_MAX;
	br->rec.len += (uint32_t)r->len;
	br->rec.n_appends++;
	r->offset = st->ord_head;
	st->ord_head += r->len;
	st->ord_version++;
	return 0;
}

/* P1 for one fence. */
static int order_fence(struct nrs_pipeline *p, struct nrs_req *r)
{
	struct nrs_stream *st = r->st;
	int err;

	if (r->epoch < st->ord_epoch)
		return -EINVAL;
	if (r->epoch == st->ord_epoch)
		return 0;
	err = upd_slot(p, st);
	if (err < 0)
		return err;
	st->ord_epoch = r->epoch;
	st->batch_slot = -1;	/* later appends: a record of the new epoch */
	return 0;
}

/* Undo P1 for every stream of the batch: the published view is the truth. */
static void reset_ordering(struct nrs_pipeline *p)
{
	for (size_t i = 0; i < p->nupds; i++) {
		struct nrs_stream *st = p->upd_st[i];

		pthread_mutex_lock(&st->lock);
		st->ord_head = st->head;
		st->ord_version = st->version;
		st->ord_epoch = st->epoch;
		st->ord_lsn = st->last_lsn;
		pthread_mutex_unlock(&st->lock);
	}
}

/* P2: format the records into iovecs and write them. */
static int write_batch(struct nrs_pipeline *p)
{
	size_t hdr_bytes = 0, niov = 0, k = 0, h = 0;
	struct nrs_wal_pos pos;
	uint64_t off;
	int err;

	if (p->nrecs == 0)
		return 0;
	for (size_t i = 0; i < p->nrecs; i++) {
		hdr_bytes += nrs_walrec_hdr_len(p->recs[i].rec.len);
		niov += 2 + p->recs[i].rec.n_appends;
	}
	if (grow((void **)&p->hdrs, &p->cap_hdrs, hdr_bytes, 1) ||
	    grow((void **)&p->iov, &p->cap_iov, niov, sizeof(*p->iov)))
		return -ENOMEM;
	for (size_t i = 0; i < p->nrecs; i++) {
		struct batch_rec *br = &p->recs[i];
		size_t hl = nrs_walrec_hdr_len(br->rec.len);
		size_t first = k + 1, pad;
		ssize_t n;

		p->iov[k].iov_base = p->hdrs + h;
		p->iov[k++].iov_len = hl;
		for (size_t ri = br->first_req; ri != SIZE_MAX; ri = p->rnext[ri]) {
			p->iov[k].iov_base = (void *)p->reqs[ri]->data;
			p->iov[k++].iov_len = p->reqs[ri]->len;
		}
		n = nrs_walrec_encode_hdr(&br->rec, &p->iov[first],
					  (int)(k - first), p->hdrs + h, hl);
		if (n < 0)
			return (int)n;
		br->total = nrs_walrec_total_len(br->rec.len);
		pad = br->total - hl - br->rec.len;
		if (pad) {
			p->iov[k].iov_base = (void *)zero_pad;
			p->iov[k++].iov_len = pad;
		}
		h += hl;
	}
	err = nrs_wal_append(p->cfg.wal, p->iov, (int)k, &pos);
	if (err < 0)
		return err;
	off = pos.off;
	for (size_t i = 0; i < p->nrecs; i++) {
		p->recs[i].seg = pos.seg;
		p->recs[i].off = off;
		off += p->recs[i].total;
	}
	return 0;
}

/* P3 */
static int publish(struct nrs_pipeline *p, bool durable)
{
	int64_t now = nrs_now_real_ns();
	long backoff = PUBLISH_BACKOFF_NS;
	int err = 0;

	if (p->nupds == 0)
		return 0;
	for (size_t i = 0; i < p->nupds; i++) {
		struct nrs_stream *st = p->upd_st[i];
		struct nrs_head_update *u = &p->upds[i];

		u->head = st->ord_head;
		u->version = st->ord_version;
		u->epoch = st->ord_epoch;
		u->last_lsn = st->ord_lsn;
		u->mtime_ns = now;
	}
	for (int attempt = 0; attempt < PUBLISH_RETRIES; attempt++) {
		struct timespec ts;

		err = nrs_meta_publish(p->cfg.meta, p->upds, p->nupds, durable);
		if (err == 0 || err == -ESTALE)
			break;
		if (p->cfg.metrics)
			nrs_count(&p->cfg.metrics->publish_errors, 1);
		nrs_warn("publishing %zu heads failed (%s), retrying", p->nupds,
			 strerror(-err));
		ts.tv_sec = backoff / 1000000000L;
		ts.tv_nsec = backoff % 1000000000L;
		nanosleep(&ts, NULL);
		if (backoff < 800000000L)
			backoff *= 2;
	}
	return err;
}

/* P4 */
static void apply(struct nrs_pipeline *p)
{
	for (size_t i = 0; i < p->nrecs; i++) {
		struct batch_rec *br = &p->recs[i];
		struct nrs_stream *st = br->st;
		struct nrs_index_ent e = {
			.start = br->rec.base,
			.end = br->rec.base + br->rec.len,
			.gen = 0,
			.kind = NRS_TARGET_WAL,
			.seg = br->seg,
			.off = br->off,
		};
		int err = 0;

		if (br->rec.len == 0)
			continue;
		pthread_mutex_lock(&st->lock);
		err = nrs_index_append(&st->index, &e);
		st->wal_bytes += br->total;
		pthread_mutex_unlock(&st->lock);
		if (err)
			nrs_err("stream %" PRIu64 ": cannot index [%" PRIu64 ", %"
				PRIu64 "): %s; reads of it will fail", st->id,
				e.start, e.end, strerror(-err));
	}
	for (size_t i = 0; i < p->nupds; i++) {
		struct nrs_stream *st = p->upd_st[i];
		const struct nrs_head_update *u = &p->upds[i];

		pthread_mutex_lock(&st->lock);
		st->head = u->head;
		st->version = u->version;
		st->epoch = u->epoch;
		st->last_lsn = u->last_lsn;
		st->mtime_ns = u->mtime_ns;
		/* a reader that saw the old head may cache its page */
		p->upd_inval[i] = st->tail_cached && u->head != p->upd_old_head[i];
		if (p->upd_inval[i])
			st->tail_cached = false;
		pthread_mutex_unlock(&st->lock);
	}
}

static void fail_pipeline(struct nrs_pipeline *p, int err)
{
	if (!atomic_exchange(&p->failed, true))
		nrs_err("commit pipeline failed (%s): durable WAL records could "
			"not be published; appends are refused until remount, "
			"which recovers them",
			err == -ESTALE ? "lost head CAS" : strerror(-err));
}

static void run_batch(struct nrs_pipeline *p, struct nrs_req *list)
{
	struct nrs_metrics *m = p->cfg.metrics;
	bool durable = false;
	uint64_t payload = 0, appends = 0;
	int err;

	p->nreqs = p->nrecs = p->nupds = 0;
	for (struct nrs_req *r = list; r; r = r->next) {
		if (grow((void **)&p->reqs, &p->cap_reqs, p->nreqs + 1,
			 sizeof(*p->reqs)) ||
		    grow((void **)&p->rnext, &p->cap_rnext, p->nreqs + 1,
			 sizeof(*p->rnext)))
			r->err = -ENOMEM;	/* completed with it below */
		else
			p->reqs[p->nreqs++] = r;
	}
	/* P1 */
	for (size_t i = 0; i < p->nreqs; i++) {
		struct nrs_req *r = p->reqs[i];

		if (r->kind == NRS_REQ_FENCE) {
			r->err = order_fence(p, r);
			if (r->err == 0 && r->st->batch_upd >= 0)
				durable = true;
		} else {
			r->err = order_append(p, r, i);
		}
		if (r->err == 0 && r->kind == NRS_REQ_APPEND) {
			payload += r->len;
			appends++;
		}
	}
	/* P2 */
	err = write_batch(p);
	if (err < 0) {
		if (m)
			nrs_count(&m->wal_errors, 1);
		nrs_err("WAL write of %zu records failed: %s", p->nrecs,
			strerror(-err));
		reset_ordering(p);
		goto out_complete;
	}
	/* P3 */
	err = publish(p, durable);
	if (err < 0) {
		fail_pipeline(p, err);
		err = -EIO;
		goto out_complete;
	}
	/* P4 */
	apply(p);
	if (m) {
		nrs_count(&m->batches, 1);
		nrs_hist_observe(&m->batch_appends, appends);
		nrs_hist_observe(&m->batch_bytes, payload);
	}
out_complete:
	/* P5 */
	for (size_t i = 0; i < p->nupds; i++) {
		p->upd_st[i]->batch_upd = -1;
		p->upd_st[i]->batch_slot = -1;
	}
	for (struct nrs_req *r = list, *next; r; r = next) {
		next = r->next;
		complete(p, r, r->err ? r->err : err);
	}
	if (err == 0 && p->cfg.hook) {
		for (size_t i = 0; i < p->nupds; i++)
			if (p->upd_inval[i])
				p->cfg.hook(p->cfg.hook_ctx, p->upd_st[i],
					    p->upd_old_head[i]);
	}
}

static void *committer(void *arg)
{
	struct nrs_pipeline *p = arg;
	struct nrs_req *list;

	while (take_batch(p, &list))
		run_batch(p, list);
	return NULL;
}

int nrs_pipeline_start(const struct nrs_pipeline_cfg *cfg,
		       struct nrs_pipeline **out)
{
	struct nrs_pipeline *p;
	int err;

	if (!cfg->wal || !cfg->meta || !cfg->put || cfg->next_lsn == 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	if (!p->cfg.max_batch_bytes)
		p->cfg.max_batch_bytes = DEFAULT_MAX_BATCH;
	p->next_lsn = cfg->next_lsn;
	p->qtail = &p->qhead;
	atomic_init(&p->failed, false);
	pthread_mutex_init(&p->qlock, NULL);
	pthread_cond_init(&p->qcond, NULL);
	err = -pthread_create(&p->thread, NULL, committer, p);
	if (err) {
		pthread_cond_destroy(&p->qcond);
		pthread_mutex_destroy(&p->qlock);
		free(p);
		return err;
	}
	*out = p;
	return 0;
}

void nrs_pipeline_stop(struct nrs_pipeline *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->qlock);
	p->stopping = true;
	pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->qcond);
	pthread_mutex_destroy(&p->qlock);
	free(p->reqs);
	free(p->rnext);
	free(p->recs);
	free(p->upds);
	free(p->upd_st);
	free(p->upd_old_head);
	free(p->upd_inval);
	free(p->iov);
	free(p->hdrs);
	free(p);
}
