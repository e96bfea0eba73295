/*
 * services.h - the seam between the stream core and its background
 * services (materializer.c, lifecycle.c): everything a service may touch,
 * handed to nrs_mat_start() and nrs_lc_start() instead of struct nrs_core.
 * The core (core/core_obj.c) fills one and keeps it, alive and unchanged,
 * until the last service has stopped; a unit test fills one with fakes.
 * A service never includes a core/ header, and reaches the core only
 * through the upcalls below (issue 13: no dependency circle).
 *
 * Members:
 *   meta      the metadata store: object rows, intents, retention, rows
 *             of streams.  Locks itself; never called with st->lock held.
 *   store     the object store segment objects are put to and deleted
 *             from.
 *   bcache    the verified block cache, whose blocks of a deleted object
 *             are forgotten (lifecycle G2); NULL: none.
 *   wal       the local WAL: stats, read (through reader) and reclaim;
 *   owal      the object WAL of object-wal streams, NULL: none.  A
 *             stream's records are in the WAL of its profile.
 *   reader    how committed bytes are read (stream/reader.h); a service
 *             copies it and may clear its metrics.
 *   streams   the stream table (stream/table.h: its lock, then st->lock).
 *   metrics   the counters and gauges a service moves (util/metrics.h).
 *
 * Upcalls, each called with ctx and with no lock of the table or of a
 * stream held (each may take the core's locks):
 *   trim      raise st's start to v, durably, and drop the index below it
 *             (what user.nereus.trim does; lifecycle L3).  0 or -errno.
 *   poke      objects of stream_id may have become unneeded: the GC looks
 *             at them at its next pass (lifecycle G1).  May be called
 *             before the lifecycle runs (then it does nothing).
 *   drain     return once every read that began before the call has
 *             finished (the read gate taken exclusively and let go,
 *             reader.h): after changing an index, before deleting the
 *             copies it no longer names (walgc.c MZ5, lifecycle.c G2).
 *   wal_floor segments of WAL w numbered below it hold no record the
 *             commit pipeline wrote and has not yet indexed; read it
 *             before the indexes (commit/pipeline.h
 *             nrs_pipeline_wal_floor_of, PL4).
 *   wal_seal  seal segment seg of WAL w if its pipeline has been idle for
 *             idle_ns (nrs_pipeline_wal_seal_of): 1 sealed, 0 not, -errno.
 *   wal_keep  segments of WAL w at or above it must stay, whatever the
 *             indexes say (walgc.c MZ8: the object WAL down to the last
 *             checkpoint's covered position); NULL or UINT64_MAX: none.
 *   adopt     write once (README, "Write once on the embedded store"):
 *             link segment seg of the local WAL into the embedded store
 *             as the object nrs_objfmt_adopt_key(seg), its directories
 *             synced (objstore.h nrs_objstore_dir_adopt, OD6).  0, or
 *             -errno (-EXDEV: another file system; any error: the caller
 *             copies instead).  NULL: write once is off, every record is
 *             copied (-o write_once=off, S3, objects on another disk).
 *   punch     free bytes [off, off + len) of the adopted file of segment
 *             seg in the embedded store (objstore.h
 *             nrs_objstore_dir_punch, OD7; lifecycle G6), refused once
 *             fenced as every write.  0 or -errno; NULL: no embedded
 *             store (as -EOPNOTSUPP).
 *   punch_sync make the holes punched in seg's file durable (OD9,
 *             lifecycle G8).  0 or -errno; NULL with punch.
 */
#ifndef NRS_SERVICES_H
#define NRS_SERVICES_H

#include <stdbool.h>
#include <stdint.h>

struct nrs_bcache;
struct nrs_meta;
struct nrs_metrics;
struct nrs_objstore;
struct nrs_reader;
struct nrs_stream;
struct nrs_streams;
struct nrs_wal;

struct nrs_services {
	struct nrs_meta *meta;
	struct nrs_objstore *store;
	struct nrs_bcache *bcache;		/* NULL: none */
	struct nrs_wal *wal;
	struct nrs_wal *owal;			/* NULL: none */
	const struct nrs_reader *reader;
	struct nrs_streams *streams;
	struct nrs_metrics *metrics;

	void *ctx;				/* the upcalls' first argument */
	int (*trim)(void *ctx, struct nrs_stream *st, uint64_t v);
	void (*poke)(void *ctx, uint64_t stream_id);
	void (*drain)(void *ctx);
	uint64_t (*wal_floor)(void *ctx, struct nrs_wal *w);
	int (*wal_seal)(void *ctx, struct nrs_wal *w, uint64_t seg,
			uint64_t idle_ns);
	uint64_t (*wal_keep)(void *ctx, struct nrs_wal *w);	/* NULL ok */
	int (*adopt)(void *ctx, uint64_t seg);			/* NULL ok */
	bool owal_adopt;	/* write once for object-wal streams: the
				 * embedded store (mat_adopt.c MZ13) */
	int (*punch)(void *ctx, uint64_t seg, uint64_t off,
		     uint64_t len);				/* NULL ok */
	int (*punch_sync)(void *ctx, uint64_t seg);		/* NULL ok */
};

#endif
