/*
 * core_ns.c - namespace operations of the stream core (DESIGN.md section
 * 2): each is one metadata transaction; the core adds the virtual /.nereus
 * directory, which no operation may create, replace or remove, and the
 * stream table bookkeeping of unlink and rename-over.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "util/clock.h"

static bool is_ctl(uint64_t parent, const char *name)
{
	return parent == NRS_ROOT_INO && strcmp(name, NRS_CTL_NAME) == 0;
}

int nrs_core_lookup(struct nrs_core *c, uint64_t parent, const char *name,
		    struct stat *out)
{
	struct nrs_attr a;
	int err;

	if (is_ctl(parent, name)) {
		nrs_virtual_stat(NRS_INO_CTL, out);
		return 0;
	}
	if (parent == NRS_INO_CTL) {
		if (strcmp(name, "metrics") == 0)
			nrs_virtual_stat(NRS_INO_METRICS, out);
		else if (strcmp(name, "status") == 0)
			nrs_virtual_stat(NRS_INO_STATUS, out);
		else
			return -ENOENT;
		return 0;
	}
	if (nrs_is_virtual(parent))
		return -ENOTDIR;
	err = nrs_meta_lookup(c->meta, parent, name, &a);
	if (err)
		return err;
	nrs_attr_to_stat(c, &a, out);
	return 0;
}

int nrs_core_mkdir(struct nrs_core *c, uint64_t parent, const char *name,
		   uint32_t mode, uint32_t uid, uint32_t gid, struct stat *out)
{
	struct nrs_attr a;
	int err;

	if (is_ctl(parent, name))
		return -EEXIST;
	if (nrs_is_virtual(parent))
		return -EPERM;
	err = nrs_meta_mkdir(c->meta, parent, name, mode, uid, gid,
			     nrs_now_real_ns(), &a);
	if (err)
		return err;
	nrs_attr_to_stat(c, &a, out);
	return nrs_core_bucket_sync(c, parent, 0);		/* NS1 */
}

int nrs_core_unlink(struct nrs_core *c, uint64_t parent, const char *name)
{
	struct nrs_attr a;
	int err;

	if (is_ctl(parent, name))
		return -EISDIR;
	if (nrs_is_virtual(parent))
		return -EPERM;
	err = nrs_meta_unlink(c->meta, parent, name, nrs_now_real_ns(), &a);
	if (err)
		return err;
	nrs_core_stream_unlinked(c, &a);
	return nrs_core_bucket_sync(c, parent, 0);		/* NS1 */
}

int nrs_core_rmdir(struct nrs_core *c, uint64_t parent, const char *name)
{
	if (is_ctl(parent, name) || nrs_is_virtual(parent))
		return -EPERM;
	return nrs_meta_rmdir(c->meta, parent, name, nrs_now_real_ns()) ?:
	       nrs_core_bucket_sync(c, parent, 0);		/* NS1 */
}

int nrs_core_rename(struct nrs_core *c, uint64_t parent, const char *name,
		    uint64_t newparent, const char *newname, unsigned int flags)
{
	uint64_t replaced = 0;
	struct nrs_attr a;
	int err;

	if (is_ctl(parent, name) || is_ctl(newparent, newname) ||
	    nrs_is_virtual(parent) || nrs_is_virtual(newparent))
		return -EPERM;
	err = nrs_meta_rename(c->meta, parent, name, newparent, newname, flags,
			      nrs_now_real_ns(), &replaced);
	if (!err)
		err = nrs_core_bucket_sync(c, parent, newparent);	/* NS1 */
	if (err || !replaced)
		return err;
	/* The replaced stream lost its name: as unlink. */
	if (nrs_meta_getattr(c->meta, replaced, &a) == 0 && a.stream_id)
		nrs_core_stream_unlinked(c, &a);
	return 0;
}

int nrs_core_setattr(struct nrs_core *c, uint64_t ino, const struct stat *in,
		     int mask, struct stat *out)
{
	struct nrs_attr a, cur;
	int err;

	if (nrs_is_virtual(ino))
		return -EPERM;
	err = nrs_meta_getattr(c->meta, ino, &cur);
	if (err)
		return err;
	if (mask & NRS_SET_SIZE) {
		struct stat now;

		if (S_ISDIR(cur.mode))
			return -EISDIR;
		nrs_attr_to_stat(c, &cur, &now);
		/* Truncating to the current size is a no-op; anything else
		 * would rewrite history (DESIGN.md section 3). */
		if (in->st_size != now.st_size)
			return -EPERM;
	}
	mask &= ~NRS_SET_SIZE;
	if (mask) {
		memset(&a, 0, sizeof(a));
		a.mode = in->st_mode;
		a.uid = in->st_uid;
		a.gid = in->st_gid;
		a.atime_ns = (int64_t)in->st_atim.tv_sec * 1000000000 +
			     in->st_atim.tv_nsec;
		a.mtime_ns = (int64_t)in->st_mtim.tv_sec * 1000000000 +
			     in->st_mtim.tv_nsec;
		if (mask & NRS_SET_MODE)
			pthread_mutex_lock(&c->admin);	/* K1: with st->privs */
		err = nrs_meta_setattr(c->meta, ino, &a, mask,
				       nrs_now_real_ns(), &cur);
		if (!err && (mask & NRS_SET_MODE))
			nrs_core_privs_set(c, &cur);
		if (mask & NRS_SET_MODE)
			pthread_mutex_unlock(&c->admin);
		if (!err)
			err = nrs_core_bucket_sync(c, ino, 0);	/* NS1 */
		if (err)
			return err;
	}
	nrs_attr_to_stat(c, &cur, out);
	return 0;
}

/*
 * Directory offsets: 1 and 2 are "." and "..", 3 is /.nereus in the root,
 * and a stored entry with cookie k (>= 3) is offset k + 3.
 */
#define OFF_DOT		1
#define OFF_DOTDOT	2
#define OFF_CTL		3
#define OFF_BASE	3

struct rd_ctx {
	struct nrs_core *c;
	nrs_core_dirent_cb cb;
	void *ctx;
};

static int rd_one(void *ctx, const char *name, const struct nrs_attr *a,
		  uint64_t cookie)
{
	struct rd_ctx *r = ctx;
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_ino = a->ino;
	st.st_mode = a->mode;
	return r->cb(r->ctx, name, &st, cookie + OFF_BASE);
}

static int rd_fixed(nrs_core_dirent_cb cb, void *ctx, const char *name,
		    uint64_t ino, uint32_t mode, uint64_t next)
{
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_ino = ino;
	st.st_mode = mode;
	return cb(ctx, name, &st, next);
}

int nrs_core_readdir(struct nrs_core *c, uint64_t ino, uint64_t off,
		     nrs_core_dirent_cb cb, void *ctx)
{
	struct rd_ctx r = { c, cb, ctx };
	struct nrs_attr a;
	int err;

	if (ino == NRS_INO_CTL) {
		static const char *const names[] = { "metrics", "status" };

		if (off < OFF_DOT && rd_fixed(cb, ctx, ".", ino, S_IFDIR, OFF_DOT))
			return 0;
		if (off < OFF_DOTDOT &&
		    rd_fixed(cb, ctx, "..", NRS_ROOT_INO, S_IFDIR, OFF_DOTDOT))
			return 0;
		for (uint64_t i = off < OFF_DOTDOT ? 0 : off - OFF_DOTDOT; i < 2; i++)
			if (rd_fixed(cb, ctx, names[i], NRS_INO_METRICS + i,
				     S_IFREG, OFF_DOTDOT + i + 1))
				return 0;
		return 0;
	}
	if (nrs_is_virtual(ino))
		return -ENOTDIR;
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	if (!S_ISDIR(a.mode))
		return -ENOTDIR;
	if (off < OFF_DOT && rd_fixed(cb, ctx, ".", ino, S_IFDIR, OFF_DOT))
		return 0;
	if (off < OFF_DOTDOT &&
	    rd_fixed(cb, ctx, "..", a.parent ? a.parent : ino, S_IFDIR,
		     OFF_DOTDOT))
		return 0;
	if (ino == NRS_ROOT_INO && off < OFF_CTL &&
	    rd_fixed(cb, ctx, NRS_CTL_NAME, NRS_INO_CTL, S_IFDIR, OFF_CTL))
		return 0;
	return nrs_meta_readdir(c->meta, ino, off > OFF_BASE ? off - OFF_BASE : 0,
				rd_one, &r);
}
