/*
 * ckpt_service.c - the thread that takes metadata checkpoints while the
 * daemon runs (issue 15): every checkpoint_ms, and once the object WAL has
 * written checkpoint_bytes since the last (nrs_ckpt_wal_bytes), it takes
 * a snapshot of the store (meta.h nrs_meta_snapshot), writes it as
 * checkpoint object ckpt/<seq> with proof, then the pointer, and deletes
 * old ones; the rules it keeps are KP1-KP7 of checkpoint.c.
 *
 * Defaults: checkpoint_ms 60000.  A checkpoint of 10,000 streams is a
 * 1.4 MiB PUT and ~10 ms of snapshot (test_snapshot), so one a minute costs
 * 1,440 PUTs a day (well under a cent at S3 prices) and the bucket keeps
 * two; a recovery then replays at most about a minute of object-WAL
 * objects, or checkpoint_bytes (default 256 MiB), whichever comes first.
 * A checkpoint whose database and covered position are those of the last
 * one is not written (an idle daemon writes nothing).
 *
 *  KC1 The covered position is read before the snapshot starts: every
 *      object-WAL record below it was in the store by then (the caller's
 *      promise, checkpoint.h), so it is in the snapshot, which can only
 *      hold more.  Covering more than it holds would let recovery skip a
 *      record; covering less only replays a few again.  This holds for
 *      META records too (the object WAL's records of metadata changes,
 *      core_metalog.c): a change is committed, with its number, before
 *      its record is written (sqlite_log.c ML1), so every META record
 *      below the covered position has a number the snapshot holds, and
 *      the object WAL's GC, which keeps what the last proven checkpoint
 *      does not cover (walgc.c MZ8), reclaims a WAL object holding META
 *      records only once a proven checkpoint holds every one of them.
 *  KC2 An upload not proven is retried with the same bytes under the same
 *      key (KP1), with a backoff, before anything else: no new checkpoint
 *      is taken while one waits for proof.  Quarantine (KP2) moves to the
 *      next seq, with the same snapshot under a new header.
 *  KC3 Sync (nrs_ckpt_sync): a change that must reach the store before
 *      its call returns takes a ticket and kicks the service; a snapshot
 *      answers every ticket taken before it began, once its checkpoint
 *      is proven -- or at once, if the database is what the last proven
 *      checkpoint holds.  So concurrent changes share one checkpoint, and
 *      none is answered by a snapshot that may predate it.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bg/checkpoint.h"
#include "bg/services.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "util/backoff.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/sat.h"
#include "util/waitms.h"

#define MARKS_MAX	16	/* KP7 ranges waiting out the grace period */
#define QUAR_MAX	8	/* quarantined seqs KP7 leaves alone */
#define PRUNE_MAX	256	/* deletes per step of the thread */
#define FIND_MAX	4096	/* old checkpoints probed for at start */
#define RETRY_MIN_MS	250	/* nothing waits for a checkpoint: gently */
#define RETRY_MAX_MS	10000
#define IDLE_MS		1000	/* how often the triggers are looked at */

/* KP7: every checkpoint from floor up to upto may go once the grace
 * period has passed since since_ns (when the pointer named upto + 2). */
struct mark {
	uint64_t upto;
	int64_t since_ns;
};

struct nrs_ckpt {
	const struct nrs_services *svc;
	struct nrs_ckpt_opts o;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping;		/* protected by lock */
	bool kicked;		/* protected by lock */
	/* KC3, protected by lock: syncs asked for, the count a snapshot
	 * began after, the count a proven checkpoint answers */
	uint64_t want, taking, done;
	atomic_uint_fast64_t wal_bytes;	/* since the last checkpoint */
	atomic_uint_fast64_t covered;	/* of the last proven one (MZ8) */

	/* the thread's own */
	uint64_t next_seq;	/* 0: not found yet (KP4) */
	uint64_t ptr_seq;	/* what the pointer names (KP7) */
	uint64_t last_start;	/* monotonic ns of the last checkpoint */
	bool have_last;
	unsigned char last_sha[NRS_SHA256_LEN];	/* of the last database */
	uint64_t last_covered, last_epoch;
	/* KP7: no checkpoint of ours is left below floor; the ranges from
	 * it waiting out the grace, oldest first; seqs quarantined (KP1,
	 * other bytes under the key), never deleted */
	uint64_t floor;
	struct mark marks[MARKS_MAX];
	size_t nmarks;
	uint64_t quar[QUAR_MAX];
	size_t nquar;
	/* the checkpoint waiting for proof (KC2); obj NULL: none */
	void *obj;
	size_t obj_len;
	struct nrs_ckpt_hdr hdr;
	unsigned char sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	uint64_t lock_ns, t0;
	unsigned int attempt;
	uint64_t hdr_taking;	/* KC3: the syncs its snapshot answers */
};

/* KC3: the syncs counted up to n are answered. */
static void answer(struct nrs_ckpt *k, uint64_t n)
{
	pthread_mutex_lock(&k->lock);
	if (n > k->done)
		k->done = n;
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

static bool nap(struct nrs_ckpt *k, uint64_t ms)
{
	return nrs_wait_ms(&k->cond, &k->lock, &k->stopping, ms);
}

static uint64_t backoff_ms(unsigned int attempt)
{
	return nrs_backoff_ms(attempt, RETRY_MIN_MS, RETRY_MAX_MS);
}

/* KP1: seq holds other bytes; KP7 leaves it be (the oldest forgotten
 * when there are more: a quarantine is the store's fault, and rare). */
static void quarantined(struct nrs_ckpt *k, uint64_t seq)
{
	if (k->nquar == QUAR_MAX) {
		memmove(k->quar, k->quar + 1, (QUAR_MAX - 1) * sizeof(k->quar[0]));
		k->nquar--;
	}
	k->quar[k->nquar++] = seq;
}

static bool is_quarantined(const struct nrs_ckpt *k, uint64_t seq)
{
	for (size_t i = 0; i < k->nquar; i++)
		if (k->quar[i] == seq)
			return true;
	return false;
}

/* KP7: once the pointer names ptr, the ones two or more below it may go
 * after the grace period.  A range is added only when the last one does
 * not cover it; with MARKS_MAX waiting, the next call adds it. */
static void mark_old(struct nrs_ckpt *k, int64_t now)
{
	uint64_t upto;

	if (k->ptr_seq < k->floor + 2)	/* the newest two stay */
		return;
	upto = k->ptr_seq - 2;
	if (k->nmarks && k->marks[k->nmarks - 1].upto >= upto)
		return;
	if (k->nmarks == MARKS_MAX)
		return;
	k->marks[k->nmarks++] = (struct mark){ upto, now };
}

/* KP7: delete what has waited out the grace period, at most PRUNE_MAX
 * keys a step; a delete that fails is tried again at the next step. */
static void prune(struct nrs_ckpt *k)
{
	int64_t now = nrs_now_real_ns();
	unsigned int n = 0;

	mark_old(k, now);
	while (k->nmarks && nrs_elapsed_ms(now, k->marks[0].since_ns,
					   k->o.grace_ms)) {
		while (k->floor <= k->marks[0].upto) {
			char key[NRS_OBJKEY_MAX];
			int err = 0;

			if (n++ == PRUNE_MAX)
				return;
			nrs_ckptfmt_key(key, k->floor);
			if (!is_quarantined(k, k->floor))
				err = nrs_obj_del(k->svc->store, key);
			if (err && err != -ENOENT)
				return;
			if (err == 0 && !is_quarantined(k, k->floor)) {
				nrs_debug("checkpoint: deleted %s", key);
				nrs_count(&k->svc->metrics->ckpt_deleted, 1);
			}
			k->floor++;
		}
		memmove(k->marks, k->marks + 1,
			(k->nmarks - 1) * sizeof(k->marks[0]));
		k->nmarks--;
	}
}

/* KP4 at start: where to go on, and which old ones are still there. */
static int find_start(struct nrs_ckpt *k)
{
	uint64_t top = 0, ptr = 0;
	int64_t now = nrs_now_real_ns();
	int err = nrs_ckpt_find(k->svc->store, &top, &ptr);

	if (err)
		return err;
	k->next_seq = top + 1;
	k->ptr_seq = ptr;
	/* KP7: the oldest of ours still there (FIND_MAX at most: older
	 * ones, a leftover of a daemon before this rule, stay) */
	k->floor = top + 1;
	for (uint64_t s = top; s > 0 && top - s < FIND_MAX; s--) {
		struct nrs_obj_meta m;
		char key[NRS_OBJKEY_MAX];

		nrs_ckptfmt_key(key, s);
		if (nrs_obj_head(k->svc->store, key, &m) != 0)
			break;	/* missing (or no answer: a later start) */
		k->floor = s;
	}
	mark_old(k, now);
	nrs_info("checkpoint: the newest in the store is %" PRIu64 ", the next"
		 " is %" PRIu64, top, k->next_seq);
	return 0;
}

/* 0 if a checkpoint is due, else the ms until the timer says it is (at
 * most IDLE_MS; a kick or the bytes trigger wakes the thread sooner). */
static uint64_t until_due(struct nrs_ckpt *k)
{
	uint64_t since, every;
	bool kicked;

	pthread_mutex_lock(&k->lock);
	kicked = k->kicked;
	pthread_mutex_unlock(&k->lock);
	if (kicked || (k->o.bytes && atomic_load(&k->wal_bytes) >= k->o.bytes))
		return 0;
	if (!k->o.interval_ms)
		return IDLE_MS;
	since = (nrs_now_mono_ns() - k->last_start) / NRS_NS_PER_MS;
	every = k->o.interval_ms;
	if (since >= every)
		return 0;
	return every - since < IDLE_MS ? every - since : IDLE_MS;
}

/* The object of k->hdr for the snapshot in db becomes the pending one
 * (there is none). */
static int seal(struct nrs_ckpt *k, const void *db)
{
	void *obj = NULL;
	size_t len = 0;
	bool want = nrs_obj_wants_md5(k->svc->store);
	int err = nrs_ckptfmt_build(&k->hdr, db, &obj, &len);

	if (!err)
		err = nrs_objfmt_digest(obj, len, k->sha, want ? k->md5 : NULL);
	if (err) {
		free(obj);
		return err;
	}
	k->obj = obj;
	k->obj_len = len;
	k->attempt = 0;
	return 0;
}

/* A snapshot made pending, unless it is the last one again. */
static int take(struct nrs_ckpt *k)
{
	const struct nrs_ckpt_opts *o = &k->o;
	struct nrs_meta_snap_stats st;
	unsigned char sha[NRS_SHA256_LEN];
	uint64_t covered, epoch;
	void *db = NULL;
	size_t len = 0;
	int err;

	pthread_mutex_lock(&k->lock);
	k->kicked = false;
	k->taking = k->want;			/* KC3: before the snapshot */
	pthread_mutex_unlock(&k->lock);
	atomic_store(&k->wal_bytes, 0);
	k->last_start = k->t0 = nrs_now_mono_ns();
	covered = o->covered ? o->covered(o->ctx) : 0;	/* KC1: first */
	epoch = o->epoch ? o->epoch(o->ctx) : 0;
	err = nrs_meta_snapshot(k->svc->meta, &db, &len, &st);
	if (!err)
		err = nrs_objfmt_digest(db, len, sha, NULL);
	if (err) {
		free(db);
		return err;
	}
	if (k->have_last && covered == k->last_covered &&
	    epoch == k->last_epoch && memcmp(sha, k->last_sha, sizeof(sha)) == 0) {
		nrs_count(&k->svc->metrics->ckpt_skipped, 1);
		free(db);
		answer(k, k->taking);	/* KC3: the last one holds it all */
		return 0;
	}
	k->hdr_taking = k->taking;
	memcpy(k->last_sha, sha, sizeof(sha));
	k->last_covered = covered;
	k->last_epoch = epoch;
	k->lock_ns = st.max_hold_ns;
	k->hdr = (struct nrs_ckpt_hdr){
		.seq = k->next_seq, .covered = covered, .epoch = epoch,
		.db_len = len, .created_ns = nrs_now_real_ns(),
	};
	err = seal(k, db);
	free(db);
	return err;
}

/* The pending checkpoint is proven: the pointer, the metrics, KP7. */
static void proven(struct nrs_ckpt *k)
{
	struct nrs_metrics *m = k->svc->metrics;
	struct nrs_ckpt_ptr p = { .seq = k->hdr.seq, .length = k->obj_len };
	int err = -EAGAIN;

	memcpy(p.sha256, k->sha, sizeof(p.sha256));
	for (int i = 0; i < 3 && err == -EAGAIN; i++)
		err = nrs_ckpt_put_pointer(k->svc->store, &p);	/* KP3 */
	if (err)
		nrs_warn("checkpoint: %s not rewritten (%s): the next find"
			 " probes past it", NRS_CKPT_LATEST_KEY, strerror(-err));
	else
		k->ptr_seq = p.seq;
	k->have_last = true;
	atomic_store(&k->covered, k->hdr.covered);	/* MZ8 */
	mark_old(k, nrs_now_real_ns());
	nrs_count(&m->ckpt_taken, 1);
	atomic_store(&m->ckpt_last_seq, k->hdr.seq);
	atomic_store(&m->ckpt_last_bytes, k->obj_len);
	atomic_store(&m->ckpt_last_ms, (nrs_now_mono_ns() - k->t0) / 1000000);
	atomic_store(&m->ckpt_last_lock_us, k->lock_ns / 1000);
	atomic_store(&m->ckpt_last_real_ns, (uint64_t)k->hdr.created_ns);
	answer(k, k->hdr_taking);	/* KC3, once the metrics say so too */
	nrs_info("checkpoint %" PRIu64 " stored (%zu bytes, object WAL covered"
		 " up to %" PRIu64 ")", k->hdr.seq, k->obj_len, k->hdr.covered);
	k->next_seq = k->hdr.seq + 1;
	free(k->obj);
	k->obj = NULL;
}

/* KC2: one attempt at the pending upload; the ms to wait before the
 * next step. */
static uint64_t upload(struct nrs_ckpt *k)
{
	char key[NRS_OBJKEY_MAX];
	const void *db;
	int err;

	nrs_ckptfmt_key(key, k->hdr.seq);
	err = nrs_ckpt_put_proven(k->svc->store, key, k->obj, k->obj_len,
				  nrs_obj_wants_md5(k->svc->store) ? k->md5 :
				  NULL, k->sha);
	if (err == 0) {
		proven(k);
		return 0;
	}
	if (err == -EBADMSG) {		/* KP1: that seq is gone for good */
		nrs_count(&k->svc->metrics->ckpt_quarantined, 1);
		quarantined(k, k->hdr.seq);
		void *old = k->obj;

		db = (const unsigned char *)old + k->obj_len - k->hdr.db_len;
		k->hdr.seq++;
		k->next_seq = k->hdr.seq;
		k->obj = NULL;
		err = seal(k, db);
		free(old);
		if (err)
			nrs_warn("checkpoint: %s", strerror(-err));
		return 0;
	}
	nrs_count(&k->svc->metrics->ckpt_retries, 1);
	if (k->attempt % 10 == 0)
		nrs_warn("checkpoint %s: not proven yet; the same bytes again"
			 " after a backoff", key);
	return backoff_ms(k->attempt++);
}

/* One step of the thread; the ms to nap after it. */
static uint64_t step(struct nrs_ckpt *k)
{
	uint64_t wait;
	int err;

	if (k->obj)
		return upload(k);
	prune(k);
	wait = until_due(k);
	if (wait)
		return wait;
	if (k->next_seq == 0) {	/* only once one is due: a store that is
				 * down at mount is not asked at once */
		err = find_start(k);
		if (err) {
			if (k->attempt % 10 == 0)
				nrs_warn("checkpoint: cannot find the newest"
					 " checkpoint (%s): none is written"
					 " until it is found", strerror(-err));
			return backoff_ms(k->attempt++);
		}
		k->attempt = 0;
	}
	err = take(k);
	if (err) {
		nrs_warn("checkpoint: no snapshot: %s", strerror(-err));
		return backoff_ms(3);
	}
	return k->obj ? upload(k) : IDLE_MS;
}

static void *ckpt_thread(void *arg)
{
	struct nrs_ckpt *k = arg;
	uint64_t ms = 0;

	while (!nap(k, ms))
		ms = step(k);
	return NULL;
}

int nrs_ckpt_start(const struct nrs_services *svc,
		   const struct nrs_ckpt_opts *o, struct nrs_ckpt **out)
{
	struct nrs_ckpt *k;
	int err;

	*out = NULL;
	if (o->interval_ms == 0 && o->bytes == 0)
		return 0;
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->svc = svc;
	k->o = *o;
	k->last_start = nrs_now_mono_ns();
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cond, NULL);
	err = -pthread_create(&k->thread, NULL, ckpt_thread, k);
	if (err) {
		nrs_ckpt_stop(k);
		return err;
	}
	(void)pthread_setname_np(k->thread, "nrs-checkpoint");
	k->started = true;
	*out = k;
	return 0;
}

void nrs_ckpt_stop(struct nrs_ckpt *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->stopping = true;
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
	if (k->started)
		pthread_join(k->thread, NULL);
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->lock);
	free(k->obj);
	free(k);
}

void nrs_ckpt_kick(struct nrs_ckpt *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->kicked = true;
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

void nrs_ckpt_wal_bytes(struct nrs_ckpt *k, uint64_t n)
{
	if (!k || n == 0)
		return;
	if (k->o.bytes && atomic_fetch_add(&k->wal_bytes, n) + n >= k->o.bytes)
		nrs_ckpt_kick(k);
}

uint64_t nrs_ckpt_covered(struct nrs_ckpt *k)
{
	return k ? atomic_load(&k->covered) : UINT64_MAX;
}

int nrs_ckpt_sync(struct nrs_ckpt *k, uint64_t timeout_ms)
{
	struct timespec ts;
	uint64_t ticket;
	int err = 0;

	if (!k)
		return 0;
	nrs_deadline_ms(&ts, timeout_ms);
	pthread_mutex_lock(&k->lock);
	ticket = ++k->want;
	k->kicked = true;
	pthread_cond_broadcast(&k->cond);
	while (k->done < ticket && !k->stopping && !err)
		err = -pthread_cond_timedwait(&k->cond, &k->lock, &ts);
	if (k->done >= ticket)
		err = 0;
	else if (!err)
		err = -ESHUTDOWN;
	pthread_mutex_unlock(&k->lock);
	if (err)
		nrs_warn("checkpoint: a change under an object-wal directory is"
			 " not in the store after %" PRIu64 " ms: %s",
			 timeout_ms, strerror(-err));
	return err;
}
