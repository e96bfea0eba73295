/*
 * core_metalog.c - the metadata's change log in the object WAL: every
 * logged change of the store (meta.h THE CHANGE LOG: names, attributes,
 * xattrs, settings, trims) becomes a META record (walrec.c WV4,
 * metarec.c) of the object WAL, in the order the store numbered the
 * changes, so that the bucket holds the namespace with the same proof as
 * the appends, and a recovery from the bucket alone replays it
 * (stream/recovery_meta.c RM1) on the last checkpoint.
 *
 * Why changesets and not logical operation records: sqlite_log.c's top.
 * Every change is logged, local-wal directories' too (one ordered log is
 * what replays: a change's rows name what earlier changes made); only the
 * calls under an object-wal directory wait for their record.
 *
 *  NS1 A namespace or xattr change under an object-wal directory (the
 *      inode's effective profile, or either side of a rename) returns only
 *      once the META record of its change is proven stored by the object
 *      WAL (wal_object.c OW1) -- the store's sink (meta_logged, called in
 *      the caller's thread inside its store call, under the store's lock)
 *      submitted it to the object WAL's pipeline as the change's number
 *      came out (commit/pipeline.c PL8), and the pipeline completes in
 *      order, so waiting for this thread's last number waits for every
 *      earlier change too -- within object_wal_timeout_ms, else it fails
 *      ETIMEDOUT.  The change itself is made: a failed call may or may not
 *      have taken effect, as a failed write (I3).  An epoch is not a
 *      logged change (the pipeline publishes it with the head): NS4.
 *  NS2 A META record that failed would leave a gap in the log, which a
 *      recovery refuses (sqlite_log.c ML2).  So it is submitted again, the
 *      same change under the same number (a later LSN: a recovery orders
 *      META records by their number, recovery_meta.c RM1, and skips a second
 *      copy), up to META_TRIES times; every waiter waits while one is
 *      being tried again.  If the last try fails too, every waiter whose
 *      record completed after it also waits for a proven checkpoint begun
 *      after the failure (it holds every change up to the failed one, so
 *      a recovery from it skips the gap): only then is a change
 *      acknowledged -- and not at all (ESTALE) while this mount may not
 *      acknowledge (owner.c OR3), as its appends.
 *  NS3 The log starts with the first change under an object-wal
 *      directory (a mount whose store never logged one puts nothing of
 *      its local-wal namespace in the object WAL), and from then on is
 *      never off while the mount lasts, nor at later mounts (the store's
 *      number is above 0).  The change that starts it, and every change
 *      before, are unnumbered: that change returns once a checkpoint
 *      begun after the sink was set is proven, which holds all of them,
 *      so the numbered changes a recovery replays follow a checkpoint
 *      that holds every unnumbered one.
 *  NS4 An epoch fence (user.nereus.epoch, NRS_IOC_BIND) of an object-wal
 *      stream is a record of the object WAL itself (pipeline.c PL9: a
 *      record of no bytes at the head, carrying the new epoch), and the
 *      fence returns once that record is proven and published, as an
 *      append -- no checkpoint; a recovery from the bucket raises the
 *      epoch from it (recovery.c RC9).  Only a fence of a local-wal
 *      stream under an object-wal directory (one renamed there) waits
 *      for a checkpoint that holds it (checkpoint.h KC3).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bg/checkpoint.h"
#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "meta/meta.h"
#include "owner/owner.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/waitms.h"

/* This thread's last logged change (0: none since its last wait). */
static _Thread_local uint64_t my_seq;

#define META_TRIES	3

struct mrec {
	struct nrs_req req;	/* first */
	struct nrs_core *c;
	int tries;
	unsigned char change[];
};

static void meta_done(struct nrs_req *r, int err);

static void meta_submit(struct mrec *m, uint64_t seq, size_t len)
{
	memset(&m->req, 0, sizeof(m->req));
	m->req.kind = NRS_REQ_META;
	m->req.data = m->change;
	m->req.len = len;
	m->req.meta_seq = seq;
	m->req.done = meta_done;
	m->tries++;
	nrs_pipeline_submit(m->c->opipe, &m->req);		/* PL8 */
}

static void meta_done(struct nrs_req *r, int err)
{
	struct mrec *m = (struct mrec *)r;
	struct nrs_core *c = m->c;
	uint64_t seq = r->meta_seq;
	bool again = err && err != -EIO && m->tries < META_TRIES &&
		     !nrs_pipeline_failed(c->opipe);

	pthread_mutex_lock(&c->mlock);
	if (m->tries > 1)
		c->mlog_retrying--;
	if (again)
		c->mlog_retrying++;			/* NS2 */
	else if (err && seq > c->mlog_failed)
		c->mlog_failed = seq;
	if (seq > c->mlog_done)
		c->mlog_done = seq;
	pthread_cond_broadcast(&c->mcond);
	pthread_mutex_unlock(&c->mlock);
	if (err)
		nrs_err("object WAL: the META record of metadata change %"
			PRIu64 " failed: %s; %s", seq, strerror(-err),
			again ? "trying it again (NS2)" :
			"the changes that wait for theirs wait for a "
			"checkpoint too (NS2)");
	if (again)
		meta_submit(m, seq, r->len);
	else
		free(m);
}

/* The store's sink (meta.h): under its lock, in the caller's thread. */
static void meta_logged(void *ctx, uint64_t seq, const void *change,
			size_t len)
{
	struct nrs_core *c = ctx;
	struct mrec *m = malloc(sizeof(*m) + len);

	my_seq = seq;
	if (!m) {
		pthread_mutex_lock(&c->mlock);
		if (seq > c->mlog_failed)
			c->mlog_failed = seq;
		if (seq > c->mlog_done)
			c->mlog_done = seq;
		pthread_mutex_unlock(&c->mlock);
		return;
	}
	m->c = c;
	m->tries = 0;
	memcpy(m->change, change, len);
	meta_submit(m, seq, len);
}

/* NS3: the sink set, from the store's number on. */
static int metalog_on(struct nrs_core *c, uint64_t seq)
{
	int err;

	pthread_mutex_lock(&c->mlock);
	c->mlog_done = c->mlog_ckpt = seq;	/* the store holds them */
	pthread_mutex_unlock(&c->mlock);
	err = nrs_meta_log_set(c->meta, meta_logged, c);
	if (err)
		nrs_err("metadata changes cannot be logged to the object WAL:"
			" %s", strerror(-err));
	else
		atomic_store(&c->mlog_on, true);
	return err;
}

int nrs_core_metalog_start(struct nrs_core *c)
{
	uint64_t seq = 0;
	int err;

	if (!c->opipe)
		return 0;
	err = nrs_meta_log_seq(c->meta, &seq);
	if (err || seq == 0)		/* NS3: not yet */
		return err;
	atomic_store(&c->mlog_enabling, true);
	return metalog_on(c, seq);
}

void nrs_core_metalog_stop(struct nrs_core *c)
{
	if (atomic_load(&c->mlog_on) && c->meta)
		nrs_meta_log_set(c->meta, NULL, NULL);
	atomic_store(&c->mlog_on, false);
}

/* NS1: is ino under an object-wal directory (its effective profile, one
 * meta call)?  When that cannot be told, it may be: the sync is made. */
static bool under_object_wal(struct nrs_core *c, uint64_t ino)
{
	int p;

	return nrs_meta_effective_profile(c->meta, ino, &p) != 0 ||
	       p == NRS_PROFILE_OBJECT_WAL;
}

/* NS2: a checkpoint that holds every change up to the failed one. */
static int ckpt_owed(struct nrs_core *c)
{
	uint64_t failed;
	int err;

	pthread_mutex_lock(&c->mlock);
	failed = c->mlog_failed > c->mlog_ckpt ? c->mlog_failed : 0;
	pthread_mutex_unlock(&c->mlock);
	if (!failed)
		return 0;
	if (c->owner && !nrs_owner_may_ack(c->owner, nrs_now_mono_ns()))
		return -ESTALE;		/* OW1, I8: as the appends */
	err = nrs_ckpt_sync(c->ckpt, c->owal_timeout_ms);
	if (err)
		return err;
	pthread_mutex_lock(&c->mlock);
	if (failed > c->mlog_ckpt)
		c->mlog_ckpt = failed;
	pthread_mutex_unlock(&c->mlock);
	return 0;
}

/* NS1: until every META record up to seq completed. */
static int wait_logged(struct nrs_core *c, uint64_t seq)
{
	struct timespec until;
	int rc = 0;

	nrs_deadline_ms(&until, c->owal_timeout_ms);
	pthread_mutex_lock(&c->mlock);
	while ((c->mlog_done < seq || c->mlog_retrying) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&c->mcond, &c->mlock, &until);
	rc = c->mlog_done < seq || c->mlog_retrying ? -ETIMEDOUT : 0;
	pthread_mutex_unlock(&c->mlock);
	return rc;
}

int nrs_core_bucket_sync(struct nrs_core *c, uint64_t ino, uint64_t ino2)
{
	uint64_t seq = my_seq;

	my_seq = 0;
	if (!c->ckpt || !c->owal)
		return 0;
	if (!under_object_wal(c, ino) && (!ino2 || !under_object_wal(c, ino2)))
		return 0;
	if (!atomic_load(&c->mlog_on)) {	/* NS3 */
		uint64_t now = 0;

		if (c->opipe && !atomic_exchange(&c->mlog_enabling, true) &&
		    (nrs_meta_log_seq(c->meta, &now) || metalog_on(c, now)))
			atomic_store(&c->mlog_enabling, false);
		return nrs_ckpt_sync(c->ckpt, c->owal_timeout_ms);
	}
	if (seq == 0)		/* the call changed no row */
		return 0;
	return wait_logged(c, seq) ?: ckpt_owed(c);		/* NS1, NS2 */
}

int nrs_core_bucket_sync_epoch(struct nrs_core *c, struct nrs_stream *st,
			       uint64_t ino)
{
	my_seq = 0;
	if (!c->ckpt || !c->owal || !under_object_wal(c, ino))
		return 0;
	if (c->opipe && nrs_core_pipe_of(c, st) == c->opipe)
		return 0;		/* NS4: its record is proven (PL9) */
	return nrs_ckpt_sync(c->ckpt, c->owal_timeout_ms);	/* NS4 */
}
