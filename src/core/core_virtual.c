/*
 * core_virtual.c - the virtual files under /.nereus (DESIGN.md section 4):
 * the directory itself, metrics (Prometheus text, metrics.c) and status
 * (JSON).  Each open renders a snapshot (the handle's vbuf,
 * core_handle.c), so a reader sees one consistent text however it reads
 * it; the gauges are gathered from the WAL, the store, the pipeline and
 * every stream at that moment.  Nothing here changes any state.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "obj/bcache.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "owner/owner.h"
#include "util/clock.h"
#include "util/metrics.h"
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

/* One stream's part of the gauges (nrs_streams_each). */
static void add_stream(void *ctx, struct nrs_stream *st)
{
	struct nrs_metrics_gauges *g = ctx;
	uint64_t age_ms = 0;

	g->streams_damaged += st->corrupt;
	g->wal_live_bytes += st->wal_bytes;
	g->obj_bytes += st->obj_bytes;
	g->mat_lag_bytes += st->head - nrs_stream_mat_point(st);
	if (st->unmat_since_ns && st->head > nrs_stream_mat_point(st))
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
	if (c->owal) {
		struct nrs_wal_stats os;

		nrs_wal_stats(c->owal, &os);
		g->owal_bytes = os.bytes;
		g->owal_objects = os.segments;
		g->owal_inflight = os.inflight;
		g->owal_waiting_bytes = os.waiting_bytes;
		g->wal_broken |= os.broken;
	}
	g->pipeline_failed = (c->pipe && nrs_pipeline_failed(c->pipe)) ||
			     (c->opipe && nrs_pipeline_failed(c->opipe));
	nrs_meta_counts(c->meta, &g->dirs, &g->streams);
	g->chain_steps = nrs_meta_chain_steps(c->meta);
	g->now_ns = nrs_now_mono_ns();
	if (c->owner) {
		struct nrs_owner_status os;

		nrs_owner_status(c->owner, &os);
		g->owner_state = (int)os.state;
		g->owner_mode = (int)os.mode;
		g->owner_epoch = os.epoch;
		g->owner_renewals = os.renewals;
		g->owner_renew_failures = os.renew_failures;
	}
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

/* The bucket's owner record (core_owner.c). */
static void owner_status(struct nrs_core *c, FILE *f)
{
	struct nrs_owner_status s;

	if (!c->owner)
		return;
	nrs_owner_status(c->owner, &s);
	fprintf(f, "  \"owner\": {\"mode\": \"%s\", \"state\": \"%s\", "
		"\"epoch\": %" PRIu64 ", \"lease_ms\": %" PRIu64
		", \"since_renew_ms\": %" PRId64 ", \"may_ack\": %s},\n",
		nrs_owner_mode_name(s.mode), nrs_owner_state_name(s.state),
		s.epoch, s.lease_ms, s.since_renew_ms,
		s.may_ack ? "true" : "false");
}

/* WA5: the data directory's space against the WAL's reserve, now, and
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

/* The checkpoints (bg/ckpt_service.c): the last one, and how often the
 * store had to be asked again. */
static void ckpt_status(struct nrs_metrics *m, FILE *f)
{
	uint64_t seq = nrs_counter(&m->ckpt_last_seq);
	int64_t at = (int64_t)nrs_counter(&m->ckpt_last_real_ns);

	fprintf(f, "  \"checkpoints\": {\"last_seq\": %" PRIu64
		", \"age_seconds\": ", seq);
	if (seq)
		fprintf(f, "%" PRId64, (nrs_now_real_ns() - at) / 1000000000);
	else
		fprintf(f, "null");
	fprintf(f, ", \"bytes\": %" PRIu64 ", \"duration_ms\": %" PRIu64
		", \"lock_max_us\": %" PRIu64 ", \"taken\": %" PRIu64
		", \"skipped\": %" PRIu64 ", \"retries\": %" PRIu64
		", \"quarantined\": %" PRIu64 ", \"deleted\": %" PRIu64 "},\n",
		(uint64_t)nrs_counter(&m->ckpt_last_bytes),
		(uint64_t)nrs_counter(&m->ckpt_last_ms),
		(uint64_t)nrs_counter(&m->ckpt_last_lock_us),
		(uint64_t)nrs_counter(&m->ckpt_taken),
		(uint64_t)nrs_counter(&m->ckpt_skipped),
		(uint64_t)nrs_counter(&m->ckpt_retries),
		(uint64_t)nrs_counter(&m->ckpt_quarantined),
		(uint64_t)nrs_counter(&m->ckpt_deleted));
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
	fprintf(f, "  \"object_wal\": {\"objects\": %" PRIu64 ", \"bytes\": %"
		PRIu64 ", \"inflight\": %" PRIu64 ", \"waiting_bytes\": %"
		PRIu64 ", \"proven_objects\": %" PRIu64 ", \"proven_bytes\": %"
		PRIu64 ", \"retries\": %" PRIu64 "},\n", g.owal_objects,
		g.owal_bytes, g.owal_inflight, g.owal_waiting_bytes,
		(uint64_t)nrs_counter(&m->owal_objects),
		(uint64_t)nrs_counter(&m->owal_bytes),
		(uint64_t)nrs_counter(&m->owal_retries));
	space_status(c, f);
	fprintf(f, "  \"pipeline\": {\"failed\": %s, \"batches\": %" PRIu64
		", \"publications\": %" PRIu64 "},\n",
		g.pipeline_failed ? "true" : "false",
		(uint64_t)nrs_counter(&m->batches),
		(uint64_t)nrs_counter(&m->publications));
	fprintf(f, "  \"objects\": {\"store\": \"%s\", \"same_fs_as_wal\": %s"
		", \"write_once\": \"%s\", \"adopting\": %s, \"adopted\": %"
		PRIu64 ", \"adopted_bytes\": %" PRIu64
		", \"bytes\": %" PRIu64 ", \"uploads\": %" PRIu64 ", \"retries\": %" PRIu64
		", \"lag_bytes\": %" PRIu64 ", \"lag_seconds\": %" PRIu64
		", \"wal_reclaimed_bytes\": %" PRIu64 "},\n",
		c->store ? c->store->ops->name : "none",
		c->obj_same_fs ? "true" : "false",
		c->write_once ? "auto" : "off", c->svc.adopt ? "true" : "false",
		(uint64_t)nrs_counter(&m->obj_adopted),
		(uint64_t)nrs_counter(&m->obj_adopted_bytes), g.obj_bytes,
		(uint64_t)nrs_counter(&m->obj_uploads),
		(uint64_t)nrs_counter(&m->obj_retries), g.mat_lag_bytes,
		g.mat_lag_ms / 1000,
		(uint64_t)nrs_counter(&m->wal_reclaimed_bytes));
	owner_status(c, f);
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
	ckpt_status(m, f);
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
