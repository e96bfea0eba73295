/*
 * pipeline_publish.c - PL3 to PL5 (pipeline.c): a batch's heads published
 * with one metadata transaction (retried while the error is transient; a
 * lost CAS fails the pipeline), the published view applied around the
 * commit hook, and every request completed; the publisher thread that does
 * it in batch order, for every batch waiting at once with one transaction
 * (PL20, PL21; the merge of their updates is pipeline_group.c's).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "commit/pipeline.h"
#include "commit/pipeline_priv.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/metrics.h"

#define PUBLISH_RETRIES		40
#define PUBLISH_BACKOFF_NS	50000000L	/* 50 ms, doubling to 800 ms */

void pl_complete(struct nrs_pipeline *p, struct nrs_req *r, int err)
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
	} else if (m && err == 0 && r->kind == NRS_REQ_FENCE) {
		nrs_count(&m->fences, 1);
	}
	r->done(r, err);
	if (st)
		p->cfg.put(st);
}

/*
 * PL3 (PL20: of a group): the n updates u in one metadata transaction,
 * retried while the error is transient; synced if durable.
 */
static int publish(struct nrs_pipeline *p, const struct nrs_head_update *u,
		   size_t n, bool durable)
{
	long backoff = PUBLISH_BACKOFF_NS;
	int err = 0;

	if (n == 0)
		return 0;
	for (int attempt = 0; attempt < PUBLISH_RETRIES; attempt++) {
		struct timespec ts;

		err = nrs_meta_publish(p->cfg.meta, u, n, durable);
		if (err == 0 && p->cfg.metrics)
			nrs_count(&p->cfg.metrics->publications, 1);
		if (err == 0 || err == -ESTALE || err == -EUCLEAN)
			break;		/* retrying would not change them */
		if (p->cfg.metrics)
			nrs_count(&p->cfg.metrics->publish_errors, 1);
		nrs_warn("publishing %zu heads failed (%s), retrying", n,
			 strerror(-err));
		ts.tv_sec = backoff / 1000000000L;
		ts.tv_nsec = backoff % 1000000000L;
		nanosleep(&ts, NULL);
		if (backoff < 800000000L)
			backoff *= 2;
	}
	return err;
}

/*
 * PL4, in two halves around the commit hook.  The kernel learns a new size
 * only from getattr, i.e. from st->head; a reader that saw the old head
 * may have left the page holding it in the page cache, zero-filled past
 * it.  So: first let reads reach the new head (read_limit) and take the
 * "page may be cached" flag (apply_reads); then the hook drops that page;
 * only then does the head move for stat and xattrs (apply_head).  A read
 * after apply_reads caches real bytes up to the new head; a read before it
 * set the flag that apply_reads takes.
 */
static void apply_reads(struct batch *b)
{
	uint64_t now = nrs_now_mono_ns();

	for (size_t i = 0; i < b->nrecs; i++) {
		struct batch_rec *br = &b->recs[i];
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

		if (br->rec.len == 0 || !st)	/* !st: a META record */
			continue;
		pthread_mutex_lock(&st->lock);
		err = nrs_index_append(&st->index, &e);
		st->wal_bytes += br->total;
		if (st->unmat_since_ns == 0)	/* mat_plan.c MZ1 */
			st->unmat_since_ns = (int64_t)now;
		pthread_mutex_unlock(&st->lock);
		if (err)
			nrs_err("stream %" PRIu64 ": cannot index [%" PRIu64 ", %"
				PRIu64 "): %s; reads of it will fail", st->id,
				e.start, e.end, strerror(-err));
	}
	for (size_t i = 0; i < b->nupds; i++) {
		struct batch_upd *bu = &b->bu[i];
		struct nrs_stream *st = bu->st;
		const struct nrs_head_update *u = &b->upds[i];

		pthread_mutex_lock(&st->lock);
		st->read_limit = u->head;
		/* a reader that saw the old head may cache its page */
		bu->inval = st->tail_cached && u->head != bu->head;
		if (bu->inval)
			st->tail_cached = false;
		pthread_mutex_unlock(&st->lock);
	}
}

static void apply_head(struct batch *b)
{
	for (size_t i = 0; i < b->nupds; i++) {
		struct nrs_stream *st = b->bu[i].st;
		const struct nrs_head_update *u = &b->upds[i];

		pthread_mutex_lock(&st->lock);
		st->head = u->head;
		st->version = u->version;
		st->epoch = u->epoch;
		st->last_lsn = u->last_lsn;
		st->mtime_ns = u->mtime_ns;
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

/* PL4 and PL5 of b, whose publication ended with err. */
static void finish(struct nrs_pipeline *p, struct batch *b, int err)
{
	struct nrs_metrics *m = p->cfg.metrics;

	if (!err) {
		apply_reads(b);
		/* before the head moves for stat (see apply_reads), and before
		 * the replies: the requests' references keep the streams alive */
		if (p->cfg.hook)
			for (size_t i = 0; i < b->nupds; i++)
				if (b->bu[i].inval)
					p->cfg.hook(p->cfg.hook_ctx, b->bu[i].st,
						    b->bu[i].head);
		apply_head(b);
		if (m) {
			nrs_count(&m->batches, 1);
			nrs_hist_observe(&m->batch_appends, b->appends);
			nrs_hist_observe(&m->batch_bytes, b->payload);
		}
	}
	if (!err)
		err = nrs_failpoint(NRS_FP_PIPELINE_BEFORE_REPLY);
	atomic_store(&b->floor, UINT64_MAX);
	for (struct nrs_req *r = b->list, *next; r; r = next) {
		next = r->next;
		pl_complete(p, r, r->err ? r->err : err);
	}
	b->list = NULL;
}

/*
 * PL3 to PL5 of the group bs[0..n) (PL20, PL21): one transaction for all,
 * then each batch applied and replied to, in batch order, and handed to
 * done (may be NULL).  A batch PL2 failed (its err set) is a group of one.
 */
static void publish_group(struct nrs_pipeline *p, struct batch *const *bs,
			  int n, void (*done)(struct nrs_pipeline *p,
					      struct batch *b))
{
	const struct nrs_head_update *u = bs[0]->upds;
	size_t nu = bs[0]->nupds;
	int64_t now = nrs_now_real_ns();
	bool durable = false;
	int err = bs[0]->err;

	if (!err && atomic_load(&p->failed))
		err = -EIO;	/* a batch before this one was not published */
	for (int k = 0; !err && k < n; k++) {
		for (size_t i = 0; i < bs[k]->nupds; i++)
			bs[k]->upds[i].mtime_ns = now;
		durable = durable || bs[k]->durable;	/* PL20: any fence */
	}
	if (!err && n > 1) {
		if (pl_group_merge(&p->group, bs, n)) {
			/* no room to merge them: one transaction each */
			for (int k = 0; k < n; k++)
				publish_group(p, &bs[k], 1, done);
			return;
		}
		u = p->group.upds;
		nu = p->group.n;
	}
	if (!err) {
		err = publish(p, u, nu, durable);
		if (err) {	/* PL21: every batch of the group, and later */
			fail_pipeline(p, err);
			err = -EIO;
		}
	}
	for (int k = 0; k < n; k++) {
		finish(p, bs[k], err);
		if (done)
			done(p, bs[k]);
	}
}

/* Stage 2: PL3, PL4 and PL5 of b alone. */
void pl_stage_publish(struct nrs_pipeline *p, struct batch *b)
{
	publish_group(p, &b, 1, NULL);
}

/*
 * PL20: the batches waiting at the publisher from b[i] on, in batch order,
 * into bs; a batch PL2 failed only alone.  hlock held.  Their count.
 */
static int waiting_group(struct nrs_pipeline *p, int i, struct batch **bs)
{
	int n = 0;

	do {
		bs[n++] = &p->b[i];
		i = (i + 1) % NBUF;
	} while (n < NBUF && p->full[i] && !p->b[i].err && !bs[0]->err);
	return n;
}

/* Give b's buffer back to the commit role: the publisher is past it. */
static void release_buf(struct nrs_pipeline *p, struct batch *b)
{
	int i = (int)(b - p->b);

	pthread_mutex_lock(&p->hlock);
	p->full[i] = false;
	p->pub_next = (i + 1) % NBUF;
	pthread_cond_broadcast(&p->hcond);
	pthread_mutex_unlock(&p->hlock);
}

void *pl_publisher(void *arg)
{
	struct nrs_pipeline *p = arg;
	struct batch *bs[NBUF];
	int n;

	for (;;) {
		pthread_mutex_lock(&p->hlock);
		while (!p->full[p->pub_next] && !p->committer_done)
			pthread_cond_wait(&p->hcond, &p->hlock);
		if (!p->full[p->pub_next]) {	/* done, and nothing left */
			pthread_mutex_unlock(&p->hlock);
			return NULL;
		}
		n = waiting_group(p, p->pub_next, bs);
		pthread_mutex_unlock(&p->hlock);
		publish_group(p, bs, n, release_buf);
	}
}
