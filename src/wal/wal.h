/*
 * wal.h - the WAL provider interface: an operations table (struct
 * nrs_wal_ops) that every WAL implements, and the local WAL's options.
 *
 * A WAL provider makes a formatted batch of records durable (write, then
 * sync) and reads bytes back.  It knows nothing of streams or heads: the
 * commit pipeline formats records (walrec.h) and decides what is published
 * (DESIGN.md section 1: a provider's completed I/O never makes anything
 * visible).  A position is (segment, byte offset); a batch never spans two
 * segments.  The pipeline holds one provider per stream profile
 * (pipeline.h, profile_wal; pipeline.c PW1).
 *
 * PROVIDERS
 *
 *   local-wal   (wal_local.c) segment files in one directory.  write() is
 *               pwritev into the current segment; a "segment" is a file.
 *   object-wal  (wal_object.c) a segment is one bucket object: write()
 *               makes the batch an object and starts its PUT (ops.async);
 *               sync() waits until the HEAD that follows proves it; cut()
 *               records the objects from pos on as abandoned in the next
 *               object (OW4), since a PUT already sent may still land;
 *               read() is the copy in memory or a ranged GET; scan() probes
 *               keys in order from a floor, never lists; reclaim() deletes
 *               keys; seal() has nothing to do.
 *
 * DURABLE means, for each provider, that the bytes survive power loss of
 * this host and any crash of the daemon, and that a later scan() returns
 * them:
 *   local-wal   an fdatasync of the segment returned 0 (and the segment's
 *               creation was made durable with its directory, WA1);
 *   object-wal  the PUT returned success and the HEAD that follows proves
 *               the object holds exactly those bytes (length and SHA-256,
 *               objstore.h OB1).
 *
 * RECORDS.  Every provider stores the same bytes: walrec.c's records,
 * back to back, each padded to 8.  A record is kind DATA (the appends of
 * one batch to one stream) or META (one change of the metadata store:
 * walrec.c WV4, its payload metarec.c's -- the change's number and its
 * SQLite changeset), which the commit pipeline writes into the object WAL
 * (pipeline.c PL8, core_metalog.c NS1) and a recovery replays on the last
 * checkpoint (recovery_meta.c RM1).  Providers need no change for either: they
 * store and return opaque records.
 *
 * WHAT THE PIPELINE MAY ASSUME of every provider:
 *   - a batch written whole into one segment, at increasing positions in
 *     write order; sync(end) covers every byte of end.seg before end, and
 *     the caller syncs each segment in write order;
 *   - after a write() or sync() error, cut() to the oldest unsynced batch
 *     leaves no trace of it or of anything written after it, or the
 *     provider refuses every later write (-EIO); nothing is ever returned
 *     by scan() that a failed write() left;
 *   - read() returns exactly what write() was given, also before sync();
 *   - a provider's operations never make anything visible and never call
 *     back into the pipeline; positions of different providers are
 *     unrelated (a segment number names a segment of one provider only).
 *
 * Threads: scan() and sync_all() run alone, before the first write() or
 * after the last one.  write() and cut()
 * are called by one thread at a time (the commit role); sync() by one
 * thread at a time, concurrently with write(), so that the sync of batch k
 * overlaps the write of batch k+1.  read() may run in any number of
 * threads concurrently with all of them.
 *
 * There is no append() here: write, sync and cut are the path; a test that
 * wants the three in one call has tests/unit/wal_append.h.
 */
#ifndef NRS_WAL_H
#define NRS_WAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wal/walrec.h"

struct nrs_wal;

struct nrs_wal_pos {
	uint64_t seg;
	uint64_t off;
};

/* One record found by scan(). */
struct nrs_wal_rec_info {
	struct nrs_walrec rec;
	struct nrs_wal_pos pos;	/* where the record starts */
	bool data_ok;		/* every payload chunk CRC verified */
	bool object;		/* found in the object WAL (pos names one of
				 * its objects, wal_object.c) */
};

/* Return 0 to continue the scan, a negative errno to stop it with that. */
typedef int (*nrs_wal_scan_cb)(void *ctx, const struct nrs_wal_rec_info *ri);

struct nrs_wal_stats {
	uint64_t bytes;		/* bytes held in segments on disk */
	uint64_t segments;
	uint64_t cur_seg;
	uint64_t last_seg;	/* the highest segment number held (0: none) */
	uint64_t cur_bytes;	/* record bytes in cur_seg (0: none yet) */
	bool broken;		/* a failed append could not be undone */
	uint64_t inflight;	/* object WAL: objects sealed, not yet proven */
	uint64_t waiting_bytes;	/* object WAL: their bytes and the open one's */
	uint64_t floor;		/* object WAL: objects below it are not
				 * the WAL's (wal_object_gc.c OW7, OW18) */
	uint64_t reclaim_due_ns;	/* object WAL: the monotonic time the first
					 * object waiting out its GC grace may
					 * go (wal_object_gc.c OWG1), or the
					 * DELETEs it owes are sent again
					 * (OWG3), whichever is first; 0: none
					 * waits */
};

struct nrs_wal_ops {
	const char *name;
	/*
	 * write() starts making the batch durable and sync() waits for it
	 * (the object WAL's PUTs): the pipeline hands every batch to its
	 * syncer thread, so that several are in flight at once.
	 */
	bool async;
	/*
	 * Write the iovecs back to back at the end of the log; *pos is the
	 * position of the first byte.  They are not durable until a sync()
	 * that covers them returns 0.  On error nothing of the batch may ever
	 * be returned by a later scan(): the provider undoes the partial
	 * write, or refuses every later write (-EIO) if it cannot.  Returns 0
	 * or -errno (-ENOSPC on a full disk).
	 */
	int (*write)(struct nrs_wal *w, const struct iovec *iov, int iovcnt,
		     struct nrs_wal_pos *pos);
	/*
	 * Make durable every byte written before end (the end of a batch:
	 * its pos plus its length) in end.seg.  The caller syncs in write
	 * order, up to the end of the last batch it wrote to each segment, so
	 * earlier segments' bytes already are.  Runs in any thread,
	 * concurrently with write() (never with another sync() or cut()):
	 * the next batches are copied while these go to the disk.  On error
	 * the bytes not yet made durable may or may not be on the disk: the
	 * caller must cut() back to the start of the oldest batch not yet
	 * synced; with it go the batches written after it, also those
	 * written while the sync ran.
	 */
	int (*sync)(struct nrs_wal *w, struct nrs_wal_pos end);
	/*
	 * Drop every byte written at or after pos (a position write()
	 * returned, of a batch no sync() made durable), durably, so that no
	 * scan() ever returns it.  why is the error that made the caller
	 * give the batch up (for the log).  If the bytes cannot be dropped,
	 * the WAL refuses every later write (-EIO).  Called by the writing
	 * thread.  Returns 0 or -errno.
	 */
	int (*cut)(struct nrs_wal *w, struct nrs_wal_pos pos, int why);
	/* Read up to len bytes at pos; returns bytes read, short at segment
	 * end, or -errno (-ENOENT: no such segment). */
	ssize_t (*read)(struct nrs_wal *w, struct nrs_wal_pos pos, void *buf,
			size_t len);
	/*
	 * Recovery: call cb for every record in log order (segments
	 * ascending).  A torn or corrupt tail of the last segment is cut; a
	 * corrupt range followed by valid records is skipped and logged.
	 * After scan() the next write goes to a new segment.
	 */
	int (*scan)(struct nrs_wal *w, nrs_wal_scan_cb cb, void *ctx);
	/*
	 * Make durable every byte and every name the log holds: all of its
	 * segments and its directory (DESIGN.md I7).  A scan() may return
	 * records a crash left only in the page cache (written, never
	 * synced): recovery calls this after scan() and before it publishes
	 * any of them (recovery.c RC4); a clean close calls it after the last
	 * write.  Never concurrently with write(), sync() or cut().  Returns
	 * 0 or -errno; after an error nothing the scan returned may be taken
	 * as durable.
	 */
	int (*sync_all)(struct nrs_wal *w);
	void (*stats)(struct nrs_wal *w, struct nrs_wal_stats *out);
	/*
	 * Delete every segment numbered below `below` but the one appends go
	 * to.  The caller guarantees that none of their records is needed any
	 * more and that no read of them is in flight.  Returns the number of
	 * segments removed (*bytes: their size) or -errno.
	 */
	int (*reclaim)(struct nrs_wal *w, uint64_t below, uint64_t *bytes);
	/*
	 * Seal the segment appends go to, if it is seg and holds a record:
	 * the next write goes to a new segment, so that reclaim() may delete
	 * seg once none of its records is needed.  Seals nothing, only moves
	 * the next write.  Called by the writing thread (the commit role),
	 * only while every batch it wrote is synced.  Returns 1 if sealed,
	 * 0 if there was nothing to seal, or -errno (nothing changed).
	 */
	int (*seal)(struct nrs_wal *w, uint64_t seg);
	void (*close)(struct nrs_wal *w);
};

struct nrs_wal {
	const struct nrs_wal_ops *ops;
};

static inline int nrs_wal_write(struct nrs_wal *w, const struct iovec *iov,
				int iovcnt, struct nrs_wal_pos *pos)
{
	return w->ops->write(w, iov, iovcnt, pos);
}

static inline int nrs_wal_sync(struct nrs_wal *w, struct nrs_wal_pos end)
{
	return w->ops->sync(w, end);
}

static inline int nrs_wal_cut(struct nrs_wal *w, struct nrs_wal_pos pos,
			      int why)
{
	return w->ops->cut(w, pos, why);
}

static inline ssize_t nrs_wal_read(struct nrs_wal *w, struct nrs_wal_pos pos,
				   void *buf, size_t len)
{
	return w->ops->read(w, pos, buf, len);
}

static inline int nrs_wal_scan(struct nrs_wal *w, nrs_wal_scan_cb cb, void *ctx)
{
	return w->ops->scan(w, cb, ctx);
}

static inline int nrs_wal_sync_all(struct nrs_wal *w)
{
	return w->ops->sync_all(w);
}

static inline void nrs_wal_stats(struct nrs_wal *w, struct nrs_wal_stats *out)
{
	w->ops->stats(w, out);
}

static inline int nrs_wal_reclaim(struct nrs_wal *w, uint64_t below,
				  uint64_t *bytes)
{
	return w->ops->reclaim(w, below, bytes);
}

static inline int nrs_wal_seal(struct nrs_wal *w, uint64_t seg)
{
	return w->ops->seal ? w->ops->seal(w, seg) : 0;
}

/* Close of NULL is a no-op. */
static inline void nrs_wal_close(struct nrs_wal *w)
{
	if (w)
		w->ops->close(w);
}

/* A damaged range scan() found in a local WAL (wal_local_scan.c WS1-WS6). */
enum nrs_wal_damage_kind {
	NRS_WAL_TORN_TAIL,	/* [start, end) of the last segment: cut (WS5),
				 * or left in place when read_only */
	NRS_WAL_TORN_SEGMENT,	/* a last segment torn at creation (WS1): the
				 * file is removed, or left when read_only */
	NRS_WAL_BAD_SEGMENT,	/* a segment header fails (WS2): skipped whole */
	NRS_WAL_CORRUPT,	/* [start, end) skipped: no header verifies (WS4) */
	NRS_WAL_BAD_CHUNK,	/* record lsn at start: payload chunk fails */
};

struct nrs_wal_damage {
	enum nrs_wal_damage_kind kind;
	uint64_t seg;		/* segment number */
	uint64_t start, end;	/* byte range in the segment file */
	uint64_t lsn;		/* NRS_WAL_BAD_CHUNK: the record */
	uint32_t chunk;		/* NRS_WAL_BAD_CHUNK: the first bad chunk */
	bool object;		/* an object WAL's object (seg), whole: kind
				 * NRS_WAL_CORRUPT, [0, its length) */
};

struct nrs_wal_local_opts {
	uint64_t segment_size;	/* rotate past this many bytes (0: 64 MiB) */
	/*
	 * Free space (bytes) left to others on the file system: a write
	 * that would leave less fails -ENOSPC before writing anything.  The
	 * metadata store shares the disk and must still be able to publish
	 * the heads of records the WAL already holds.  0: no reserve.
	 */
	uint64_t reserve;
	/*
	 * The most bytes the segments may hold: a write past it fails
	 * -ENOSPC before writing anything (backpressure while committed bytes
	 * cannot move to the object store).  0: no budget.
	 */
	uint64_t budget;
	/*
	 * For offline checkers: the directory is never created, scan() cuts
	 * and removes nothing (a torn tail is only reported through damage;
	 * its records are not passed to the callback, exactly as after a cut)
	 * and write(), sync() and cut() fail -EROFS.
	 */
	bool read_only;
	/* If not NULL, called by scan() for every damaged range it finds, in
	 * log order, with damage_ctx.  It must not call the WAL. */
	void (*damage)(void *ctx, const struct nrs_wal_damage *d);
	void *damage_ctx;
	/*
	 * New segments take numbers at or above this (0, 1: from 1): write
	 * once (core_obj.c CO3) gives the number after the highest segment
	 * the embedded store adopted, so that a WAL whose every segment was
	 * reclaimed does not start again at a number whose name the store
	 * holds (objstore_dir_adopt.c OD6 would refuse the link).
	 */
	uint64_t first_seg;
};

/*
 * Open the local WAL in directory dir (segments are
 * dir/NNNNNNNNNNNNNNNN.seg, 16 lower-case hex digits), creating the
 * directory unless o->read_only (then -ENOENT if it is missing).
 * Returns 0 or -errno.
 */
int nrs_wal_local_open(const char *dir, const struct nrs_wal_local_opts *o,
		       struct nrs_wal **out);

/*
 * The path of segment seg of the local WAL w (DIR/NNNNNNNNNNNNNNNN.seg),
 * whether or not it exists: what the embedded store adopts in place
 * (wal_local_seg.c WD3, objstore.h nrs_objstore_dir_adopt).  0;
 * -EINVAL if w is not a local WAL or seg is 0; -ENAMETOOLONG.
 */
int nrs_wal_local_seg_path(struct nrs_wal *w, uint64_t seg, char *buf,
			   size_t size);

/* The file name of a local WAL's segment seg, NNNNNNNNNNNNNNNN.seg (16
 * lower-case hex digits), into buf of NRS_WAL_SEG_NAME_MAX bytes: for the
 * WAL itself and nereusfs-fsck's messages. */
#define NRS_WAL_SEG_NAME_MAX	32
void nrs_wal_local_seg_name(char buf[NRS_WAL_SEG_NAME_MAX], uint64_t seg);

struct nrs_objstore;
struct nrs_metrics;

/*
 * What a recovery has read so far, shown while it runs (wal_object_scan.c
 * RP1): objects and bytes read from the store (the checkpoint, then each
 * WAL object the scan fetches), and the streams it recovers.  Whoever
 * reads adds to it and calls nrs_wal_progress_tick(); recovery runs alone,
 * so no lock.  start_ns is set by the first tick.
 */
struct nrs_wal_progress {
	const char *what;		/* the lines' prefix: "recover" */
	uint64_t objects, bytes, streams;
	uint64_t start_ns, last_ns;	/* monotonic: first tick, last line */
	unsigned int lines;		/* lines written so far */
};

/* RP1: a line of p's counts if a second went by since the last one (or
 * since the first tick), or always when final.  p may be NULL. */
void nrs_wal_progress_tick(struct nrs_wal_progress *p, bool final);

/* The most objects an object WAL keeps unproven at once
 * (object_wal_inflight's maximum).  A scan crosses gaps this wide in a
 * run it has no seal of, whatever this mount's own window (OW14). */
#define NRS_WAL_OBJECT_INFLIGHT_MAX	64u

struct nrs_wal_object_opts {
	struct nrs_objstore *store;	/* where the WAL objects go */
	const char *dir;		/* a local directory for the state file
					 * (wal_object_scan.c OW6), created */
	unsigned int inflight_max;	/* unproven objects at once (0: 8;
				 * at most NRS_WAL_OBJECT_INFLIGHT_MAX) */
	uint64_t timeout_ms;		/* a sync waits at most this (0: 30 s) */
	uint64_t cache_bytes;		/* proven objects kept for reads
					 * (0: 64 MiB) */
	uint64_t flush_bytes;		/* seal an object at this size
					 * (wal_object.c OW9; 0: 512 KiB) */
	uint64_t linger_ms;		/* or this long after its first write,
					 * or after the previous seal for a
					 * lone writer (OW13; 0: none;
					 * NRS_WAL_OBJECT_LINGER_MS is the
					 * daemon's default) */
	uint64_t grace_ms;		/* a reclaimable object is deleted this
					 * long after it became so
					 * (wal_object_gc.c OWG1; 0: at once) */
	/* The owner gate (DESIGN I8): sync() fails -ESTALE once it returns
	 * false, and reclaim() deletes nothing while it does (OWG2).  NULL:
	 * always allowed. */
	bool (*may_ack)(void *ctx);
	void *may_ack_ctx;
	struct nrs_metrics *metrics;	/* may be NULL */
	/* Called (under the WAL's lock: it must not call the WAL) with the
	 * size of each object proven stored; NULL: none. */
	void (*stored)(void *ctx, uint64_t bytes);
	void *stored_ctx;
	/*
	 * For offline checkers: no worker starts, nothing is written (the
	 * state file neither), write(), sync(), cut() and reclaim() fail
	 * -EROFS; scan() reports each damaged object through damage.
	 */
	bool read_only;
	void (*damage)(void *ctx, const struct nrs_wal_damage *d);
	void *damage_ctx;
	/* OW18: does a generation name a slice of WAL object seg (mat_adopt.c
	 * MZ13)?  Then a reclaim moves the floor over it but does not delete
	 * it: it is the generation's GC's then (lifecycle.c G9).  Called with
	 * no lock of the WAL held; -errno counts as named.  NULL: none is. */
	int (*named)(void *ctx, uint64_t seg);
	void *named_ctx;
	/* The scan counts each object it reads in it (RP1); NULL: none. */
	struct nrs_wal_progress *progress;
};

/* Bytes of a WAL object's header: position (seg, off) is byte
 * NRS_WAL_OBJECT_HDR + off of its object (wal_object.c). */
#define NRS_WAL_OBJECT_HDR	192

/* The key of the object WAL's segment seg (wal_object.c): for
 * user.nereus.index and nereusfs-fsck.  NRS_OBJKEY_MAX (objstore.h) bytes. */
void nrs_wal_object_key(char *key, uint64_t seg);

/*
 * For a recovery from the bucket: make dir (created) the state of an object
 * WAL whose objects below floor are gone, which never ran here (its scan
 * then finds the runs from floor's on, wal_object.c OW11).  -EEXIST if dir
 * holds a state already.  0 or -errno.
 */
int nrs_wal_object_state_init(const char *dir, uint64_t floor);

/*
 * For nereusfs-fsck (its F32): the floor the object WAL state in dir
 * records (wal_object_gc.c OW7: every WAL object below it was reclaimed),
 * 0 and *floor; -ENOENT if dir holds no state, -EUCLEAN a damaged one.
 */
int nrs_wal_object_floor(const char *dir, uint64_t *floor);
/*
 * What key is among the object WAL's keys (wal_object.c THE KEYS):
 * NRS_OWKEY_OBJECT (a WAL object; *seg its segment), NRS_OWKEY_MARKER or
 * NRS_OWKEY_SEAL (*seg: the run's segment 0), or NRS_OWKEY_NONE (any
 * other name, also under owal/).
 */
enum nrs_owkey { NRS_OWKEY_NONE, NRS_OWKEY_OBJECT, NRS_OWKEY_MARKER,
		 NRS_OWKEY_SEAL };
enum nrs_owkey nrs_wal_object_key_kind(const char *key, uint64_t *seg);

#define NRS_WAL_OBJECT_FLUSH_BYTES	(512u << 10)
#define NRS_WAL_OBJECT_LINGER_MS	5

/* Open the object WAL (wal_object.c); its workers start at once.  Nothing
 * is PUT before the first write.  Returns 0 or -errno. */
int nrs_wal_object_open(const struct nrs_wal_object_opts *o,
			struct nrs_wal **out);

/* The least default reserve (WA5): what SQLite's own WAL grows by between
 * checkpoints (1000 pages of 4 KiB). */
#define NRS_WAL_RESERVE_FLOOR	(4ull << 20)
/*
 * WA5, the default reserve on a file system of fs_bytes: 5% of it, at
 * least NRS_WAL_RESERVE_FLOOR, at most max (the configured default), so
 * that a small file system is not all reserve.  A reserve given by the
 * admin is used as given.
 */
uint64_t nrs_wal_reserve_scaled(uint64_t max, uint64_t fs_bytes);

#endif
