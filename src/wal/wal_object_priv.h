/*
 * wal_object_priv.h - private to src/wal/: the object WAL's state and the
 * functions its files share.
 *
 *   wal_object.c       the provider: the sync (OW1, OW9, OW20), cut (OW4),
 *                      reads, stats, open and close, the operations
 *                      table; the format of a WAL object and the rules
 *   wal_object_append.c  the append path (OW3-OW5, OW9, OW13, OW15)
 *   wal_object_put.c   the workers: PUT, proof (OW1) and retries (OW2)
 *   wal_object_gc.c    reclaim (OW7) after the GC grace (OWG1), never
 *                      while fenced (OWG2)
 *   wal_object_gcrec.c the gc record: the DELETEs a reclaim owes (OWG3)
 *   wal_object_scan.c  the state file (OW6) and the recovery scan (OW8)
 *   wal_object_seal.c  the seal of a past run (SL1-SL4)
 *
 * The formats and the rules are in wal_object.c's top comment.
 */
#ifndef NRS_WAL_OBJECT_PRIV_H
#define NRS_WAL_OBJECT_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "obj/objstore.h"
#include "wal/wal.h"

#define OW_HDR		192		/* bytes of an object's header */
#define OW_MAGIC	"NRSOWAL1"
#define OW_VERSION	1u
#define OW_ABAND_MAX	5		/* abandoned ranges one header holds */
#define OW_OBJ_MAX	(1ull << 30)	/* record bytes of one object, at most */
#define OW_SEQ_BITS	40		/* a position's segment: run << 40 | seq */
#define OW_RUN_PROBE	8		/* OW11: missing markers a scan crosses */
#define OW_SEQ_MAX	((1ull << OW_SEQ_BITS) - 1)
#define OW_SEAL_HOLES_MAX 128		/* SL1: gaps one seal names */
#define OW_RUN_MAX	((1ull << (64 - OW_SEQ_BITS)) - 1)
#define OW_OWED_MAX	8192		/* OWG3: DELETEs one gc record holds */
#define OW_OWED_RETRY_MS 10000		/* OWG3: owed DELETEs that failed are
					 * sent again this much later */

static inline uint64_t ow_seg(uint64_t run, uint64_t seq)
{
	return run << OW_SEQ_BITS | seq;
}

static inline uint64_t ow_run_of(uint64_t seg)
{
	return seg >> OW_SEQ_BITS;
}

static inline uint64_t ow_seq_of(uint64_t seg)
{
	return seg & OW_SEQ_MAX;
}

/* Records abandoned (OW4): every one at a position >= (lo_seg, lo_off)
 * in a segment <= hi_seg. */
struct ow_range {
	uint64_t lo_seg, lo_off, hi_seg;
};

static inline bool ow_range_has(const struct ow_range *r, uint64_t seg,
				uint64_t off)
{
	return seg <= r->hi_seg &&
	       (seg > r->lo_seg || (seg == r->lo_seg && off >= r->lo_off));
}

/* A WAL object's decoded header. */
struct ow_hdr {
	uint64_t seg;			/* run << 40 | seq */
	uint64_t rec_len;		/* record bytes after the header */
	uint32_t n_aband;
	struct ow_range aband[OW_ABAND_MAX];
};

/* A scan's view of one run (SL1): from its seal, or what it found. */
struct ow_view {
	uint64_t run;
	uint64_t from;			/* the first seq probed */
	uint64_t end;			/* the last seq found; 0: none */
	bool sealed;			/* a seal in the store says so */
	uint32_t n_holes;
	struct {
		uint64_t lo, hi;
	} holes[OW_SEAL_HOLES_MAX];	/* seqs in [from, end] not found */
	uint64_t ignored;		/* SL3: late objects found */
};

enum ow_state {
	OW_OPEN = 1,		/* batches are written into it (OW9) */
	OW_SEALING,		/* its header and digest are being made */
	OW_PUTTING,		/* a worker PUTs it until proven */
	OW_PROVEN,		/* stored and proven (OW1) */
	OW_BAD,			/* other bytes under its key: quarantined */
};

/* One WAL object this run wrote or the scan found. */
struct ow_obj {
	uint64_t seg;
	uint64_t size;			/* header + records */
	unsigned char *buf;		/* its bytes; NULL once evicted */
	uint64_t cap;			/* of buf, while OW_OPEN */
	unsigned char sha256[NRS_SHA256_LEN];
	enum ow_state state;
	bool taken;			/* a worker has it */
	bool hedged;			/* a second worker PUTs it too (OW10) */
	unsigned int users;		/* workers using buf: not freed */
	uint64_t t_attempt_ns;		/* the first worker's PUT began */
	uint64_t aband_from;		/* records from this offset on are
					 * cut (OW4); UINT64_MAX: none */
	uint64_t t_write_ns;		/* its first write() */
	bool appends;			/* OW15: holds an appended byte */
	uint64_t t_dead_ns;		/* OWG1: first found reclaimable
					 * (monotonic; 0: not, or needed
					 * again since) */
	struct ow_obj *next;		/* in seg order */
	struct ow_obj *unp_prev, *unp_next;	/* OW17: in w->unp while
						 * sealed and not settled */
};

struct wal_object {
	struct nrs_wal base;
	struct nrs_objstore *store;
	char *state_path;		/* DIR/state (OW6) */
	char *gc_path;			/* DIR/gc (OWG3) */
	char *dir;
	unsigned int inflight_max;	/* unproven objects at most (OW5) */
	uint64_t timeout_ns;		/* OW2 */
	uint64_t cache_bytes;
	uint64_t flush_bytes;		/* OW9 */
	uint64_t linger_ns;		/* OW9 */
	uint64_t grace_ns;		/* OWG1 */
	bool (*may_ack)(void *ctx);
	void *may_ack_ctx;
	struct nrs_metrics *metrics;
	bool read_only;
	void (*stored)(void *ctx, uint64_t bytes);
	void *stored_ctx;
	int (*named)(void *ctx, uint64_t seg);	/* OW18; may be NULL */
	void *named_ctx;
	void (*damage)(void *ctx, const struct nrs_wal_damage *d);
	void *damage_ctx;
	struct nrs_wal_progress *progress;	/* RP1; may be NULL */

	pthread_mutex_t lock;
	pthread_cond_t work;		/* OW19: an object to PUT or hedge */
	pthread_cond_t done;		/* OW19: an object settled, a window
					 * freed, the open one changed */
	pthread_cond_t nap;		/* back-offs: woken by the stop only */
	struct ow_obj *head, *tail;	/* every object held, seg order */
	struct ow_obj *open;		/* the one being filled, or NULL */
	struct ow_obj *unp, *unp_tail;	/* OW17: the unproven, seg order */
	uint64_t floor;			/* OW6, OW7: objects below are gone */
	uint64_t run;			/* this run (0: none yet, OW3) */
	bool run_marked;		/* its marker is stored (OW11) */
	uint64_t last_run;		/* the highest run the state names */
	uint64_t next_seq;		/* of this run */
	uint64_t t_sealed_ns;		/* OW13: the last seal (0: none) */
	bool lone;			/* OW13: the object sealed last held
					 * one append, or none was sealed */
	unsigned int open_appends;	/* in the open object (2: two or
					 * more, or not known) */
	uint64_t last_seg;		/* highest segment held or written */
	struct ow_range pend[OW_ABAND_MAX];	/* OW4: not yet recorded */
	unsigned int n_pend;
	struct ow_view *views;		/* SL1: of the runs the scan probed */
	size_t n_views, cap_views;
	unsigned int unproven;		/* objects PUTTING (OW5) */
	uint64_t held_bytes;		/* bytes of every object held */
	uint64_t cached_bytes;		/* bytes of bufs of proven objects */
	bool broken;			/* OW1: a quarantine */
	uint64_t srtt_ns, rttvar_ns;	/* OW10: PUT latency */
	uint64_t lat_samples;
	bool stop;
	/* OWG3: one reclaim at a time.  Guarded by it: the DELETEs owed
	 * (segments, ascending; the array holds OW_OWED_MAX), and whether
	 * the gc record on disk says something else (damaged, or more). */
	pthread_mutex_t gc_lock;
	uint64_t *owed;
	size_t n_owed;
	bool gc_stale;
	uint64_t owed_due_ns;		/* OWG3: when the owed are sent again
					 * (monotonic; 0: none owed); lock */
	pthread_t *workers;
	unsigned int nworkers;
};

/* Encode h (n_aband <= OW_ABAND_MAX) into out[OW_HDR]. */
void ow_hdr_encode(const struct ow_hdr *h, unsigned char out[OW_HDR]);
/* Decode and verify (magic, version, CRC, fields); 0 or -EBADMSG. */
int ow_hdr_decode(const unsigned char in[OW_HDR], struct ow_hdr *out);
/* The key of segment seg: "owal/<run, 6 hex>/<seq, 10 hex>". */
void ow_key(char key[NRS_OBJKEY_MAX], uint64_t seg);

/* OW6: read the state file (absent: floor 0, last_run 0); 0 or -errno. */
int ow_state_read(const char *path, uint64_t *floor, uint64_t *last_run);
/* OW6: replace it durably; 0 or -errno. */
int ow_state_write(const char *path, const char *dir, uint64_t floor,
		   uint64_t last_run);

/* OWG3: read the gc record at path (absent: *n = 0) into segs[OW_OWED_MAX];
 * 0, -EUCLEAN (damaged: wal_object_gcrec.c) or -errno. */
int ow_gc_read(const char *path, uint64_t last_run, uint64_t *segs,
	       size_t *n);
/* OWG3: replace it durably with the n (<= OW_OWED_MAX) ascending segs, all
 * below floor; n 0 removes it.  0 or -errno. */
int ow_gc_write(const char *path, const char *dir, uint64_t floor,
		const uint64_t *segs, size_t n);

/* Insert o in seg order (lock held). */
void ow_insert(struct wal_object *w, struct ow_obj *o);
/* OW17: o is sealed (unproven++), or settled or failed (unproven--). */
void ow_unp_add(struct wal_object *w, struct ow_obj *o);
void ow_unp_del(struct wal_object *w, struct ow_obj *o);
/* The object of segment seg, or NULL (lock held). */
struct ow_obj *ow_find(struct wal_object *w, uint64_t seg);

/* OW4: add a range to the abandoned ranges not yet recorded (lock held);
 * -EOVERFLOW if they do not fit a header. */
int ow_pend_add(struct wal_object *w, const struct ow_range *add);
/* Drop the bytes of the oldest proven objects past cache_bytes (lock held). */
void ow_evict(struct wal_object *w);

/* Wait ms on nap unless stopping (lock held); true if stopping. */
bool ow_nap(struct wal_object *w, unsigned int ms);
/* OW19: wait once on cv (one of w's, CLOCK_MONOTONIC) until woken or
 * the monotonic deadline (UINT64_MAX: none) passes (lock held).  The
 * caller checks what it waits for again. */
void ow_wait_until(struct wal_object *w, pthread_cond_t *cv,
		   uint64_t deadline);
/* OW11: store run's marker and prove it, retrying until deadline (no
 * lock held).  0, -ETIMEDOUT, -EIO (other bytes under its key). */
int ow_put_marker(struct wal_object *w, uint64_t run, uint64_t deadline);
/* OW11: the marker's bytes for run. */
#define OW_MARKER_LEN	32
void ow_marker_encode(uint64_t run, unsigned char out[OW_MARKER_LEN]);
/* The append path (wal_object_append.c): the provider's write(); wait
 * until fewer than inflight_max objects are unproven (OW5: 0, -ETIMEDOUT
 * past deadline, -EIO, -ESHUTDOWN); seal the open object o and hand it to
 * the workers (OW9; lock held, dropped and taken again). */
int ow_write(struct nrs_wal *wal, const struct iovec *iov, int iovcnt,
	     struct nrs_wal_pos *pos);
int ow_wait_window(struct wal_object *w, uint64_t deadline);
void ow_seal_open(struct wal_object *w, struct ow_obj *o);
/* A worker thread (wal_object_put.c); arg: the WAL. */
void *ow_worker(void *arg);

int ow_scan(struct nrs_wal *wal, nrs_wal_scan_cb cb, void *ctx);

/* OW7, OWG1, OWG2: the provider's reclaim (wal_object_gc.c). */
int ow_reclaim(struct nrs_wal *wal, uint64_t below, uint64_t *bytes);
/* OWG1: when the first object waiting out its grace may go; 0: none
 * waits (lock held). */
uint64_t ow_reclaim_due(const struct wal_object *w);
/* SL1-SL4 (wal_object_seal.c).  The key of run's seal. */
void ow_seal_key(char key[NRS_OBJKEY_MAX], uint64_t run);
/* SL3: is seq of v's run late (above its seal's end, or in a hole)? */
bool ow_view_excludes(const struct ow_view *v, uint64_t seq);
/* SL1: v's run has a gap [lo, hi]; -EOVERFLOW past OW_SEAL_HOLES_MAX. */
int ow_view_add_hole(struct ow_view *v, uint64_t lo, uint64_t hi);
/* SL2: read run's seal into *v (sealed stays false without one); 0,
 * -EUCLEAN (a damaged seal) or the store's error (lock held). */
int ow_seal_read(struct wal_object *w, uint64_t run, struct ow_view *v);
/* SL1, SL2: store v as its run's seal and prove it, or adopt the seal
 * already there (then *v is that one); lock held, dropped in naps. */
int ow_seal_store(struct wal_object *w, struct ow_view *v);

#endif
