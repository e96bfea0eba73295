/*
 * core_priv.h - what the files of the stream core share: core.c,
 * core_handle.c, core_append.c, core_ns.c, core_xattr.c, core_virtual.c,
 * core_adapter.c and core_obj.c, all in core/ (tests/lint/layers.sh LY2
 * refuses it anywhere else).
 * Recovery gets a struct nrs_recover_env (stream/recovery.h) and the
 * background services a struct nrs_services (bg/services.h, built in
 * core_obj.c) instead.
 *
 * Locks, in the order they may be taken: c->admin (trim, profile and
 * unlink decisions), c->streams.lock (the stream table, stream/table.h),
 * st->lock.  The metadata store locks itself and is never called with
 * st->lock held.  A handle's
 * lock (h->lock) is taken with no other core lock held, or after them.
 */
#ifndef NRS_CORE_PRIV_H
#define NRS_CORE_PRIV_H

#include <pthread.h>
#include <stdatomic.h>

#include "bg/services.h"
#include "core/core.h"
#include "meta/meta.h"
#include "stream/reader.h"
#include "stream/stream.h"
#include "stream/table.h"
#include "util/metrics.h"
#include "util/pool.h"
#include "wal/wal.h"

struct nrs_bcache;
struct nrs_lc;
struct nrs_mat;
struct nrs_objstore;
struct nrs_owner;
struct nrs_pipeline;
struct nrs_wal;

/* The pipeline of st's profile (core_append.c). */
struct nrs_pipeline *nrs_core_pipe_of(struct nrs_core *c,
				      struct nrs_stream *st);

struct nrs_core {
	char *data_dir;
	int lock_fd;			/* flock'd data_dir/lock */
	struct nrs_meta *meta;
	struct nrs_wal *wal;		/* the local WAL */
	struct nrs_pipeline *pipe;	/* its pipeline */
	struct nrs_wal *owal;		/* the object WAL (core_obj.c) */
	struct nrs_pipeline *opipe;	/* its pipeline; NULL: none */
	_Atomic uint64_t lsn;		/* both pipelines' LSNs (PL7) */
	bool recovering;		/* -o recover under way (RB1) */
	struct nrs_wal_progress progress; /* what start-up recovery read (RP1) */
	uint64_t owal_timeout_ms;	/* NS1 */
	/* core_metalog.c: the change log's META records (NS1, NS2) */
	pthread_mutex_t mlock;
	pthread_cond_t mcond;
	atomic_bool mlog_on;		/* the store's sink is set (NS3) */
	atomic_bool mlog_enabling;	/* it is being set, or is */
	uint64_t mlog_done;		/* protected by mlock: every META
					 * record up to it completed */
	uint64_t mlog_retrying;		/* protected by mlock: records being
					 * tried again (NS2) */
	uint64_t mlog_failed;		/* protected by mlock: the highest
					 * one that failed (0: none) */
	uint64_t mlog_ckpt;		/* protected by mlock: a proven
					 * checkpoint holds every change up
					 * to it (NS2) */
	struct nrs_objstore *store;	/* the embedded directory, or S3 */
	bool obj_same_fs;		/* store on the WAL's file system (CO1) */
	bool write_once;		/* -o write_once=auto (core_obj.c CO2) */
	struct nrs_bcache *bcache;	/* verified object blocks */
	struct nrs_mat *mat;		/* materializer and reclaimer threads */
	struct nrs_lc *lc;		/* retention and GC thread */
	struct nrs_ckpt *ckpt;		/* checkpoints (NULL: off); the object
					 * WAL counts its bytes with
					 * nrs_ckpt_wal_bytes(c->ckpt, n) */
	struct nrs_owner *owner;	/* the bucket's owner record */
	struct nrs_objstore *owned_store;	/* store, refusing writes once
						 * fenced: what mat and lc get */
	struct nrs_services svc;	/* what mat and lc get (core_obj.c) */
	pthread_rwlock_t gate;		/* reads vs reclamation (reader.h) */
	struct nrs_reader reader;
	struct nrs_metrics metrics;
	int64_t started_ns;
	/* WA5 at mount (core.c choose_reserve): the reserve in force,
	 * whether it was scaled down, and what the mount warned about (a
	 * word for /.nereus/status, or NULL) */
	uint64_t wal_reserve;
	bool reserve_scaled;
	const char *space_warning;

	pthread_mutex_t hlock;		/* the handle list */
	struct nrs_handle *handles;
	pthread_mutex_t admin;
	struct nrs_pool ar_pool;	/* small append requests
					 * (core_append.c) */
	struct nrs_streams streams;	/* the stream table (its own lock) */

	nrs_inval_fn inval;
	void *inval_ctx;
};

enum nrs_handle_kind {
	NRS_H_STREAM = 1,
	NRS_H_VIRTUAL = 2,
};

struct nrs_handle {
	enum nrs_handle_kind kind;
	/* The FUSE layer's reference, plus one per nrs_core_append running:
	 * an append's reply can reach the kernel, and the file be closed,
	 * before the append has let go of h->lock. */
	atomic_int refs;
	/* all handles, for the ones the kernel never released (a RELEASE
	 * that comes after the session ended): protected by c->hlock */
	struct nrs_handle *hprev, *hnext;
	uint64_t ino;
	int flags;
	struct nrs_stream *st;		/* NRS_H_STREAM: a reference */
	bool direct;			/* bypasses the kernel page cache */
	char *vbuf;			/* NRS_H_VIRTUAL: a snapshot */
	size_t vlen;

	pthread_mutex_t lock;		/* NRS_H_STREAM; after st->lock */
	/* protected by lock: the writer state (core_adapter.c) */
	uint64_t epoch;			/* opened under, or bound to */
	bool armed;
	bool follow;			/* NRS_EXPECT_FOLLOW: not consumed */
	/* armed: the next write's offset; written under lock, except that
	 * a following append's completion moves it without (EX1) */
	_Atomic uint64_t expect;
};

/* core_adapter.c, for nrs_core_append (h->lock held): the offset h's next
 * append must land at, or NRS_EXPECT_ANY / off as at_head says; *follow
 * is set when that append must report back (nrs_core_expect_followed). */
uint64_t nrs_core_expect_take(struct nrs_handle *h, bool at_head,
			      uint64_t off, bool *follow);
/* EX1: a following append expected at `expected` completed with err. */
void nrs_core_expect_followed(struct nrs_handle *h, uint64_t expected,
			      size_t len, int err);

/* core_handle.c */
/* -EIO (logged with the stream and the file) if st is corrupt, else 0. */
int nrs_core_stream_check(struct nrs_core *c, const struct nrs_stream *st);
void nrs_attr_to_stat(struct nrs_core *c, const struct nrs_attr *a,
		      struct stat *out);
/* The stream's name went: forget it now, or at the last close. */
void nrs_core_stream_unlinked(struct nrs_core *c, const struct nrs_attr *a);
/* Drop a reference to h (the FUSE layer's, or an append's); the last
 * frees it. */
void nrs_core_handle_put(struct nrs_handle *h);

/* core_append.c */
/* Small append requests come from c->ar_pool (set up by core.c) in
 * blocks of NRS_AR_BLOCK bytes, NRS_AR_POOL_MAX of them kept (1 MiB). */
#define NRS_AR_BLOCK		4096u
#define NRS_AR_POOL_MAX		256u
/* K1: st->privs of a's stream from a's mode (c->admin held). */
void nrs_core_privs_set(struct nrs_core *c, const struct nrs_attr *a);
/* K1: clear the set-id bits of st's inode before an unprivileged write
 * or O_TRUNC; 0 or the store's error (the caller then fails). */
int nrs_core_kill_priv(struct nrs_core *c, struct nrs_stream *st);

/*
 * Raise st's writer epoch through the pipeline; waits for the commit.
 * An epoch below the stream's is -ESTALE if bind (NRS_IOC_BIND), else
 * -EINVAL (the epoch xattr); equal is a no-op.
 */
int nrs_core_fence(struct nrs_core *c, struct nrs_stream *st, uint64_t epoch,
		   bool bind);

/* core_xattr.c: raise st's start to v (durable), drop the index below it
 * and the kernel's cached pages.  -EINVAL if v < start or v > head. */
int nrs_core_trim(struct nrs_core *c, struct nrs_stream *st, uint64_t v);

/* core_virtual.c: the virtual files */
int nrs_core_render(struct nrs_core *c, uint64_t ino, char **buf, size_t *len);
void nrs_virtual_stat(uint64_t ino, struct stat *out);
bool nrs_is_virtual(uint64_t ino);

/* core_obj.c: the object store (first: recover reads it); the block
 * cache, the object WAL and the reader; then, once the pipeline runs, the
 * background services.  Close undoes the last. */
int nrs_core_store_open(struct nrs_core *c, const struct nrs_core_opts *o);
/* CO3: the first number the local WAL gives a new segment (0: any). */
int nrs_core_wal_first_seg(struct nrs_core *c, const struct nrs_core_opts *o,
			   uint64_t *first);
int nrs_core_obj_open(struct nrs_core *c, const struct nrs_core_opts *o);
int nrs_core_obj_start(struct nrs_core *c, const struct nrs_core_opts *o);
void nrs_core_obj_close(struct nrs_core *c);

/* core_recover.c: -o recover (RB1, RB2) before the metadata store opens;
 * the report and the end of it (RB3) after the start-up recovery. */
int nrs_core_recover_bucket(struct nrs_core *c, const struct nrs_core_opts *o);
int nrs_core_recover_report(struct nrs_core *c);
/* core_metalog.c NS1: the change this thread just made to ino (and ino2,
 * 0: none) is in the bucket, if either is under an object-wal directory;
 * _epoch (NS4): the epoch just raised on ino's stream st (the caller's
 * reference; a checkpoint only if its fence was no object-WAL record).  start
 * sets the store's sink once the object WAL's pipeline runs; stop unsets
 * it before the pipeline stops. */
int nrs_core_bucket_sync(struct nrs_core *c, uint64_t ino, uint64_t ino2);
int nrs_core_bucket_sync_epoch(struct nrs_core *c, struct nrs_stream *st,
			       uint64_t ino);
int nrs_core_metalog_start(struct nrs_core *c);
void nrs_core_metalog_stop(struct nrs_core *c);
/* core_owner.c: the bucket's owner (CW1 at mount; -EBUSY, -EUCLEAN refuse
 * it); close stops the renewals. */
int nrs_core_owner_open(struct nrs_core *c, const struct nrs_core_opts *o);
void nrs_core_owner_close(struct nrs_core *c);

#endif
