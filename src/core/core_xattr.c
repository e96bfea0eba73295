/*
 * core_xattr.c - extended attributes (DESIGN.md section 4) and the virtual
 * files /.nereus/metrics and /.nereus/status.
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
 *  - profile object-wal is refused with -EOPNOTSUPP until an object WAL
 *    exists; on a stream, profile is settable only while it is empty
 *    (-EINVAL otherwise).
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
#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "core/xattr.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/clock.h"
#include "util/log.h"
#include "wal/wal.h"

bool nrs_is_virtual(uint64_t ino)
{
	return ino >= NRS_INO_CTL && ino <= NRS_INO_STATUS;
}

void nrs_virtual_stat(uint64_t ino, struct stat *out)
{
	memset(out, 0, sizeof(*out));
	out->st_ino = ino;
	out->st_blksize = 4096;
	if (ino == NRS_INO_CTL) {
		out->st_mode = S_IFDIR | 0555;
		out->st_nlink = 2;
	} else {
		out->st_mode = S_IFREG | 0444;
		out->st_nlink = 1;
	}
}

static int copy_out(const void *val, size_t len, void *buf, size_t size)
{
	if (size == 0)
		return (int)len;
	if (len > size)
		return -ERANGE;
	memcpy(buf, val, len);
	return (int)len;
}

/* Every byte below it is in the object store or trimmed.  Under st->lock. */
static uint64_t mat_point(const struct nrs_stream *st)
{
	return st->materialized > st->start ? st->materialized : st->start;
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
	case NRS_XA_MATERIALIZED: v = mat_point(st); break;
	case NRS_XA_WAL_BYTES: v = st->head - mat_point(st); break;
	case NRS_XA_INDEX:
		n = nrs_index_format(&st->index, st->id, from, buf, size);
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
			*exists = true;		/* fixed at creation (M5) */
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
		if (p == NRS_PROFILE_OBJECT_WAL)
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
		pthread_mutex_lock(&st->lock);
		err = st->head == 0 ? 0 : -EINVAL;
		pthread_mutex_unlock(&st->lock);
		if (!err)
			err = nrs_meta_set_profile(c->meta, a->ino, p);
		if (!err) {
			pthread_mutex_lock(&st->lock);
			st->profile = p;
			pthread_mutex_unlock(&st->lock);
		}
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
		return nrs_meta_xattr_set(c->meta, ino, name, value, size, flags);
	if (id == NRS_XA_UNKNOWN && nrs_xattr_parse_index_page(name, NULL) == 0)
		return -EPERM;		/* read-only, as user.nereus.index */
	if (id == NRS_XA_UNKNOWN) {
		nrs_warn("inode %" PRIu64 ": no attribute %s", ino, name);
		return -EINVAL;
	}
	pthread_mutex_lock(&c->admin);
	err = set_nereus(c, &a, id, value, size, flags);
	pthread_mutex_unlock(&c->admin);
	return err;
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
	return nrs_meta_xattr_remove(c->meta, ino, name);
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

/* ---- virtual files -------------------------------------------------- */

/* One stream's part of the gauges (nrs_streams_each). */
static void add_stream(void *ctx, struct nrs_stream *st)
{
	struct nrs_metrics_gauges *g = ctx;
	uint64_t age_ms = 0;

	g->streams_damaged += st->corrupt;
	g->wal_live_bytes += st->wal_bytes;
	g->obj_bytes += st->obj_bytes;
	g->mat_lag_bytes += st->head - mat_point(st);
	if (st->unmat_since_ns && st->head > mat_point(st))
		age_ms = (g->now_ns - (uint64_t)st->unmat_since_ns) / 1000000;
	if (age_ms > g->mat_lag_ms)
		g->mat_lag_ms = age_ms;
}

/* The gauges of other modules; ws gets the WAL's statistics. */
static void gauges(struct nrs_core *c, struct nrs_metrics_gauges *g,
		   struct nrs_wal_stats *ws)
{
	memset(g, 0, sizeof(*g));
	nrs_wal_stats(c->wal, ws);
	g->wal_bytes = ws->bytes;
	g->wal_segments = ws->segments;
	g->wal_broken = ws->broken;
	g->pipeline_failed = c->pipe ? nrs_pipeline_failed(c->pipe) : 0;
	nrs_meta_counts(c->meta, &g->dirs, &g->streams);
	g->chain_steps = nrs_meta_chain_steps(c->meta);
	g->now_ns = nrs_now_mono_ns();
	nrs_streams_each(&c->streams, add_stream, g);
	if (c->bcache) {
		struct nrs_bcache_stats bs;

		nrs_bcache_stats(c->bcache, &bs);
		g->cache_hits = bs.hits;
		g->cache_misses = bs.misses;
		g->cache_disk_hits = bs.disk_hits;
		g->cache_mem_bytes = bs.mem_bytes;
		g->cache_disk_bytes = bs.disk_bytes;
		g->store_get_requests = bs.get_requests;
		nrs_objstore_s3_errors(c->store, &g->store_errors);
		g->store_get_bytes = bs.get_bytes;
	}
}

/* A5: the data directory's space against the WAL's reserve, now, and
 * what the mount warned about (core.c choose_reserve). */
static void space_status(struct nrs_core *c, FILE *f)
{
	struct statvfs sv;
	uint64_t fs = 0, avail = 0;

	if (statvfs(c->data_dir, &sv) == 0) {
		fs = (uint64_t)sv.f_blocks * sv.f_frsize;
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	}
	fprintf(f, "  \"space\": {\"fs_bytes\": %" PRIu64 ", \"free_bytes\": %"
		PRIu64 ", \"wal_reserve\": %" PRIu64 ", \"reserve_scaled\": %s"
		", \"below_reserve\": %s, \"warning\": ", fs, avail,
		c->wal_reserve, c->reserve_scaled ? "true" : "false",
		c->wal_reserve && avail <= c->wal_reserve ? "true" : "false");
	if (c->space_warning)
		fprintf(f, "\"%s\"},\n", c->space_warning);
	else
		fprintf(f, "null},\n");
}

static int render_status(struct nrs_core *c, char **buf, size_t *len)
{
	struct nrs_metrics_gauges g;
	struct nrs_wal_stats ws;
	struct nrs_metrics *m = &c->metrics;
	char *out = NULL;
	size_t sz = 0;
	FILE *f;

	gauges(c, &g, &ws);
	f = open_memstream(&out, &sz);
	if (!f)
		return -ENOMEM;
	fprintf(f, "{\n  \"version\": \"%s\",\n", PACKAGE_VERSION);
	fprintf(f, "  \"uptime_seconds\": %" PRId64 ",\n",
		(nrs_now_real_ns() - c->started_ns) / 1000000000);
	fprintf(f, "  \"profile\": \"local-wal\",\n");
	fprintf(f, "  \"streams\": %" PRIu64 ",\n  \"streams_damaged\": %" PRIu64
		",\n  \"directories\": %" PRIu64 ",\n", g.streams,
		g.streams_damaged, g.dirs);
	fprintf(f, "  \"wal\": {\"bytes\": %" PRIu64 ", \"live_bytes\": %" PRIu64
		", \"segments\": %" PRIu64 ", \"current_segment\": %" PRIu64
		", \"broken\": %s},\n", ws.bytes, g.wal_live_bytes, ws.segments,
		ws.cur_seg, ws.broken ? "true" : "false");
	space_status(c, f);
	fprintf(f, "  \"pipeline\": {\"failed\": %s, \"batches\": %" PRIu64
		"},\n", g.pipeline_failed ? "true" : "false",
		(uint64_t)nrs_counter(&m->batches));
	fprintf(f, "  \"objects\": {\"store\": \"%s\", \"bytes\": %" PRIu64
		", \"uploads\": %" PRIu64 ", \"retries\": %" PRIu64
		", \"lag_bytes\": %" PRIu64 ", \"lag_seconds\": %" PRIu64
		", \"wal_reclaimed_bytes\": %" PRIu64 "},\n",
		c->store ? c->store->ops->name : "none", g.obj_bytes,
		(uint64_t)nrs_counter(&m->obj_uploads),
		(uint64_t)nrs_counter(&m->obj_retries), g.mat_lag_bytes,
		g.mat_lag_ms / 1000,
		(uint64_t)nrs_counter(&m->wal_reclaimed_bytes));
	fprintf(f, "  \"lifecycle\": {\"retention_trims\": %" PRIu64
		", \"compactions\": %" PRIu64 ", \"gc_draining_bytes\": %" PRIu64
		", \"gc_deleted_objects\": %" PRIu64 ", \"gc_deleted_bytes\": %"
		PRIu64 ", \"gc_last_lag_seconds\": %" PRIu64 "},\n",
		(uint64_t)nrs_counter(&m->retention_trims),
		(uint64_t)nrs_counter(&m->compactions),
		(uint64_t)nrs_counter(&m->gc_draining_bytes),
		(uint64_t)nrs_counter(&m->gc_deleted),
		(uint64_t)nrs_counter(&m->gc_deleted_bytes),
		(uint64_t)nrs_counter(&m->gc_last_lag_ms) / 1000);
	fprintf(f, "  \"appends\": %" PRIu64 ",\n  \"append_bytes\": %" PRIu64
		",\n  \"append_errors\": %" PRIu64 ",\n  \"read_errors\": %" PRIu64
		"\n}\n", (uint64_t)nrs_counter(&m->appends),
		(uint64_t)nrs_counter(&m->append_bytes),
		(uint64_t)nrs_counter(&m->append_errors),
		(uint64_t)nrs_counter(&m->read_errors));
	if (fclose(f) != 0) {
		free(out);
		return -ENOMEM;
	}
	*buf = out;
	*len = sz;
	return 0;
}

int nrs_core_render(struct nrs_core *c, uint64_t ino, char **buf, size_t *len)
{
	if (ino == NRS_INO_METRICS) {
		struct nrs_metrics_gauges g;
		struct nrs_wal_stats ws;
		ssize_t n;

		gauges(c, &g, &ws);
		n = nrs_metrics_render(&c->metrics, &g, buf);
		if (n < 0)
			return (int)n;
		*len = (size_t)n;
		return 0;
	}
	if (ino == NRS_INO_STATUS)
		return render_status(c, buf, len);
	return -ENOENT;
}
