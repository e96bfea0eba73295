/*
 * pipeline.c - ordering and group commit of appends (DESIGN.md section 1,
 * events 1 and 2; section 3's append semantics; section 5 local-wal).
 *
 * Batches pass through a ring of NBUF batch buffers, in batch order.  The
 * commit role takes everything queued (up to max_batch_bytes) as a batch,
 * runs PL1 and PL2 (write, then sync: see PL2 for who syncs); the publisher
 * thread runs PL3 to PL5, overlapping the next batch's sync.  (Where there
 * is nothing to overlap -- the publisher idle, no request queued -- the
 * commit role runs PL3 to PL5 itself: a lone writer's append then goes
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
 * The code is cut by concern (pipeline_priv.h): this file holds the queue,
 * the commit role and the threads' start and stop; pipeline_batch.c PL1 and
 * PL2's write; pipeline_sync.c PL2's sync and its failure rule;
 * pipeline_publish.c PL3 to PL5.
 *
 * Each step's failure rule is given beside it.
 *
 *  PL1 Order (commit role).  Requests are taken in submission order.  A fence
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
 *  PL2 Write (commit role), then sync, one of two ways.  Every record of
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
 *     - Every batch to a WAL whose write() starts the I/O and whose sync()
 *       only waits (wal.h, ops.async: the object WAL's PUTs) goes to the
 *       syncer, so that the commit role writes the next batches -- whose
 *       PUTs then run at once -- while the syncer waits for the first.
 *     A failed write was undone by the provider (or it refuses all later
 *     writes), so the batch's requests fail with its error and each
 *     stream's ordering view goes back to what it was before the batch.
 *     A failed sync fails every batch written and not yet synced: they are
 *     ordered on top of each other.  The commit role (the syncer stops and
 *     waits for it) cuts the WAL back to the start of the first of them
 *     (wal.h: the bytes of the others go with it), undoes their ordering,
 *     the latest first, and fails them with the sync's error.
 *  PL3 Publish (publisher).  One metadata transaction moves every head of
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
 *     ("failed"); a remount recovers (DESIGN.md section 6, I3).  Batches
 *     that wait for the publisher together are published as one (PL20).
 *  PL4 Apply (publisher).  The published view of each stream (head,
 *     version, epoch, index entries) is updated under the stream lock:
 *     readers see the new bytes only now, and only bytes the metadata store
 *     has published (I4).
 *  PL5 Reply (publisher).  Each request's callback runs; then the commit
 *     hook (page cache invalidation in the FUSE layer).
 *
 *  PL6 Seal (nrs_pipeline_wal_seal, for the reclaimer: wal_local_seg.c WD2).
 *     The WAL's current segment is sealed only by the holder of the commit
 *     role, taken the way a submitter takes it (so no write or cut runs
 *     beside it), and only while the pipeline is idle: no request queued,
 *     every batch's floor at UINT64_MAX -- a batch holds it down from its
 *     write until PL4 indexed it, so none is at the syncer (nothing written
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
 *     core_xattr.c), PL2 writes and syncs each batch in its own WAL, and a
 *     request is acknowledged only once its own WAL made it durable.  The
 *     syncer syncs each WAL its queued batches went to (one sync per
 *     segment of each); a failed sync fails every batch written and not
 *     yet synced, as PL2 says, and cuts each WAL back to its first of them.
 *     Positions, floors (nrs_pipeline_wal_floor_of) and seals (PL6) are
 *     per WAL.  With one WAL behind every profile there is nothing to
 *     split and no stream lock to take: behaviour is as with a single WAL.
 *     Traffic that alternates between two WALs makes small batches; a
 *     provider that wants larger ones may take every queued request of its
 *     WAL once a stream's profile is fixed at create.
 *
 *  PL7 LSNs.  A pipeline takes its LSNs from cfg.lsn_source when set, one
 *     counter shared by the pipelines of every WAL a recovery reads
 *     together (core.c runs one pipeline per WAL, so that a batch that
 *     waits for the bucket never holds a local-wal batch behind it):
 *     every LSN is unique across those WALs, as recovery's LSN order and
 *     commit chains (recovery.c RC3, recovery_index.c RC5a) need.
 *  PL8 META requests (NRS_REQ_META, a metadata change of meta.h's change
 *     log) have no stream: each is a META record of its own (walrec.c
 *     WV4) in the batch it was taken in, at its place in submission order
 *     with the appends, goes to cfg.wal, publishes nothing and is
 *     completed, as an append, once its batch is durable and published
 *     (so in submission order with the other requests of its WAL).  The
 *     core submits them in the order the store numbered them.
 *  PL9 Fence records (cfg.fence_records: the object WAL's pipeline, so
 *     that the bucket holds every epoch, DESIGN.md section 6).  A fence
 *     that raises a stream's ordering epoch is also a DATA record of no
 *     bytes (walrec.c: len 0, n_appends 0) at its place in the batch:
 *     the stream's id, base = its ordering head, epoch = the new one,
 *     prev_lsn = the head's last LSN, the next LSN.  It stands beside the
 *     commit chain, not in it: the head's last LSN stays, so the next
 *     append names the same predecessor, and no record ever names a fence
 *     record's LSN (recovery's chain walks, RC5, never meet one).  The
 *     fence completes, as an append, once its batch is durable -- in the
 *     bucket, proven (wal_object.c OW1) -- and published; a failed batch
 *     cuts its record with the others (OW4: never brought back).
 *     Recovery raises the epoch from it (recovery.c RC9).
 *
 *  PL20 Group publication (publisher).  When the publisher finds several
 *     synced batches waiting (up to NBUF, in batch order, up to one that
 *     PL2 failed, which is published alone with its error), it publishes
 *     them all with ONE metadata transaction: one head update per stream
 *     of the group, whose CAS goes from the stream's view before its first
 *     batch of the group and whose values are those after its last
 *     (pipeline_group.c; each batch's CAS starts where the one before it
 *     left the stream, PL1).  The transaction syncs if ANY batch of the
 *     group holds a fence (PL3).  Then PL4 and PL5 run for each batch, in
 *     batch order.  Under many writers the store's cost per WAL frame and
 *     per row is paid once per group, not per batch; publications_total
 *     counts the transactions (batches_total / publications_total is the
 *     grouping).  Where the merge finds no memory, each batch is published
 *     alone, as before.
 *  PL21 A group's failure.  A lost CAS, -EUCLEAN or an error that outlives
 *     PL3's retries leaves nothing of the group published (meta.h MC5),
 *     so every batch of the group fails with -EIO, as PL3 fails the batch
 *     and every later one (the pipeline is "failed"); and no request of
 *     the group is replied to before its transaction committed.
 *
 * Appends to one stream are therefore published in the order they were
 * submitted, and a request is completed only after both its WAL write is
 * durable and its head is published.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "commit/pipeline.h"
#include "commit/pipeline_priv.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "util/clock.h"
#include "wal/wal.h"

#define DEFAULT_MAX_BATCH	(16u << 20)
#define GROUP_SYNC_MIN	(256u << 10)	/* see PL2 */

_Static_assert(NRS_PROFILE_OBJECT_WAL < NRS_PIPELINE_PROFILES,
	       "cfg.profile_wal has an entry for every profile");

void nrs_pipeline_submit(struct nrs_pipeline *p, struct nrs_req *r)
{
	r->next = NULL;
	r->err = 0;
	r->t_submit_ns = nrs_now_mono_ns();
	if (atomic_load(&p->failed)) {
		pl_complete(p, r, -EIO);
		return;
	}
	pthread_mutex_lock(&p->qlock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->qlock);
		pl_complete(p, r, -EIO);
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

	/* Under load the role is taken: then say so without qlock, which
	 * every submitter and the holder of the role take too.  A stale
	 * "taken" only queues the request, as a taken role would. */
	if (!p->cfg.lead || atomic_load(&p->failed) ||
	    atomic_load_explicit(&p->busy, memory_order_relaxed))
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

	if (!p->multi || !st)		/* PL8: a META record */
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

bool pl_queue_empty(struct nrs_pipeline *p)
{
	bool empty;

	pthread_mutex_lock(&p->qlock);
	empty = p->qhead == NULL;
	pthread_mutex_unlock(&p->qlock);
	return empty;
}

/* PL6 */
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
		p->busy = true;		/* the commit role: PL6 */
	pthread_mutex_unlock(&p->qlock);
	if (!idle)
		return 0;
	/* a batch written and not yet published (at the syncer, failed
	 * there, or at the publisher), to any WAL, holds the floor down: PL6 */
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
		pl_run_batch(p, list, w);
	}
	release_role(p);
}

static void *committer(void *arg)
{
	struct nrs_pipeline *p = arg;
	struct nrs_req *list;

	while (take_role(p, &list)) {
		if (list)
			pl_run_batch(p, list, split_batch(p, list));
		else
			pl_settle_failure(p, NULL);
		release_role(p);
	}
	while (pl_drain(p, NULL))	/* the syncer's last batches */
		;
	pthread_mutex_lock(&p->hlock);
	p->committer_done = true;
	pthread_cond_broadcast(&p->hcond);
	pthread_mutex_unlock(&p->hlock);
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
	free(p->group.upds);
	free(p->group.keys);
	free(p);
}

int nrs_pipeline_start(const struct nrs_pipeline_cfg *cfg,
		       struct nrs_pipeline **out)
{
	struct nrs_pipeline *p;
	int err;

	if (!cfg->wal || !cfg->meta || !cfg->put ||
	    (cfg->next_lsn == 0 && !cfg->lsn_source))
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
	atomic_init(&p->own_lsn, cfg->next_lsn);
	p->lsn = cfg->lsn_source ? cfg->lsn_source : &p->own_lsn;
	p->qtail = &p->qhead;
	atomic_init(&p->sfail, 0);
	atomic_init(&p->failed, false);
	atomic_init(&p->last_batch_ns, 0);
	atomic_init(&p->busy, false);
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
	err = -pthread_create(&p->publisher, NULL, pl_publisher, p);
	if (err) {
		pipeline_free(p);
		return err;
	}
	err = -pthread_create(&p->syncer, NULL, pl_syncer, p);
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
