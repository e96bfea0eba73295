/*
 * pipeline.c - ordering and group commit of appends (DESIGN.md section 1,
 * events 1 and 2; section 3's append semantics; section 5 local-wal).
 *
 * Batches pass through a ring of NBUF batch buffers, in batch order.  The
 * commit role takes everything queued (up to max_batch_bytes) as a batch,
 * runs P1 and P2 (write, then sync: see P2 for who syncs); the publisher
 * thread runs P3 to P5, overlapping the next batch's sync.  (Where there
 * is nothing to overlap -- the publisher idle, no request queued -- the
 * commit role runs P3 to P5 itself: a lone writer's append then goes
 * through one thread.)
 *
 * One thread at a time holds the commit role (busy), so batches are taken
 * and written one after another, in queue order.  It is the committer
 * thread's, except when a submitter finds it free (nrs_pipeline_try_lead):
 * that thread then queues its request and commits batches itself until
 * its request is written (nrs_pipeline_lead), and hands the role back.  A
 * lone writer's append so costs no thread switch inside the daemon (nor a
 * copy of its bytes: they are written before its thread returns), and at
 * most one submitting thread ever waits on a commit; every request that
 * finds the role taken is queued and completed asynchronously.
 *
 * Each step's failure rule is given beside it.
 *
 *  P1 Order (commit role).  Requests are taken in submission order.  A fence
 *     raises the stream's ordering epoch (a value below it is -EINVAL, or
 *     -ESTALE for a bind, NRS_IOC_BIND; equal is a no-op).  An append whose handle epoch is below the
 *     stream's ordering epoch fails -ESTALE; a conditional append whose
 *     expected offset is not the ordering head fails -ESPIPE; both fail at
 *     once and change nothing.  Otherwise the append gets offset = ordering
 *     head, and the head moves by its length.  Appends of one stream in one
 *     batch become one WAL record (a fence starts a new record, so a record
 *     has one epoch); each record gets the next LSN and names the stream's
 *     previous commit (prev_lsn): the commit chain.  Neither wraps: an
 *     append that would take the head past NRS_HEAD_MAX (meta.h) fails
 *     -EFBIG, and one that needs an LSN above NRS_WALREC_LSN_MAX (which
 *     only damage recovery accepted can bring near) fails -EOVERFLOW,
 *     logged once.  Each stream touched
 *     gets one head update, whose CAS goes from the ordering view before the
 *     batch (which batch k-1 will have published by the time batch k is).
 *  P2 Write (commit role), then sync, one of two ways.  Every record of
 *     the batch goes to the WAL provider as one write.
 *     - Small batches (the running average of batch bytes, weight 1/8, at
 *       most group_sync_min, 256 KiB): the commit role syncs the batch
 *       itself, once every batch before it has been handed on.  Their
 *       cost is the sync's latency, and one sync per batch is the fewest.
 *     - Large batches, while another may be written meanwhile (requests
 *       queued, or batches at the syncer or the publisher): the batch is
 *       queued for the syncer thread, which syncs every batch queued with
 *       one sync (one per segment), and hands them on in order.  The
 *       commit role meanwhile writes the next batches, so the disk always
 *       has bytes to work on: a lone sync waits for its data and then for
 *       the disk's flush, during which nothing else is written (1 MiB
 *       appends by 8 writers gain 9-14% of MB/s, measured side by side).
 *     A failed write was undone by the provider (or it refuses all later
 *     writes), so the batch's requests fail with its error and each
 *     stream's ordering view goes back to what it was before the batch.
 *     A failed sync fails every batch written and not yet synced: they are
 *     ordered on top of each other.  The commit role (the syncer stops and
 *     waits for it) cuts the WAL back to the start of the first of them
 *     (wal.h: the bytes of the others go with it), undoes their ordering,
 *     the latest first, and fails them with the sync's error.
 *  P3 Publish (publisher).  One metadata transaction moves every head of
 *     the batch by compare-and-set.  It syncs only when the batch holds a
 *     fence (epochs must survive power loss; heads are re-published from the
 *     WAL by recovery).  Transient errors are retried for a while.  A lost
 *     CAS, a head row that fails its checksum (-EUCLEAN: damage done
 *     while mounted; neither is retried), or an error that outlives the
 *     retries, leaves records durable in
 *     the WAL that are not published: later appends would build a second
 *     chain from the same head, and recovery could re-publish the first over
 *     the second (losing acknowledged bytes, I1).  So the pipeline then
 *     fails this and every later batch with -EIO and refuses new appends
 *     ("failed"); a remount recovers (DESIGN.md section 6, I3).
 *  P4 Apply (publisher).  The published view of each stream (head,
 *     version, epoch, index entries) is updated under the stream lock:
 *     readers see the new bytes only now, and only bytes the metadata store
 *     has published (I4).
 *  P5 Reply (publisher).  Each request's callback runs; then the commit
 *     hook (page cache invalidation in the FUSE layer).
 *
 *  P6 Seal (nrs_pipeline_wal_seal, for the reclaimer: wal_local_seg.c D2).
 *     The WAL's current segment is sealed only by the holder of the commit
 *     role, taken the way a submitter takes it (so no write or cut runs
 *     beside it), and only while the pipeline is idle: no request queued,
 *     every batch's floor at UINT64_MAX -- a batch holds it down from its
 *     write until P4 indexed it, so none is at the syncer (nothing written
 *     is unsynced, no failed sync to settle, no cut to come) or waits for
 *     the publisher -- and no batch taken for the
 *     caller's idle time (so that a light load is not cut into a segment
 *     per append).  Otherwise it does nothing: appends are on their way,
 *     and the next idle moment seals.
 *
 *  PW1 One WAL per profile (cfg.profile_wal, a NULL entry: cfg.wal).  A
 *     stream's requests go to the WAL of its profile (read under its lock
 *     by the commit role, which holds no other), and a batch goes to one
 *     WAL: the commit role keeps, of what it cut off the queue, the
 *     requests up to the first one for another WAL, and puts the rest
 *     back at the queue's head, in order, for the next batch.  So nothing
 *     is reordered (a stream's profile changes only while it is empty,
 *     core_xattr.c), P2 writes and syncs each batch in its own WAL, and a
 *     request is acknowledged only once its own WAL made it durable.  The
 *     syncer syncs each WAL its queued batches went to (one sync per
 *     segment of each); a failed sync fails every batch written and not
 *     yet synced, as P2 says, and cuts each WAL back to its first of them.
 *     Positions, floors (nrs_pipeline_wal_floor_of) and seals (P6) are
 *     per WAL.  With one WAL behind every profile there is nothing to
 *     split and no stream lock to take: behaviour is as with a single WAL.
 *     Traffic that alternates between two WALs makes small batches; a
 *     provider that wants larger ones may take every queued request of its
 *     WAL once a stream's profile is fixed at create.
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

#include "commit/pipeline.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"

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

#define NBUF	16	/* written, syncing or publishing, in order */

_Static_assert(NRS_PROFILE_OBJECT_WAL < NRS_PIPELINE_PROFILES,
	       "cfg.profile_wal has an entry for every profile");
#define GROUP_SYNC_MIN	(256u << 10)	/* see P2 */

/* One stream's part of a batch, beside its head update. */
struct batch_upd {
	struct nrs_stream *st;
	/* the ordering view before the batch: to undo P1, and the old head */
	uint64_t head, version, epoch, lsn;
	bool inval;			/* the commit hook is owed a call */
};

struct batch {
	struct nrs_req *list;		/* every request taken, in order */
	struct nrs_req **reqs;
	size_t *rnext;			/* next request of the same record */
	size_t nreqs, cap_reqs, cap_rnext;
	struct batch_rec *recs;
	size_t nrecs, cap_recs;
	struct nrs_head_update *upds;	/* parallel to bu */
	struct batch_upd *bu;
	size_t nupds, cap_upds, cap_bu;
	struct iovec *iov;
	size_t cap_iov;
	unsigned char *hdrs;
	size_t cap_hdrs;
	bool durable;			/* publish with a sync (a fence) */
	bool written;			/* P2 wrote records at wpos, wlen */
	struct nrs_wal_pos wpos;
	uint64_t wlen;
	int err;			/* the outcome of P2 (then P3) */
	uint64_t payload, appends;
	/* the WAL it goes to (PW1); set before floor leaves UINT64_MAX */
	_Atomic(struct nrs_wal *) wal;
	/* segments of wal below this hold no record of the batch that P4
	 * has not indexed yet (nrs_pipeline_wal_floor); UINT64_MAX when idle */
	_Atomic uint64_t floor;
};

struct nrs_pipeline {
	struct nrs_pipeline_cfg cfg;
	bool multi;			/* PW1: more than one WAL */
	pthread_t committer, syncer, publisher;

	pthread_mutex_t qlock;
	pthread_cond_t qcond;		/* the committer thread waits on it */
	/* protected by qlock */
	struct nrs_req *qhead, **qtail;
	bool stopping;
	bool busy;			/* a thread holds the commit role */

	atomic_bool failed;
	_Atomic uint64_t last_batch_ns;	/* when a batch was last taken: P6 */
	/* owned by the commit role */
	uint64_t next_lsn;
	bool lsn_warned;		/* lsn_exhausted() said it */
	int cur;			/* the batch buffer it fills next */
	uint64_t avg_wlen;		/* running average of batch bytes */

	pthread_mutex_t slock;
	pthread_cond_t scond;
	/* protected by slock: the batches written and queued for the syncer
	 * (wq, in batch order; busy_buf[i]: b[i] is among them), and the
	 * error of a failed group sync (also read under qlock by take_role:
	 * the syncer signals qcond once it is set), which the commit role
	 * settles (settle_failure) */
	int wq[NBUF], wq_head, wq_len;
	bool busy_buf[NBUF];
	atomic_int sfail;
	bool sstop;

	pthread_mutex_t hlock;
	pthread_cond_t hcond;
	/* protected by hlock: which batch buffers wait for the publisher,
	 * and which one it publishes next */
	bool full[NBUF];
	int pub_next;
	bool committer_done;
	struct batch b[NBUF];	/* b[i] belongs to the commit role while
				 * neither busy_buf[i] nor full[i], is read by
				 * the syncer while busy_buf[i], belongs to
				 * the publisher while full[i] */
};

static const unsigned char zero_pad[NRS_WALREC_ALIGN];

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
	if (!p->busy)	/* else the holder of the role takes it */
		pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

bool nrs_pipeline_try_lead(struct nrs_pipeline *p)
{
	bool got = false;

	if (!p->cfg.lead || atomic_load(&p->failed))
		return false;
	pthread_mutex_lock(&p->qlock);
	if (!p->busy && !p->stopping) {
		p->busy = true;
		got = true;
	}
	pthread_mutex_unlock(&p->qlock);
	return got;
}

bool nrs_pipeline_failed(struct nrs_pipeline *p)
{
	return atomic_load(&p->failed);
}

/*
 * Cut a batch off the queue, qlock held: everything queued, cut after the
 * request that reaches max_batch_bytes (NULL if the queue is empty).
 * *has: whether `mine` is in it (may be NULL).
 */
static struct nrs_req *cut_batch(struct nrs_pipeline *p,
				 const struct nrs_req *mine, bool *has)
{
	struct nrs_req *r, *list = p->qhead, *last = NULL;
	size_t bytes = 0;

	if (!list)
		return NULL;
	for (r = p->qhead; r; r = r->next) {
		last = r;
		if (r == mine)
			*has = true;
		bytes += r->len;
		if (bytes >= p->cfg.max_batch_bytes)
			break;
	}
	p->qhead = last->next;
	if (!p->qhead)
		p->qtail = &p->qhead;
	last->next = NULL;
	return list;
}

/* PW1: the WAL of st's profile. */
static struct nrs_wal *wal_of(const struct nrs_pipeline *p,
			      struct nrs_stream *st)
{
	struct nrs_wal *w = NULL;
	int profile;

	if (!p->multi)
		return p->cfg.wal;
	pthread_mutex_lock(&st->lock);
	profile = st->profile;
	pthread_mutex_unlock(&st->lock);
	if (profile >= 0 && profile < NRS_PIPELINE_PROFILES)
		w = p->cfg.profile_wal[profile];
	return w ? w : p->cfg.wal;
}

/*
 * PW1, by the commit role, no lock held: keep in *list the requests up to
 * the first one for another WAL than its first request's, and queue the
 * rest back at the queue's head, in order.  Returns the batch's WAL.
 */
static struct nrs_wal *split_batch(struct nrs_pipeline *p,
				   struct nrs_req *list)
{
	struct nrs_wal *w = list ? wal_of(p, list->st) : p->cfg.wal;
	struct nrs_req *r, *rest, *last;

	if (!p->multi || !list)
		return w;
	for (r = list; r->next; r = r->next)
		if (wal_of(p, r->next->st) != w)
			break;
	rest = r->next;
	if (!rest)
		return w;
	r->next = NULL;
	for (last = rest; last->next; last = last->next)
		;
	pthread_mutex_lock(&p->qlock);
	last->next = p->qhead;
	if (!p->qhead)
		p->qtail = &last->next;
	p->qhead = rest;
	pthread_mutex_unlock(&p->qlock);
	return w;
}

/*
 * The committer thread: wait until requests are queued or a group sync
 * failed, and the commit role is free; then take the role, and *list: the
 * queued batch (NULL: only the failure, to settle).  Returns false when
 * stopping with nothing left.
 */
static bool take_role(struct nrs_pipeline *p, struct nrs_req **list)
{
	pthread_mutex_lock(&p->qlock);
	while (p->busy || (!p->qhead && !p->stopping && !atomic_load(&p->sfail)))
		pthread_cond_wait(&p->qcond, &p->qlock);
	if (!p->qhead && !atomic_load(&p->sfail)) {
		pthread_mutex_unlock(&p->qlock);
		return false;
	}
	*list = cut_batch(p, NULL, NULL);
	p->busy = true;
	pthread_mutex_unlock(&p->qlock);
	return true;
}

/* Give the commit role back; the committer thread takes what is left. */
static void release_role(struct nrs_pipeline *p)
{
	pthread_mutex_lock(&p->qlock);
	p->busy = false;
	if (p->qhead || atomic_load(&p->sfail) || p->stopping)
		pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

/* The stream's head update in this batch, created on first use. */
static int upd_slot(struct batch *b, struct nrs_stream *st)
{
	struct batch_upd *bu;

	if (st->batch_upd >= 0)
		return st->batch_upd;
	if (nrs_grow((void **)&b->upds, &b->cap_upds, b->nupds + 1,
		     sizeof(*b->upds)) ||
	    nrs_grow((void **)&b->bu, &b->cap_bu, b->nupds + 1,
		     sizeof(*b->bu)))
		return -ENOMEM;
	memset(&b->upds[b->nupds], 0, sizeof(b->upds[0]));
	b->upds[b->nupds].id = st->id;
	b->upds[b->nupds].old_version = st->ord_version;
	bu = &b->bu[b->nupds];
	bu->st = st;
	bu->head = st->ord_head;
	bu->version = st->ord_version;
	bu->epoch = st->ord_epoch;
	bu->lsn = st->ord_lsn;
	bu->inval = false;
	st->batch_upd = (int)b->nupds++;
	return st->batch_upd;
}

/* P1: no LSN is left to issue (logged once); the append fails. */
static int lsn_exhausted(struct nrs_pipeline *p)
{
	if (!p->lsn_warned) {
		p->lsn_warned = true;
		nrs_err("pipeline: the next LSN %" PRIu64 " is above the largest"
			" one (%" PRIu64 "): appends fail EOVERFLOW; reads "
			"work; see nereusfs-fsck(8)", p->next_lsn,
			NRS_WALREC_LSN_MAX);
	}
	return -EOVERFLOW;
}

/* P1 for one append; returns 0 or the error to complete it with. */
static int order_append(struct nrs_pipeline *p, struct batch *b,
			struct nrs_req *r, size_t ri)
{
	struct nrs_stream *st = r->st;
	struct batch_rec *br;
	int err;

	if (r->epoch < st->ord_epoch) /* P1: a fenced handle */
		return -ESTALE;
	if (r->expect != NRS_EXPECT_ANY && r->expect != st->ord_head)
		return -ESPIPE;
	if (r->len > NRS_WALREC_MAX_LEN || r->len > NRS_HEAD_MAX - st->ord_head)
		return -EFBIG;					/* P1 */
	if ((st->batch_slot < 0 ||
	     b->recs[st->batch_slot].rec.len + r->len > NRS_WALREC_MAX_LEN) &&
	    p->next_lsn > NRS_WALREC_LSN_MAX)			/* P1 */
		return lsn_exhausted(p);
	err = upd_slot(b, st);
	if (err < 0)
		return err;
	if (st->batch_slot >= 0 &&
	    b->recs[st->batch_slot].rec.len + r->len > NRS_WALREC_MAX_LEN)
		st->batch_slot = -1;	/* start another record */
	if (st->batch_slot < 0) {
		if (nrs_grow((void **)&b->recs, &b->cap_recs, b->nrecs + 1,
			     sizeof(*b->recs)))
			return -ENOMEM;
		br = &b->recs[b->nrecs];
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
		st->batch_slot = (int)b->nrecs++;
	} else {
		br = &b->recs[st->batch_slot];
		b->rnext[br->last_req] = ri;
	}
	br->last_req = ri;
	b->rnext[ri] = SIZE_MAX;
	br->rec.len += (uint32_t)r->len;
	br->rec.n_appends++;
	r->offset = st->ord_head;
	st->ord_head += r->len;
	st->ord_version++;
	return 0;
}

/* P1 for one fence. */
static int order_fence(struct batch *b, struct nrs_req *r)
{
	struct nrs_stream *st = r->st;
	int err;

	if (r->epoch < st->ord_epoch)
		return r->bind ? -ESTALE : -EINVAL;
	if (r->epoch == st->ord_epoch)
		return 0;
	err = upd_slot(b, st);
	if (err < 0)
		return err;
	st->ord_epoch = r->epoch;
	st->batch_slot = -1;	/* later appends: a record of the new epoch */
	b->durable = true;
	return 0;
}

/* P2: format the records into iovecs and write them to w. */
static int write_batch(struct batch *b, struct nrs_wal *w)
{
	size_t hdr_bytes = 0, niov = 0, k = 0, h = 0;
	struct nrs_wal_pos pos;
	uint64_t off;
	int err;

	if (b->nrecs == 0)
		return 0;
	for (size_t i = 0; i < b->nrecs; i++) {
		hdr_bytes += nrs_walrec_hdr_len(b->recs[i].rec.len);
		niov += 2 + b->recs[i].rec.n_appends;
	}
	if (nrs_grow((void **)&b->hdrs, &b->cap_hdrs, hdr_bytes, 1) ||
	    nrs_grow((void **)&b->iov, &b->cap_iov, niov, sizeof(*b->iov)))
		return -ENOMEM;
	for (size_t i = 0; i < b->nrecs; i++) {
		struct batch_rec *br = &b->recs[i];
		size_t hl = nrs_walrec_hdr_len(br->rec.len);
		size_t first = k + 1, pad;
		ssize_t n;

		b->iov[k].iov_base = b->hdrs + h;
		b->iov[k++].iov_len = hl;
		for (size_t ri = br->first_req; ri != SIZE_MAX; ri = b->rnext[ri]) {
			b->iov[k].iov_base = (void *)b->reqs[ri]->data;
			b->iov[k++].iov_len = b->reqs[ri]->len;
		}
		n = nrs_walrec_encode_hdr(&br->rec, &b->iov[first],
					  (int)(k - first), b->hdrs + h, hl);
		if (n < 0)
			return (int)n;
		br->total = nrs_walrec_total_len(br->rec.len);
		pad = br->total - hl - br->rec.len;
		if (pad) {
			b->iov[k].iov_base = (void *)zero_pad;
			b->iov[k++].iov_len = pad;
		}
		h += hl;
	}
	atomic_store(&b->wal, w);	/* before floor: nrs_pipeline_wal_floor_of */
	atomic_store(&b->floor, 0);	/* the segment is not known yet */
	err = nrs_wal_write(w, b->iov, (int)k, &pos);
	if (err < 0) {
		atomic_store(&b->floor, UINT64_MAX);
		return err;
	}
	atomic_store(&b->floor, pos.seg);
	b->written = true;
	b->wpos = pos;
	b->wlen = 0;
	off = pos.off;
	for (size_t i = 0; i < b->nrecs; i++) {
		b->recs[i].seg = pos.seg;
		b->recs[i].off = off;
		off += b->recs[i].total;
		b->wlen += b->recs[i].total;
	}
	return 0;
}

/* Put every stream's ordering view back to what it was before b's P1. */
static void undo_order(struct batch *b)
{
	for (size_t i = 0; i < b->nupds; i++) {
		struct batch_upd *bu = &b->bu[i];
		struct nrs_stream *st = bu->st;

		st->ord_head = bu->head;
		st->ord_version = bu->version;
		st->ord_epoch = bu->epoch;
		st->ord_lsn = bu->lsn;
	}
}

/* Stage 1: P1 and P2's write, by the commit role. */
static void stage_write(struct nrs_pipeline *p, struct batch *b,
			struct nrs_req *list, struct nrs_wal *w)
{
	struct nrs_metrics *m = p->cfg.metrics;

	b->list = list;
	b->nreqs = b->nrecs = b->nupds = 0;
	b->durable = false;
	b->written = false;
	b->err = 0;
	b->payload = b->appends = 0;
	if (atomic_load(&p->failed)) {
		b->err = -EIO;
		return;
	}
	for (struct nrs_req *r = list; r; r = r->next) {
		if (nrs_grow((void **)&b->reqs, &b->cap_reqs, b->nreqs + 1,
			     sizeof(struct nrs_req *)) ||
		    nrs_grow((void **)&b->rnext, &b->cap_rnext, b->nreqs + 1,
			     sizeof(*b->rnext)))
			r->err = -ENOMEM;	/* completed with it in P5 */
		else
			b->reqs[b->nreqs++] = r;
	}
	/* P1 */
	for (size_t i = 0; i < b->nreqs; i++) {
		struct nrs_req *r = b->reqs[i];

		if (r->kind == NRS_REQ_FENCE) {
			r->err = order_fence(b, r);
		} else {
			r->err = order_append(p, b, r, i);
			if (r->err == 0) {
				b->payload += r->len;
				b->appends++;
			}
		}
	}
	/* P2 */
	b->err = write_batch(b, w);
	if (b->err)
		undo_order(b);
	for (size_t i = 0; i < b->nupds; i++) {
		struct nrs_stream *st = b->bu[i].st;
		struct nrs_head_update *u = &b->upds[i];

		if (!b->err) {	/* what P3 publishes */
			u->head = st->ord_head;
			u->version = st->ord_version;
			u->epoch = st->ord_epoch;
			u->last_lsn = st->ord_lsn;
		}
		st->batch_upd = -1;
		st->batch_slot = -1;
	}
	if (b->err) {
		if (m)
			nrs_count(&m->wal_errors, 1);
		nrs_err("WAL write of %zu records failed: %s", b->nrecs,
			strerror(-b->err));
	}
}

/* P3 */
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
 * P4, in two halves around the commit hook.  The kernel learns a new size
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

		if (br->rec.len == 0)
			continue;
		pthread_mutex_lock(&st->lock);
		err = nrs_index_append(&st->index, &e);
		st->wal_bytes += br->total;
		if (st->unmat_since_ns == 0)	/* materializer.c M1 */
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

/* Stage 2: P3, P4 and P5, in the publisher thread. */
static void stage_publish(struct nrs_pipeline *p, struct batch *b)
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
		complete(p, r, r->err ? r->err : err);
	}
	b->list = NULL;
}

/*
 * The least floor of the batches going to w (NULL: to any WAL).  floor is
 * loaded before wal, which write_batch stores before floor: a batch seen
 * in flight is seen with its own WAL, or (the buffer reused since) with a
 * later batch's, which can only lower another WAL's floor.
 */
static uint64_t floor_of(struct nrs_pipeline *p, struct nrs_wal *w)
{
	uint64_t floor = UINT64_MAX;

	for (int i = 0; i < NBUF; i++) {
		uint64_t f = atomic_load(&p->b[i].floor);

		if (f < floor && (!w || atomic_load(&p->b[i].wal) == w))
			floor = f;
	}
	return floor;
}

uint64_t nrs_pipeline_wal_floor_of(struct nrs_pipeline *p, struct nrs_wal *w)
{
	return floor_of(p, w);
}

uint64_t nrs_pipeline_wal_floor(struct nrs_pipeline *p)
{
	return floor_of(p, p->cfg.wal);
}

static bool queue_empty(struct nrs_pipeline *p)
{
	bool empty;

	pthread_mutex_lock(&p->qlock);
	empty = p->qhead == NULL;
	pthread_mutex_unlock(&p->qlock);
	return empty;
}

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

/* P6 */
int nrs_pipeline_wal_seal_of(struct nrs_pipeline *p, struct nrs_wal *w,
			     uint64_t seg, uint64_t idle_ns)
{
	bool idle;
	int rc = 0;

	if (atomic_load(&p->failed) ||
	    nrs_now_mono_ns() - atomic_load(&p->last_batch_ns) < idle_ns)
		return 0;
	pthread_mutex_lock(&p->qlock);
	idle = !p->busy && !p->stopping && !p->qhead;
	if (idle)
		p->busy = true;		/* the commit role: P6 */
	pthread_mutex_unlock(&p->qlock);
	if (!idle)
		return 0;
	/* a batch written and not yet published (at the syncer, failed
	 * there, or at the publisher), to any WAL, holds the floor down: P6 */
	if (floor_of(p, NULL) == UINT64_MAX)
		rc = nrs_wal_seal(w, seg);
	release_role(p);
	return rc;
}

int nrs_pipeline_wal_seal(struct nrs_pipeline *p, uint64_t seg,
			  uint64_t idle_ns)
{
	return nrs_pipeline_wal_seal_of(p, p->cfg.wal, seg, idle_ns);
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
 * P2's failure rule for a sync (the commit role): the batches bs[0..n),
 * in batch order, were written and not made durable -- the sync failed
 * with err -- and `then` (if not NULL) was ordered after them.  Cut each
 * WAL they went to back to the start of the first of them in it (the
 * bytes of the rest go with it; PW1), undo P1 of each, the latest first,
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
		undo_order(then);
	}
	for (int k = n - 1; k >= 0; k--) {
		if (!bs[k]->err) {	/* a failed write was undone at once */
			bs[k]->err = err;
			undo_order(bs[k]);
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
static bool settle_failure(struct nrs_pipeline *p, struct batch *then)
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
static bool drain(struct nrs_pipeline *p, struct batch *then)
{
	pthread_mutex_lock(&p->slock);
	while (p->wq_len > 0 && !atomic_load(&p->sfail))
		pthread_cond_wait(&p->scond, &p->slock);
	pthread_mutex_unlock(&p->slock);
	return settle_failure(p, then);
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
	here = !publisher_holds_any(p) && queue_empty(p);
	if (!here) {
		p->full[i] = true;
		pthread_cond_broadcast(&p->hcond);
	}
	pthread_mutex_unlock(&p->hlock);
	if (here) {
		stage_publish(p, &p->b[i]);
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
	return yes || !queue_empty(p);
}

/*
 * One batch, by the holder of the commit role: P1 and P2's write into the
 * next free buffer; then P2's sync, one of two ways (see the top).
 */
static void run_batch(struct nrs_pipeline *p, struct nrs_req *list,
		      struct nrs_wal *w)
{
	int i = p->cur;
	struct batch *b = &p->b[i];
	int err;

	atomic_store(&p->last_batch_ns, nrs_now_mono_ns());	/* P6 */
	settle_failure(p, NULL);	/* before P1 orders on top of them */
	pthread_mutex_lock(&p->slock);
	while (p->busy_buf[i])
		pthread_cond_wait(&p->scond, &p->slock);
	pthread_mutex_unlock(&p->slock);
	pthread_mutex_lock(&p->hlock);
	while (p->full[i])
		pthread_cond_wait(&p->hcond, &p->hlock);
	pthread_mutex_unlock(&p->hlock);
	stage_write(p, b, list, w);
	p->cur = (i + 1) % NBUF;
	if (b->written)
		p->avg_wlen = p->avg_wlen - p->avg_wlen / 8 + b->wlen / 8;
	if (p->avg_wlen > p->cfg.group_sync_min && overlaps(p)) {
		to_syncer(p, i);	/* a failure is settled later */
		return;
	}
	if (!drain(p, b) && !b->err && b->written) {
		err = nrs_wal_sync(w, batch_end(b));
		if (err)
			fail_written(p, &b, 1, NULL, err);
	}
	hand_on(p, i);
}

void nrs_pipeline_lead(struct nrs_pipeline *p, const struct nrs_req *mine)
{
	bool written = mine == NULL;	/* NULL: just give the role back */

	/* mine may follow others' requests: batches until its own is done
	 * (none if submit completed it at once: a failed pipeline) */
	while (!written) {
		struct nrs_req *list;

		struct nrs_wal *w;

		pthread_mutex_lock(&p->qlock);
		list = cut_batch(p, mine, &written);
		pthread_mutex_unlock(&p->qlock);
		if (!list)
			break;
		w = split_batch(p, list);
		if (written && p->multi) {	/* mine may be queued again */
			written = false;
			for (struct nrs_req *r = list; r; r = r->next)
				written = written || r == mine;
		}
		run_batch(p, list, w);
	}
	release_role(p);
}

static void *committer(void *arg)
{
	struct nrs_pipeline *p = arg;
	struct nrs_req *list;

	while (take_role(p, &list)) {
		if (list)
			run_batch(p, list, split_batch(p, list));
		else
			settle_failure(p, NULL);
		release_role(p);
	}
	while (drain(p, NULL))	/* the syncer's last batches */
		;
	pthread_mutex_lock(&p->hlock);
	p->committer_done = true;
	pthread_cond_broadcast(&p->hcond);
	pthread_mutex_unlock(&p->hlock);
	return NULL;
}

static void *publisher(void *arg)
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
		stage_publish(p, &p->b[i]);
		pthread_mutex_lock(&p->hlock);
		p->full[i] = false;
		p->pub_next = (i + 1) % NBUF;
		pthread_cond_broadcast(&p->hcond);
		pthread_mutex_unlock(&p->hlock);
	}
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
 * The syncer: P2's sync of every batch queued, with one sync of the WAL
 * (one per segment) up to the end of the last one written, then hands
 * them on in order.  After a failed sync it leaves them queued, with the
 * error in sfail, for the commit role to settle, and waits until it has.
 */
static void *syncer(void *arg)
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

/* Stop and join the syncer (it has nothing left: the committer is done). */
static void stop_syncer(struct nrs_pipeline *p)
{
	pthread_mutex_lock(&p->slock);
	p->sstop = true;
	pthread_cond_broadcast(&p->scond);
	pthread_mutex_unlock(&p->slock);
	pthread_join(p->syncer, NULL);
}

static void batch_free(struct batch *b)
{
	free(b->reqs);
	free(b->rnext);
	free(b->recs);
	free(b->upds);
	free(b->bu);
	free(b->iov);
	free(b->hdrs);
}

static void pipeline_free(struct nrs_pipeline *p)
{
	pthread_cond_destroy(&p->hcond);
	pthread_mutex_destroy(&p->hlock);
	pthread_cond_destroy(&p->scond);
	pthread_mutex_destroy(&p->slock);
	pthread_cond_destroy(&p->qcond);
	pthread_mutex_destroy(&p->qlock);
	for (int i = 0; i < NBUF; i++)
		batch_free(&p->b[i]);
	free(p);
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
	for (int i = 0; i < NRS_PIPELINE_PROFILES; i++)
		if (cfg->profile_wal[i] && cfg->profile_wal[i] != cfg->wal)
			p->multi = true;
	if (!p->cfg.max_batch_bytes)
		p->cfg.max_batch_bytes = DEFAULT_MAX_BATCH;
	if (!p->cfg.group_sync_min)
		p->cfg.group_sync_min = GROUP_SYNC_MIN;
	p->next_lsn = cfg->next_lsn;
	p->qtail = &p->qhead;
	atomic_init(&p->sfail, 0);
	atomic_init(&p->failed, false);
	atomic_init(&p->last_batch_ns, 0);
	for (int i = 0; i < NBUF; i++) {
		atomic_init(&p->b[i].floor, UINT64_MAX);
		atomic_init(&p->b[i].wal, cfg->wal);
	}
	pthread_mutex_init(&p->qlock, NULL);
	pthread_cond_init(&p->qcond, NULL);
	pthread_mutex_init(&p->slock, NULL);
	pthread_cond_init(&p->scond, NULL);
	pthread_mutex_init(&p->hlock, NULL);
	pthread_cond_init(&p->hcond, NULL);
	err = -pthread_create(&p->publisher, NULL, publisher, p);
	if (err) {
		pipeline_free(p);
		return err;
	}
	err = -pthread_create(&p->syncer, NULL, syncer, p);
	if (!err) {
		err = -pthread_create(&p->committer, NULL, committer, p);
		if (err)
			stop_syncer(p);
	}
	if (!err) {
		(void)pthread_setname_np(p->publisher, "nrs-publisher");
		(void)pthread_setname_np(p->syncer, "nrs-syncer");
		(void)pthread_setname_np(p->committer, "nrs-committer");
	}
	if (err) {
		pthread_mutex_lock(&p->hlock);
		p->committer_done = true;
		pthread_cond_broadcast(&p->hcond);
		pthread_mutex_unlock(&p->hlock);
		pthread_join(p->publisher, NULL);
		pipeline_free(p);
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
	pthread_join(p->committer, NULL);
	stop_syncer(p);
	pthread_join(p->publisher, NULL);
	pipeline_free(p);
}
