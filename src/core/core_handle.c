/*
 * core_handle.c - the stream core's handles (open, create, release), reads,
 * stat, and the forgetting of a stream whose name went.  The life cycle
 * is in core.c, appends in core_append.c.
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
 * page on (the pipelines' commit hook, core.c) -- before stat shows the new
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
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bg/lifecycle.h"
#include "core/core_priv.h"
#include "stream/reader.h"
#include "util/clock.h"
#include "util/log.h"

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
		err = nrs_core_kill_priv(c, st);
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

void nrs_core_handle_put(struct nrs_handle *h)
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
	nrs_core_handle_put(h);
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
