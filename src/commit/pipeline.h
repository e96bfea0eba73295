/*
 * pipeline.h - the commit pipeline: orders appends, group-commits them to
 * the WAL with one write and one sync per batch, publishes every head the
 * batch moved with one metadata transaction, then completes each request.
 *
 * Requests are submitted from any thread and completed, in submission order
 * within a stream, by a callback (the FUSE layer replies from it) from the
 * pipeline's threads -- or from the submitting thread itself when it found
 * the pipeline idle and leads the commit (nrs_pipeline_try_lead).  See
 * pipeline.c for the ordering rules and failure handling.
 */
#ifndef NRS_PIPELINE_H
#define NRS_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nrs_meta;
struct nrs_metrics;
struct nrs_stream;
struct nrs_wal;

enum nrs_req_kind {
	NRS_REQ_APPEND = 1,
	NRS_REQ_FENCE = 2,
	/* A metadata change (meta.h THE CHANGE LOG) as a META record
	 * (walrec.h, metarec.h) of the WAL: st is NULL, data and len the
	 * change, meta_seq its number.  Ordered in the log with the appends
	 * of the same batch as it was submitted (pipeline.c PL8). */
	NRS_REQ_META = 3,
};

#define NRS_EXPECT_ANY	UINT64_MAX	/* O_APPEND: at the head, wherever */

struct nrs_req;
/*
 * Called exactly once per request: from the pipeline's threads, from
 * nrs_pipeline_lead, or from the submit call when the pipeline is stopped
 * or failed.  err is 0 or -errno;
 * on success r->offset is where the append landed.  The callback owns r
 * from then on (it may free it) and must not use r->st: the pipeline drops
 * that stream reference (cfg->put) after the callback returns.
 */
typedef void (*nrs_req_done)(struct nrs_req *r, int err);

struct nrs_req {
	enum nrs_req_kind kind;
	struct nrs_stream *st;	/* the caller's reference, handed over */
	uint64_t epoch;		/* APPEND: the handle's epoch; FENCE: new */
	uint64_t expect;	/* APPEND: required head or NRS_EXPECT_ANY */
	bool bind;		/* FENCE: a lower epoch is -ESTALE, not -EINVAL */
	const void *data;	/* APPEND, META: len bytes, live until done */
	size_t len;
	uint64_t meta_seq;	/* META: the change's number */
	nrs_req_done done;
	void *cookie;		/* for the caller */
	uint64_t offset;	/* out */

	/* private to the pipeline */
	struct nrs_req *next;
	uint64_t t_submit_ns;
	int err;
};

/*
 * Called after a batch is published for each stream whose head moved while
 * a reader may hold the page that held the old head (stream.h tail_cached),
 * with that old head; from the thread that publishes the batch (a
 * pipeline thread or a leader, nrs_pipeline_lead), no lock held.
 */
typedef void (*nrs_commit_hook)(void *ctx, struct nrs_stream *st,
				uint64_t old_head);
/* Drops a stream reference the pipeline held. */
typedef void (*nrs_stream_put_fn)(struct nrs_stream *st);

/* Entries of nrs_pipeline_cfg.profile_wal: every enum nrs_profile (meta.h). */
#define NRS_PIPELINE_PROFILES	3

struct nrs_pipeline_cfg {
	/*
	 * The WAL of each stream profile (pipeline.c PW1), indexed by enum
	 * nrs_profile; a NULL entry, and a profile out of range, mean wal,
	 * the default, which must be set.  Today local-wal is behind every
	 * profile: the daemon sets only wal.
	 */
	struct nrs_wal *wal;
	struct nrs_wal *profile_wal[NRS_PIPELINE_PROFILES];
	struct nrs_meta *meta;
	struct nrs_metrics *metrics;	/* may be NULL */
	uint64_t next_lsn;		/* first LSN to assign, > 0 */
	/*
	 * PL7: if set, LSNs come from here, not from next_lsn: pipelines
	 * whose WALs one recovery reads together (one per WAL, core.c) share
	 * it, so an LSN is unique across them.  Holds the next LSN.
	 */
	_Atomic uint64_t *lsn_source;
	size_t max_batch_bytes;		/* 0: 16 MiB */
	size_t group_sync_min;		/* 0: 256 KiB (pipeline.c) */
	bool lead;			/* let nrs_pipeline_try_lead lead */
	/* PL9: a fence that raises an epoch is also a record of the WAL
	 * (the object WAL's pipeline: the bucket holds the epochs). */
	bool fence_records;
	nrs_commit_hook hook;		/* may be NULL */
	void *hook_ctx;
	nrs_stream_put_fn put;
};

struct nrs_pipeline;

/* Starts the committer thread.  Returns 0 or -errno. */
int nrs_pipeline_start(const struct nrs_pipeline_cfg *cfg,
		       struct nrs_pipeline **out);
/* Hand r to the pipeline; r->done is always called. */
void nrs_pipeline_submit(struct nrs_pipeline *p, struct nrs_req *r);
/*
 * Leading.  If cfg->lead is set and no thread holds the commit role (the
 * pipeline is idle), nrs_pipeline_try_lead gives it to the caller: true.
 * The caller then submits its request r (nrs_pipeline_submit) and calls
 * nrs_pipeline_lead(p, r), holding no lock that a completion callback, the
 * commit hook or another submitter may take: it commits batches in this
 * thread until the one holding r is written (so r->data need only live
 * until it returns; r->done has run, or runs later from the publisher
 * thread), then gives the role back.  Saves the thread switches of a lone
 * writer's append, and the copy of its bytes.
 */
bool nrs_pipeline_try_lead(struct nrs_pipeline *p);
void nrs_pipeline_lead(struct nrs_pipeline *p, const struct nrs_req *r);
/* Completes every submitted request, stops the thread, frees p (NULL ok). */
void nrs_pipeline_stop(struct nrs_pipeline *p);
/* True once a failure left the pipeline refusing appends (see pipeline.c). */
bool nrs_pipeline_failed(struct nrs_pipeline *p);

/*
 * Segments of WAL w numbered below the result hold no record that the
 * pipeline wrote and has not yet indexed (PL4): with the streams' indexes,
 * this says which segments a reclaimer may delete.  Read it before the
 * indexes.  nrs_pipeline_wal_floor: of the default WAL (cfg.wal).
 */
uint64_t nrs_pipeline_wal_floor_of(struct nrs_pipeline *p, struct nrs_wal *w);
uint64_t nrs_pipeline_wal_floor(struct nrs_pipeline *p);

/*
 * PL6: seal the current segment seg of WAL w (wal.h, seal) if the pipeline
 * is idle -- the commit role free, no request queued, no batch in flight
 * to any WAL, and no batch taken in the last idle_ns nanoseconds -- taking
 * the commit role for it, so it never runs beside an append.  Returns 1 if
 * sealed, 0 if not (busy, nothing to seal), or -errno.
 * nrs_pipeline_wal_seal: of the default WAL (cfg.wal).
 */
int nrs_pipeline_wal_seal_of(struct nrs_pipeline *p, struct nrs_wal *w,
			     uint64_t seg, uint64_t idle_ns);
int nrs_pipeline_wal_seal(struct nrs_pipeline *p, uint64_t seg,
			  uint64_t idle_ns);

#endif
