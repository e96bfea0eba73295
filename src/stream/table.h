/*
 * table.h - the stream table: stream id -> the stream's in-memory state
 * (stream.h), and the life of that state (new, reference, put).
 *
 * It is a hash map (idmap.h), because ids come from the disk: its size
 * follows the number of streams, never the largest id, and a walk over it
 * (nrs_streams_each) visits only the live streams.  It holds one reference
 * to every stream with a name or an open handle; the core decides when a
 * stream leaves it (core_handle.c: a stream whose name went is forgotten at its
 * last close).  Users: the core (core/), recovery (it fills the table) and
 * the background services (bg/), each through a pointer to the one table.
 *
 * Locking: t->lock (a rwlock) protects the map only.  Lock order: the
 * core's c->admin, then t->lock, then st->lock (stream.h).  The metadata
 * store is never called with t->lock or st->lock held.
 */
#ifndef NRS_STREAM_TABLE_H
#define NRS_STREAM_TABLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"
#include "stream/stream.h"
#include "util/idmap.h"

struct nrs_streams {
	pthread_rwlock_t lock;
	/* protected by lock: stream id -> struct nrs_stream * (idmap.h:
	 * its size follows the number of streams, never the largest id) */
	struct nrs_idmap map;
};

/* A stream with one reference, from its row (a corrupt row: only its id,
 * corrupt set); NULL if out of memory. */
struct nrs_stream *nrs_stream_new(const struct nrs_stream_row *row);
/* Drop a reference; the last one frees the stream (NULL ok). */
void nrs_stream_put(struct nrs_stream *st);

/* An empty table. */
void nrs_streams_init(struct nrs_streams *t);
/* Drop the table's reference to every stream and free the table. */
void nrs_streams_destroy(struct nrs_streams *t);

/* Take a reference from the table; NULL if no such stream. */
struct nrs_stream *nrs_streams_get(struct nrs_streams *t, uint64_t id);
/*
 * The table's stream id, borrowed (no reference), or NULL: only for
 * recovery, which runs before any other thread can change the table.
 */
struct nrs_stream *nrs_streams_peek(struct nrs_streams *t, uint64_t id);
/* Insert st (the table takes the caller's reference): 0, -EEXIST or
 * -ENOMEM (the caller keeps its reference). */
int nrs_streams_insert(struct nrs_streams *t, struct nrs_stream *st);
/* Remove id from the table, dropping the table's reference. */
void nrs_streams_remove(struct nrs_streams *t, uint64_t id);
/* Call fn for every stream in the table, with the table read-locked and
 * the stream's lock held (fn must take no other lock of the table's
 * users). */
void nrs_streams_each(struct nrs_streams *t,
		      void (*fn)(void *ctx, struct nrs_stream *st), void *ctx);
/* The ids in the table, ascending, into *ids (the caller frees it) and *n;
 * 0 or -ENOMEM. */
int nrs_streams_ids(struct nrs_streams *t, uint64_t **ids, size_t *n);

#endif
