/*
 * pipeline_publish.c - PL3 to PL5 (pipeline.c): a batch's heads published
 * with one metadata transaction (retried while the error is transient; a
 * lost CAS fails the pipeline), the published view applied around the
 * commit hook, and every request completed; the publisher thread that does
 * it in batch order.
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

/* PL3 */
static int publish(struct nrs_pipeline *p, struct batch *b)
{
	int64_t now = nrs_now_real_ns();
	long backoff = PUBLISH_BACKOFF_NS;
	int err = 0;

	if (b->nupds == 0)
		return 0;
	for (size_t i = 0; i < b->nupds; i++)
		b->upds[i].mtime_ns = now;
	for (int attempt = 0; attempt < PUBLISH_RETRIES; attempt++) {
		struct timespec ts;

		err = nrs_meta_publish(p->cfg.meta, b->upds, b->nupds, b->durable);
		if (err == 0 || err == -ESTALE || err == -EUCLEAN)
			break;		/* retrying would not change them */
		if (p->cfg.metrics)
			nrs_count(&p->cfg.metrics->publish_errors, 1);
		nrs_warn("publishing %zu heads failed (%s), retrying", b->nupds,
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
		if (st->unmat_since_ns == 0)	/* materializer.c MZ1 */
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

/* Stage 2: PL3, PL4 and PL5, in the publisher thread. */
void pl_stage_publish(struct nrs_pipeline *p, struct batch *b)
{
	struct nrs_metrics *m = p->cfg.metrics;
	int err = b->err;

	if (!err && atomic_load(&p->failed))
		err = -EIO;	/* a batch before this one was not published */
	if (!err) {
		err = publish(p, b);
		if (err) {
			fail_pipeline(p, err);
			err = -EIO;
		}
	}
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

void *pl_publisher(void *arg)
{
	struct nrs_pipeline *p = arg;
	int i;

	for (;;) {
		pthread_mutex_lock(&p->hlock);
		while (!p->full[p->pub_next] && !p->committer_done)
			pthread_cond_wait(&p->hcond, &p->hlock);
		i = p->pub_next;
		if (!p->full[i]) {	/* done, and nothing left */
			pthread_mutex_unlock(&p->hlock);
			return NULL;
		}
		pthread_mutex_unlock(&p->hlock);
		pl_stage_publish(p, &p->b[i]);
		pthread_mutex_lock(&p->hlock);
		p->full[i] = false;
		p->pub_next = (i + 1) % NBUF;
		pthread_cond_broadcast(&p->hcond);
		pthread_mutex_unlock(&p->hlock);
	}
}
