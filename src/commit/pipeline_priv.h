/*
 * pipeline_priv.h - private to src/commit/: the commit pipeline's state
 * and the functions its files share.  The rules (PL1-PL9, PL20, PL21,
 * PW1) are in pipeline.c's top comment; each file implements some of
 * them:
 *
 *   pipeline.c          the queue, the commit role, leading, the committer
 *                       thread, WAL floors and PL6's seal, start and stop
 *   pipeline_batch.c    PL1 (order) and PL2's write: a batch built and written
 *   pipeline_sync.c     PL2's sync, by the commit role or the syncer thread,
 *                       its failure rule, and the hand-off to the publisher
 *   pipeline_publish.c  PL3 to PL5 (publish, apply, reply), the publisher,
 *                       and PL20/PL21's group publication
 *   pipeline_group.c    PL20's merge of a group's head updates
 */
#ifndef NRS_PIPELINE_PRIV_H
#define NRS_PIPELINE_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "commit/pipeline.h"
#include "wal/wal.h"
#include "wal/metarec.h"
#include "wal/walrec.h"

struct nrs_head_update;

struct batch_rec {
	struct nrs_stream *st;
	struct nrs_walrec rec;
	size_t first_req, last_req;	/* indexes into reqs, linked by rnext */
	size_t total;			/* bytes on disk */
	uint64_t seg, off;		/* where it starts, once written */
	unsigned char meta_fixed[NRS_METAREC_FIXED];	/* META: metarec.h */
};

#define NBUF	16	/* written, syncing or publishing, in order */

/* One stream's part of a batch, beside its head update. */
struct batch_upd {
	struct nrs_stream *st;
	/* the ordering view before the batch: to undo PL1, and the old head */
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
	bool written;			/* PL2 wrote records at wpos, wlen */
	struct nrs_wal_pos wpos;
	uint64_t wlen;
	int err;			/* the outcome of PL2 (then PL3) */
	uint64_t payload, appends;
	/* the WAL it goes to (PW1); set before floor leaves UINT64_MAX */
	_Atomic(struct nrs_wal *) wal;
	/* segments of wal below this hold no record of the batch that PL4
	 * has not indexed yet (nrs_pipeline_wal_floor); UINT64_MAX when idle */
	_Atomic uint64_t floor;
};

/* PL20: the publisher's merged head updates of a group of batches. */
struct pl_gkey;
struct pl_group {
	struct nrs_head_update *upds;	/* one per stream of the group */
	size_t n, cap_upds;
	struct pl_gkey *keys;		/* scratch: the batches' updates */
	size_t cap_keys;
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
	/* a thread holds the commit role; written under qlock, read
	 * without it only as a hint (nrs_pipeline_try_lead) */
	atomic_bool busy;

	atomic_bool failed;
	_Atomic uint64_t last_batch_ns;	/* when a batch was last taken: PL6 */
	/* owned by the commit role */
	_Atomic uint64_t own_lsn;	/* cfg.next_lsn on: the source unless
					 * cfg.lsn_source (PL7) */
	_Atomic uint64_t *lsn;
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
	struct pl_group group;		/* the publisher's (PL20) */
	struct batch b[NBUF];	/* b[i] belongs to the commit role while
				 * neither busy_buf[i] nor full[i], is read by
				 * the syncer while busy_buf[i], belongs to
				 * the publisher while full[i] */
};

/* pipeline.c */
bool pl_queue_empty(struct nrs_pipeline *p);

/* pipeline_batch.c */
/* Stage 1: PL1 and PL2's write of list into b, to WAL w (the commit role). */
void pl_stage_write(struct nrs_pipeline *p, struct batch *b,
		    struct nrs_req *list, struct nrs_wal *w);
/* Put every stream's ordering view back to what it was before b's PL1. */
void pl_undo_order(struct batch *b);

/* pipeline_sync.c */
/* One batch of list to WAL w, by the holder of the commit role. */
void pl_run_batch(struct nrs_pipeline *p, struct nrs_req *list,
		  struct nrs_wal *w);
bool pl_settle_failure(struct nrs_pipeline *p, struct batch *then);
bool pl_drain(struct nrs_pipeline *p, struct batch *then);
void *pl_syncer(void *arg);

/* pipeline_publish.c */
/* Complete r with err (PL5): its callback, then its stream reference. */
void pl_complete(struct nrs_pipeline *p, struct nrs_req *r, int err);
/* Stage 2: PL3, PL4 and PL5 of b. */
void pl_stage_publish(struct nrs_pipeline *p, struct batch *b);
void *pl_publisher(void *arg);

/* pipeline_group.c */
/* PL20: g->upds = the updates of bs[0..n) (batch order), one per stream:
 * the first batch's CAS, the last one's values.  0 or -ENOMEM. */
int pl_group_merge(struct pl_group *g, struct batch *const *bs, int n);

#endif
