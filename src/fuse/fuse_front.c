/*
 * fuse_front.c - the libfuse3 low-level front: translates each request to
 * one stream-core call and sends exactly one reply.  Nothing here decides
 * semantics; the only policy is the kernel's caching, which is the FUSE
 * layer's to set:
 *
 *  - attributes of streams are never cached (timeout 0): st_size is the
 *    published head and must not be stale across handles (I4);
 *  - handles that can write use direct I/O (no page cache at guessed
 *    offsets); read-only handles keep the page cache, and the core asks for
 *    the page holding an old head to be invalidated after a commit
 *    (inval(), FUSE_CAP_EXPLICIT_INVAL_DATA: the kernel must not drop the
 *    whole cache on every size change);
 *  - writes are answered from the commit pipeline's thread (write_done), so
 *    no worker thread waits for a group commit.
 */
#include "config.h"

#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "fuse/fuse_front.h"
#include "util/log.h"

#define ENTRY_TIMEOUT	1.0
#define DIR_ATTR_TIMEOUT 1.0

static struct nrs_core *core_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct nrs_handle *handle_of(const struct fuse_file_info *fi)
{
	return (struct nrs_handle *)(uintptr_t)fi->fh;
}

static double attr_timeout(const struct stat *st)
{
	return S_ISDIR(st->st_mode) ? DIR_ATTR_TIMEOUT : 0.0;
}

static void reply_entry(fuse_req_t req, const struct stat *st)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = st->st_ino;
	e.attr = *st;
	e.attr_timeout = attr_timeout(st);
	e.entry_timeout = ENTRY_TIMEOUT;
	fuse_reply_entry(req, &e);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = NRS_MAX_WRITE;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_EXPLICIT_INVAL_DATA)
		conn->want |= FUSE_CAP_EXPLICIT_INVAL_DATA;
	else
		nrs_warn("kernel lacks explicit data invalidation; page cache "
			 "is dropped on every size change");
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct stat st;
	int err = nrs_core_lookup(core_of(req), parent, name, &st);

	if (err)
		fuse_reply_err(req, -err);
	else
		reply_entry(req, &st);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;
	int err = nrs_core_getattr(core_of(req), ino, &st);

	(void)fi;
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, attr_timeout(&st));
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct stat in = *attr, out;
	int mask = 0, err;

	(void)fi;
	if (to_set & FUSE_SET_ATTR_MODE)
		mask |= NRS_SET_MODE;
	if (to_set & FUSE_SET_ATTR_UID)
		mask |= NRS_SET_UID;
	if (to_set & FUSE_SET_ATTR_GID)
		mask |= NRS_SET_GID;
	if (to_set & FUSE_SET_ATTR_SIZE)
		mask |= NRS_SET_SIZE;
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
		mask |= NRS_SET_ATIME;
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			clock_gettime(CLOCK_REALTIME, &in.st_atim);
	}
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
		mask |= NRS_SET_MTIME;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			clock_gettime(CLOCK_REALTIME, &in.st_mtim);
	}
	err = nrs_core_setattr(core_of(req), ino, &in, mask, &out);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &out, attr_timeout(&out));
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	int err = nrs_core_mkdir(core_of(req), parent, name,
				 mode & ~ctx->umask, ctx->uid, ctx->gid, &st);

	if (err)
		fuse_reply_err(req, -err);
	else
		reply_entry(req, &st);
}

/* Hard links, symlinks and device nodes: EPERM (DESIGN.md section 2). */
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	fuse_reply_err(req, EPERM);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	(void)link; (void)parent; (void)name;
	fuse_reply_err(req, EPERM);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	(void)ino; (void)newparent; (void)newname;
	fuse_reply_err(req, EPERM);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -nrs_core_unlink(core_of(req), parent, name));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -nrs_core_rmdir(core_of(req), parent, name));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	fuse_reply_err(req, -nrs_core_rename(core_of(req), parent, name,
					     newparent, newname, flags));
}

static void set_open_flags(struct fuse_file_info *fi, struct nrs_handle *h)
{
	fi->fh = (uint64_t)(uintptr_t)h;
	if (nrs_core_handle_direct(h)) {
		fi->direct_io = 1;
	} else {
		fi->keep_cache = 1;	/* committed bytes never change (I2) */
	}
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct nrs_handle *h;
	struct fuse_entry_param e;
	int err;

	memset(&e, 0, sizeof(e));
	err = nrs_core_create(core_of(req), parent, name, mode & ~ctx->umask,
			      ctx->uid, ctx->gid, fi->flags, &e.attr, &h);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	e.ino = e.attr.st_ino;
	e.attr_timeout = 0.0;
	e.entry_timeout = ENTRY_TIMEOUT;
	set_open_flags(fi, h);
	if (fuse_reply_create(req, &e, fi) == -ENOENT)
		nrs_core_release(core_of(req), h);	/* interrupted */
}

/* The caller may keep set-id bits when it writes (core_append.c K1): uid 0
 * stands for CAP_FSETID, which the request does not carry. */
static bool privileged(fuse_req_t req)
{
	return fuse_req_ctx(req)->uid == 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct nrs_handle *h;
	int err = nrs_core_open(core_of(req), ino, fi->flags, privileged(req),
				&h);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	set_open_flags(fi, h);
	if (fuse_reply_open(req, fi) == -ENOENT)
		nrs_core_release(core_of(req), h);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	(void)ino;
	nrs_core_release(core_of(req), handle_of(fi));
	fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	char *buf;
	ssize_t n;

	(void)ino;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = nrs_core_read(core_of(req), handle_of(fi), buf, size, (uint64_t)off);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

/* From the committer thread: the append is durable and published. */
static void write_done(void *cookie, int err, size_t len)
{
	fuse_req_t req = cookie;

	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_write(req, len);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	int err;

	(void)ino;
	if (size == 0) {
		fuse_reply_write(req, 0);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* fi->flags are the file's flags now (fcntl may have set O_APPEND) */
	err = nrs_core_append(core_of(req), handle_of(fi), buf, size,
			      (uint64_t)off, (fi->flags & O_APPEND) != 0,
			      privileged(req), write_done, req);
	if (err)
		fuse_reply_err(req, -err);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino; (void)fi;
	fuse_reply_err(req, 0);
}

/* Every acknowledged append is already durable (DESIGN.md section 3). */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	(void)ino; (void)datasync; (void)fi;
	fuse_reply_err(req, 0);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			 off_t offset, off_t length, struct fuse_file_info *fi)
{
	(void)ino; (void)mode; (void)offset; (void)length; (void)fi;
	fuse_reply_err(req, EOPNOTSUPP);
}

struct dirbuf {
	fuse_req_t req;
	char *buf;
	size_t size, len;
};

static int add_dirent(void *ctx, const char *name, const struct stat *st,
		      uint64_t next)
{
	struct dirbuf *d = ctx;
	size_t n = fuse_add_direntry(d->req, d->buf + d->len, d->size - d->len,
				     name, st, (off_t)next);

	if (n > d->size - d->len)
		return 1;	/* full: the kernel asks again from here */
	d->len += n;
	return 0;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct dirbuf d = { req, NULL, size, 0 };
	int err;

	(void)fi;
	d.buf = malloc(size ? size : 1);
	if (!d.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	err = nrs_core_readdir(core_of(req), ino, off < 0 ? 0 : (uint64_t)off,
			       add_dirent, &d);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_buf(req, d.buf, d.len);
	free(d.buf);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	(void)ino; (void)datasync; (void)fi;
	fuse_reply_err(req, 0);	/* namespace changes are synced as made */
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int err = nrs_core_statfs(core_of(req), &sv);

	(void)ino;
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_statfs(req, &sv);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	fuse_reply_err(req, -nrs_core_setxattr(core_of(req), ino, name, value,
					       size, flags));
}

/* size 0 asks for the length; otherwise the value, or ERANGE. */
static void reply_sized(fuse_req_t req, size_t size, ssize_t n, const char *buf)
{
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	char *buf = size ? malloc(size) : NULL;

	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	reply_sized(req, size, nrs_core_getxattr(core_of(req), ino, name, buf,
						 size), buf);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *buf = size ? malloc(size) : NULL;

	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	reply_sized(req, size, nrs_core_listxattr(core_of(req), ino, buf, size),
		    buf);
	free(buf);
}

/*
 * The restricted ioctls of nereusfs.h (the kernel copied in_bufsz bytes in
 * and takes up to out_bufsz back).  Directories have no handle here, and
 * 32-bit callers on a 64-bit kernel (FUSE_IOCTL_COMPAT) are not supported:
 * both ENOTTY.
 */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
		     void *arg, struct fuse_file_info *fi, unsigned flags,
		     const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	unsigned char out[128];
	ssize_t n;

	(void)ino; (void)arg;
	if (flags & (FUSE_IOCTL_COMPAT | FUSE_IOCTL_DIR)) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	n = nrs_core_ioctl(core_of(req), handle_of(fi), cmd, in_buf, in_bufsz,
			   out, out_bufsz < sizeof(out) ? out_bufsz : sizeof(out));
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_ioctl(req, 0, n ? out : NULL, (size_t)n);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, -nrs_core_removexattr(core_of(req), ino, name));
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.readdir = op_readdir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = op_create,
	.fallocate = op_fallocate,
	.ioctl = op_ioctl,
};

static void inval(void *ctx, uint64_t ino, uint64_t off)
{
	struct fuse_session *se = ctx;
	int err = fuse_lowlevel_notify_inval_inode(se, ino, (off_t)off, 0);

	if (err && err != -ENOENT)
		nrs_debug("page cache invalidation of inode %llu: %s",
			  (unsigned long long)ino, strerror(-err));
}

struct fuse_session *nrs_fuse_session_new(struct fuse_args *args,
					  struct nrs_core *c)
{
	struct fuse_session *se = fuse_session_new(args, &ops, sizeof(ops), c);

	if (se)
		nrs_core_set_inval(c, inval, se);
	return se;
}
