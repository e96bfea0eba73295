/*
 * core.c - the stream core's life cycle, handles, reads and appends.
 * Namespace operations are in core_ns.c, xattrs in core_xattr.c, the
 * virtual files in core_virtual.c, the object side and the services seam
 * in core_obj.c, recovery in stream/recovery.c, the stream table in
 * stream/table.c.
 *
 * Data directory layout (DESIGN.md section 7), every file 0600 and every
 * directory 0700 (fileio.h DM1), the directory itself refused at start if
 * anyone else may read or write it (DM2):
 *   DIR/lock      flock(2)ed by the daemon that owns the directory
 *   DIR/meta.db   the metadata store (meta_sqlite.c)
 *   DIR/wal/      local WAL segments (wal_local.c)
 *   DIR/objects/  the embedded object store (objstore_dir.c), unless -o s3
 *
 * Clean close (U1).  nrs_core_close() stops every thread, then makes the
 * data directory durable before it reports success, so that a power loss
 * after a clean unmount finds exactly what the daemon left (DESIGN.md I7):
 * the WAL's segments and directory (wal.h sync_all), meta.db once SQLite
 * has checkpointed and closed it (its -wal and -shm files then are gone,
 * and so must their names be), DIR/objects (each object is synced by its
 * put, the subdirectories a delete emptied are not) and DIR itself (the
 * names lock, meta.db, wal, objects).  The daemon exits 0 only then.
 *
 * The stream table (stream/table.c) maps a stream id to its in-memory
 * state (stream.h).  It holds one reference to every stream with a name or
 * an open handle; a stream whose name went (unlink, rename over it) is
 * forgotten, in memory and in the store, when its last handle closes
 * (DESIGN.md section 2).
 *
 * Page cache (the trap in the 0.1 issue): the kernel would fill its page
 * cache for a write at the offset *it* guesses, not the one the stream
 * assigns.  So handles that can write use direct I/O, and never populate
 * the cache; read-only handles keep the cache, which is safe because
 * committed bytes never change (I2) -- except the page holding the head,
 * zero-filled past it.  A read that reaches the head marks the stream
 * (reader.c), and the commit that moves the head invalidates from that
 * page on (the pipeline's commit hook, below) -- before stat shows the new
 * head, so that the kernel never reads the zeros as data (pipeline.c PL4).  The start offset is the
 * other edge: the cache reads whole pages, which would turn ENODATA below
 * an unaligned start into data, so a stream whose start is not a multiple
 * of 4096 is opened with direct I/O, and a trim drops the cached pages of
 * handles opened before it (those then read zeros below start within its
 * page: never trimmed bytes).
 *
 * Damaged metadata (issue 3: "undamaged streams keep working").  A stream
 * whose row fails its checksum when recovery loads it (meta_sqlite.c CK3),
 * or holds values no daemon writes (recovery.c RD1: an id, head or last LSN
 * out of range, start above head), is kept in the table marked corrupt,
 * with nothing known but its id: its head cannot be told, so no byte of
 * it is served and none appended.
 * Opening it fails EIO, as do its user.nereus.* attributes but id and the
 * writable ones, each time with a log line naming the stream and the
 * database file; stat shows size 0.  Its name, mode, owner and user.*
 * xattrs live in other rows and keep working, so it can be listed,
 * renamed and unlinked (which forgets it).  Every other stream is served
 * as usual.  Repair is offline (nereusfs-fsck(8)).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bg/lifecycle.h"
#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "obj/bcache.h"
#include "obj/objstore.h"
#include "stream/reader.h"
#include "stream/recovery.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/sat.h"
#include "wal/wal.h"

/* Forget an unlinked stream: the store's rows, then the table entry. */
static void forget_stream(struct nrs_core *c, uint64_t ino, uint64_t id)
{
	int err = nrs_meta_forget_inode(c->meta, ino);

	if (err)
		nrs_err("cannot forget unlinked inode %" PRIu64 " (stream %"
			PRIu64 "): %s; it is retried at the next mount", ino, id,
			strerror(-err));
	nrs_streams_remove(&c->streams, id);
	nrs_lc_poke(c->lc, id);		/* its objects may go (lifecycle.c) */
}

void nrs_core_stream_unlinked(struct nrs_core *c, const struct nrs_attr *a)
{
	struct nrs_stream *st;
	bool now = true;

	pthread_mutex_lock(&c->admin);
	st = nrs_streams_get(&c->streams, a->stream_id);
	if (st) {
		pthread_mutex_lock(&st->lock);
		st->unlinked = true;
		now = st->open_handles == 0;
		pthread_mutex_unlock(&st->lock);
		nrs_stream_put(st);
	}
	if (now)
		forget_stream(c, a->ino, a->stream_id);
	pthread_mutex_unlock(&c->admin);
}

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
static int kill_priv(struct nrs_core *c, struct nrs_stream *st)
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

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000),
		.tv_nsec = (long)(ns % 1000000000),
	};

	if (ts.tv_nsec < 0) {
		ts.tv_sec--;
		ts.tv_nsec += 1000000000;
	}
	return ts;
}

void nrs_attr_to_stat(struct nrs_core *c, const struct nrs_attr *a,
		      struct stat *out)
{
	memset(out, 0, sizeof(*out));
	out->st_ino = a->ino;
	out->st_mode = a->mode;
	out->st_nlink = a->nlink;
	out->st_uid = a->uid;
	out->st_gid = a->gid;
	out->st_blksize = 4096;
	out->st_atim = ns_to_ts(a->atime_ns);
	out->st_mtim = ns_to_ts(a->mtime_ns);
	out->st_ctim = ns_to_ts(a->ctime_ns);
	if (S_ISDIR(a->mode)) {
		out->st_size = 4096;
		out->st_blocks = 8;
	} else if (a->stream_id) {
		struct nrs_stream *st = nrs_streams_get(&c->streams,
							a->stream_id);

		if (st) {
			pthread_mutex_lock(&st->lock);
			out->st_size = (off_t)st->head;		/* I4 */
			out->st_blocks = (blkcnt_t)((st->wal_bytes +
						     st->obj_bytes + 511) / 512);
			pthread_mutex_unlock(&st->lock);
			nrs_stream_put(st);
		}
	}
}

int nrs_core_getattr(struct nrs_core *c, uint64_t ino, struct stat *out)
{
	struct nrs_attr a;
	int err;

	if (nrs_is_virtual(ino)) {
		nrs_virtual_stat(ino, out);
		return 0;
	}
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	nrs_attr_to_stat(c, &a, out);
	return 0;
}

static void commit_hook(void *ctx, struct nrs_stream *st, uint64_t old_head)
{
	struct nrs_core *c = ctx;

	if (c->inval)
		c->inval(c->inval_ctx, st->ino, old_head & ~(uint64_t)4095);
}

void nrs_core_set_inval(struct nrs_core *c, nrs_inval_fn fn, void *ctx)
{
	c->inval = fn;
	c->inval_ctx = ctx;
}

/* ---- handles -------------------------------------------------------- */

static void handle_link(struct nrs_core *c, struct nrs_handle *h)
{
	pthread_mutex_lock(&c->hlock);
	h->hnext = c->handles;
	if (c->handles)
		c->handles->hprev = h;
	c->handles = h;
	pthread_mutex_unlock(&c->hlock);
}

static void handle_unlink(struct nrs_core *c, struct nrs_handle *h)
{
	pthread_mutex_lock(&c->hlock);
	if (h->hprev)
		h->hprev->hnext = h->hnext;
	else
		c->handles = h->hnext;
	if (h->hnext)
		h->hnext->hprev = h->hprev;
	pthread_mutex_unlock(&c->hlock);
}

static int open_stream(struct nrs_core *c, struct nrs_stream *st, uint64_t ino,
		       int flags, struct nrs_handle **out)
{
	struct nrs_handle *h;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	atomic_init(&h->refs, 1);
	pthread_mutex_lock(&st->lock);
	if (st->unlinked && st->open_handles == 0) {
		pthread_mutex_unlock(&st->lock);
		free(h);
		return -ENOENT;		/* being forgotten */
	}
	if ((flags & O_TRUNC) && st->head != 0) {
		pthread_mutex_unlock(&st->lock);
		free(h);
		return -EPERM;		/* history is never rewritten */
	}
	st->open_handles++;
	pthread_mutex_init(&h->lock, NULL);
	h->epoch = st->epoch;
	/* The page cache reads whole pages; below an unaligned start that
	 * would hide ENODATA, so such a stream is read with direct I/O. */
	h->direct = (flags & O_ACCMODE) != O_RDONLY || (st->start & 4095) != 0;
	pthread_mutex_unlock(&st->lock);
	h->kind = NRS_H_STREAM;
	h->ino = ino;
	h->flags = flags;
	h->st = st;
	handle_link(c, h);
	*out = h;
	return 0;
}

int nrs_core_stream_check(struct nrs_core *c, const struct nrs_stream *st)
{
	if (!st->corrupt)
		return 0;
	nrs_err("stream %" PRIu64 ": its metadata row in %s/meta.db %s%s%s: the "
		"stream is offline (EIO) until repaired; see nereusfs-fsck(8)",
		st->id, c->data_dir, st->damage ? "is damaged (" :
		"fails its checksum", st->damage ? st->damage : "",
		st->damage ? ")" : "");
	return -EIO;
}

int nrs_core_open(struct nrs_core *c, uint64_t ino, int flags,
		  bool privileged, struct nrs_handle **out)
{
	struct nrs_handle *h;
	struct nrs_stream *st;
	struct nrs_attr a;
	int err;

	if (nrs_is_virtual(ino)) {
		if (ino == NRS_INO_CTL)
			return -EISDIR;
		if ((flags & O_ACCMODE) != O_RDONLY)
			return -EACCES;
		h = calloc(1, sizeof(*h));
		if (!h)
			return -ENOMEM;
		atomic_init(&h->refs, 1);
		h->kind = NRS_H_VIRTUAL;
		h->ino = ino;
		h->flags = flags;
		err = nrs_core_render(c, ino, &h->vbuf, &h->vlen);
		if (err) {
			free(h);
			return err;
		}
		handle_link(c, h);
		*out = h;
		return 0;
	}
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	if (S_ISDIR(a.mode))
		return -EISDIR;
	st = nrs_streams_get(&c->streams, a.stream_id);
	if (!st)
		return -ENOENT;
	err = nrs_core_stream_check(c, st) ?:
		open_stream(c, st, ino, flags, out);
	if (err) {
		nrs_stream_put(st);
		return err;
	}
	/* K1: O_TRUNC (of an empty stream: open_stream refused the rest) */
	if ((flags & O_TRUNC) && !privileged && atomic_load(&st->privs)) {
		err = kill_priv(c, st);
		if (err) {
			nrs_core_release(c, *out);
			*out = NULL;
		}
	}
	return err;
}

int nrs_core_create(struct nrs_core *c, uint64_t parent, const char *name,
		    uint32_t mode, uint32_t uid, uint32_t gid, int flags,
		    struct stat *out, struct nrs_handle **h)
{
	struct nrs_stream_row row;
	struct nrs_stream *st;
	struct nrs_attr a;
	int err;

	if (parent == NRS_ROOT_INO && strcmp(name, NRS_CTL_NAME) == 0)
		return -EEXIST;
	if (nrs_is_virtual(parent))
		return -EPERM;
	err = nrs_meta_create(c->meta, parent, name, mode, uid, gid,
			      nrs_now_real_ns(), &a, &row);
	if (err)
		return err;
	st = nrs_stream_new(&row);
	if (!st)
		return -ENOMEM;
	atomic_fetch_add(&st->refs, 1);		/* the handle's */
	err = nrs_streams_insert(&c->streams, st);
	if (err) {
		atomic_fetch_sub(&st->refs, 1);	/* the handle's, never used */
		nrs_stream_put(st);
		return err;
	}
	/* K1: a new file keeps the set-id bits its creator gave it */
	atomic_store(&st->privs, nrs_mode_killpriv(a.mode) != a.mode);
	err = nrs_core_bucket_sync(c, parent, 0);		/* NS1 */
	if (!err)
		err = open_stream(c, st, a.ino, flags & ~O_TRUNC, h);
	if (err) {
		nrs_stream_put(st);
		return err;
	}
	nrs_attr_to_stat(c, &a, out);
	return 0;
}

bool nrs_core_handle_direct(const struct nrs_handle *h)
{
	return h->kind == NRS_H_VIRTUAL || h->direct;
}

static void handle_put(struct nrs_handle *h)
{
	if (atomic_fetch_sub(&h->refs, 1) != 1)
		return;
	if (h->kind == NRS_H_STREAM)
		pthread_mutex_destroy(&h->lock);
	free(h->vbuf);
	free(h);
}

void nrs_core_release(struct nrs_core *c, struct nrs_handle *h)
{
	if (!h)
		return;
	handle_unlink(c, h);
	if (h->kind == NRS_H_STREAM) {
		struct nrs_stream *st = h->st;
		bool forget;

		pthread_mutex_lock(&c->admin);
		pthread_mutex_lock(&st->lock);
		st->open_handles--;
		forget = st->unlinked && st->open_handles == 0;
		pthread_mutex_unlock(&st->lock);
		if (forget)
			forget_stream(c, st->ino, st->id);
		pthread_mutex_unlock(&c->admin);
		nrs_stream_put(st);
	}
	handle_put(h);
}

ssize_t nrs_core_read(struct nrs_core *c, struct nrs_handle *h, void *buf,
		      size_t size, uint64_t off)
{
	if (h->kind == NRS_H_VIRTUAL) {
		if (off >= h->vlen)
			return 0;
		if (size > h->vlen - off)
			size = h->vlen - off;
		memcpy(buf, h->vbuf + off, size);
		return (ssize_t)size;
	}
	return nrs_reader_read(&c->reader, h->st, buf, size, off,
			       !nrs_core_handle_direct(h));
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

/* An append request of AR_BLOCK bytes in all comes from c->ar_pool: one
 * page holds the copy of a small append (the common case of many writers:
 * every one not leading is copied); a larger one is malloc'd. */
#define AR_BLOCK	4096u
#define AR_POOL_MAX	256u	/* blocks kept: 1 MiB */
#define AR_SMALL	(AR_BLOCK - offsetof(struct append_req, data))

static void append_done(struct nrs_req *r, int err)
{
	struct append_req *ar = (struct append_req *)r;

	atomic_fetch_sub(&r->st->appends_out, 1);	/* XA2 */
	if (ar->follow) {	/* before the reply: the next write sees it */
		nrs_core_expect_followed(ar->follow, r->expect, r->len, err);
		handle_put(ar->follow);
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
		int err = kill_priv(c, h->st);

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
	handle_put(h);
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

/* ---- life cycle ----------------------------------------------------- */

static int lock_data_dir(const char *dir, int *fd_out)
{
	char path[4096];
	int fd, err;

	if (snprintf(path, sizeof(path), "%s/lock", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}

/*
 * WA5 at mount: the reserve of the WAL, scaled down to the file system of
 * the data directory unless the admin gave one, and a warning (log and
 * /.nereus/status) when it leaves no room for appends: a file system no
 * larger than the reserve (every append fails ENOSPC), or one with less
 * free space than it (until space is freed); a reserve scaled down is
 * said too, as SQLite's room on the disk is then small.
 */
static void choose_reserve(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct statvfs sv;
	uint64_t fs, avail;

	c->wal_reserve = o->wal_reserve;
	if (statvfs(c->data_dir, &sv) < 0) {
		nrs_warn("statvfs %s: %s: wal_reserve stays %" PRIu64,
			 c->data_dir, strerror(errno), c->wal_reserve);
		return;
	}
	fs = (uint64_t)sv.f_blocks * sv.f_frsize;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (o->wal_reserve_auto) {
		c->wal_reserve = nrs_wal_reserve_scaled(o->wal_reserve, fs);
		c->reserve_scaled = c->wal_reserve < o->wal_reserve;
	}
	if (c->wal_reserve == 0)
		return;
	if (fs <= c->wal_reserve) {
		c->space_warning = "fs_smaller_than_reserve";
		nrs_warn("the file system of %s holds %" PRIu64 " bytes, no more"
			 " than wal_reserve (%" PRIu64 "): every append will fail"
			 " ENOSPC; use a larger file system or a smaller -o"
			 " wal_reserve", c->data_dir, fs, c->wal_reserve);
	} else if (avail <= c->wal_reserve) {
		c->space_warning = "free_below_reserve";
		nrs_warn("the file system of %s has %" PRIu64 " bytes free, no"
			 " more than wal_reserve (%" PRIu64 "): appends fail"
			 " ENOSPC until space is freed", c->data_dir, avail,
			 c->wal_reserve);
	} else if (c->reserve_scaled) {
		c->space_warning = "reserve_scaled";
		nrs_warn("the file system of %s is small (%" PRIu64 " bytes):"
			 " wal_reserve scaled down from %" PRIu64 " to %" PRIu64
			 " (5%%, at least 4 MiB; -o wal_reserve sets it)",
			 c->data_dir, fs, o->wal_reserve, c->wal_reserve);
	}
}

int nrs_core_new(const struct nrs_core_opts *o, struct nrs_core **out)
{
	struct nrs_wal_local_opts wo = {
		.segment_size = o->wal_segment_size,
		.reserve = o->wal_reserve,
		.budget = o->wal_budget,
	};
	pthread_rwlockattr_t ga;
	struct nrs_recover_env rec;
	struct nrs_pipeline_cfg pc;
	struct nrs_core *c;
	char path[4096];
	uint64_t next_lsn = 1;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->lock_fd = -1;
	nrs_metrics_init(&c->metrics);
	pthread_mutex_init(&c->admin, NULL);
	pthread_mutex_init(&c->mlock, NULL);
	pthread_cond_init(&c->mcond, NULL);
	pthread_mutex_init(&c->hlock, NULL);
	nrs_pool_init(&c->ar_pool, AR_BLOCK, AR_POOL_MAX);
	nrs_streams_init(&c->streams);
	/* the reclaimer must get through a steady stream of readers */
	pthread_rwlockattr_init(&ga);
	pthread_rwlockattr_setkind_np(&ga,
		PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&c->gate, &ga);
	pthread_rwlockattr_destroy(&ga);
	c->started_ns = nrs_now_real_ns();
	c->owal_timeout_ms = o->owal_timeout_ms ? o->owal_timeout_ms : 30000;
	c->data_dir = strdup(o->data_dir);
	if (!c->data_dir) {
		err = -ENOMEM;
		goto out_free;
	}
	if (mkdir(o->data_dir, 0700) < 0 && errno != EEXIST) {
		err = -errno;
		nrs_err("cannot create data directory %s: %s", o->data_dir,
			strerror(-err));
		goto out_free;
	}
	err = nrs_dir_check_private(o->data_dir, "data directory");	/* DM2 */
	if (err)
		goto out_free;
	err = lock_data_dir(o->data_dir, &c->lock_fd);
	if (err) {
		nrs_err("cannot lock data directory %s: %s", o->data_dir,
			err == -EBUSY ? "another nereusfs is using it"
				      : strerror(-err));
		goto out_free;
	}
	choose_reserve(c, o);		/* WA5 */
	wo.reserve = c->wal_reserve;
	err = nrs_core_store_open(c, o);
	if (!err && o->recover)
		err = nrs_core_recover_bucket(c, o);	/* RB1, RB2 */
	if (err)
		goto out_free;
	snprintf(path, sizeof(path), "%s/meta.db", o->data_dir);
	err = nrs_meta_open(path, &c->meta);
	if (err) {
		nrs_err("cannot open metadata %s: %s", path, strerror(-err));
		goto out_free;
	}
	/* Metadata growth stops at twice the WAL's reserve (meta_sqlite.c
	 * MS1): a user filling the disk through names and xattrs leaves
	 * appends wal_reserve bytes, and removals the rest. */
	err = nrs_meta_set_reserve(c->meta, nrs_sat_mul(c->wal_reserve, 2));
	if (err) {
		nrs_err("metadata %s: %s", path, strerror(-err));
		goto out_free;
	}
	err = nrs_core_wal_first_seg(c, o, &wo.first_seg);	/* CO3 */
	if (err)
		goto out_free;
	snprintf(path, sizeof(path), "%s/wal", o->data_dir);
	err = nrs_wal_local_open(path, &wo, &c->wal);
	if (err) {
		nrs_err("cannot open WAL %s: %s", path, strerror(-err));
		goto out_free;
	}
	err = nrs_core_obj_open(c, o);
	if (err)
		goto out_free;
	rec = (struct nrs_recover_env){
		.meta = c->meta,
		.wal = c->wal,
		.owal = c->owal,
		.streams = &c->streams,
		.data_dir = c->data_dir,
		.progress = &c->progress,		/* RP1 */
	};
	if (!c->progress.what)
		c->progress.what = "recovery";
	err = nrs_recover(&rec, &next_lsn);
	if (!err)
		err = nrs_core_recover_report(c);	/* RB3 */
	if (err)
		goto out_free;
	/* One pipeline per WAL (pipeline.c PL7): a batch that waits for
	 * the bucket never holds a local-wal batch behind it. */
	atomic_init(&c->lsn, next_lsn);
	memset(&pc, 0, sizeof(pc));
	pc.wal = c->wal;
	pc.meta = c->meta;
	pc.metrics = &c->metrics;
	pc.lsn_source = &c->lsn;
	pc.max_batch_bytes = o->max_batch_bytes;
	pc.lead = !o->no_commit_lead;
	pc.hook = commit_hook;
	pc.hook_ctx = c;
	pc.put = nrs_stream_put;
	err = nrs_pipeline_start(&pc, &c->pipe);
	if (!err && c->owal) {
		pc.wal = c->owal;
		pc.fence_records = true;	/* PL9: epochs in the bucket */
		err = nrs_pipeline_start(&pc, &c->opipe);
	}
	if (err)
		goto out_free;
	err = nrs_core_obj_start(c, o) ?:
	      nrs_core_metalog_start(c);		/* NS1 */
	if (err)
		goto out_free;
	*out = c;
	return 0;
out_free:
	nrs_core_free(c);
	return err;
}

/* fsync DIR/rel ("" for DIR); a missing one is fine unless must. */
static int sync_entry(const char *dir, const char *rel, bool must)
{
	char path[4096];
	int fd, err = 0;

	if (snprintf(path, sizeof(path), "%s%s%s", dir, *rel ? "/" : "", rel) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT && !must ? 0 : -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (err)
		nrs_err("clean close: fsync of %s: %s", path, strerror(-err));
	return err;
}

/* U1, once SQLite is closed: files before the directory naming them. */
static int sync_data_dir(const char *dir)
{
	static const char *const files[] = {
		"meta.db", "meta.db-wal", "objects", "wal", "",
	};
	int err = 0;

	for (size_t i = 0; !err && i < sizeof(files) / sizeof(files[0]); i++)
		err = sync_entry(dir, files[i], i == 0 || !*files[i]);
	return err;
}

static int core_free(struct nrs_core *c, bool sync)
{
	int err = 0;

	nrs_core_metalog_stop(c);
	nrs_core_obj_close(c);
	nrs_pipeline_stop(c->pipe);
	nrs_pipeline_stop(c->opipe);
	/* handles the kernel did not release before the session ended */
	while (c->handles)
		nrs_core_release(c, c->handles);
	nrs_streams_destroy(&c->streams);
	if (c->bcache)
		nrs_bcache_close(c->bcache);
	nrs_wal_close(c->owal);		/* before the store it PUTs to */
	nrs_core_owner_close(c);	/* the fencing store, then its store */
	nrs_obj_close(c->store);
	if (sync && c->wal)
		err = nrs_wal_sync_all(c->wal);		/* U1 */
	nrs_wal_close(c->wal);
	nrs_meta_close(c->meta);
	if (sync && !err)
		err = sync_data_dir(c->data_dir);	/* U1 */
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	pthread_rwlock_destroy(&c->gate);
	pthread_mutex_destroy(&c->admin);
	pthread_mutex_destroy(&c->mlock);
	pthread_cond_destroy(&c->mcond);
	pthread_mutex_destroy(&c->hlock);
	nrs_pool_destroy(&c->ar_pool);	/* the pipelines completed them all */
	free(c->data_dir);
	free(c);
	return err;
}

void nrs_core_free(struct nrs_core *c)
{
	if (c)
		(void)core_free(c, false);
}

int nrs_core_close(struct nrs_core *c)
{
	return c ? core_free(c, true) : 0;
}

int nrs_core_statfs(struct nrs_core *c, struct statvfs *out)
{
	if (statvfs(c->data_dir, out) < 0)
		return -errno;
	out->f_namemax = NRS_NAME_MAX;
	return 0;
}
