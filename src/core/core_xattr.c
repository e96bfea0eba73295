/*
 * core_xattr.c - extended attributes (DESIGN.md section 4).  The virtual
 * files /.nereus/metrics and /.nereus/status are in core_virtual.c.
 *
 * Decisions where the contract is silent (documented in nereusfs(8)):
 *  - Names outside user.*: get is -ENODATA (so ls and cp stay quiet), set
 *    is -EOPNOTSUPP.
 *  - user.nereus.* names that do not exist: get -ENODATA, set -EINVAL,
 *    remove -EPERM (like every user.nereus.* name).
 *  - Read-only names (id, head, ...): set and remove are -EPERM; trim is
 *    write-only: get is -ENODATA and it is not listed.
 *  - epoch: a larger value fences; the same value is a no-op; a smaller
 *    one is -EINVAL.
 *  - XA2 On a stream, profile is settable only while it is empty -- else
 *    -EINVAL -- and no append is submitted and not yet completed
 *    (st->appends_out, counted under st->lock) -- else -EBUSY; an append
 *    submitted while the change is under way fails -EBUSY too
 *    (profile_busy).  So a stream's records are all in the WAL of its
 *    profile (recovery.c RC8).  On a directory it is inherited by streams
 *    created below.
 *  - materialized is the offset up to which every readable byte is in the
 *    object store: with no object store yet, that is start.
 *  - retention.bytes and retention.ms: -1 (what Kafka writes for "forever")
 *    is taken as 0, keep forever, and reads back as 0; any other negative
 *    is -EINVAL.  A value too large to mean anything (2^63 - 1 ms) also
 *    keeps forever (sat.h SAT1).
 *  - A stream whose metadata row is damaged (core.c): every user.nereus.*
 *    name but id, profile and retention fails EIO, read or written.
 *  - XA1 XATTR_CREATE and XATTR_REPLACE hold for the settable user.nereus.*
 *    names as for every other name: CREATE on a name that exists is
 *    -EEXIST, REPLACE on one that does not is -ENODATA.  epoch, and a
 *    stream's profile, always exist; a directory's profile and
 *    retention.* exist once set on that inode (an inherited value does
 *    not count).  The write-only trim is an action, not a value: either
 *    flag is -EINVAL.  Any other flag bit is -EINVAL for every name.
 *  - user.nereus.index is bounded (index.c X2); user.nereus.index.OFF
 *    (OFF decimal) is the same text from the range holding offset OFF
 *    on, so a reader pages through the whole index (nereusctl index).
 *    It is not listed.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "bg/lifecycle.h"
#include "core/core_priv.h"
#include "core/xattr.h"
#include "util/log.h"

static int copy_out(const void *val, size_t len, void *buf, size_t size)
{
	if (size == 0)
		return (int)len;
	if (len > size)
		return -ERANGE;
	memcpy(buf, val, len);
	return (int)len;
}

/* Stream attributes, read under the stream lock in one go. */
static ssize_t get_stream_attr(struct nrs_stream *st, int id, uint64_t from,
			       void *buf, size_t size)
{
	char val[32];
	uint64_t v = 0;
	ssize_t n;
	int len;

	pthread_mutex_lock(&st->lock);
	switch (id) {
	case NRS_XA_ID: v = st->id; break;
	case NRS_XA_HEAD: v = st->head; break;
	case NRS_XA_VERSION: v = st->version; break;
	case NRS_XA_START: v = st->start; break;
	case NRS_XA_EPOCH: v = st->epoch; break;
	case NRS_XA_MATERIALIZED: v = nrs_stream_mat_point(st); break;
	case NRS_XA_WAL_BYTES: v = st->head - nrs_stream_mat_point(st); break;
	case NRS_XA_INDEX:
		n = nrs_index_format(&st->index, st->id,
				     st->profile == NRS_PROFILE_OBJECT_WAL,
				     from, buf, size);
		pthread_mutex_unlock(&st->lock);
		return n;
	default:
		pthread_mutex_unlock(&st->lock);
		return -ENODATA;
	}
	pthread_mutex_unlock(&st->lock);
	len = snprintf(val, sizeof(val), "%" PRIu64, v);
	return copy_out(val, (size_t)len, buf, size);
}

ssize_t nrs_core_getxattr(struct nrs_core *c, uint64_t ino, const char *name,
			  void *buf, size_t size)
{
	int id = nrs_xattr_lookup(name);
	uint64_t from = 0;
	struct nrs_attr a;
	ssize_t n;
	int err;

	if (nrs_is_virtual(ino) || strncmp(name, "user.", 5) != 0)
		return -ENODATA;
	if (id == NRS_XA_UNKNOWN && nrs_xattr_parse_index_page(name, &from) == 0)
		id = NRS_XA_INDEX;
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	if (id == NRS_XA_NONE)
		return nrs_meta_xattr_get(c->meta, ino, name, buf, size);
	if (!nrs_xattr_applies(id, S_ISDIR(a.mode)) ||
	    !(nrs_xattr_desc(id)->flags & NRS_XA_READ))
		return -ENODATA;
	if (id == NRS_XA_PROFILE) {
		const char *pn;
		int p;

		err = nrs_meta_get_profile(c->meta, ino, &p);
		if (err)
			return err;
		pn = nrs_profile_name(p);
		if (!pn)
			return -ENODATA;	/* a dir with none set */
		return copy_out(pn, strlen(pn), buf, size);
	}
	if (id == NRS_XA_RET_BYTES || id == NRS_XA_RET_MS) {
		char val[32];
		uint64_t v;

		err = nrs_meta_get_retention(c->meta, ino, id == NRS_XA_RET_BYTES ?
					     NRS_RET_BYTES : NRS_RET_MS, &v);
		if (err)
			return err;
		return copy_out(val, (size_t)snprintf(val, sizeof(val), "%" PRIu64, v),
				buf, size);
	}
	{
		struct nrs_stream *st = nrs_streams_get(&c->streams,
							a.stream_id);

		if (!st)
			return -ENOENT;
		/* a damaged row: only the id (the inode's) is known */
		n = id == NRS_XA_ID ? 0 : nrs_core_stream_check(c, st);
		if (n == 0)
			n = get_stream_attr(st, id, from, buf, size);
		nrs_stream_put(st);
	}
	return n;
}

int nrs_core_trim(struct nrs_core *c, struct nrs_stream *st, uint64_t v)
{
	int err;

	pthread_mutex_lock(&st->lock);
	err = v < st->start || v > st->head ? -EINVAL : 0;
	pthread_mutex_unlock(&st->lock);
	if (err)
		return err;
	err = nrs_meta_set_start(c->meta, st->id, v);
	if (err)
		return err;
	pthread_mutex_lock(&st->lock);
	if (v > st->start) {	/* concurrent trims: the store kept the larger */
		st->start = v;
		nrs_index_drop_below(&st->index, v);
	}
	pthread_mutex_unlock(&st->lock);
	/* pages cached below the new start must not be read again */
	if (c->inval)
		c->inval(c->inval_ctx, st->ino, 0);
	nrs_lc_poke(c->lc, st->id);	/* objects below may go (lifecycle.c) */
	return 0;
}

/* XA1: does settable attribute id have a value of inode a's own? */
static int nereus_exists(struct nrs_core *c, const struct nrs_attr *a, int id,
			 bool *exists)
{
	int p, err;

	switch (id) {
	case NRS_XA_PROFILE:
		if (!S_ISDIR(a->mode)) {
			*exists = true;		/* fixed at creation (MT5) */
			return 0;
		}
		err = nrs_meta_get_profile(c->meta, a->ino, &p);
		if (!err)
			*exists = p != NRS_PROFILE_UNSET;
		return err;
	case NRS_XA_RET_BYTES:
	case NRS_XA_RET_MS:
		return nrs_meta_retention_is_set(c->meta, a->ino,
						 id == NRS_XA_RET_BYTES ?
						 NRS_RET_BYTES : NRS_RET_MS,
						 exists);
	default:
		*exists = true;			/* epoch */
		return 0;
	}
}

/* XA1: the flags against what exists. */
static int check_flags(struct nrs_core *c, const struct nrs_attr *a, int id,
		       int flags)
{
	bool exists = false;
	int err;

	if (flags == 0)
		return 0;
	if (id == NRS_XA_TRIM)
		return -EINVAL;		/* an action, not a value */
	err = nereus_exists(c, a, id, &exists);
	if (err)
		return err;
	if (flags == XATTR_CREATE && exists)
		return -EEXIST;
	if (flags == XATTR_REPLACE && !exists)
		return -ENODATA;
	return 0;
}

static int set_nereus(struct nrs_core *c, const struct nrs_attr *a, int id,
		      const void *value, size_t size, int flags)
{
	struct nrs_stream *st = NULL;
	uint64_t v = 0;
	int err, p = NRS_PROFILE_UNSET;

	if (!nrs_xattr_applies(id, S_ISDIR(a->mode)))
		return -EINVAL;
	if (!(nrs_xattr_desc(id)->flags & NRS_XA_WRITE))
		return -EPERM;
	err = check_flags(c, a, id, flags);
	if (err)
		return err;
	if (id == NRS_XA_PROFILE) {
		err = nrs_xattr_parse_profile(value, size, &p);
		if (err)
			return err;
		if (p == NRS_PROFILE_OBJECT_WAL && !c->owal)
			return -EOPNOTSUPP;
	} else if ((id == NRS_XA_RET_BYTES || id == NRS_XA_RET_MS) &&
		   nrs_xattr_is_forever(value, size)) {
		v = 0;		/* Kafka's -1: keep forever */
	} else {
		err = nrs_xattr_parse_u64(value, size, &v);
		if (err)
			return err;
	}
	if (id == NRS_XA_RET_BYTES || id == NRS_XA_RET_MS)
		return nrs_meta_set_retention(c->meta, a->ino,
					      id == NRS_XA_RET_BYTES ?
					      NRS_RET_BYTES : NRS_RET_MS, v);
	if (S_ISDIR(a->mode))
		return nrs_meta_set_profile(c->meta, a->ino, p);
	st = nrs_streams_get(&c->streams, a->stream_id);
	if (!st)
		return -ENOENT;
	err = nrs_core_stream_check(c, st);
	if (err) {
		nrs_stream_put(st);
		return err;
	}
	switch (id) {
	case NRS_XA_EPOCH:
		err = nrs_core_fence(c, st, v, false);
		break;
	case NRS_XA_TRIM:
		err = nrs_core_trim(c, st, v);
		break;
	case NRS_XA_PROFILE:
		/* XA2: no append is submitted while the store changes */
		pthread_mutex_lock(&st->lock);
		err = st->head != 0 ? -EINVAL :
		      atomic_load(&st->appends_out) || st->profile_busy ?
		      -EBUSY : 0;
		if (!err)
			st->profile_busy = true;
		pthread_mutex_unlock(&st->lock);
		if (err)
			break;
		err = nrs_meta_set_profile(c->meta, a->ino, p);
		pthread_mutex_lock(&st->lock);
		if (!err)
			st->profile = p;
		st->profile_busy = false;
		pthread_mutex_unlock(&st->lock);
		break;
	default:
		err = -EINVAL;
	}
	nrs_stream_put(st);
	return err;
}

int nrs_core_setxattr(struct nrs_core *c, uint64_t ino, const char *name,
		      const void *value, size_t size, int flags)
{
	int id = nrs_xattr_lookup(name);
	struct nrs_attr a;
	int err;

	if (nrs_is_virtual(ino))
		return -EPERM;
	if (strncmp(name, "user.", 5) != 0)
		return -EOPNOTSUPP;
	if (flags != 0 && flags != XATTR_CREATE && flags != XATTR_REPLACE)
		return -EINVAL;
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	if (id == NRS_XA_NONE)
		return nrs_meta_xattr_set(c->meta, ino, name, value, size,
					  flags) ?:
		       nrs_core_bucket_sync(c, ino, 0);		/* NS1 */
	if (id == NRS_XA_UNKNOWN && nrs_xattr_parse_index_page(name, NULL) == 0)
		return -EPERM;		/* read-only, as user.nereus.index */
	if (id == NRS_XA_UNKNOWN) {
		nrs_warn("inode %" PRIu64 ": no attribute %s", ino, name);
		return -EINVAL;
	}
	pthread_mutex_lock(&c->admin);
	err = set_nereus(c, &a, id, value, size, flags);
	pthread_mutex_unlock(&c->admin);
	if (!err && id == NRS_XA_EPOCH) {
		struct nrs_stream *st = nrs_streams_get(&c->streams,
							a.stream_id);

		err = st ? nrs_core_bucket_sync_epoch(c, st, ino) : -ENOENT;
		nrs_stream_put(st);				/* NS4 */
		return err;
	}
	return err ?: nrs_core_bucket_sync(c, ino, 0);		/* NS1 */
}

int nrs_core_removexattr(struct nrs_core *c, uint64_t ino, const char *name)
{
	int id = nrs_xattr_lookup(name);

	if (nrs_is_virtual(ino))
		return -EPERM;
	if (strncmp(name, "user.", 5) != 0)
		return -ENODATA;
	if (id != NRS_XA_NONE)
		return -EPERM;	/* the user.nereus. names are the daemon's */
	return nrs_meta_xattr_remove(c->meta, ino, name) ?:
	       nrs_core_bucket_sync(c, ino, 0);			/* NS1 */
}

ssize_t nrs_core_listxattr(struct nrs_core *c, uint64_t ino, char *buf,
			   size_t size)
{
	struct nrs_attr a;
	size_t total = 0;
	ssize_t stored;
	int err;

	if (nrs_is_virtual(ino))
		return 0;
	err = nrs_meta_getattr(c->meta, ino, &a);
	if (err)
		return err;
	for (int id = 0; id < NRS_XA_COUNT; id++) {
		const struct nrs_xattr_desc *d = nrs_xattr_desc(id);
		size_t len = strlen(d->name) + 1;

		if (!nrs_xattr_applies(id, S_ISDIR(a.mode)) ||
		    !(d->flags & NRS_XA_READ))
			continue;
		if (id == NRS_XA_PROFILE && S_ISDIR(a.mode)) {
			int p;

			if (nrs_meta_get_profile(c->meta, ino, &p) ||
			    p == NRS_PROFILE_UNSET)
				continue;
		}
		if (size > 0) {
			if (total + len > size)
				return -ERANGE;
			memcpy(buf + total, d->name, len);
		}
		total += len;
	}
	/* the stored user.* names follow */
	stored = nrs_meta_xattr_list(c->meta, ino, NULL, 0);
	if (stored < 0)
		return stored;
	if (size == 0 || stored == 0)
		return (ssize_t)total + stored;
	if (total + (size_t)stored > size)
		return -ERANGE;
	stored = nrs_meta_xattr_list(c->meta, ino, buf + total, size - total);
	if (stored < 0)
		return stored;
	return (ssize_t)(total + (size_t)stored);
}
