/*
 * meta.c - the nrs_meta_* functions of meta.h: each dispatches to the
 * operation of the same name in the store's table (m->ops), so that the
 * callers never know which store they hold.  What every store would
 * otherwise write the same way lives here too: nrs_meta_obj_rows, built
 * on the listing operations.
 */
#include "config.h"

#include <stdlib.h>

#include "meta/meta.h"
#include "util/grow.h"

void nrs_meta_close(struct nrs_meta *m)
{
	if (m)
		m->ops->close(m);
}

int nrs_meta_set_reserve(struct nrs_meta *m, uint64_t reserve)
{
	return m->ops->set_reserve(m, reserve);
}

int nrs_meta_getattr(struct nrs_meta *m, uint64_t ino, struct nrs_attr *out)
{
	return m->ops->getattr(m, ino, out);
}

int nrs_meta_lookup(struct nrs_meta *m, uint64_t parent, const char *name,
		    struct nrs_attr *out)
{
	return m->ops->lookup(m, parent, name, out);
}

int nrs_meta_mkdir(struct nrs_meta *m, uint64_t parent, const char *name,
		   uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		   struct nrs_attr *out)
{
	return m->ops->mkdir(m, parent, name, mode, uid, gid, now_ns, out);
}

int nrs_meta_create(struct nrs_meta *m, uint64_t parent, const char *name,
		    uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		    struct nrs_attr *out, struct nrs_stream_row *srow)
{
	return m->ops->create(m, parent, name, mode, uid, gid, now_ns, out,
			      srow);
}

int nrs_meta_unlink(struct nrs_meta *m, uint64_t parent, const char *name,
		    int64_t now_ns, struct nrs_attr *out)
{
	return m->ops->unlink(m, parent, name, now_ns, out);
}

int nrs_meta_rmdir(struct nrs_meta *m, uint64_t parent, const char *name,
		   int64_t now_ns)
{
	return m->ops->rmdir(m, parent, name, now_ns);
}

int nrs_meta_rename(struct nrs_meta *m, uint64_t parent, const char *name,
		    uint64_t newparent, const char *newname, unsigned int flags,
		    int64_t now_ns, uint64_t *replaced)
{
	return m->ops->rename(m, parent, name, newparent, newname, flags,
			      now_ns, replaced);
}

int nrs_meta_setattr(struct nrs_meta *m, uint64_t ino, const struct nrs_attr *a,
		     int mask, int64_t now_ns, struct nrs_attr *out)
{
	return m->ops->setattr(m, ino, a, mask, now_ns, out);
}

int nrs_meta_readdir(struct nrs_meta *m, uint64_t ino, uint64_t after,
		     nrs_meta_dirent_cb cb, void *ctx)
{
	return m->ops->readdir(m, ino, after, cb, ctx);
}

int nrs_meta_forget_inode(struct nrs_meta *m, uint64_t ino)
{
	return m->ops->forget_inode(m, ino);
}

int nrs_meta_unlinked_foreach(struct nrs_meta *m,
			      int (*cb)(void *ctx, uint64_t ino), void *ctx)
{
	return m->ops->unlinked_foreach(m, cb, ctx);
}

int nrs_meta_counts(struct nrs_meta *m, uint64_t *dirs, uint64_t *streams)
{
	return m->ops->counts(m, dirs, streams);
}

ssize_t nrs_meta_xattr_get(struct nrs_meta *m, uint64_t ino, const char *name,
			   void *buf, size_t size)
{
	return m->ops->xattr_get(m, ino, name, buf, size);
}

int nrs_meta_xattr_set(struct nrs_meta *m, uint64_t ino, const char *name,
		       const void *value, size_t size, int flags)
{
	return m->ops->xattr_set(m, ino, name, value, size, flags);
}

int nrs_meta_xattr_remove(struct nrs_meta *m, uint64_t ino, const char *name)
{
	return m->ops->xattr_remove(m, ino, name);
}

ssize_t nrs_meta_xattr_list(struct nrs_meta *m, uint64_t ino, char *buf,
			    size_t size)
{
	return m->ops->xattr_list(m, ino, buf, size);
}

int nrs_meta_get_profile(struct nrs_meta *m, uint64_t ino, int *profile)
{
	return m->ops->get_profile(m, ino, profile);
}

int nrs_meta_effective_profile(struct nrs_meta *m, uint64_t ino, int *profile)
{
	return m->ops->effective_profile(m, ino, profile);
}

int nrs_meta_set_profile(struct nrs_meta *m, uint64_t ino, int profile)
{
	return m->ops->set_profile(m, ino, profile);
}

int nrs_meta_get_retention(struct nrs_meta *m, uint64_t ino, int which,
			   uint64_t *value)
{
	return m->ops->get_retention(m, ino, which, value);
}

int nrs_meta_set_retention(struct nrs_meta *m, uint64_t ino, int which,
			   uint64_t value)
{
	return m->ops->set_retention(m, ino, which, value);
}

uint64_t nrs_meta_chain_steps(struct nrs_meta *m)
{
	return m->ops->chain_steps(m);
}

int nrs_meta_retention_is_set(struct nrs_meta *m, uint64_t ino, int which,
			      bool *set)
{
	return m->ops->retention_is_set(m, ino, which, set);
}

int nrs_meta_set_start(struct nrs_meta *m, uint64_t stream_id, uint64_t start)
{
	return m->ops->set_start(m, stream_id, start);
}

int nrs_meta_stream_get(struct nrs_meta *m, uint64_t stream_id,
			struct nrs_stream_row *out)
{
	return m->ops->stream_get(m, stream_id, out);
}

int nrs_meta_stream_foreach(struct nrs_meta *m, nrs_meta_stream_cb cb,
			    void *ctx)
{
	return m->ops->stream_foreach(m, cb, ctx);
}

int nrs_meta_publish(struct nrs_meta *m, const struct nrs_head_update *u,
		     size_t n, bool durable)
{
	return m->ops->publish(m, u, n, durable);
}

int nrs_meta_obj_prepare(struct nrs_meta *m, struct nrs_obj_row *o)
{
	return m->ops->obj_prepare(m, o);
}

int nrs_meta_obj_prepare_n(struct nrs_meta *m, struct nrs_obj_row *v,
			   size_t n)
{
	return m->ops->obj_prepare_n(m, v, n);
}

int nrs_meta_obj_publish_n(struct nrs_meta *m, const struct nrs_obj_row *v,
			   size_t n)
{
	return m->ops->obj_publish_n(m, v, n);
}

int nrs_meta_obj_publish(struct nrs_meta *m, uint64_t gen,
			 const unsigned char sha256[32])
{
	return m->ops->obj_publish(m, gen, sha256);
}

int nrs_meta_obj_replace(struct nrs_meta *m, uint64_t gen,
			 const unsigned char sha256[32], const uint64_t *olds,
			 size_t nolds, int64_t now_ns)
{
	return m->ops->obj_replace(m, gen, sha256, olds, nolds, now_ns);
}

int nrs_meta_obj_set_state(struct nrs_meta *m, uint64_t gen, int from, int to,
			   int64_t now_ns)
{
	return m->ops->obj_set_state(m, gen, from, to, now_ns);
}

int nrs_meta_obj_delete(struct nrs_meta *m, uint64_t gen)
{
	return m->ops->obj_delete(m, gen);
}

int nrs_meta_obj_foreach(struct nrs_meta *m, uint64_t stream_id,
			 int (*cb)(void *ctx, const struct nrs_obj_row *o),
			 void *ctx)
{
	return m->ops->obj_foreach(m, stream_id, cb, ctx);
}

int nrs_meta_obj_foreach_state(struct nrs_meta *m, int state,
			       int (*cb)(void *ctx, const struct nrs_obj_row *o),
			       void *ctx)
{
	return m->ops->obj_foreach_state(m, state, cb, ctx);
}

int nrs_meta_integrity_check(struct nrs_meta *m,
			     int (*cb)(void *ctx, const char *problem),
			     void *ctx)
{
	return m->ops->integrity_check(m, cb, ctx);
}

int nrs_meta_stream_seq_raise(struct nrs_meta *m, uint64_t id)
{
	return m->ops->stream_seq_raise(m, id);
}

int nrs_meta_sequences(struct nrs_meta *m, struct nrs_meta_seq *inodes,
		       struct nrs_meta_seq *streams)
{
	return m->ops->sequences(m, inodes, streams);
}

int nrs_meta_inode_foreach(struct nrs_meta *m,
			   int (*cb)(void *ctx, const struct nrs_attr *a),
			   void *ctx)
{
	return m->ops->inode_foreach(m, cb, ctx);
}

int nrs_meta_dirent_foreach(struct nrs_meta *m, nrs_meta_rawdirent_cb cb,
			    void *ctx)
{
	return m->ops->dirent_foreach(m, cb, ctx);
}

/* ---- built on the operations ----------------------------------------- */

struct obj_rows {
	int state;		/* 0: any */
	struct nrs_obj_row *v;
	size_t n, cap;
};

static int obj_rows_add(void *ctx, const struct nrs_obj_row *o)
{
	struct obj_rows *r = ctx;

	if (r->state && o->state != r->state)
		return 0;
	if (nrs_grow((void **)&r->v, &r->cap, r->n + 1, sizeof(*r->v)))
		return -ENOMEM;
	r->v[r->n++] = *o;
	return 0;
}

int nrs_meta_obj_rows(struct nrs_meta *m, uint64_t stream_id, int state,
		      struct nrs_obj_row **out, size_t *n)
{
	struct obj_rows r = { .state = state };
	int ret;

	if (stream_id || !state)
		ret = nrs_meta_obj_foreach(m, stream_id, obj_rows_add, &r);
	else
		ret = nrs_meta_obj_foreach_state(m, state, obj_rows_add, &r);
	if (ret) {
		free(r.v);
		return ret;
	}
	*out = r.v;
	*n = r.n;
	return 0;
}

int nrs_meta_snapshot(struct nrs_meta *m, void **buf, size_t *len,
		      struct nrs_meta_snap_stats *stats)
{
	return m->ops->snapshot(m, buf, len, stats);
}

int nrs_meta_log_set(struct nrs_meta *m, nrs_meta_log_fn fn, void *ctx)
{
	return m->ops->log_set(m, fn, ctx);
}

int nrs_meta_log_seq(struct nrs_meta *m, uint64_t *seq)
{
	return m->ops->log_seq(m, seq);
}

int nrs_meta_log_apply(struct nrs_meta *m, uint64_t seq, const void *change,
		       size_t len)
{
	return m->ops->log_apply(m, seq, change, len);
}
