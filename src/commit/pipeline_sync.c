/*
 * pipeline_sync.c - PL2's sync (pipeline.c): a batch synced by the commit
 * role itself, or queued for the syncer thread, which syncs every queued
 * batch with one sync per segment of each WAL (PW1); a failed sync settled
 * by the commit role (cut, undo, fail); batches handed on to the publisher
 * in batch order, or published in place when nothing would overlap.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "commit/pipeline.h"
#include "commit/pipeline_priv.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"

static struct nrs_wal_pos batch_end(const struct batch *b)
{
	struct nrs_wal_pos end = { b->wpos.seg, b->wpos.off + b->wlen };

	return end;
}

/* Whether a batch waits for the publisher; hlock held. */
static bool publisher_holds_any(const struct nrs_pipeline *p)
{
	for (int k = 0; k < NBUF; k++)
		if (p->full[k])
			return true;
	return false;
}

/* Batch i to the publisher, in batch order. */
static void to_publisher(struct nrs_pipeline *p, int i)
{
	pthread_mutex_lock(&p->hlock);
	p->full[i] = true;
	pthread_cond_broadcast(&p->hcond);
	pthread_mutex_unlock(&p->hlock);
}

/*
 * Hand the first n batches queued for the syncer (idx, in order) to the
 * publisher and take them off the queue; settled: a failure was settled.
 */
static void dequeue(struct nrs_pipeline *p, const int *idx, int n,
		    bool settled)
{
	for (int k = 0; k < n; k++)
		to_publisher(p, idx[k]);
	pthread_mutex_lock(&p->slock);
	for (int k = 0; k < n; k++)
		p->busy_buf[idx[k]] = false;
	p->wq_head = (p->wq_head + n) % NBUF;
	p->wq_len -= n;
	if (settled)
		atomic_store(&p->sfail, 0);
	pthread_cond_broadcast(&p->scond);
	pthread_mutex_unlock(&p->slock);
}

/* Whether b was written (and not undone at once) to WAL w. */
static bool wrote_to(const struct batch *b, const struct nrs_wal *w)
{
	return b->written && !b->err && atomic_load(&b->wal) == w;
}

/*
 * PL2's failure rule for a sync (the commit role): the batches bs[0..n),
 * in batch order, were written and not made durable -- the sync failed
 * with err -- and `then` (if not NULL) was ordered after them.  Cut each
 * WAL they went to back to the start of the first of them in it (the
 * bytes of the rest go with it; PW1), undo PL1 of each, the latest first,
 * and fail them with err.
 */
static void fail_written(struct nrs_pipeline *p, struct batch **bs, int n,
			 struct batch *then, int err)
{
	struct batch *all[NBUF + 1];
	int na = 0;

	for (int k = 0; k < n; k++)
		all[na++] = bs[k];
	if (then)
		all[na++] = then;
	for (int k = 0; k < na; k++) {
		struct nrs_wal *w = atomic_load(&all[k]->wal);
		bool first = wrote_to(all[k], w);

		for (int j = 0; first && j < k; j++)
			first = !wrote_to(all[j], w);
		if (first)
			(void)nrs_wal_cut(w, all[k]->wpos, err);
	}
	if (then && !then->err) {
		then->err = err;
		pl_undo_order(then);
	}
	for (int k = n - 1; k >= 0; k--) {
		if (!bs[k]->err) {	/* a failed write was undone at once */
			bs[k]->err = err;
			pl_undo_order(bs[k]);
		}
	}
	if (p->cfg.metrics)
		nrs_count(&p->cfg.metrics->wal_errors, 1);
	nrs_err("WAL sync failed (%s): %d batch%s not made durable failed",
		strerror(-err), n + (then != NULL),
		n + (then != NULL) == 1 ? "" : "es");
}

/*
 * If a group sync failed, settle it (the commit role): fail every batch
 * the syncer holds (written before or after the failed sync's start: all
 * are ordered on top of its first batch) and `then`, hand them on, and let
 * the syncer go on.  Returns true if there was a failure.
 */
bool pl_settle_failure(struct nrs_pipeline *p, struct batch *then)
{
	struct batch *bs[NBUF];
	int idx[NBUF], n, err;

	/* the syncer sets sfail under slock before it wakes anyone: a
	 * failure missed here is settled at the commit role's next look */
	err = atomic_load(&p->sfail);
	if (!err)
		return false;
	pthread_mutex_lock(&p->slock);
	n = p->wq_len;
	for (int k = 0; k < n; k++) {
		idx[k] = p->wq[(p->wq_head + k) % NBUF];
		bs[k] = &p->b[idx[k]];
	}
	pthread_mutex_unlock(&p->slock);
	fail_written(p, bs, n, then, err);
	dequeue(p, idx, n, true);
	return true;
}

/* Wait until the syncer has handed on every batch queued for it (settling
 * a failure, with `then`).  Returns true if there was a failure. */
bool pl_drain(struct nrs_pipeline *p, struct batch *then)
{
	pthread_mutex_lock(&p->slock);
	while (p->wq_len > 0 && !atomic_load(&p->sfail))
		pthread_cond_wait(&p->scond, &p->slock);
	pthread_mutex_unlock(&p->slock);
	return pl_settle_failure(p, then);
}

/* Queue batch i for the syncer (the commit role). */
static void to_syncer(struct nrs_pipeline *p, int i)
{
	pthread_mutex_lock(&p->slock);
	p->busy_buf[i] = true;
	p->wq[(p->wq_head + p->wq_len) % NBUF] = i;
	p->wq_len++;
	pthread_cond_broadcast(&p->scond);
	pthread_mutex_unlock(&p->slock);
}

/*
 * Hand batch i to the publisher; or, if nothing would overlap with it (no
 * batch at the publisher, no request waiting), publish it here, which
 * saves a thread switch on the path of a lone writer.  The syncer holds
 * no batch (drained).
 */
static void hand_on(struct nrs_pipeline *p, int i)
{
	bool here;

	pthread_mutex_lock(&p->hlock);
	/* none held: then pub_next == i */
	here = !publisher_holds_any(p) && pl_queue_empty(p);
	if (!here) {
		p->full[i] = true;
		pthread_cond_broadcast(&p->hcond);
	}
	pthread_mutex_unlock(&p->hlock);
	if (here) {
		pl_stage_publish(p, &p->b[i]);
		pthread_mutex_lock(&p->hlock);
		p->pub_next = (i + 1) % NBUF;
		pthread_mutex_unlock(&p->hlock);
	}
}

/*
 * Whether another batch may be written while one is synced: requests are
 * queued, or batches are at the syncer or the publisher (their writers are
 * about to send more).  Not so for a lone writer.
 */
static bool overlaps(struct nrs_pipeline *p)
{
	bool yes;

	pthread_mutex_lock(&p->slock);
	yes = p->wq_len > 0;
	pthread_mutex_unlock(&p->slock);
	pthread_mutex_lock(&p->hlock);
	yes = yes || publisher_holds_any(p);
	pthread_mutex_unlock(&p->hlock);
	return yes || !pl_queue_empty(p);
}

/*
 * One batch, by the holder of the commit role: PL1 and PL2's write into the
 * next free buffer; then PL2's sync, one of two ways (see the top).
 */
void pl_run_batch(struct nrs_pipeline *p, struct nrs_req *list,
		      struct nrs_wal *w)
{
	int i = p->cur;
	struct batch *b = &p->b[i];
	int err;

	atomic_store(&p->last_batch_ns, nrs_now_mono_ns());	/* PL6 */
	pl_settle_failure(p, NULL);	/* before PL1 orders on top of them */
	pthread_mutex_lock(&p->slock);
	while (p->busy_buf[i])
		pthread_cond_wait(&p->scond, &p->slock);
	pthread_mutex_unlock(&p->slock);
	pthread_mutex_lock(&p->hlock);
	while (p->full[i])
		pthread_cond_wait(&p->hcond, &p->hlock);
	pthread_mutex_unlock(&p->hlock);
	pl_stage_write(p, b, list, w);
	p->cur = (i + 1) % NBUF;
	if (b->written)
		p->avg_wlen = p->avg_wlen - p->avg_wlen / 8 + b->wlen / 8;
	if (w->ops->async ||					/* PL2 */
	    (p->avg_wlen > p->cfg.group_sync_min && overlaps(p))) {
		to_syncer(p, i);	/* a failure is settled later */
		return;
	}
	if (!pl_drain(p, b) && !b->err && b->written) {
		err = nrs_wal_sync(w, batch_end(b));
		if (err)
			fail_written(p, &b, 1, NULL, err);
	}
	hand_on(p, i);
}

/*
 * One sync per segment of WAL w the batches idx[0..n) were written to, up
 * to the end of the last one in it, in order (wal.h).  0 or the first
 * error.
 */
static int sync_wal(struct nrs_pipeline *p, struct nrs_wal *w, const int *idx,
		    int n)
{
	struct nrs_wal_pos end = { 0, 0 };
	bool have = false;

	for (int k = 0; k < n; k++) {
		const struct batch *b = &p->b[idx[k]];

		if (!wrote_to(b, w))
			continue;
		if (have && b->wpos.seg != end.seg) {
			int err = nrs_wal_sync(w, end);

			if (err)
				return err;
		}
		end = batch_end(b);
		have = true;
	}
	return have ? nrs_wal_sync(w, end) : 0;
}

/* sync_wal for each WAL the batches idx[0..n) went to (PW1), in the order
 * of their first batch.  0 or the first error. */
static int sync_group(struct nrs_pipeline *p, const int *idx, int n)
{
	for (int k = 0; k < n; k++) {
		const struct batch *b = &p->b[idx[k]];
		struct nrs_wal *w = atomic_load(&b->wal);
		bool first = wrote_to(b, w);
		int err;

		for (int j = 0; first && j < k; j++)
			first = !wrote_to(&p->b[idx[j]], w);
		if (!first)
			continue;
		err = sync_wal(p, w, idx, n);
		if (err)
			return err;
	}
	return 0;
}

/*
 * The syncer: PL2's sync of every batch queued, with one sync of the WAL
 * (one per segment) up to the end of the last one written, then hands
 * them on in order.  After a failed sync it leaves them queued, with the
 * error in sfail, for the commit role to settle, and waits until it has.
 */
void *pl_syncer(void *arg)
{
	struct nrs_pipeline *p = arg;

	pthread_mutex_lock(&p->slock);
	for (;;) {
		int idx[NBUF], n, err;

		while ((p->wq_len == 0 || atomic_load(&p->sfail)) && !p->sstop)
			pthread_cond_wait(&p->scond, &p->slock);
		if (p->wq_len == 0 || atomic_load(&p->sfail))
			break;
		n = p->wq_len;
		for (int k = 0; k < n; k++)
			idx[k] = p->wq[(p->wq_head + k) % NBUF];
		pthread_mutex_unlock(&p->slock);
		err = sync_group(p, idx, n);
		if (p->cfg.metrics)
			nrs_count(&p->cfg.metrics->group_syncs, 1);
		if (err) {
			pthread_mutex_lock(&p->slock);
			atomic_store(&p->sfail, err);
			pthread_cond_broadcast(&p->scond);
			pthread_mutex_unlock(&p->slock);
			pthread_mutex_lock(&p->qlock);	/* wake the committer */
			pthread_cond_signal(&p->qcond);
			pthread_mutex_unlock(&p->qlock);
			pthread_mutex_lock(&p->slock);
			continue;
		}
		dequeue(p, idx, n, false);
		pthread_mutex_lock(&p->slock);
	}
	pthread_mutex_unlock(&p->slock);
	return NULL;
}
