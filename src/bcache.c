/*
 * bcache.c - verified reads of segment objects through a block cache.
 *
 * Readers of materialized ranges ask for logical bytes of an object
 * (nrs_bcache_read); this module turns that into as few range GETs as it
 * can, verifies every block against the object's CRC table (DESIGN.md I6),
 * and keeps verified blocks in memory and, optionally, in a directory on a
 * local disk.  The object format is objfmt.c's.
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
 * the lock) never does I/O.  Files are not fsynced: the tier is a cache and
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
 * block on disk is read and verified; a missing run is fetched with one
 * range GET.  A run stops at a block that memory or disk already holds or
 * another reader is fetching, and at `readahead` bytes.  A read that is
 * not sequential fetches only the blocks it wants.  A sequential read (it
 * starts at the object's start, or within SEQ_SLACK of where the previous
 * reads of the object got to, since the last one that was not sequential
 * or started at the start: the kernel sends a sequential reader's
 * requests concurrently, and they arrive in any order) reads ahead up to
 * the object's end, within a window that starts at SEQ_FIRST bytes and
 * doubles with every sequential GET of the object, up to `readahead`: a
 * long sequential reader pays the per-request cost of the store once per
 * `readahead` bytes, a short one never fetches much that it will not
 * read.  Each block of the GET is verified before it is
 * cached or copied; a bad block is logged (key, stream, logical offset),
 * counted, never cached, and fails the read (-EBADMSG) if the read wanted
 * it.  A bad block read ahead fails nothing.
 *
 * A run being fetched is a flight, listed until its blocks are cached.  A
 * reader that misses a block of a flight waits for it to land instead of
 * fetching it again (the kernel sends a sequential reader's requests for
 * neighbouring ranges concurrently: each would otherwise fetch the other's
 * run), then looks again: normally the block is in memory by then; if not
 * (the fetch failed, or memory had no room), the reader fetches it itself.
 * A sequential reader that finds its block in flight first reads ahead:
 * it fetches the run that follows the flight (a window's worth), so that
 * while a sequential reader's requests come two at a time, two GETs are in
 * flight, and the next window is cached by the time the reader gets there
 * (one GET at a time, a reader leaves the store idle while it consumes,
 * and a store like s3rver serves one connection at 160 MB/s but two at
 * 220).  A block read ahead that fails fails nothing.
 *
 * INVARIANTS
 *
 *   B1  An entry in memory holds only bytes that matched a CRC of a table
 *       that matched the table CRC of a header naming exactly the entry's
 *       object.  Bytes copied to a reader satisfy the same.
 *   B2  Nothing read from disk_dir is used before it matched its CRC.
 *   B3  An entry is freed only when no reader holds it: refs counts the
 *       readers plus one while the entry is in the memory tier.  Eviction
 *       takes only entries with refs == 1 (forget() takes any): evicting one
 *       in use would be safe, but would free nothing while mem.bytes says
 *       it did.
 *   B4  No store request and no file I/O happens under c->lock.
 *   B5  mem.bytes <= mem.budget always; disk.bytes <= disk.budget after
 *       every insertion.
 *   B6  A reader waits for a flight only while it owns none: a flight is
 *       ended before its reader waits or moves to its next block, so every
 *       flight ends and no wait is forever.
 *
 * LOCKING: one mutex, c->lock, protects both tiers, every entry's refs,
 * links, seq_next and ra, the flights, and the statistics; c->landed is
 * signalled with it when a flight ends.  Entry data is immutable once the
 * entry is published, so readers copy it without the lock (B3).
 */
#include "config.h"

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

#include "log.h"
#include "objfmt.h"

#define HDR_IDX		UINT32_MAX	/* idx of an object's header entry */
#define DEF_MEM		(64ull << 20)
#define DEF_DISK	(1ull << 30)
#define DEF_READAHEAD	(8u << 20)
#define MAX_READAHEAD	(64u << 20)
#define SEQ_FIRST	(1u << 20)	/* a sequential read's first window */
#define SEQ_SLACK	(1u << 20)	/* how far from the end of the last read
					 * a sequential one may start */
#define MAX_FLIGHTS	32		/* more at once are not deduplicated */
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
	/* header entries only: */
	struct nrs_objinfo info;
	uint64_t seq_next;	/* where the reads of the object got to */
	uint32_t ra;		/* blocks the next sequential GET may fetch */
	unsigned char data[];	/* block bytes, or fixed header + table */
};

struct tier {
	struct ent **buckets;
	size_t mask;
	struct ent *mru, *lru;
	uint64_t bytes, budget;
};

/* A run of blocks [first, first + n) of object h that a reader is fetching;
 * n == 0: a free slot. */
struct flight {
	struct nrs_objhdr h;
	uint32_t first, n;
};

struct nrs_bcache {
	struct nrs_objstore *store;	/* borrowed */
	uint32_t readahead;		/* bytes, a multiple of NRS_OBJ_BLOCK */
	uint32_t seq_first;		/* blocks, <= readahead's */
	int dir_fd;			/* disk_dir, or -1: no disk tier */
	int lock_fd;			/* disk_dir/.lock, flock()ed */
	pthread_mutex_t lock;
	pthread_cond_t landed;		/* a flight ended */
	/* protected by lock: */
	struct tier mem, disk;
	struct flight flights[MAX_FLIGHTS];
	struct nrs_bcache_stats st;
	uint64_t tmp_seq;
	bool disk_warned;
};

/* What one nrs_bcache_read() wants, with its header entry held. */
struct req {
	struct ent *hdr;
	const struct nrs_objhdr *h;
	uint64_t rel, end;	/* payload-relative bytes wanted */
	uint32_t last;		/* last block wanted */
	bool seq;		/* read ahead past last */
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

/* A new unlinked entry with room for len bytes; no lock needed. */
static struct ent *ent_new(const struct nrs_objhdr *h, uint32_t idx,
			   size_t len)
{
	struct ent *e = calloc(1, sizeof(*e) + len);

	if (!e)
		return NULL;
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
	tier_del(&c->mem, e);
	ent_put(e);
}

/* Evict unused memory entries until cost more bytes fit (B5).  false: they
 * do not, even with every unused entry gone. */
static bool mem_make_room(struct nrs_bcache *c, uint64_t cost)
{
	struct ent *e = c->mem.lru;

	if (cost > c->mem.budget)
		return false;
	while (c->mem.bytes + cost > c->mem.budget && e) {
		struct ent *prev = e->prev;

		if (e->refs == 1)
			mem_drop(c, e);
		e = prev;
	}
	return c->mem.bytes + cost <= c->mem.budget;
}

/*
 * Offer e (unlinked, refs 0, data verified: B1) to the memory tier.  It is
 * linked, or freed if the tier has the block already or no room for it.
 * Takes the lock.
 */
static void mem_insert(struct nrs_bcache *c, struct ent *e)
{
	struct ent *old;

	pthread_mutex_lock(&c->lock);
	old = tier_find(&c->mem, &e->h, e->idx);
	if (old) {
		tier_touch(&c->mem, old);
	} else if (mem_make_room(c, sizeof(*e) + e->len)) {
		e->refs = 1;
		tier_add(&c->mem, e, sizeof(*e) + e->len);
		e = NULL;
	}
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

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
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

/* One range GET, counted.  Returns bytes read or a store error (logged). */
static ssize_t store_get(struct nrs_bcache *c, const struct nrs_objhdr *h,
			 uint64_t at, void *buf, size_t len)
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
		nrs_log(got == -ENOENT ? NRS_LOG_ERR : NRS_LOG_WARN,
			"bcache: GET %s bytes %" PRIu64 "+%zu: %s", key, at,
			len, strerror((int)-got));
	return got;
}

/* Fetch, verify and parse the header and table of h into a new entry. */
static int hdr_fetch(struct nrs_bcache *c, const struct nrs_objhdr *h,
		     struct ent **out)
{
	size_t hl = nrs_objfmt_hdr_len(h->end - h->start);
	struct ent *e = ent_new(h, HDR_IDX, hl);
	const char *what = NULL;
	ssize_t got;
	int err;

	if (!e)
		return -ENOMEM;
	got = store_get(c, h, 0, e->data, hl);
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

/*
 * A reference to the header entry of h, fetched if need be, and whether a
 * read of [off, off + len) continues a sequential read of the object (see
 * READS).
 */
static int hdr_get(struct nrs_bcache *c, struct req *r, uint64_t off,
		   size_t len)
{
	const struct nrs_objhdr *h = r->h;
	struct ent *e, *mine = NULL;
	uint64_t next;

	pthread_mutex_lock(&c->lock);
	e = tier_find(&c->mem, h, HDR_IDX);
	if (e) {
		e->refs++;
		tier_touch(&c->mem, e);
	}
	pthread_mutex_unlock(&c->lock);
	if (!e) {
		int err = hdr_fetch(c, h, &mine);

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
			if (mem_make_room(c, sizeof(*e) + e->len)) {
				e->refs++;
				tier_add(&c->mem, e, sizeof(*e) + e->len);
			}
		}
		pthread_mutex_unlock(&c->lock);
		free(mine);
	}
	pthread_mutex_lock(&c->lock);
	next = e->seq_next;
	r->seq = off == h->start ||
		 (off + SEQ_SLACK >= next && off <= next + SEQ_SLACK);
	if (!r->seq || off == h->start || off + len > next)
		e->seq_next = off + len;
	if (!r->seq || e->ra == 0)
		e->ra = c->seq_first;
	pthread_mutex_unlock(&c->lock);
	r->hdr = e;
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

/* End flight slot (-1: none) and wake the readers waiting for it. */
static void flight_end(struct nrs_bcache *c, int slot)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&c->lock);
	c->flights[slot].n = 0;
	pthread_cond_broadcast(&c->landed);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Plan the GET from first, a miss: up to the readahead window (see READS)
 * but at least the wanted blocks, within readahead bytes; past r->last only
 * when sequential; stopping at a block memory or disk holds or a flight
 * carries.  Counts the wanted ones after first as misses, widens the
 * object's sequential window, and lists the run as the caller's flight in
 * *slot (-1: no free slot), which the caller ends.  Lock held.
 */
static uint32_t plan_fetch(struct nrs_bcache *c, const struct req *r,
			   uint32_t first, int *slot)
{
	uint32_t limit = r->seq ? r->hdr->info.nblocks - 1 : r->last;
	uint32_t cap = c->readahead / NRS_OBJ_BLOCK, max = cap, n = 1;

	if (r->seq) {
		uint32_t win = r->hdr->ra;

		if (win < r->last - first + 1)
			win = r->last - first + 1;
		if (win < max)
			max = win;
		r->hdr->ra = r->hdr->ra < cap / 2 ? 2 * r->hdr->ra : cap;
	}
	while (n < max && first + n <= limit &&
	       !tier_find(&c->mem, r->h, first + n) &&
	       !tier_find(&c->disk, r->h, first + n) &&
	       !in_flight(c, r->h, first + n)) {
		if (first + n <= r->last)
			c->st.misses++;
		n++;
	}
	*slot = -1;
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		if (c->flights[i].n == 0) {
			c->flights[i] = (struct flight){ .h = *r->h,
							 .first = first, .n = n };
			*slot = (int)i;
			break;
		}
	}
	return n;
}

/*
 * Fetch blocks [first, first + n) with one GET, verify each, cache the good
 * ones and copy out the wanted ones.  -EBADMSG if a wanted block is bad.
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
	got = store_get(c, r->h, nrs_objfmt_hdr_len(plen) + at, buf, bytes);
	if (got < 0) {
		free(buf);
		return (int)got;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = first + i;
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
			err = idx <= r->last ? -EBADMSG : 0;
			break;
		}
		if (idx <= r->last)
			copy_out(r, idx, p, bl);
		e = ent_new(r->h, idx, bl);	/* B1: p verified */
		if (e) {
			memcpy(e->data, p, bl);
			mem_insert(c, e);
		}
		if (c->dir_fd >= 0)
			disk_store(c, r->h, idx, p, bl);
	}
	free(buf);
	return err;
}

/*
 * While a block sequential read r wants is in flight f, fetch the run that
 * follows f, if no one holds or fetches its first block (READS).  Its
 * blocks are cached, none copied out; a bad one fails nothing.  Called
 * with the lock held, which it drops for the GET.
 */
static void read_past(struct nrs_bcache *c, const struct req *r,
		      const struct flight *f)
{
	uint32_t first = f->first + f->n, n;
	struct req ahead = *r;
	int slot;

	if (first >= r->hdr->info.nblocks || tier_find(&c->mem, r->h, first) ||
	    tier_find(&c->disk, r->h, first) || in_flight(c, r->h, first))
		return;
	ahead.last = first - 1;		/* wants nothing */
	n = plan_fetch(c, &ahead, first, &slot);
	pthread_mutex_unlock(&c->lock);
	fetch_run(c, &ahead, first, n);
	flight_end(c, slot);
	pthread_mutex_lock(&c->lock);
}

/* Serve block *cur of r and step *cur past what was served. */
static int read_step(struct nrs_bcache *c, const struct req *r, uint32_t *cur)
{
	uint32_t idx = *cur, n = 0;
	const struct flight *f;
	struct ent *e;
	bool on_disk = false, helped = !r->seq;
	int slot = -1, err;

	pthread_mutex_lock(&c->lock);
	/* B6: this reader owns no flight here, nor when it waits below */
	while (!(e = tier_find(&c->mem, r->h, idx)) &&
	       (f = flight_of(c, r->h, idx))) {
		if (!helped) {
			helped = true;
			read_past(c, r, f);
			continue;
		}
		pthread_cond_wait(&c->landed, &c->lock);
	}
	if (e) {
		c->st.hits++;
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
			mem_insert(c, e);
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
	*out = c;
	return 0;
}

void nrs_bcache_close(struct nrs_bcache *c)
{
	if (!c)
		return;
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

/* One tier's hash and LRU hold the same entries, and its bytes add up. */
static bool tier_check(const struct tier *t, bool mem)
{
	uint64_t bytes = 0;
	size_t in_lru = 0, in_hash = 0;

	for (const struct ent *e = t->mru; e; e = e->next) {
		if (!e->linked || (e->next && e->next->prev != e) ||
		    (!e->next && t->lru != e) ||
		    tier_find(t, &e->h, e->idx) != e ||
		    (mem && e->refs < 1) ||
		    e->cost != (mem ? sizeof(*e) + e->len : e->len))
			return false;
		bytes += e->cost;
		in_lru++;
	}
	for (size_t b = 0; t->buckets && b <= t->mask; b++)
		for (const struct ent *e = t->buckets[b]; e; e = e->hnext)
			in_hash++;
	return bytes == t->bytes && in_lru == in_hash &&
	       t->bytes <= t->budget && (t->mru != NULL) == (t->lru != NULL);
}

bool nrs_bcache_check(struct nrs_bcache *c)
{
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = tier_check(&c->mem, true) && tier_check(&c->disk, false);
	pthread_mutex_unlock(&c->lock);
	return ok;
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
