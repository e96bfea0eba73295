/*
 * bcache.c - verified reads of segment objects through a block cache.
 *
 * Readers of materialized ranges ask for logical bytes of an object
 * (nrs_bcache_read); this module turns that into as few range GETs as it
 * can, verifies every block against the object's CRC table (DESIGN.md I6),
 * and keeps verified blocks in memory and, optionally, in a directory on a
 * local disk.  For sequential readers, threads of its own fetch ahead with
 * several GETs in flight (PREFETCH).  The object format is objfmt.c's.
 *
 * WHY A CACHE OF OBJECTS IS SIMPLE HERE
 *
 * Objects are immutable and a key is never reused for other bytes
 * (DESIGN.md 6): a block verified once is right for as long as anyone can
 * ask for it.  So there is no invalidation, only eviction; forget() is
 * hygiene before a delete, not a correctness step, and a read racing a
 * forget() may leave an entry behind without harm.
 *
 * ENTRIES
 *
 * An entry is named by (stream, start, end, gen, idx), the object's whole
 * identity (its key derives from the same four numbers) and:
 *   - idx = HDR_IDX: the object's fixed header and CRC table, fetched with
 *     one range GET of the first nrs_objfmt_hdr_len() bytes, and kept only
 *     if the header CRC, the version, the fields, the identity (exactly the
 *     caller's nrs_objhdr) and the table CRC all check;
 *   - idx = i: payload block i (NRS_OBJ_BLOCK bytes, the last one shorter).
 *
 * TIERS
 *
 * Memory: a hash table and an LRU list, bounded by mem_bytes (entry struct
 * plus data are counted).  An entry that does not fit once every unused
 * entry is evicted is not cached: the reader uses its private copy.
 *
 * Disk (optional, disk_dir): write-through.  Every block that verified after
 * a GET is also written to disk_dir as one file (the tier is inclusive: it
 * holds what memory holds and more, being larger).  Written when fetched,
 * rather than when evicted from memory, so that the write is done by the
 * thread that did the GET, outside the lock, and the eviction path (under
 * the lock) never does I/O.  A prefetched block is in memory (and may be
 * read from there) before its file is written; nrs_bcache_drain() returns
 * once both are done.  Files are not fsynced: the tier is a cache and
 * a torn file fails its check.  Bounded by disk_bytes (file data counted),
 * LRU.  The header and table are not kept on disk: one small GET refetches
 * them.
 *
 *   disk_dir/.lock       flock()ed while open: one cache per directory
 *   disk_dir/SSSSSSSSSSSSSSSS-AAAAAAAAAAAAAAAA-EEEEEEEEEEEEEEEE-
 *            GGGGGGGGGGGGGGGG-IIIIIIII.blk
 *                        block IIIIIIII of the object (stream, start, end,
 *                        gen), lower-case hex, the block's bytes only
 *   disk_dir/.tmp-PID-N  a block being written; renamed into place
 *
 * Start-up with an existing disk_dir REUSES it: files named as above are
 * indexed (in directory order, as the least recently used) and trusted for
 * nothing but their name: each is verified again when read (B2).  Leftover
 * .tmp- files and our names with an impossible size are removed; any other
 * file is left alone (the directory is the administrator's).
 *
 * A disk file that fails its check, vanished, or cannot be read is dropped
 * from the index (and, if bad, unlinked) and the block is fetched from the
 * store again: the reader sees the store's verified bytes, never the disk's
 * rot and never an error of the disk tier.  Failing disk writes are logged
 * once and otherwise ignored.
 *
 * READS
 *
 * A read takes a reference on the object's header entry, then walks the
 * blocks it wants.  A block in memory is copied out under a reference; a
 * block on disk is read and verified; a block a flight carries (below) is
 * waited for; a missing run is fetched with one range GET by the reader
 * itself.  A run stops at a block that memory or disk already holds or a
 * flight carries, and at `readahead` bytes.  A read that is not sequential
 * fetches only the blocks it wants.
 *
 * A read is sequential if it starts at the object's start, or within
 * SEQ_SLACK of where the previous reads of its stream got to (the kernel
 * sends a sequential reader's requests concurrently, and they arrive in
 * any order).  That is kept per stream, not per object, in a small table
 * (NSEQ streams, least recently used replaced), so that a run goes on
 * across the objects of a stream.  A read that is not sequential starts a
 * new run.  A sequential reader that misses a block itself (the prefetches
 * could not cover it) fetches up to the stream's window.
 *
 * Each block of a GET is verified before it is cached or copied; a bad
 * block is logged (key, stream, logical offset), counted, never cached,
 * and fails the read (-EBADMSG) if the read wanted it.  A bad block
 * fetched for anyone else fails nothing.
 *
 * A run being fetched is a flight, listed until its blocks are cached: a
 * reader that misses a block of a flight waits for it to land instead of
 * fetching it again, then looks again: normally the block is in memory by
 * then; if not (the fetch failed, or memory had no room), the reader
 * fetches it itself, so that only its own GET can fail it.
 *
 * PREFETCH
 *
 * One GET at a time leaves the store idle while the reader consumes, and a
 * store like s3rver serves one connection at 165 MB/s but four at 340.  So
 * a sequential read also plans prefetches, which NWORKERS threads owned by
 * the cache run, each one range GET of a run, listed as a flight from the
 * moment it is planned (so a reader never fetches what a prefetch will).
 * The plan, under the lock, in the read's thread:
 *   - the horizon is the end of the read plus as many bytes as the run has
 *     read so far, at most `lookahead` (NWORKERS * readahead, at most half
 *     the memory tier and NRS_BCACHE_FOLLOW): a read that merely starts at
 *     an object's start sets off one window, a long run keeps `lookahead`
 *     bytes coming;
 *   - from where the stream's prefetches got to (or the read's first
 *     block), each block not held is planned in runs of the stream's
 *     window, which starts at SEQ_FIRST and doubles with each prefetch up
 *     to `readahead`, or less if the bytes ahead (B7) could not hold a GET
 *     for every worker and one window landed besides (with the default
 *     64 MiB tier: 6.4 MiB; else, every worker busy, the reader would
 *     wait for a full window to be read before the next GET could start);
 *   - past the object's end it goes on into the object the reader named as
 *     the next one (nrs_bcache_follow, from the stream's index), whose
 *     header the worker fetches first if need be;
 *   - it stops when every worker has a job (W1), no flight slot is free,
 *     or the bytes read ahead (B7) or the memory tier would go over.
 * A worker verifies each block as a reader's GET does and caches it marked
 * `ahead` (prefetched, not yet read), writing it to the disk tier too.  A
 * prefetch that fails (a store error, a bad block, no memory) is logged
 * (store errors at debug level only) and fails nothing: whoever wanted the
 * bytes finds no flight and no block, and fetches them itself.  The
 * objects a prefetch reads are not covered by the reader's gate
 * (reader.h): one deleted meanwhile is a failed prefetch, nothing worse.
 *
 * INVARIANTS
 *
 *   B1  An entry in memory holds only bytes that matched a CRC of a table
 *       that matched the table CRC of a header naming exactly the entry's
 *       object.  Bytes copied to a reader satisfy the same.
 *   B2  Nothing read from disk_dir is used before it matched its CRC.
 *   B3  An entry is freed only when no reader holds it: refs counts the
 *       readers (and prefetches holding a header) plus one while the entry
 *       is in the memory tier.  Eviction takes only entries with
 *       refs == 1 (forget() takes any): evicting one in use would be safe,
 *       but would free nothing while mem.bytes says it did.
 *   B4  No store request and no file I/O happens under c->lock.
 *   B5  mem.bytes + mem.reserved <= mem.budget always, where reserved is
 *       what the blocks of planned prefetches will cost: a prefetch makes
 *       room when it is planned, so its blocks land without evicting;
 *       disk.bytes <= disk.budget after every insertion.
 *   B6  A reader waits for a flight only while it owns none, and workers
 *       never wait for flights: a flight is ended before its reader waits
 *       or moves to its next block, and a prefetch's when its job ends,
 *       so every flight ends and no wait is forever.
 *   B7  ahead = the cost of the memory entries marked ahead + mem.reserved
 *       <= ahead_max (half the memory tier).  Making room for a prefetch
 *       never evicts an entry marked ahead; a reader's making room evicts
 *       them only after every other unused entry.  So prefetches never
 *       throw out what a reader is about to read, and always leave half
 *       the tier to what readers read.  A read of the block clears the
 *       mark; entries abandoned with it are evicted like any other once
 *       readers need the room.
 *   W1  jobs (queued or running) <= nworkers: a planned prefetch starts at
 *       once, so a reader waiting for its flight waits for one GET only.
 *   W2  nrs_bcache_close() stops the workers and joins them: a running
 *       job finishes its GET, a queued one ends without one; every job
 *       gives back its reservation, flight and header reference.
 *
 * LOCKING: one mutex, c->lock, protects both tiers, every entry's refs,
 * links and ahead mark, the flights, the job queue, the stream table, and
 * the statistics; c->landed is signalled with it when a flight ends,
 * c->work when a job is queued or the cache stops.  Entry data is
 * immutable once the entry is published, so readers copy it without the
 * lock (B3).  A job is owned by the worker that took it off the queue.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objfmt.h"
#include "util/fileio.h"
#include "util/log.h"

#define HDR_IDX		UINT32_MAX	/* idx of an object's header entry */
#define DEF_MEM		(64ull << 20)
#define DEF_DISK	(1ull << 30)
#define DEF_READAHEAD	(8u << 20)
#define MAX_READAHEAD	(64u << 20)
#define SEQ_FIRST	(1u << 20)	/* a sequential read's first window */
#define SEQ_SLACK	(1u << 20)	/* how far from the end of the last read
					 * a sequential one may start */
#define MAX_FLIGHTS	32		/* more at once are not deduplicated */
#define NWORKERS	4		/* prefetch threads: GETs in flight
					 * ahead of sequential readers */
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

/* A run of blocks [first, first + n) of object h that a reader is fetching;
 * n == 0: a free slot. */
struct flight {
	struct nrs_objhdr h;
	uint32_t first, n;
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
};

/* ---- entries and tiers (callers hold c->lock unless noted) ------------ */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static size_t ent_hash(const struct tier *t, const struct nrs_objhdr *h,
		       uint32_t idx)
{
	uint64_t x = mix(h->stream_id ^ idx);

	x = mix(x ^ h->start);
	x = mix(x ^ h->end);
	return (size_t)mix(x ^ h->gen) & t->mask;
}

static bool obj_is(const struct nrs_objhdr *a, const struct nrs_objhdr *b)
{
	return a->stream_id == b->stream_id && a->start == b->start &&
	       a->end == b->end && a->gen == b->gen;
}

static bool ent_is(const struct ent *e, const struct nrs_objhdr *h,
		   uint32_t idx)
{
	return e->idx == idx && obj_is(&e->h, h);
}

/* A new unlinked entry with room for len bytes, which the caller fills
 * (they are not zeroed: blocks are written whole); no lock needed. */
static struct ent *ent_new(const struct nrs_objhdr *h, uint32_t idx,
			   size_t len)
{
	struct ent *e = malloc(sizeof(*e) + len);

	if (!e)
		return NULL;
	memset(e, 0, sizeof(*e));
	e->h = *h;
	e->idx = idx;
	e->len = (uint32_t)len;
	return e;
}

static int tier_init(struct tier *t, uint64_t budget)
{
	uint64_t want = budget / NRS_OBJ_BLOCK;
	size_t n = 64;

	while (n < want && n < (1u << 20))
		n <<= 1;
	t->buckets = calloc(n, sizeof(struct ent *));
	if (!t->buckets)
		return -ENOMEM;
	t->mask = n - 1;
	t->budget = budget;
	return 0;
}

static struct ent *tier_find(const struct tier *t, const struct nrs_objhdr *h,
			     uint32_t idx)
{
	struct ent *e;

	if (!t->buckets)
		return NULL;
	for (e = t->buckets[ent_hash(t, h, idx)]; e; e = e->hnext)
		if (ent_is(e, h, idx))
			return e;
	return NULL;
}

static void lru_unlink(struct tier *t, struct ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		t->mru = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		t->lru = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push(struct tier *t, struct ent *e)
{
	e->prev = NULL;
	e->next = t->mru;
	if (t->mru)
		t->mru->prev = e;
	else
		t->lru = e;
	t->mru = e;
}

static void tier_touch(struct tier *t, struct ent *e)
{
	if (t->mru != e) {
		lru_unlink(t, e);
		lru_push(t, e);
	}
}

static void tier_add(struct tier *t, struct ent *e, uint64_t cost)
{
	struct ent **b = &t->buckets[ent_hash(t, &e->h, e->idx)];

	e->hnext = *b;
	*b = e;
	lru_push(t, e);
	e->cost = cost;
	e->linked = true;
	t->bytes += cost;
}

static void tier_del(struct tier *t, struct ent *e)
{
	struct ent **p = &t->buckets[ent_hash(t, &e->h, e->idx)];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	e->hnext = NULL;
	lru_unlink(t, e);
	e->linked = false;
	t->bytes -= e->cost;
}

/* Drop one reference to a memory entry; the last one frees it (B3). */
static void ent_put(struct ent *e)
{
	if (--e->refs == 0)
		free(e);
}

static void mem_drop(struct nrs_bcache *c, struct ent *e)
{
	if (e->ahead) {
		e->ahead = false;
		c->ahead -= e->cost;
	}
	tier_del(&c->mem, e);
	ent_put(e);
}

/* What a block of len bytes costs the memory tier. */
static uint64_t blk_cost(size_t len)
{
	return sizeof(struct ent) + len;
}

/*
 * Evict unused memory entries until cost more bytes fit beside what is
 * reserved (B5): least recently used first, entries read ahead and not yet
 * read only after every other, and never for a prefetch (B7).  false:
 * they do not fit.
 */
static bool mem_make_room(struct nrs_bcache *c, uint64_t cost, bool prefetch)
{
	struct tier *t = &c->mem;

	if (cost > t->budget || t->reserved > t->budget - cost)
		return false;
	for (int pass = 0; pass < (prefetch ? 1 : 2); pass++) {
		struct ent *e = t->lru;

		while (t->bytes + t->reserved + cost > t->budget && e) {
			struct ent *prev = e->prev;

			if (e->refs == 1 && (pass == 1 || !e->ahead))
				mem_drop(c, e);
			e = prev;
		}
	}
	return t->bytes + t->reserved + cost <= t->budget;
}

/*
 * Offer e (unlinked, refs 0, data verified: B1) to the memory tier.  It is
 * linked, or freed if the tier has the block already or no room for it.
 * With j, e is a block of prefetch j: its reservation is given back and it
 * is linked as read ahead (B7).  Takes the lock.
 */
static void mem_insert(struct nrs_bcache *c, struct ent *e, struct job *j)
{
	uint64_t cost = blk_cost(e->len);
	struct ent *old;

	pthread_mutex_lock(&c->lock);
	if (j) {
		assert(j->reserve >= cost && c->mem.reserved >= cost);
		j->reserve -= cost;
		c->mem.reserved -= cost;
	}
	old = tier_find(&c->mem, &e->h, e->idx);
	if (old) {
		tier_touch(&c->mem, old);
	} else if (mem_make_room(c, cost, j != NULL)) {
		e->refs = 1;
		e->ahead = j != NULL;
		tier_add(&c->mem, e, cost);
		e = NULL;
	}
	if (e && j)
		c->ahead -= cost;	/* not kept: no longer ahead */
	pthread_mutex_unlock(&c->lock);
	free(e);
}

/* ---- the disk tier ---------------------------------------------------- */

static void disk_name(char name[DISK_NAME_MAX], const struct nrs_objhdr *h,
		      uint32_t idx)
{
	snprintf(name, DISK_NAME_MAX,
		 "%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64
		 "-%08" PRIx32 BLK_SUFFIX,
		 h->stream_id, h->start, h->end, h->gen, idx);
}

/* The object and block a file name of ours names; false if it is not one
 * (exactly what disk_name() writes, for a possible range). */
static bool disk_parse(const char *name, struct nrs_objhdr *h, uint32_t *idx)
{
	char again[DISK_NAME_MAX];

	if (sscanf(name, "%16" SCNx64 "-%16" SCNx64 "-%16" SCNx64 "-%16" SCNx64
		   "-%8" SCNx32, &h->stream_id, &h->start, &h->end, &h->gen,
		   idx) != 5)
		return false;
	if (!nrs_objfmt_hdr_is_valid(h) ||
	    *idx >= nrs_objfmt_nblocks(h->end - h->start))
		return false;
	disk_name(again, h, *idx);
	return strcmp(again, name) == 0;
}

/* Unlink the files of a victim list built under the lock, and free it.
 * Called without the lock (B4). */
static void disk_reap(struct nrs_bcache *c, struct ent *victims)
{
	char name[DISK_NAME_MAX];

	while (victims) {
		struct ent *next = victims->hnext;

		disk_name(name, &victims->h, victims->idx);
		if (unlinkat(c->dir_fd, name, 0) < 0 && errno != ENOENT)
			nrs_debug("bcache: unlink %s: %s", name,
				  strerror(errno));
		free(victims);
		victims = next;
	}
}

/* Remove d from the disk index onto *victims. */
static void disk_drop(struct nrs_bcache *c, struct ent *d,
		      struct ent **victims)
{
	tier_del(&c->disk, d);
	d->hnext = *victims;
	*victims = d;
}

/* Evict disk entries until cost more bytes fit (B5); evicted entries go
 * onto *victims for disk_reap(). */
static bool disk_make_room(struct nrs_bcache *c, uint64_t cost,
			   struct ent **victims)
{
	if (cost > c->disk.budget)
		return false;
	while (c->disk.bytes + cost > c->disk.budget && c->disk.lru)
		disk_drop(c, c->disk.lru, victims);
	return true;
}

/* Index a file of len bytes for block (h, idx); takes the lock. */
static void disk_index(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint32_t idx, size_t len)
{
	struct ent *d = ent_new(h, idx, 0), *victims = NULL, *old;
	bool indexed = false;

	pthread_mutex_lock(&c->lock);
	old = tier_find(&c->disk, h, idx);
	if (old) {
		tier_touch(&c->disk, old);
		indexed = true;
	} else if (d && disk_make_room(c, len, &victims)) {
		d->len = (uint32_t)len;
		tier_add(&c->disk, d, len);
		d = NULL;
		indexed = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (!indexed) {
		/* No memory to index it: it must not stay untracked, out of
		 * the budget's reach. */
		char name[DISK_NAME_MAX];

		disk_name(name, h, idx);
		unlinkat(c->dir_fd, name, 0);
	}
	free(d);
	disk_reap(c, victims);
}

static void disk_warn(struct nrs_bcache *c, const char *what, int err)
{
	bool first;

	pthread_mutex_lock(&c->lock);
	first = !c->disk_warned;
	c->disk_warned = true;
	pthread_mutex_unlock(&c->lock);
	if (first)
		nrs_warn("bcache: disk tier: %s: %s (further failures are "
			 "logged at debug level)", what, strerror(-err));
	else
		nrs_debug("bcache: disk tier: %s: %s", what, strerror(-err));
}

/* Store a verified block in the disk tier (best effort; no lock held). */
static void disk_store(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint32_t idx, const unsigned char *data, size_t len)
{
	char tmp[64], name[DISK_NAME_MAX];
	bool have;
	uint64_t seq;
	ssize_t n;
	int fd, err;

	pthread_mutex_lock(&c->lock);
	have = tier_find(&c->disk, h, idx) != NULL;
	seq = ++c->tmp_seq;
	pthread_mutex_unlock(&c->lock);
	if (have || len > c->disk.budget)
		return;

	snprintf(tmp, sizeof(tmp), TMP_PREFIX "%ld-%" PRIu64, (long)getpid(),
		 seq);
	disk_name(name, h, idx);
	fd = openat(c->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
		    O_NOFOLLOW, 0600);
	if (fd < 0) {
		disk_warn(c, "create", -errno);
		return;
	}
	/* One write: a short one (a full disk) just leaves the block out. */
	n = write(fd, data, len);
	err = n == (ssize_t)len ? 0 : n < 0 ? -errno : -ENOSPC;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && renameat(c->dir_fd, tmp, c->dir_fd, name) < 0)
		err = -errno;
	if (err) {
		unlinkat(c->dir_fd, tmp, 0);
		disk_warn(c, "write", err);
		return;
	}
	disk_index(c, h, idx, len);
}

/*
 * Read block idx of r's object from disk into a new entry, verified (B2).
 * 0 with *out set, or an error after which the block is no longer indexed
 * (a bad file is also unlinked); -ENOMEM is the only error worth more than
 * a fetch from the store.  No lock held.
 */
static int disk_load(struct nrs_bcache *c, const struct req *r, uint32_t idx,
		     struct ent **out)
{
	const struct nrs_objinfo *oi = &r->hdr->info;
	size_t len = nrs_objfmt_block_len(oi, idx), got = 0;
	char name[DISK_NAME_MAX];
	struct ent *e, *d, *victims = NULL;
	struct stat st;
	int fd, err = 0;

	e = ent_new(r->h, idx, len);
	if (!e)
		return -ENOMEM;
	disk_name(name, r->h, idx);
	fd = openat(c->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		err = -errno;
	else if (fstat(fd, &st) < 0)
		err = -errno;
	else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != len)
		err = -EBADMSG;
	while (!err && got < len) {
		ssize_t n = pread(fd, e->data + got, len - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			err = n < 0 ? -errno : -EBADMSG;
		else
			got += (size_t)n;
	}
	if (fd >= 0)
		close(fd);
	if (!err)
		err = nrs_objfmt_verify_block(oi, r->hdr->data + NRS_OBJ_FIXED,
					      idx, e->data, len);

	pthread_mutex_lock(&c->lock);
	d = tier_find(&c->disk, r->h, idx);
	if (!err) {
		c->st.disk_hits++;
		if (d)
			tier_touch(&c->disk, d);
	} else {
		if (err == -EBADMSG)
			c->st.bad_blocks++;
		if (d)
			disk_drop(c, d, &victims);
	}
	pthread_mutex_unlock(&c->lock);

	if (err == -EBADMSG)
		nrs_warn("bcache: disk tier: %s fails its check (stream %"
			 PRIu64 " offset %" PRIu64 "); fetching it again",
			 name, r->h->stream_id,
			 r->h->start + (uint64_t)idx * NRS_OBJ_BLOCK);
	else if (err)
		nrs_debug("bcache: disk tier: %s: %s", name, strerror(-err));
	disk_reap(c, victims);	/* a bad or unreadable file goes */
	if (err) {
		free(e);
		return err;
	}
	*out = e;
	return 0;
}

/*
 * Open or create disk_dir, lock it (-EBUSY: another cache has it), and
 * index the blocks an earlier run left there (see the top of this file).
 * Runs before any other thread can reach c; the caller logs a failure.
 */
static int disk_open(struct nrs_bcache *c, const char *dir)
{
	struct nrs_objhdr h;
	struct ent *victims = NULL;
	struct dirent *de;
	uint32_t idx;
	DIR *d;
	int err;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)	/* fileio.h DM1 */
		return -errno;
	err = nrs_dir_check_private(dir, "disk cache directory");	/* DM2 */
	if (err)
		return err;
	c->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dir_fd < 0)
		return -errno;
	c->lock_fd = openat(c->dir_fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC |
			    O_NOFOLLOW, 0600);
	if (c->lock_fd < 0)
		return -errno;
	if (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	err = tier_init(&c->disk, c->disk.budget);
	if (err)
		return err;

	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct stat st;
		struct ent *e;

		if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
			unlinkat(c->dir_fd, de->d_name, 0);
			continue;
		}
		if (!disk_parse(de->d_name, &h, &idx))
			continue;	/* not ours */
		if (fstatat(c->dir_fd, de->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
		    st.st_size > NRS_OBJ_BLOCK) {
			unlinkat(c->dir_fd, de->d_name, 0);
			continue;
		}
		e = ent_new(&h, idx, 0);
		if (!e) {
			err = -ENOMEM;
			break;
		}
		e->len = (uint32_t)st.st_size;
		if (!disk_make_room(c, e->len, &victims)) {
			free(e);
			continue;
		}
		tier_add(&c->disk, e, e->len);
	}
	closedir(d);
	disk_reap(c, victims);
	return err;
}

/* ---- fetching and verifying ------------------------------------------ */

/* Log a verification failure of h's object (what at logical offset), and
 * count it unless it is a newer version rather than damage. */
static void report_bad(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint64_t offset, const char *what, bool count)
{
	char key[NRS_OBJKEY_MAX];

	if (count) {
		pthread_mutex_lock(&c->lock);
		c->st.bad_blocks++;
		pthread_mutex_unlock(&c->lock);
	}
	nrs_objfmt_key(key, h);
	nrs_err("bcache: object %s (stream %" PRIu64 " offset %" PRIu64
		"): %s", key, h->stream_id, offset, what);
}

/* One range GET, counted.  Returns bytes read or a store error, logged;
 * a prefetch's (quiet) only at debug level: no read asked for it, and the
 * one that does will say what fails. */
static ssize_t store_get(struct nrs_bcache *c, const struct nrs_objhdr *h,
			 uint64_t at, void *buf, size_t len, bool quiet)
{
	char key[NRS_OBJKEY_MAX];
	ssize_t got;

	nrs_objfmt_key(key, h);
	got = nrs_obj_get(c->store, key, at, buf, len);
	pthread_mutex_lock(&c->lock);
	c->st.get_requests++;
	if (got > 0)
		c->st.get_bytes += (uint64_t)got;
	pthread_mutex_unlock(&c->lock);
	if (got < 0)
		nrs_log(quiet ? NRS_LOG_DEBUG : got == -ENOENT ? NRS_LOG_ERR
							       : NRS_LOG_WARN,
			"bcache: %sGET %s bytes %" PRIu64 "+%zu: %s",
			quiet ? "prefetch " : "", key, at, len,
			strerror((int)-got));
	return got;
}

/* Fetch, verify and parse the header and table of h into a new entry. */
static int hdr_fetch(struct nrs_bcache *c, const struct nrs_objhdr *h,
		     bool quiet, struct ent **out)
{
	size_t hl = nrs_objfmt_hdr_len(h->end - h->start);
	struct ent *e = ent_new(h, HDR_IDX, hl);
	const char *what = NULL;
	ssize_t got;
	int err;

	if (!e)
		return -ENOMEM;
	got = store_get(c, h, 0, e->data, hl, quiet);
	if (got < 0) {
		free(e);
		return (int)got;
	}
	if ((size_t)got < hl) {
		err = -EBADMSG;
		what = "shorter than its header";
	} else {
		err = nrs_objfmt_parse(e->data, hl, h, &e->info);
		if (err == -EBADMSG)
			what = "header fails its checksum";
		else if (err == -EUCLEAN)
			what = "header names another stream, range or "
			       "generation";
		else if (err == -EPROTO)
			what = "newer object format version than this build "
			       "reads";
		if (err == -EUCLEAN)
			err = -EBADMSG;
	}
	if (!err) {
		err = nrs_objfmt_verify_table(&e->info, e->data + NRS_OBJ_FIXED);
		if (err)
			what = "block CRC table fails its checksum";
	}
	if (err) {
		report_bad(c, h, h->start, what, err != -EPROTO);
		free(e);
		return err;
	}
	*out = e;
	return 0;
}

/* A reference to the header entry of h, fetched if need be (by a prefetch:
 * quiet, and evicting nothing read ahead, B7). */
static int hdr_ref(struct nrs_bcache *c, const struct nrs_objhdr *h,
		   bool prefetch, struct ent **out)
{
	struct ent *e, *mine = NULL;

	pthread_mutex_lock(&c->lock);
	e = tier_find(&c->mem, h, HDR_IDX);
	if (e) {
		e->refs++;
		tier_touch(&c->mem, e);
	}
	pthread_mutex_unlock(&c->lock);
	if (!e) {
		int err = hdr_fetch(c, h, prefetch, &mine);

		if (err)
			return err;
		pthread_mutex_lock(&c->lock);
		e = tier_find(&c->mem, h, HDR_IDX);
		if (e) {		/* another reader was faster */
			e->refs++;
			tier_touch(&c->mem, e);
		} else {
			e = mine;
			mine = NULL;
			e->refs = 1;
			if (mem_make_room(c, sizeof(*e) + e->len, prefetch)) {
				e->refs++;
				tier_add(&c->mem, e, sizeof(*e) + e->len);
			}
		}
		pthread_mutex_unlock(&c->lock);
		free(mine);
	}
	*out = e;
	return 0;
}

/* The reads of stream id so far: its slot, or the least recently used
 * one, emptied.  Lock held; the pointer is good while it is. */
static struct seq *seq_of(struct nrs_bcache *c, uint64_t id)
{
	struct seq *s = &c->seqs[0];

	for (unsigned i = 0; i < NSEQ; i++) {
		if (c->seqs[i].tick && c->seqs[i].stream_id == id) {
			s = &c->seqs[i];
			goto found;
		}
		if (c->seqs[i].tick < s->tick)
			s = &c->seqs[i];
	}
	memset(s, 0, sizeof(*s));
	s->stream_id = id;
found:
	s->tick = ++c->tick;
	return s;
}

/* The flight carrying block idx of h, or NULL.  Lock held; the pointer is
 * good while it is. */
static const struct flight *flight_of(const struct nrs_bcache *c,
				      const struct nrs_objhdr *h, uint32_t idx)
{
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		const struct flight *f = &c->flights[i];

		if (f->n && idx - f->first < f->n && obj_is(&f->h, h))
			return f;
	}
	return NULL;
}

static bool in_flight(const struct nrs_bcache *c, const struct nrs_objhdr *h,
		      uint32_t idx)
{
	return flight_of(c, h, idx) != NULL;
}

/* Is block idx of h in memory, on disk or being fetched?  Lock held. */
static bool is_held(const struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint32_t idx)
{
	return tier_find(&c->mem, h, idx) || tier_find(&c->disk, h, idx) ||
	       in_flight(c, h, idx);
}

/* List [first, first + n) of h as a flight: its slot, or -1 if none is
 * free.  Lock held. */
static int flight_add(struct nrs_bcache *c, const struct nrs_objhdr *h,
		      uint32_t first, uint32_t n)
{
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		if (c->flights[i].n == 0) {
			c->flights[i] = (struct flight){ .h = *h,
							 .first = first, .n = n };
			return (int)i;
		}
	}
	return -1;
}

/* Bytes of payload block idx of h (the last one may be short). */
static size_t blk_len(const struct nrs_objhdr *h, uint32_t idx)
{
	uint64_t plen = h->end - h->start, at = (uint64_t)idx * NRS_OBJ_BLOCK;

	if (at >= plen)
		return 0;
	return (size_t)(plen - at < NRS_OBJ_BLOCK ? plen - at : NRS_OBJ_BLOCK);
}

/* The object the reader named as holding logical offset at after h
 * (nrs_bcache_follow), or NULL.  Lock held. */
static const struct nrs_objhdr *follow_of(const struct seq *s,
					  const struct nrs_objhdr *h,
					  uint64_t at)
{
	if (!obj_is(&s->cur, h))
		return NULL;
	for (unsigned i = 0; i < s->nfollow; i++)
		if (at >= s->follow[i].start && at < s->follow[i].end)
			return &s->follow[i];
	return NULL;
}

/*
 * Queue prefetches for sequential read r, which ends at logical offset
 * end, of the stream whose reads are s: from where the last ones stopped
 * (or from r's first block) to the horizon (see PREFETCH), skipping blocks
 * held, as long as a worker is free, a flight slot too, and the bytes
 * ahead and the memory tier allow (B5, B7).  Lock held.
 */
static void prefetch_plan(struct nrs_bcache *c, const struct req *r,
			  struct seq *s, uint64_t end)
{
	uint64_t off = r->h->start + r->rel, run = end - s->run;
	uint64_t horizon = end + (run < c->lookahead ? run : c->lookahead);
	uint64_t at = s->pf >= off && s->pf <= horizon ? s->pf : off;
	uint32_t cap = c->pf_max;
	bool queued = false;

	while (at < horizon && c->jobs < c->nworkers) {
		const struct nrs_objhdr *h;
		struct ent *hdr;
		uint64_t reserve;
		uint32_t idx, nb, n;
		struct job *j;
		int slot;

		h = at >= r->h->start && at < r->h->end ? r->h
							 : follow_of(s, r->h, at);
		if (!h)
			break;		/* the next object is unknown */
		nb = nrs_objfmt_nblocks(h->end - h->start);
		idx = (uint32_t)((at - h->start) / NRS_OBJ_BLOCK);
		if (is_held(c, h, idx)) {
			at = h->start + (uint64_t)(idx + 1) * NRS_OBJ_BLOCK;
			at = at < h->end ? at : h->end;
			continue;
		}
		reserve = blk_cost(blk_len(h, idx));
		for (n = 1; n < (s->ra < cap ? s->ra : cap) && idx + n < nb &&
			    !is_held(c, h, idx + n); n++)
			reserve += blk_cost(blk_len(h, idx + n));
		/* A window wider than ahead_max could ever hold is cut to
		 * fit; one that does not fit now waits for the reader to
		 * catch up (cutting it would make many small GETs). */
		while (n > 1 && reserve > c->ahead_max)
			reserve -= blk_cost(blk_len(h, idx + --n));
		if (c->ahead + reserve > c->ahead_max ||
		    !mem_make_room(c, reserve, true))
			break;
		/* only now: making room may have evicted an unreferenced
		 * header entry of a following object */
		hdr = h == r->h ? r->hdr : tier_find(&c->mem, h, HDR_IDX);
		j = malloc(sizeof(*j));
		if (!j)
			break;
		slot = flight_add(c, h, idx, n);
		if (slot < 0) {
			free(j);
			break;
		}
		*j = (struct job){ .h = *h, .hdr = hdr, .first = idx, .n = n,
				   .slot = slot, .reserve = reserve };
		if (hdr)
			hdr->refs++;
		c->mem.reserved += reserve;
		c->ahead += reserve;
		if (c->queue_tail)
			c->queue_tail->next = j;
		else
			c->queue = j;
		c->queue_tail = j;
		c->jobs++;
		queued = true;
		s->ra = s->ra < cap / 2 ? 2 * s->ra : cap;
		at = h->start + (uint64_t)(idx + n) * NRS_OBJ_BLOCK;
		at = at < h->end ? at : h->end;
	}
	s->pf = at;
	if (queued)
		pthread_cond_broadcast(&c->work);
}

/*
 * A reference to the header entry of r->h for a read of [off, off + len),
 * whether the read continues a sequential read of the stream (see READS),
 * and, if it does, its prefetches queued.
 */
static int hdr_get(struct nrs_bcache *c, struct req *r, uint64_t off,
		   size_t len)
{
	const struct nrs_objhdr *h = r->h;
	uint64_t end = off + len;
	struct seq *s;
	bool near;
	int err;

	err = hdr_ref(c, h, false, &r->hdr);
	if (err)
		return err;
	pthread_mutex_lock(&c->lock);
	s = seq_of(c, h->stream_id);
	near = s->seen && off + SEQ_SLACK >= s->next &&
	       off <= s->next + SEQ_SLACK;
	r->seq = near || off == h->start;
	if (!near) {			/* a new run */
		s->run = off;
		s->pf = 0;
		s->ra = c->seq_first;
	}
	if (!near || end > s->next)
		s->next = end;
	s->seen = true;
	r->win = s->ra;
	if (r->seq)
		prefetch_plan(c, r, s, end);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Copy the wanted part of block idx (len bytes at data) to r->dst. */
static void copy_out(const struct req *r, uint32_t idx,
		     const unsigned char *data, size_t len)
{
	uint64_t bs = (uint64_t)idx * NRS_OBJ_BLOCK;
	uint64_t from = bs > r->rel ? bs : r->rel;
	uint64_t to = bs + len < r->end ? bs + len : r->end;

	if (from < to)
		memcpy(r->dst + (from - r->rel), data + (from - bs),
		       (size_t)(to - from));
}

/* End flight slot (-1: none) and wake the readers waiting for it.  Lock
 * held. */
static void flight_end_locked(struct nrs_bcache *c, int slot)
{
	if (slot < 0)
		return;
	c->flights[slot].n = 0;
	pthread_cond_broadcast(&c->landed);
}

static void flight_end(struct nrs_bcache *c, int slot)
{
	pthread_mutex_lock(&c->lock);
	flight_end_locked(c, slot);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Plan a reader's own GET from first, a miss: the wanted blocks and, when
 * sequential, on to the stream's window (r->win), within readahead bytes;
 * stopping at a block memory or disk holds or a flight carries.  Counts
 * the wanted ones after first as misses, and lists the run as the caller's
 * flight in *slot (-1: no free slot), which the caller ends.  Lock held.
 */
static uint32_t plan_fetch(struct nrs_bcache *c, const struct req *r,
			   uint32_t first, int *slot)
{
	uint32_t limit = r->seq ? r->hdr->info.nblocks - 1 : r->last;
	uint32_t max = c->readahead / NRS_OBJ_BLOCK, n = 1;

	if (r->seq) {
		uint32_t win = r->win;

		if (win < r->last - first + 1)
			win = r->last - first + 1;
		if (win < max)
			max = win;
	}
	while (n < max && first + n <= limit &&
	       !is_held(c, r->h, first + n)) {
		if (first + n <= r->last)
			c->st.misses++;
		n++;
	}
	*slot = flight_add(c, r->h, first, n);
	return n;
}

/*
 * Fetch blocks [first, first + n) with one GET, verify each, cache the good
 * ones and copy out the wanted ones.  -EBADMSG if a wanted block is bad.
 * For a prefetch (r->job) nothing is wanted and its blocks are cached as
 * read ahead (B7).
 */
static int fetch_run(struct nrs_bcache *c, const struct req *r,
		     uint32_t first, uint32_t n)
{
	const struct nrs_objinfo *oi = &r->hdr->info;
	const unsigned char *table = r->hdr->data + NRS_OBJ_FIXED;
	uint64_t plen = r->h->end - r->h->start;
	uint64_t at = (uint64_t)first * NRS_OBJ_BLOCK;
	size_t bytes = (size_t)(plen - at < (uint64_t)n * NRS_OBJ_BLOCK ?
				plen - at : (uint64_t)n * NRS_OBJ_BLOCK);
	unsigned char *buf = malloc(bytes);
	ssize_t got;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	got = store_get(c, r->h, nrs_objfmt_hdr_len(plen) + at, buf, bytes,
			r->job != NULL);
	if (got < 0) {
		free(buf);
		return (int)got;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = first + i;
		bool wanted = !r->job && idx <= r->last;
		size_t bl = nrs_objfmt_block_len(oi, idx);
		const unsigned char *p = buf + (size_t)i * NRS_OBJ_BLOCK;
		const char *bad = NULL;
		struct ent *e;

		if ((size_t)i * NRS_OBJ_BLOCK + bl > (size_t)got)
			bad = "object shorter than its header says";
		else if (nrs_objfmt_verify_block(oi, table, idx, p, bl))
			bad = "block fails its checksum";
		if (bad) {
			/* Never cached; fails the read only if wanted. */
			report_bad(c, r->h, r->h->start + at +
				   (uint64_t)i * NRS_OBJ_BLOCK, bad, true);
			err = wanted ? -EBADMSG : 0;
			break;
		}
		if (wanted)
			copy_out(r, idx, p, bl);
		e = ent_new(r->h, idx, bl);	/* B1: p verified */
		if (e) {
			memcpy(e->data, p, bl);
			mem_insert(c, e, r->job);
		}
		if (c->dir_fd >= 0)
			disk_store(c, r->h, idx, p, bl);
	}
	free(buf);
	return err;
}

/* Serve block *cur of r and step *cur past what was served. */
static int read_step(struct nrs_bcache *c, const struct req *r, uint32_t *cur)
{
	uint32_t idx = *cur, n = 0;
	struct ent *e;
	bool on_disk = false, waited = false;
	int slot = -1, err;

	pthread_mutex_lock(&c->lock);
	/* B6: this reader owns no flight here, nor when it waits below */
	while (!(e = tier_find(&c->mem, r->h, idx)) &&
	       in_flight(c, r->h, idx)) {
		waited = true;
		pthread_cond_wait(&c->landed, &c->lock);
	}
	if (e) {
		if (waited)
			c->st.misses++;
		else
			c->st.hits++;
		if (e->ahead) {		/* B7: read, no longer ahead */
			e->ahead = false;
			c->ahead -= e->cost;
		}
		e->refs++;
		tier_touch(&c->mem, e);
	} else {
		c->st.misses++;
		on_disk = tier_find(&c->disk, r->h, idx) != NULL;
		if (!on_disk)
			n = plan_fetch(c, r, idx, &slot);
	}
	pthread_mutex_unlock(&c->lock);

	if (e) {
		copy_out(r, idx, e->data, e->len);
		pthread_mutex_lock(&c->lock);
		ent_put(e);
		pthread_mutex_unlock(&c->lock);
		*cur = idx + 1;
		return 0;
	}
	if (on_disk) {
		err = disk_load(c, r, idx, &e);
		if (!err) {
			copy_out(r, idx, e->data, e->len);
			mem_insert(c, e, NULL);
			*cur = idx + 1;
			return 0;
		}
		if (err == -ENOMEM)
			return err;
		pthread_mutex_lock(&c->lock);
		n = plan_fetch(c, r, idx, &slot);
		pthread_mutex_unlock(&c->lock);
	}
	err = fetch_run(c, r, idx, n);
	flight_end(c, slot);
	*cur = idx + n;
	return err;
}

/* ---- prefetch workers -------------------------------------------------- */

/* Fetch job j's blocks (and its object's header first if need be).  What
 * fails is logged at most; nothing is reported to anyone. */
static void job_run(struct nrs_bcache *c, struct job *j)
{
	struct req r = { .h = &j->h, .job = j };

	if (!j->hdr && hdr_ref(c, &j->h, true, &j->hdr))
		return;
	r.hdr = j->hdr;
	fetch_run(c, &r, j->first, j->n);
}

/* Give back what job j holds: the memory of blocks that did not land, its
 * flight (waking the readers waiting for it), its header; and free it. */
static void job_end(struct nrs_bcache *c, struct job *j)
{
	pthread_mutex_lock(&c->lock);
	c->mem.reserved -= j->reserve;
	c->ahead -= j->reserve;
	flight_end_locked(c, j->slot);
	if (j->hdr)
		ent_put(j->hdr);
	c->jobs--;
	pthread_mutex_unlock(&c->lock);
	free(j);
}

/* A prefetch thread: runs jobs until the cache closes; jobs still queued
 * then are ended without a GET (W2). */
static void *worker_main(void *arg)
{
	struct nrs_bcache *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct job *j;
		bool stopping;

		while (!c->queue && !c->stopping)
			pthread_cond_wait(&c->work, &c->lock);
		j = c->queue;
		if (!j)
			break;
		c->queue = j->next;
		if (!c->queue)
			c->queue_tail = NULL;
		stopping = c->stopping;
		pthread_mutex_unlock(&c->lock);
		if (!stopping)
			job_run(c, j);
		job_end(c, j);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- the API ----------------------------------------------------------- */

int nrs_bcache_open(const struct nrs_bcache_opts *o, struct nrs_objstore *store,
		    struct nrs_bcache **out)
{
	struct nrs_bcache *c;
	uint32_t ra;
	int err;

	if (!store || !out)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->store = store;
	c->dir_fd = -1;
	c->lock_fd = -1;
	ra = o && o->readahead ? o->readahead : DEF_READAHEAD;
	if (ra > MAX_READAHEAD)
		ra = MAX_READAHEAD;
	c->readahead = ra < NRS_OBJ_BLOCK ? NRS_OBJ_BLOCK
					  : ra - ra % NRS_OBJ_BLOCK;
	c->seq_first = (c->readahead < SEQ_FIRST ? c->readahead : SEQ_FIRST) /
		       NRS_OBJ_BLOCK;
	c->disk.budget = o && o->disk_bytes ? o->disk_bytes : DEF_DISK;
	err = pthread_mutex_init(&c->lock, NULL);
	if (err) {
		free(c);
		return -err;
	}
	err = pthread_cond_init(&c->landed, NULL);
	if (err) {
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -err;
	}
	err = pthread_cond_init(&c->work, NULL);
	if (err) {
		pthread_cond_destroy(&c->landed);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -err;
	}
	err = tier_init(&c->mem, o && o->mem_bytes ? o->mem_bytes : DEF_MEM);
	if (!err && o && o->disk_dir) {
		err = disk_open(c, o->disk_dir);
		if (err)
			nrs_err("bcache: disk tier %s: %s", o->disk_dir,
				strerror(-err));
	}
	if (err) {
		nrs_bcache_close(c);
		return err;
	}
	c->ahead_max = c->mem.budget / 2;
	/* Room ahead for every worker's GET and one window landed. */
	c->pf_max = (uint32_t)(c->ahead_max / (NWORKERS + 1) / NRS_OBJ_BLOCK);
	if (c->pf_max > c->readahead / NRS_OBJ_BLOCK)
		c->pf_max = c->readahead / NRS_OBJ_BLOCK;
	if (c->pf_max == 0)
		c->pf_max = 1;
	c->lookahead = (uint64_t)NWORKERS * c->readahead;
	if (c->lookahead > c->ahead_max)
		c->lookahead = c->ahead_max;
	if (c->lookahead > NRS_BCACHE_FOLLOW)
		c->lookahead = NRS_BCACHE_FOLLOW;
	while (c->nworkers < NWORKERS) {
		err = pthread_create(&c->workers[c->nworkers], NULL,
				     worker_main, c);
		if (err) {
			/* Fewer prefetches, or none: reads still work. */
			nrs_warn("bcache: prefetch thread: %s", strerror(err));
			break;
		}
		(void)pthread_setname_np(c->workers[c->nworkers], "nrs-prefetch");
		c->nworkers++;
	}
	*out = c;
	return 0;
}

void nrs_bcache_close(struct nrs_bcache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->work);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < c->nworkers; i++)
		pthread_join(c->workers[i], NULL);	/* W2 */
	assert(c->jobs == 0 && c->mem.reserved == 0);
	while (c->mem.lru) {
		struct ent *e = c->mem.lru;

		/* B3: closing under a reader is a caller bug. */
		if (e->refs != 1)
			nrs_err("bcache: closed with a read in flight");
		mem_drop(c, e);
	}
	while (c->disk.lru) {
		struct ent *e = c->disk.lru;

		tier_del(&c->disk, e);
		free(e);
	}
	free(c->mem.buckets);
	free(c->disk.buckets);
	if (c->lock_fd >= 0)
		close(c->lock_fd);	/* releases the flock */
	if (c->dir_fd >= 0)
		close(c->dir_fd);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->landed);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int nrs_bcache_read(struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint64_t off, size_t len, void *dst)
{
	struct req r = { .h = h, .dst = dst };
	uint32_t cur;
	int err;

	if (!c || !h || (!dst && len > 0) || !nrs_objfmt_hdr_is_valid(h) ||
	    off < h->start || off > h->end || len > h->end - off)
		return -EINVAL;
	if (len == 0)
		return 0;
	r.rel = off - h->start;
	r.end = r.rel + len;
	r.last = (uint32_t)((r.end - 1) / NRS_OBJ_BLOCK);
	err = hdr_get(c, &r, off, len);
	if (err)
		return err;
	for (cur = (uint32_t)(r.rel / NRS_OBJ_BLOCK); !err && cur <= r.last;)
		err = read_step(c, &r, &cur);
	pthread_mutex_lock(&c->lock);
	ent_put(r.hdr);
	pthread_mutex_unlock(&c->lock);
	return err;
}

void nrs_bcache_follow(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       const struct nrs_objhdr *next, size_t n)
{
	const struct nrs_objhdr *prev = h;
	struct seq *s;
	size_t k;

	if (!c || !h || !next || !nrs_objfmt_hdr_is_valid(h))
		return;
	if (n > NRS_BCACHE_FOLLOW_MAX)
		n = NRS_BCACHE_FOLLOW_MAX;
	for (k = 0; k < n; k++) {
		if (!nrs_objfmt_hdr_is_valid(&next[k]) ||
		    next[k].stream_id != h->stream_id ||
		    next[k].start > prev->end || next[k].end <= prev->end)
			break;
		prev = &next[k];
	}
	if (k == 0)
		return;
	pthread_mutex_lock(&c->lock);
	s = seq_of(c, h->stream_id);
	s->cur = *h;
	memcpy(s->follow, next, k * sizeof(*next));
	s->nfollow = (unsigned)k;
	pthread_mutex_unlock(&c->lock);
}

void nrs_bcache_forget(struct nrs_bcache *c, const struct nrs_objhdr *h)
{
	struct ent *e, *victims = NULL;
	uint32_t nblocks;

	if (!c || !h || !nrs_objfmt_hdr_is_valid(h))
		return;
	nblocks = nrs_objfmt_nblocks(h->end - h->start);
	pthread_mutex_lock(&c->lock);
	e = tier_find(&c->mem, h, HDR_IDX);
	if (e)
		mem_drop(c, e);		/* a reader's reference keeps it */
	for (uint32_t i = 0; i < nblocks; i++) {
		e = tier_find(&c->mem, h, i);
		if (e)
			mem_drop(c, e);
		e = tier_find(&c->disk, h, i);
		if (e)
			disk_drop(c, e, &victims);
	}
	pthread_mutex_unlock(&c->lock);
	disk_reap(c, victims);
}

/* One tier's hash and LRU hold the same entries, and its bytes add up;
 * *ahead gets the bytes of its entries read ahead. */
static bool tier_check(const struct tier *t, bool mem, uint64_t *ahead)
{
	uint64_t bytes = 0;
	size_t in_lru = 0, in_hash = 0;

	*ahead = 0;
	for (const struct ent *e = t->mru; e; e = e->next) {
		if (!e->linked || (e->next && e->next->prev != e) ||
		    (!e->next && t->lru != e) ||
		    tier_find(t, &e->h, e->idx) != e ||
		    (mem && e->refs < 1) || (!mem && e->ahead) ||
		    e->cost != (mem ? sizeof(*e) + e->len : e->len))
			return false;
		bytes += e->cost;
		if (e->ahead)
			*ahead += e->cost;
		in_lru++;
	}
	for (size_t b = 0; t->buckets && b <= t->mask; b++)
		for (const struct ent *e = t->buckets[b]; e; e = e->hnext)
			in_hash++;
	return bytes == t->bytes && in_lru == in_hash &&
	       t->reserved <= t->budget &&
	       t->bytes <= t->budget - t->reserved &&
	       (t->mru != NULL) == (t->lru != NULL);
}

bool nrs_bcache_check(struct nrs_bcache *c)
{
	uint64_t ahead, none;
	unsigned jobs = 0, flying = 0;
	bool ok;

	pthread_mutex_lock(&c->lock);
	for (const struct job *j = c->queue; j; j = j->next)
		jobs++;
	for (unsigned i = 0; i < MAX_FLIGHTS; i++)
		flying += c->flights[i].n ? 1 : 0;
	ok = tier_check(&c->mem, true, &ahead) &&
	     tier_check(&c->disk, false, &none) &&
	     c->ahead == ahead + c->mem.reserved &&	/* B7 */
	     c->ahead <= c->ahead_max && c->jobs <= c->nworkers &&
	     jobs <= c->jobs && flying >= c->jobs &&
	     (c->jobs > 0 || c->mem.reserved == 0);
	pthread_mutex_unlock(&c->lock);
	return ok;
}

void nrs_bcache_drain(struct nrs_bcache *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->jobs > 0)
		pthread_cond_wait(&c->landed, &c->lock);	/* job_end() */
	pthread_mutex_unlock(&c->lock);
}

void nrs_bcache_stats(struct nrs_bcache *c, struct nrs_bcache_stats *out)
{
	if (!c || !out)
		return;
	pthread_mutex_lock(&c->lock);
	*out = c->st;
	out->mem_bytes = c->mem.bytes;
	out->disk_bytes = c->disk.bytes;
	pthread_mutex_unlock(&c->lock);
}
