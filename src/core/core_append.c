/*
 * core_append.c - the stream core's appends (from a handle into the
 * pipeline of the stream's profile), the synchronous fence, and K1, the
 * set-id bits a write clears.  Handles are in core_handle.c.
 *
 * K1 set-id bits (pjdfstest chmod/12.t; issue 12).  A write, or an open
 * with O_TRUNC, by a caller without CAP_FSETID clears S_ISUID, and S_ISGID
 * when group-execute is set (nrs_mode_killpriv, attrmask.h), durably as a
 * chmod.  With direct I/O and FUSE_CAP_HANDLE_KILLPRIV the kernel leaves
 * that to us, and libfuse does not pass its kill flag on, so the FUSE
 * front says whether the caller is privileged (uid 0 stands for
 * CAP_FSETID).  It happens before the append is ordered, as the kernel
 * clears before a local file system writes: no byte an unprivileged
 * writer sent is ever committed while the bits are still set, and a
 * write that then fails (ESPIPE, ENOSPC) has cleared them too, as on
 * ext4.  If the clearing fails, so does the write, and nothing is
 * written.  It costs the common path one branch: st->privs says whether
 * the mode may hold such bits, kept by chmod and by the clearing under
 * c->admin (so a chmod that races a write is never undone by it), and
 * true for a stream loaded at start until its first unprivileged write
 * looks.  Creating a stream never clears: the file is new (as O_TRUNC on
 * a file O_CREAT made).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "util/clock.h"
#include "util/log.h"

void nrs_core_privs_set(struct nrs_core *c, const struct nrs_attr *a)
{
	struct nrs_stream *st = a->stream_id ?
		nrs_streams_get(&c->streams, a->stream_id) : NULL;

	if (!st)
		return;
	atomic_store(&st->privs, nrs_mode_killpriv(a->mode) != a->mode);
	nrs_stream_put(st);
}

/*
 * K1: clear the set-id bits of st's inode, durably, before an
 * unprivileged caller's write or O_TRUNC goes on.  0, or the store's
 * error (then the caller fails and changes nothing).
 */
int nrs_core_kill_priv(struct nrs_core *c, struct nrs_stream *st)
{
	struct nrs_attr a;
	int err;

	pthread_mutex_lock(&c->admin);
	err = nrs_meta_getattr(c->meta, st->ino, &a);
	if (!err && nrs_mode_killpriv(a.mode) != a.mode)
		err = nrs_meta_setattr(c->meta, st->ino, &a, NRS_SET_KILLPRIV,
				       nrs_now_real_ns(), &a);
	if (err == -ENOENT)
		err = 0;		/* being forgotten: nothing to clear */
	else if (err)
		nrs_err("stream %" PRIu64 ": cannot clear the set-id bits of "
			"inode %" PRIu64 " before an unprivileged write: %s; "
			"the write fails", st->id, st->ino, strerror(-err));
	else
		atomic_store(&st->privs, false);
	pthread_mutex_unlock(&c->admin);
	return err;
}

/* ---- appends -------------------------------------------------------- */

struct append_req {
	struct nrs_req req;
	nrs_append_done done;
	void *cookie;
	struct nrs_handle *follow;	/* a reference, or NULL: EX1 */
	struct nrs_pool *pool;		/* it came from (pool.h PO2), or NULL:
					 * malloc'd */
	unsigned char data[];
};

/* An append request of NRS_AR_BLOCK bytes in all comes from c->ar_pool
 * (core_priv.h): one page holds the copy of a small append (the common
 * case of many writers: every one not leading is copied); a larger one is
 * malloc'd. */
#define AR_SMALL	(NRS_AR_BLOCK - offsetof(struct append_req, data))

static void append_done(struct nrs_req *r, int err)
{
	struct append_req *ar = (struct append_req *)r;

	atomic_fetch_sub(&r->st->appends_out, 1);	/* XA2 */
	if (ar->follow) {	/* before the reply: the next write sees it */
		nrs_core_expect_followed(ar->follow, r->expect, r->len, err);
		nrs_core_handle_put(ar->follow);
	}
	ar->done(ar->cookie, err, r->len);
	if (ar->pool)
		nrs_pool_put(ar->pool, ar);
	else
		free(ar);
}

/* An append request with room for len bytes of copy (0 when leading). */
static struct append_req *append_req_new(struct nrs_core *c, size_t len)
{
	struct append_req *ar;

	if (len > AR_SMALL) {
		ar = malloc(sizeof(*ar) + len);
		if (ar)
			ar->pool = NULL;
		return ar;
	}
	ar = nrs_pool_get(&c->ar_pool);
	if (ar)
		ar->pool = &c->ar_pool;
	return ar;
}

struct nrs_pipeline *nrs_core_pipe_of(struct nrs_core *c,
				      struct nrs_stream *st)
{
	int profile;

	if (!c->opipe)
		return c->pipe;
	pthread_mutex_lock(&st->lock);
	profile = st->profile;
	pthread_mutex_unlock(&st->lock);
	return profile == NRS_PROFILE_OBJECT_WAL ? c->opipe : c->pipe;
}

/* XA2: the pipeline of st's profile, for an append: counted out under the
 * lock the profile's change takes, so the profile stays until it is
 * completed; NULL (-EBUSY) while a change is under way. */
static struct nrs_pipeline *append_pipe(struct nrs_core *c,
					struct nrs_stream *st)
{
	int profile;

	pthread_mutex_lock(&st->lock);
	if (st->profile_busy) {
		pthread_mutex_unlock(&st->lock);
		return NULL;
	}
	atomic_fetch_add(&st->appends_out, 1);
	profile = st->profile;
	pthread_mutex_unlock(&st->lock);
	return profile == NRS_PROFILE_OBJECT_WAL && c->opipe ? c->opipe
							     : c->pipe;
}

int nrs_core_append(struct nrs_core *c, struct nrs_handle *h, const void *buf,
		    size_t len, uint64_t off, bool at_head, bool privileged,
		    nrs_append_done done, void *cookie)
{
	struct nrs_pipeline *pipe;
	struct append_req *ar;
	bool lead, follow;

	if (h->kind != NRS_H_STREAM)
		return -EACCES;
	if ((h->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (len > NRS_MAX_WRITE)
		return -EFBIG;
	if (nrs_core_is_fenced(c))
		return -ESTALE;	/* core_owner.c CW2 */
	/* K1: before the append is ordered; one branch when nothing is set */
	if (!privileged && atomic_load_explicit(&h->st->privs,
						memory_order_relaxed)) {
		int err = nrs_core_kill_priv(c, h->st);

		if (err)
			return err;
	}
	/* Leading, this thread writes the bytes before it returns: no copy */
	pipe = append_pipe(c, h->st);
	if (!pipe)
		return -EBUSY;		/* XA2 */
	lead = nrs_pipeline_try_lead(pipe);
	ar = append_req_new(c, lead ? 0 : len);
	if (!ar) {
		if (lead)
			nrs_pipeline_lead(pipe, NULL);	/* gives it back */
		atomic_fetch_sub(&h->st->appends_out, 1);
		return -ENOMEM;
	}
	if (!lead)
		memcpy(ar->data, buf, len);
	ar->done = done;
	ar->cookie = cookie;
	memset(&ar->req, 0, sizeof(ar->req));
	ar->req.kind = NRS_REQ_APPEND;
	ar->req.st = h->st;
	atomic_fetch_add(&h->st->refs, 1);
	ar->req.data = lead ? buf : ar->data;
	ar->req.len = len;
	ar->req.done = append_done;
	/* The epoch and an armed expectation (NRS_IOC_EXPECT) are taken, and
	 * the request queued, in one step: the write that consumes the
	 * expectation is the next one this handle submits. */
	atomic_fetch_add(&h->refs, 1);
	pthread_mutex_lock(&h->lock);
	ar->req.epoch = h->epoch;
	ar->req.expect = nrs_core_expect_take(h, at_head, off, &follow);
	ar->follow = NULL;
	if (follow) {
		atomic_fetch_add(&h->refs, 1);	/* put by append_done */
		ar->follow = h;
	}
	nrs_pipeline_submit(pipe, &ar->req);
	pthread_mutex_unlock(&h->lock);
	nrs_core_handle_put(h);
	if (lead)	/* the pipeline was idle: commit it in this thread */
		nrs_pipeline_lead(pipe, &ar->req);
	return 0;
}

/* A synchronous fence through the pipeline (core_xattr.c uses it). */
struct fence_wait {
	struct nrs_req req;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int err;
};

static void fence_done(struct nrs_req *r, int err)
{
	struct fence_wait *fw = (struct fence_wait *)r;

	pthread_mutex_lock(&fw->lock);
	fw->err = err;
	fw->done = true;
	pthread_cond_signal(&fw->cond);
	pthread_mutex_unlock(&fw->lock);
}

int nrs_core_fence(struct nrs_core *c, struct nrs_stream *st, uint64_t epoch,
		   bool bind)
{
	struct nrs_pipeline *pipe = nrs_core_pipe_of(c, st);
	struct fence_wait fw;
	bool lead;
	int err;

	memset(&fw, 0, sizeof(fw));
	pthread_mutex_init(&fw.lock, NULL);
	pthread_cond_init(&fw.cond, NULL);
	fw.req.kind = NRS_REQ_FENCE;
	fw.req.st = st;
	atomic_fetch_add(&st->refs, 1);
	fw.req.epoch = epoch;
	fw.req.bind = bind;
	fw.req.done = fence_done;
	lead = nrs_pipeline_try_lead(pipe);
	nrs_pipeline_submit(pipe, &fw.req);
	if (lead)
		nrs_pipeline_lead(pipe, &fw.req);
	pthread_mutex_lock(&fw.lock);
	while (!fw.done)
		pthread_cond_wait(&fw.cond, &fw.lock);
	err = fw.err;
	pthread_mutex_unlock(&fw.lock);
	pthread_cond_destroy(&fw.cond);
	pthread_mutex_destroy(&fw.lock);
	return err;
}
