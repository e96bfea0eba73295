/*
 * metrics.c - Prometheus text rendering of struct nrs_metrics.
 *
 * Names are prefixed nereus_; counters end in _total; histograms give
 * cumulative _bucket{le=...} lines, _sum and _count, as the format requires.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"
#include "util/metrics.h"

static const uint64_t lat_bounds_us[] = {
	50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	250000, 500000, 1000000, 2500000, 10000000,
};
static const uint64_t batch_bounds[] = {
	1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096,
};
static const uint64_t batch_byte_bounds[] = {
	1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
	67108864,
};

_Static_assert(sizeof(lat_bounds_us) / sizeof(lat_bounds_us[0]) <= NRS_LAT_BUCKETS,
	       "latency buckets");
_Static_assert(sizeof(batch_bounds) / sizeof(batch_bounds[0]) <= NRS_LAT_BUCKETS,
	       "batch buckets");

static void hist_init(struct nrs_hist *h, const uint64_t *b, unsigned int n)
{
	h->bounds = b;
	h->nbounds = n;
	for (unsigned int i = 0; i <= NRS_LAT_BUCKETS; i++)
		atomic_init(&h->counts[i], 0);
	atomic_init(&h->sum, 0);
	atomic_init(&h->count, 0);
}

void nrs_metrics_init(struct nrs_metrics *m)
{
	memset(m, 0, sizeof(*m));
	hist_init(&m->commit_latency, lat_bounds_us,
		  sizeof(lat_bounds_us) / sizeof(lat_bounds_us[0]));
	hist_init(&m->batch_appends, batch_bounds,
		  sizeof(batch_bounds) / sizeof(batch_bounds[0]));
	hist_init(&m->batch_bytes, batch_byte_bounds,
		  sizeof(batch_byte_bounds) / sizeof(batch_byte_bounds[0]));
	hist_init(&m->owal_put_us, lat_bounds_us,
		  sizeof(lat_bounds_us) / sizeof(lat_bounds_us[0]));
}

void nrs_hist_observe(struct nrs_hist *h, uint64_t v)
{
	unsigned int i = 0;

	while (i < h->nbounds && v > h->bounds[i])
		i++;
	nrs_count(&h->counts[i], 1);
	nrs_count(&h->sum, v);
	nrs_count(&h->count, 1);
}

/* A growable text buffer; on allocation failure it remembers the error. */
struct text {
	char *buf;
	size_t len, cap;
	int err;
};

static void put(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err)
		return;
	for (;;) {
		size_t room = t->cap - t->len;

		va_start(ap, fmt);
		n = vsnprintf(t->buf ? t->buf + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->err = -EINVAL;
			return;
		}
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		if (nrs_grow((void **)&t->buf, &t->cap,
			     t->len + (size_t)n + 1, 1)) {
			t->err = -ENOMEM;
			return;
		}
	}
}

static void counter(struct text *t, const char *name, const char *help,
		    uint64_t v)
{
	put(t, "# HELP nereus_%s %s\n# TYPE nereus_%s counter\nnereus_%s %" PRIu64 "\n",
	    name, help, name, name, v);
}

static void gauge(struct text *t, const char *name, const char *help,
		  uint64_t v)
{
	put(t, "# HELP nereus_%s %s\n# TYPE nereus_%s gauge\nnereus_%s %" PRIu64 "\n",
	    name, help, name, name, v);
}

static void histogram(struct text *t, const char *name, const char *help,
		      struct nrs_hist *h, double scale)
{
	uint64_t cum = 0;

	put(t, "# HELP nereus_%s %s\n# TYPE nereus_%s histogram\n", name, help,
	    name);
	for (unsigned int i = 0; i < h->nbounds; i++) {
		cum += nrs_counter(&h->counts[i]);
		put(t, "nereus_%s_bucket{le=\"%g\"} %" PRIu64 "\n", name,
		    (double)h->bounds[i] * scale, cum);
	}
	cum += nrs_counter(&h->counts[h->nbounds]);
	put(t, "nereus_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
	put(t, "nereus_%s_sum %g\n", name, (double)nrs_counter(&h->sum) * scale);
	put(t, "nereus_%s_count %" PRIu64 "\n", name, nrs_counter(&h->count));
}

ssize_t nrs_metrics_render(struct nrs_metrics *m,
			   const struct nrs_metrics_gauges *g, char **out)
{
	struct text t = { 0 };

	counter(&t, "appends_total", "Acknowledged appends.",
		nrs_counter(&m->appends));
	counter(&t, "append_bytes_total", "Bytes of acknowledged appends.",
		nrs_counter(&m->append_bytes));
	counter(&t, "append_errors_total",
		"Appends answered with an error (all causes).",
		nrs_counter(&m->append_errors));
	counter(&t, "append_espipe_total",
		"Conditional appends refused because the offset was not the head.",
		nrs_counter(&m->espipe));
	counter(&t, "append_estale_total",
		"Appends refused because the handle's epoch was fenced.",
		nrs_counter(&m->estale));
	counter(&t, "fences_total", "Writer epoch raises.",
		nrs_counter(&m->fences));
	counter(&t, "batches_total", "Group commits (WAL write + sync + publish).",
		nrs_counter(&m->batches));
	counter(&t, "publications_total",
		"Head publications (metadata transactions) of the commit "
		"pipeline, each for every batch waiting to publish.",
		nrs_counter(&m->publications));
	counter(&t, "wal_group_syncs_total",
		"WAL syncs by the syncer thread, each for the large batches "
		"written since the last one.", nrs_counter(&m->group_syncs));
	counter(&t, "wal_errors_total", "Failed WAL writes or syncs.",
		nrs_counter(&m->wal_errors));
	counter(&t, "publish_errors_total", "Failed head publications.",
		nrs_counter(&m->publish_errors));
	counter(&t, "reads_total", "Read requests served.",
		nrs_counter(&m->reads));
	counter(&t, "read_bytes_total", "Bytes returned by reads.",
		nrs_counter(&m->read_bytes));
	counter(&t, "read_errors_total", "Reads answered with an error.",
		nrs_counter(&m->read_errors));
	counter(&t, "checksum_errors_total",
		"CRC32C mismatches found while reading.",
		nrs_counter(&m->checksum_errors));
	counter(&t, "object_uploads_total",
		"Segment objects uploaded, proven and published.",
		nrs_counter(&m->obj_uploads));
	counter(&t, "object_upload_bytes_total",
		"Bytes of the published segment objects.",
		nrs_counter(&m->obj_upload_bytes));
	counter(&t, "object_adopted_total",
		"WAL records published in place as generations (write once).",
		nrs_counter(&m->obj_adopted));
	counter(&t, "object_adopted_bytes_total",
		"Payload bytes of the WAL records adopted in place.",
		nrs_counter(&m->obj_adopted_bytes));
	counter(&t, "object_upload_retries_total",
		"Uploads not proven by HEAD (store errors), retried.",
		nrs_counter(&m->obj_retries));
	counter(&t, "object_quarantined_total",
		"Keys found holding other bytes: quarantined, never overwritten.",
		nrs_counter(&m->obj_quarantined));
	counter(&t, "object_orphans_removed_total",
		"Objects of interrupted uploads removed at start.",
		nrs_counter(&m->obj_orphans_removed));
	counter(&t, "wal_reclaimed_segments_total",
		"WAL segments deleted after their ranges moved on.",
		nrs_counter(&m->wal_reclaimed_segments));
	counter(&t, "wal_reclaimed_bytes_total",
		"Bytes of the WAL segments deleted.",
		nrs_counter(&m->wal_reclaimed_bytes));
	counter(&t, "wal_sealed_segments_total",
		"Idle current WAL segments sealed once no live record was left.",
		nrs_counter(&m->wal_sealed_segments));
	counter(&t, "compactions_total",
		"Objects published by compaction.", nrs_counter(&m->compactions));
	counter(&t, "compacted_objects_total",
		"Smaller objects that compaction replaced.",
		nrs_counter(&m->compacted_objects));
	counter(&t, "retention_trims_total",
		"Trims made by retention.", nrs_counter(&m->retention_trims));
	counter(&t, "retention_trimmed_bytes_total",
		"Bytes trimmed by retention.",
		nrs_counter(&m->retention_trimmed_bytes));
	counter(&t, "lifecycle_chain_steps_total",
		"Inodes read to resolve inherited retention: flat while no "
		"setting, rename or unlink changes it.", g->chain_steps);
	counter(&t, "gc_deleted_objects_total",
		"Superseded or unneeded objects deleted by GC.",
		nrs_counter(&m->gc_deleted));
	counter(&t, "gc_deleted_bytes_total", "Bytes of the objects GC deleted.",
		nrs_counter(&m->gc_deleted_bytes));
	gauge(&t, "gc_draining_bytes",
	      "Bytes of objects no state needs, waiting out the GC grace period.",
	      nrs_counter(&m->gc_draining_bytes));
	gauge(&t, "gc_last_lag_seconds",
	      "Time from draining to deletion of the last object GC deleted.",
	      nrs_counter(&m->gc_last_lag_ms) / 1000);
	counter(&t, "checkpoints_total",
		"Metadata checkpoints stored in the object store and proven.",
		nrs_counter(&m->ckpt_taken));
	counter(&t, "checkpoints_skipped_total",
		"Checkpoints not written: nothing changed since the last.",
		nrs_counter(&m->ckpt_skipped));
	counter(&t, "checkpoint_retries_total",
		"Checkpoint PUTs not proven, sent again with the same bytes.",
		nrs_counter(&m->ckpt_retries));
	counter(&t, "checkpoints_quarantined_total",
		"Checkpoint keys found holding other bytes (never used).",
		nrs_counter(&m->ckpt_quarantined));
	counter(&t, "checkpoints_deleted_total",
		"Old checkpoints deleted (the newest two are kept).",
		nrs_counter(&m->ckpt_deleted));
	gauge(&t, "checkpoint_last_seq",
	      "Sequence number of the last checkpoint (0: none yet).",
	      nrs_counter(&m->ckpt_last_seq));
	gauge(&t, "checkpoint_last_bytes", "Bytes of the last checkpoint.",
	      nrs_counter(&m->ckpt_last_bytes));
	gauge(&t, "checkpoint_last_duration_ms",
	      "From the snapshot to the proof of the last checkpoint.",
	      nrs_counter(&m->ckpt_last_ms));
	gauge(&t, "checkpoint_last_lock_us",
	      "Longest hold of the metadata lock by the last snapshot.",
	      nrs_counter(&m->ckpt_last_lock_us));
	gauge(&t, "checkpoint_last_timestamp_seconds",
	      "Wall clock of the last checkpoint's snapshot (0: none).",
	      nrs_counter(&m->ckpt_last_real_ns) / 1000000000);
	counter(&t, "cache_hits_total", "Object block cache hits (memory).",
		g->cache_hits);
	counter(&t, "cache_misses_total", "Object block cache misses (memory).",
		g->cache_misses);
	counter(&t, "cache_disk_hits_total",
		"Memory misses served by the disk cache.", g->cache_disk_hits);
	counter(&t, "object_get_requests_total",
		"Range GETs sent to the object store.", g->store_get_requests);
	counter(&t, "object_get_bytes_total",
		"Bytes fetched from the object store.", g->store_get_bytes);
	put(&t, "# HELP nereus_object_store_errors_total S3 requests that "
	    "failed, by error class (after retries).\n"
	    "# TYPE nereus_object_store_errors_total counter\n");
	for (unsigned int i = 2; i < NRS_S3_CLASSES; i++)	/* not ok,
								 * not_found */
		if (g->store_errors.name[i])
			put(&t, "nereus_object_store_errors_total{class=\"%s\"} %"
			    PRIu64 "\n", g->store_errors.name[i],
			    g->store_errors.by_class[i]);
	counter(&t, "object_store_retries_total",
		"S3 requests sent again after a transient error.",
		g->store_errors.retries);
	histogram(&t, "commit_latency_seconds",
		  "Time from an append's arrival to its acknowledgement.",
		  &m->commit_latency, 1e-6);
	histogram(&t, "batch_appends", "Appends per group commit.",
		  &m->batch_appends, 1.0);
	histogram(&t, "batch_bytes", "Payload bytes per group commit.",
		  &m->batch_bytes, 1.0);
	counter(&t, "object_wal_objects_total",
		"Object WAL objects stored and proven.",
		nrs_counter(&m->owal_objects));
	counter(&t, "object_wal_bytes_total",
		"Bytes of the object WAL objects proven.",
		nrs_counter(&m->owal_bytes));
	counter(&t, "object_wal_put_retries_total",
		"Object WAL PUTs not proven, sent again (same bytes, same key).",
		nrs_counter(&m->owal_retries));
	counter(&t, "object_wal_put_hedges_total",
		"Object WAL PUTs slower than the hedge delay, sent a second time.",
		nrs_counter(&m->owal_hedges));
	counter(&t, "object_wal_late_objects_total",
		"Object WAL objects found past their run's seal, ignored.",
		nrs_counter(&m->owal_late));
	histogram(&t, "object_wal_put_seconds",
		  "Time of one object WAL PUT and the HEAD that proves it.",
		  &m->owal_put_us, 1e-6);
	gauge(&t, "wal_bytes", "Bytes held in WAL segment files.",
	      g->wal_bytes);
	gauge(&t, "wal_live_bytes",
	      "WAL record bytes of committed, still readable ranges.",
	      g->wal_live_bytes);
	gauge(&t, "wal_segments", "WAL segment files.", g->wal_segments);
	gauge(&t, "object_wal_held_bytes",
	      "Bytes of the object WAL objects held (not yet reclaimed).",
	      g->owal_bytes);
	gauge(&t, "object_wal_held_objects", "Object WAL objects held.",
	      g->owal_objects);
	gauge(&t, "object_wal_inflight",
	      "Object WAL objects sealed and not yet proven stored.",
	      g->owal_inflight);
	gauge(&t, "object_wal_waiting_bytes",
	      "Bytes of object-wal appends waiting for their WAL object.",
	      g->owal_waiting_bytes);
	gauge(&t, "materialize_lag_bytes",
	      "Committed bytes not yet in the object store.", g->mat_lag_bytes);
	gauge(&t, "materialize_lag_seconds",
	      "Age of the oldest committed byte not yet in the object store.",
	      g->mat_lag_ms / 1000);
	gauge(&t, "object_bytes", "Bytes of published segment objects.",
	      g->obj_bytes);
	gauge(&t, "cache_memory_bytes", "Object blocks held in memory.",
	      g->cache_mem_bytes);
	gauge(&t, "cache_disk_bytes", "Object blocks held in the disk cache.",
	      g->cache_disk_bytes);
	gauge(&t, "streams", "Streams with a name.", g->streams);
	gauge(&t, "streams_damaged",
	      "Streams offline because their metadata row fails its checksum.",
	      g->streams_damaged);
	gauge(&t, "directories", "Directories.", g->dirs);
	gauge(&t, "wal_broken",
	      "1 when a failed WAL write could not be undone (appends refused).",
	      (uint64_t)g->wal_broken);
	gauge(&t, "pipeline_failed",
	      "1 when the commit pipeline stopped accepting appends.",
	      (uint64_t)g->pipeline_failed);
	gauge(&t, "owner_state", "The bucket's owner record: 0 not claimed "
	      "yet, 1 owned, 2 fenced (another daemon took it).",
	      (uint64_t)g->owner_state);
	gauge(&t, "owner_mode", "How ownership is kept: 1 compare-and-set, "
	      "2 lease, 0 not known yet.", (uint64_t)g->owner_mode);
	gauge(&t, "owner_epoch", "The ownership epoch (+1 at every takeover).",
	      g->owner_epoch);
	counter(&t, "owner_renewals_total",
		"Good renewals of the owner record.", g->owner_renewals);
	counter(&t, "owner_renew_failures_total",
		"Renewals of the owner record the store did not answer.",
		g->owner_renew_failures);
	if (t.err) {
		free(t.buf);
		return t.err;
	}
	*out = t.buf;
	return (ssize_t)t.len;
}
