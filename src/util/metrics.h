/*
 * metrics.h - counters and histograms behind /.nereus/metrics.
 *
 * Every field is updated with relaxed atomics from any thread; rendering
 * reads them without a lock, so a scrape is a near-snapshot, never torn per
 * value.  The text follows the Prometheus exposition format 0.0.4.
 */
#ifndef NRS_METRICS_H
#define NRS_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * An object store's failed requests by error class, each class with its
 * name (NULL: none), and the requests it sent again; filled by the store
 * (objstore.h nrs_objstore_s3_errors), all 0 for a store without classes.
 */
#define NRS_S3_CLASSES	18
struct nrs_objstore_errors {
	uint64_t by_class[NRS_S3_CLASSES];
	const char *name[NRS_S3_CLASSES];
	uint64_t retries;
};

#define NRS_LAT_BUCKETS		16
#define NRS_BATCH_BUCKETS	12

struct nrs_hist {
	const uint64_t *bounds;		/* upper bounds, ascending */
	unsigned int nbounds;
	atomic_uint_fast64_t counts[NRS_LAT_BUCKETS + 1];	/* last: +Inf */
	atomic_uint_fast64_t sum;
	atomic_uint_fast64_t count;
};

struct nrs_metrics {
	atomic_uint_fast64_t appends;		/* acknowledged appends */
	atomic_uint_fast64_t append_bytes;
	atomic_uint_fast64_t append_errors;	/* appends answered with an error */
	atomic_uint_fast64_t espipe;		/* conditional appends refused */
	atomic_uint_fast64_t estale;		/* fenced appends refused */
	atomic_uint_fast64_t batches;
	atomic_uint_fast64_t publications;	/* pipeline.c PL20 */
	atomic_uint_fast64_t group_syncs;	/* pipeline.c PL2 */
	atomic_uint_fast64_t wal_errors;	/* failed WAL writes or syncs */
	atomic_uint_fast64_t publish_errors;	/* failed head publications */
	atomic_uint_fast64_t fences;
	atomic_uint_fast64_t reads;
	atomic_uint_fast64_t read_bytes;
	atomic_uint_fast64_t read_errors;
	atomic_uint_fast64_t checksum_errors;
	/* bg/: the materializer, walgc */
	atomic_uint_fast64_t obj_uploads;	/* objects published */
	atomic_uint_fast64_t obj_upload_bytes;
	atomic_uint_fast64_t obj_adopted;	/* WAL records adopted in place
						 * (mat_adopt.c MZ11) */
	atomic_uint_fast64_t obj_adopted_bytes;	/* their payload bytes */
	atomic_uint_fast64_t obj_retries;	/* uploads not proven, retried */
	atomic_uint_fast64_t obj_quarantined;
	atomic_uint_fast64_t obj_orphans_removed;
	atomic_uint_fast64_t wal_reclaimed_segments;
	atomic_uint_fast64_t wal_reclaimed_bytes;
	atomic_uint_fast64_t wal_sealed_segments;	/* idle seals, MZ7 */
	atomic_uint_fast64_t compactions;	/* compacted objects published */
	atomic_uint_fast64_t compacted_objects;	/* objects they replaced */
	/* lifecycle.c */
	atomic_uint_fast64_t retention_trims;
	atomic_uint_fast64_t retention_trimmed_bytes;
	atomic_uint_fast64_t gc_deleted;	/* objects retired */
	atomic_uint_fast64_t gc_deleted_bytes;
	atomic_uint_fast64_t gc_last_lag_ms;	/* draining -> deleted, last */
	atomic_uint_fast64_t gc_draining_bytes;	/* awaiting GC, last pass */
	/* bg/ckpt_service.c: metadata checkpoints in the bucket */
	atomic_uint_fast64_t ckpt_taken;	/* proven checkpoints */
	atomic_uint_fast64_t ckpt_skipped;	/* nothing changed since the last */
	atomic_uint_fast64_t ckpt_retries;	/* PUTs not proven, sent again */
	atomic_uint_fast64_t ckpt_quarantined;
	atomic_uint_fast64_t ckpt_deleted;	/* old ones deleted (KP7) */
	atomic_uint_fast64_t ckpt_last_seq;	/* 0: none yet */
	atomic_uint_fast64_t ckpt_last_bytes;	/* of the object */
	atomic_uint_fast64_t ckpt_last_ms;	/* snapshot to proof */
	atomic_uint_fast64_t ckpt_last_lock_us;	/* longest hold (SN1) */
	atomic_uint_fast64_t ckpt_last_real_ns;	/* when it was taken */
	struct nrs_hist commit_latency;		/* microseconds, submit->reply */
	struct nrs_hist batch_appends;		/* appends per batch */
	struct nrs_hist batch_bytes;		/* payload bytes per batch */
	/* wal_object.c */
	atomic_uint_fast64_t owal_objects;	/* WAL objects proven */
	atomic_uint_fast64_t owal_bytes;
	atomic_uint_fast64_t owal_retries;	/* PUTs not proven, sent again */
	atomic_uint_fast64_t owal_hedges;	/* second PUTs of a slow one */
	atomic_uint_fast64_t owal_late;		/* objects past a run's seal */
	struct nrs_hist owal_put_us;		/* PUT + HEAD, microseconds */
};

/* Gauges that belong to other modules, sampled at render time. */
struct nrs_metrics_gauges {
	uint64_t wal_bytes;
	uint64_t wal_segments;
	uint64_t owal_bytes, owal_objects;	/* the object WAL holds */
	uint64_t owal_inflight, owal_waiting_bytes;
	uint64_t streams;
	uint64_t streams_damaged;	/* offline: metadata row fails its crc */
	uint64_t dirs;
	uint64_t wal_live_bytes;	/* record bytes of live ranges */
	uint64_t mat_lag_bytes;		/* committed, not yet materialized */
	uint64_t mat_lag_ms;		/* age of the oldest of them */
	uint64_t now_ns;		/* monotonic, when sampled */
	uint64_t obj_bytes;		/* bytes of published objects */
	uint64_t cache_hits, cache_misses, cache_disk_hits;
	uint64_t cache_mem_bytes, cache_disk_bytes;
	uint64_t store_get_requests, store_get_bytes;
	uint64_t chain_steps;		/* meta_sqlite.c MT8 */
	struct nrs_objstore_errors store_errors;	/* S3 only */
	int wal_broken;
	int pipeline_failed;
	/* the bucket's owner record (owner.h): state 0 unclaimed, 1 owned,
	 * 2 fenced; mode 0 unknown, 1 cas, 2 lease */
	int owner_state, owner_mode;
	uint64_t owner_epoch, owner_renewals, owner_renew_failures;
};

void nrs_metrics_init(struct nrs_metrics *m);
void nrs_hist_observe(struct nrs_hist *h, uint64_t v);
static inline void nrs_count(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline uint64_t nrs_counter(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}
/*
 * Render into a newly allocated buffer (*out, caller frees, NUL-terminated)
 * the Prometheus text.  Returns the length or -ENOMEM.
 */
ssize_t nrs_metrics_render(struct nrs_metrics *m,
			   const struct nrs_metrics_gauges *g, char **out);

#endif
