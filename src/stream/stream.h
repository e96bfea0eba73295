/*
 * stream.h - the in-memory state of one stream, shared by the stream core
 * (core.c), the commit pipeline (pipeline.c) and the reader (reader.c).
 *
 * Two views of the head live here (DESIGN.md section 1):
 *  - the published view (head, version, epoch, last_lsn), equal to the
 *    stream's row in the metadata store; readers and stat see only it (I4);
 *  - the ordering view (ord_*), owned by the committer thread alone, which
 *    runs ahead of the published view by the appends of the batch being
 *    committed.  Between batches the two views are equal.
 */
#ifndef NRS_STREAM_H
#define NRS_STREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "stream/index.h"

struct nrs_stream {
	uint64_t id;
	uint64_t ino;
	atomic_int refs;	/* the stream table, handles, requests */
	/* Set at load, never changed: the stream's metadata row fails its
	 * checksum (meta_sqlite.c CK3), so its head, version, start and epoch
	 * are unknown (0 here) and it is offline (core_handle.c). */
	bool corrupt;
	/* K1 (core_append.c): the inode's mode may hold bits that a write or
	 * O_TRUNC by an unprivileged caller clears.  True until looked at
	 * (a stream loaded at start), kept under c->admin by chmod and by
	 * the clearing; read without a lock on the write path. */
	atomic_bool privs;
	const char *damage;	/* if corrupt: NULL if the row fails its
				 * checksum (RC7), else what is impossible
				 * in it (recovery.c RD1), a static string */

	pthread_mutex_t lock;
	/* protected by lock: the published view */
	uint64_t head, version, start, epoch, last_lsn;
	uint64_t read_limit;	/* reads may reach this far: the published
				 * head, which stat shows only once the
				 * commit hook ran (pipeline.c, PL4) */
	int64_t mtime_ns;
	int profile;		/* changes only while empty, with no append
				 * submitted and not yet completed
				 * (appends_out: core_xattr.c XA2) */
	atomic_uint appends_out;	/* submitted, not yet completed: raised
					 * under lock, lowered without it */
	bool profile_busy;	/* under lock: profile being changed (XA2) */
	uint64_t wal_bytes;	/* on-disk WAL record bytes of live ranges */
	uint64_t materialized;	/* [0, materialized) has published object
				 * generations (or lies below start) */
	uint64_t obj_bytes;	/* bytes of the published objects */
	int64_t unmat_since_ns;	/* monotonic time the oldest committed byte
				 * not yet materialized was appended; 0 if
				 * none (materializer.c) */
	bool mat_busy;		/* a materializer thread works on it */
	uint64_t mat_retry_ns;	/* after a failure: not before (monotonic) */
	struct nrs_index index;
	unsigned int open_handles;
	bool unlinked;
	bool tail_cached;	/* a read since the last commit returned the
				 * page holding the head (see core_handle.c) */

	/* owned by the committer thread: the ordering view */
	uint64_t ord_head, ord_version, ord_epoch, ord_lsn;
	int batch_slot;		/* this stream's open record in the batch */
	int batch_upd;		/* this stream's head update in the batch */
};

/* Every byte below it is in the object store or trimmed.  Under st->lock. */
static inline uint64_t nrs_stream_mat_point(const struct nrs_stream *st)
{
	return st->materialized > st->start ? st->materialized : st->start;
}

#endif
