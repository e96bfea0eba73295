/*
 * reader.h - reads of committed stream bytes: resolve a logical range
 * through the offset index, fetch the physical copy, verify its checksums
 * (DESIGN.md I6), copy out.
 */
#ifndef NRS_READER_H
#define NRS_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <pthread.h>

struct nrs_bcache;
struct nrs_metrics;
struct nrs_objstore;
struct nrs_stream;
struct nrs_wal;

/*
 * What a read needs.  gate: held shared for the whole of every read, so a
 * reader never loses a physical copy its snapshot of the index names; a
 * reclaimer takes it exclusively (and lets go) after changing the index and
 * before deleting the copies it replaced (walgc.c MZ5).
 */
struct nrs_reader {
	struct nrs_wal *wal;		/* the local WAL */
	struct nrs_wal *owal;		/* the object WAL: object-wal streams'
					 * records; NULL: none */
	struct nrs_bcache *bcache;	/* object copies; NULL: none */
	struct nrs_objstore *store;	/* the embedded store's adopted WAL
					 * segments (NRS_TARGET_ADOPT); NULL:
					 * none */
	struct nrs_metrics *metrics;	/* may be NULL */
	pthread_rwlock_t *gate;		/* may be NULL (no reclaimer) */
};

/*
 * Read up to size bytes at logical offset off of st.  Returns the bytes
 * copied (short at the head, 0 at or past it), -ENODATA below the start
 * offset (but for a page-cache read, whole_pages, that reaches start: the
 * bytes below start are zeros), -EIO when a copy is missing or fails its
 * checksum (logged with stream, offset and file or object key).  Takes st->lock briefly; no lock held by caller.
 * A read that reaches the head sets st->tail_cached (the kernel may now
 * cache the page holding the head, which the next commit extends).
 */
ssize_t nrs_reader_read(const struct nrs_reader *r, struct nrs_stream *st,
			void *buf, size_t size, uint64_t off, bool whole_pages);

#endif
