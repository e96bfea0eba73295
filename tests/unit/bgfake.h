/*
 * bgfake.h - what the unit tests of the background services
 * (test_materializer, test_lifecycle) hand them through the services seam
 * (bg/services.h) instead of a core: the real SQLite store and the real
 * directory object store in a scratch directory under $TMPDIR, a real
 * local WAL (or none), a stream table of the test's own, and upcalls that
 * record what they were asked.
 *
 * The object store is the directory store behind a wrapper (struct
 * bgstore) whose switches make it fail the way a remote store does: away
 * (PUT and HEAD do not answer), a PUT answered but lost, a HEAD that shows
 * other bytes under one key, a DELETE that fails.  It counts what it was
 * asked and checks, at every PUT, that the key's intent (a prepared row)
 * was recorded before (materializer.c MZ3).
 *
 * Streams are made by bg_stream (a row in the store, a stream in the
 * table) and grown by bg_write: one WAL record at the head, indexed, as the
 * commit pipeline leaves it.  Nothing here sleeps but bg_wait, which polls
 * a condition every few milliseconds up to a generous limit: no test
 * depends on how long anything takes.
 */
#ifndef NRS_TEST_BGFAKE_H
#define NRS_TEST_BGFAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bg/services.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "stream/reader.h"
#include "stream/table.h"
#include "util/metrics.h"

#define BG_KEYS		32

struct bgstore {
	struct nrs_objstore s;		/* first: the ops see this */
	struct nrs_objstore *real;	/* the directory store */
	struct nrs_meta *meta;		/* to check the intent at a PUT */
	pthread_mutex_t mu;
	/* switches, protected by mu */
	unsigned int away;		/* this many PUTs (and their HEADs)
					 * do not answer */
	bool away_forever;		/* until cleared */
	unsigned int drop;		/* this many PUTs answered, not kept */
	bool lie_first;			/* the first key put: HEAD shows
					 * other bytes under it, for good */
	unsigned int del_fail;		/* this many DELETEs fail */
	/* called at every PUT, before it is done (no lock held) */
	void (*put_hook)(void *ctx, const char *key);
	void *put_hook_ctx;
	/* counters, protected by mu */
	unsigned int puts, heads, dels, del_fails_done;
	bool no_intent;			/* a PUT came with no intent */
	char lie_key[NRS_OBJKEY_MAX];
	char keys[BG_KEYS][NRS_OBJKEY_MAX];	/* every PUT's key, in order */
	unsigned int nkeys;
	char dels_done[BG_KEYS][NRS_OBJKEY_MAX];	/* every DELETE's */
	unsigned int ndels;
};

struct bgfake {
	char dir[4096];
	struct nrs_meta *meta;
	struct bgstore store;
	struct nrs_wal *wal;		/* NULL: none */
	struct nrs_reader reader;
	struct nrs_streams t;
	struct nrs_metrics metrics;
	struct nrs_services svc;
	uint64_t next_lsn;

	pthread_mutex_t mu;
	/* the upcalls' record, protected by mu */
	unsigned int trims, pokes, drains, seals;
	uint64_t trim_id, trim_v, poke_id, seal_seg;
	unsigned int dels_at_first_drain;	/* store DELETEs before it */
	uint64_t segs_at_drain;		/* WAL segments at the last drain */
	atomic_uint_fast64_t floor;	/* what wal_floor answers */
	atomic_uint_fast64_t keep;	/* what wal_keep answers (MZ8) */
	int seal_err;			/* what wal_seal answers when < 0 */
	/* write once (bg_adopting): the adopt upcall links into the real
	 * directory store, or answers adopt_err when < 0 */
	unsigned int adopts;
	uint64_t adopt_seg;		/* the last segment asked for */
	int adopt_err;
	bool adopt_no_intent;		/* a link came with no prepared row
					 * naming its segment (MZ11) */
	bool adopt_current;		/* a link of the segment appends go
					 * to (MZ10, WD3) */
	/* the trim upcall also pokes this lifecycle (as the core does) */
	void (*on_trim)(void *ctx, uint64_t stream_id);
	void *on_trim_ctx;
};

/* Open everything in a fresh directory $TMPDIR/NAME.XXXXXX; with_wal: a
 * local WAL under it (segment_size: 0 for the default). */
void bg_open(struct bgfake *f, const char *name, bool with_wal);
/* Write once on (mat_adopt.c): the adopt upcall set, the reader reading
 * adopted segments from the directory store. */
void bg_adopting(struct bgfake *f);
/* A fake WAL segment of size bytes of 0xab at path (the WAL's name of
 * it), adopted by the directory store as nrs_objfmt_adopt_key(seg). */
void bg_adopted_segment(struct bgfake *f, const char *path, uint64_t seg,
			size_t size);
/* Close everything and remove the directory. */
void bg_close(struct bgfake *f);

/* A stream NAME in the root directory, in the store and in the table
 * (borrowed: the table holds it); *ino its inode. */
struct nrs_stream *bg_stream(struct bgfake *f, const char *name,
			     uint64_t *ino);
/* Commit len bytes of fill at st's head: one WAL record, synced, indexed
 * (the stream not busy).  Its segment is returned. */
uint64_t bg_write(struct bgfake *f, struct nrs_stream *st, uint32_t len,
		  char fill);
/* Publish head (and last_lsn; 0: the next one) as st's, in the store and
 * in memory, as a commit does; nothing is indexed. */
void bg_head(struct bgfake *f, struct nrs_stream *st, uint64_t head,
	     uint64_t last_lsn);

/* Counter c, read under mu (f->mu or f->store.mu, whichever guards it). */
unsigned int bg_count(pthread_mutex_t *mu, const unsigned int *c);

/* Poll cond(ctx) every few ms for up to 20 s; true once it holds. */
bool bg_wait(bool (*cond)(void *ctx), void *ctx);

/* bg_wait until st's [0, v) is materialized (fails the test if not). */
void bg_wait_materialized(struct nrs_stream *st, uint64_t v);

/* The rows of stream id in state (0: any), counted. */
size_t bg_rows(struct bgfake *f, uint64_t id, int state);
/* The row of generation gen into *o; false if there is none. */
bool bg_row(struct bgfake *f, uint64_t gen, struct nrs_obj_row *o);
/* The key of row o. */
void bg_key(const struct nrs_obj_row *o, char key[NRS_OBJKEY_MAX]);
/* Is there an object under key in the directory store (its length)? */
bool bg_has(struct bgfake *f, const char *key, uint64_t *len);
/* How many PUTs (DELETEs) were made with key. */
unsigned int bg_puts_of(struct bgfake *f, const char *key);
unsigned int bg_dels_of(struct bgfake *f, const char *key);
/* A committed row of the stream for [start, end) made at ctime_ns, with
 * an object of len payload bytes under its key; its generation. */
uint64_t bg_object(struct bgfake *f, uint64_t id, uint64_t start,
		   uint64_t end, int64_t ctime_ns);

#endif
