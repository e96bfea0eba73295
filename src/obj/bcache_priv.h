/*
 * bcache_priv.h - what the files of the block cache share, and nothing
 * outside src/obj/ may include: its limits, the structures of entries,
 * tiers, flights, streams' reads and prefetch jobs, and the functions one
 * file of the cache calls in another.  The design, the invariants
 * (B1..B7, BW1, BW2) and what c->lock protects are at the top of bcache.c;
 * each function's comment, at its definition, says which lock it needs.
 *
 *   bcache.c           the API: open, close, read, forget, audit, stats
 *   bcache_tier.c      entries, the hash and LRU of a tier, the memory tier
 *   bcache_disk.c      the disk tier: its files, their names, start-up
 *   bcache_fetch.c     a reader's blocks: header, flights, GETs
 *   bcache_fill.c      a GET's body landed block by block, verified
 *   bcache_prefetch.c  sequential reads and the prefetch workers
 */
#ifndef NRS_BCACHE_PRIV_H
#define NRS_BCACHE_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "obj/bcache.h"
#include "obj/objfmt.h"

#define HDR_IDX		UINT32_MAX	/* idx of an object's header entry */
#define DEF_MEM		(128ull << 20)	/* BA2 */
#define DEF_DISK	(1ull << 30)
#define DEF_READAHEAD	(16u << 20)	/* BA2: the default object_size */
#define MAX_READAHEAD	(64u << 20)
#define SEQ_FIRST	(1u << 20)	/* a sequential read's first window */
#define SEQ_SLACK	(1u << 20)	/* how far from the end of the last read
					 * a sequential one may start */
#define RA_GROW		4		/* BA3: each window of a run is this
					 * many times the one before */
#define MAX_FLIGHTS	32		/* more at once are not deduplicated */
#define NWORKERS	4		/* prefetch threads: GETs in flight
					 * ahead of sequential readers */
#define PF_DEEP		2		/* GETs a full window leaves room
					 * for in flight at once (BA1) */
#define NSEQ		64		/* streams whose reads are followed */
#define DISK_NAME_MAX	96
#define BLK_SUFFIX	".blk"
#define TMP_PREFIX	".tmp-"

struct ent {
	struct nrs_objhdr h;
	uint32_t idx;		/* block number, or HDR_IDX */
	uint32_t len;		/* bytes at data (memory); file bytes (disk) */
	uint64_t cost;		/* what it counts against its tier's budget */
	struct ent *hnext;	/* hash chain; victim list once unlinked */
	struct ent *prev, *next;	/* LRU: prev is more recently used */
	unsigned refs;		/* memory entries: B3 */
	bool linked;		/* in its tier's hash and LRU */
	bool ahead;		/* memory: prefetched, not yet read (B7) */
	/* header entries only: */
	struct nrs_objinfo info;
	unsigned char data[];	/* block bytes, or fixed header + table */
};

struct tier {
	struct ent **buckets;
	size_t mask;
	struct ent *mru, *lru;
	uint64_t bytes, budget;
	uint64_t reserved;	/* memory: held for prefetches (B5) */
};

/* A run of blocks [first, first + n) of object h that a reader or a
 * prefetch is fetching; first HDR_IDX and n 1: its header (B8); n == 0: a
 * free slot. */
struct flight {
	struct nrs_objhdr h;
	uint32_t first, n;
	uint32_t next;		/* blocks before it landed (BS2): carried
				 * are [next, first + n) */
};

/* Where the reads of one stream got to (READS); a slot of seqs[]. */
struct seq {
	uint64_t stream_id;
	uint64_t tick;		/* last use; 0: a free slot */
	bool seen;		/* a read was recorded: next means something */
	uint64_t next;		/* where the reads got to (logical) */
	uint64_t run;		/* where the current sequential run began */
	uint64_t pf;		/* prefetches are planned up to here */
	uint32_t ra;		/* blocks the next prefetch GET may fetch */
	unsigned nfollow;	/* follow[0..nfollow) come after cur */
	struct nrs_objhdr cur, follow[NRS_BCACHE_FOLLOW_MAX];
};

/* A prefetch: blocks [first, first + n) of h, listed as flight slot. */
struct job {
	struct job *next;	/* queue */
	struct nrs_objhdr h;
	struct ent *hdr;	/* a reference; NULL: the worker gets one */
	uint32_t first, n;
	int slot;
	uint64_t reserve;	/* memory reserved for its blocks (B5) */
};

struct nrs_bcache {
	struct nrs_objstore *store;	/* borrowed */
	uint32_t readahead;		/* bytes, a multiple of NRS_OBJ_BLOCK */
	uint32_t seq_first;		/* blocks, <= readahead's */
	uint64_t ahead_max;		/* bytes prefetched, not yet read */
	uint32_t pf_max;		/* blocks one prefetch may fetch */
	uint64_t lookahead;		/* bytes past a sequential read */
	int dir_fd;			/* disk_dir, or -1: no disk tier */
	int lock_fd;			/* disk_dir/.lock, flock()ed */
	unsigned nworkers;		/* running; set before any read */
	pthread_t workers[NWORKERS];
	pthread_mutex_t lock;
	pthread_cond_t landed;		/* a flight ended */
	pthread_cond_t work;		/* a job was queued, or stopping */
	/* protected by lock: */
	struct tier mem, disk;
	struct flight flights[MAX_FLIGHTS];
	struct job *queue, *queue_tail;	/* jobs no worker took yet */
	unsigned jobs;			/* queued or running, <= nworkers */
	uint64_t ahead;			/* B7 */
	bool stopping;
	struct seq seqs[NSEQ];
	uint64_t tick;
	struct nrs_bcache_stats st;
	uint64_t tmp_seq;
	bool disk_warned;
};

/* What one nrs_bcache_read(), or one prefetch, wants, with its header
 * entry held. */
struct req {
	struct ent *hdr;
	const struct nrs_objhdr *h;
	uint64_t rel, end;	/* payload-relative bytes wanted */
	uint32_t last;		/* last block wanted */
	bool seq;		/* read ahead past last */
	uint32_t win;		/* blocks a sequential miss may fetch */
	struct job *job;	/* a prefetch: wants nothing, fails nothing */
	unsigned char *dst;
	uint32_t served;	/* blocks [0, served) came with the header
				 * (B8): copied out if wanted */
	int run_err;		/* -EBADMSG: a wanted one of them was bad */
};

/* A GET being landed block by block (bcache_fill.c, STREAMING). */
struct fill {
	struct nrs_bcache *c;
	const struct req *r;	/* h, job, and what a reader wants */
	struct ent *hdr;	/* the table blocks are verified against;
				 * a GET with the header: parsed from it,
				 * the caller's to keep or free */
	int slot;		/* flight moved past landed blocks, or -1 */
	uint32_t first, n;	/* the run of blocks */
	size_t hl;		/* header bytes before the first block */
	unsigned char *hbuf;	/* them, while they come */
	uint64_t have;		/* body bytes taken (header included) */
	uint32_t done;		/* blocks [first, first + done) landed or
				 * failed */
	struct ent *cur;	/* block first + done, being filled */
	int err;		/* -EBADMSG: a wanted block was bad */
	int sink_err;		/* what the sink aborted the GET with */
	int *hslot;		/* a GET with the header: its flight, ended
				 * when the header is published (BS5) */
	bool published;		/* hdr is (BS5) */
};

static inline bool nrs_bc_obj_is(const struct nrs_objhdr *a,
				 const struct nrs_objhdr *b)
{
	return a->stream_id == b->stream_id && a->start == b->start &&
	       a->end == b->end && a->gen == b->gen;
}

/* BA3: the window (blocks) of a run's GET after one of ra, cap the
 * most. */
static inline uint32_t nrs_bc_ra_next(uint32_t ra, uint32_t cap)
{
	return ra < cap / RA_GROW ? ra * RA_GROW : cap;
}

/* What a block of len bytes costs the memory tier. */
static inline uint64_t nrs_bc_blk_cost(size_t len)
{
	return sizeof(struct ent) + len;
}

/* bcache_tier.c */
struct ent *nrs_bc_ent_new(const struct nrs_objhdr *h, uint32_t idx,
			   size_t len);
void nrs_bc_ent_put(struct ent *e);
int nrs_bc_tier_init(struct tier *t, uint64_t budget);
struct ent *nrs_bc_tier_find(const struct tier *t, const struct nrs_objhdr *h,
			     uint32_t idx);
void nrs_bc_tier_touch(struct tier *t, struct ent *e);
void nrs_bc_tier_add(struct tier *t, struct ent *e, uint64_t cost);
void nrs_bc_tier_del(struct tier *t, struct ent *e);
bool nrs_bc_tier_check(const struct tier *t, bool mem, uint64_t *ahead);
void nrs_bc_mem_drop(struct nrs_bcache *c, struct ent *e);
bool nrs_bc_mem_make_room(struct nrs_bcache *c, uint64_t cost, bool prefetch);
void nrs_bc_mem_insert(struct nrs_bcache *c, struct ent *e, struct job *j);

/* bcache_disk.c */
int nrs_bc_disk_open(struct nrs_bcache *c, const char *dir);
int nrs_bc_disk_load(struct nrs_bcache *c, const struct req *r, uint32_t idx,
		     struct ent **out);
void nrs_bc_disk_store(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint32_t idx, const unsigned char *data, size_t len);
void nrs_bc_disk_drop(struct nrs_bcache *c, struct ent *d,
		      struct ent **victims);
void nrs_bc_disk_reap(struct nrs_bcache *c, struct ent *victims);

/* bcache_fill.c */
void nrs_bc_report_bad(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint64_t offset, const char *what, bool count);
ssize_t nrs_bc_store_get(struct nrs_bcache *c, const struct nrs_objhdr *h,
			 uint64_t at, void *buf, size_t len, bool quiet);
void nrs_bc_copy_out(const struct req *r, uint32_t idx,
		     const unsigned char *data, size_t len);
int nrs_bc_hdr_parse(struct nrs_bcache *c, const struct nrs_objhdr *h,
		     const unsigned char *buf, size_t got, struct ent **out);
size_t nrs_bc_run_bytes(const struct nrs_objhdr *h, uint32_t first,
			uint32_t n);
void nrs_bc_fill_init(struct fill *f, struct nrs_bcache *c,
		      const struct req *r, uint32_t first, uint32_t n,
		      int slot);
int nrs_bc_fill_sink(void *arg, uint64_t pos, const void *buf, size_t n);
ssize_t nrs_bc_fill_get(struct fill *f, bool with_hdr);
int nrs_bc_land_buf(struct fill *f, const unsigned char *buf, size_t got);
int nrs_bc_fill_end(struct fill *f, ssize_t got);

/* bcache_fetch.c */
int nrs_bc_hdr_ref(struct nrs_bcache *c, const struct nrs_objhdr *h,
		   struct job *j, struct req *r, struct ent **out);
void nrs_bc_hdr_publish(struct fill *f);
bool nrs_bc_is_held(const struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint32_t idx);
int nrs_bc_flight_add(struct nrs_bcache *c, const struct nrs_objhdr *h,
		      uint32_t first, uint32_t n);
void nrs_bc_flight_end_locked(struct nrs_bcache *c, int slot);
int nrs_bc_fetch_run(struct nrs_bcache *c, const struct req *r,
		     uint32_t first, uint32_t n, int slot);
int nrs_bc_read_step(struct nrs_bcache *c, const struct req *r,
		     uint32_t *cur);
void nrs_bc_fetch_job(struct nrs_bcache *c, struct job *j);

/* bcache_prefetch.c */
int nrs_bc_hdr_get(struct nrs_bcache *c, struct req *r, uint64_t off,
		   size_t len);
void *nrs_bc_worker_main(void *arg);

#endif
