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
 *   - idx = HDR_IDX: the object's fixed header and CRC table, fetched once
 *     (B8) with a range GET of the first nrs_objfmt_hdr_len() bytes (for a
 *     reader, with the first window of blocks), and kept only
 *     if the header CRC, the version, the fields, the identity (exactly the
 *     caller's nrs_objhdr) and the table CRC all check;
 *   - idx = i: payload block i (NRS_OBJ_BLOCK bytes, the last one shorter).
 *
 * FILES
 *
 *   bcache.c           this overview, the invariants, and the API
 *   bcache_tier.c      entries, a tier's hash and LRU, the memory tier
 *   bcache_disk.c      the disk tier (TIERS, its files, start-up)
 *   bcache_fetch.c     READS: a reader's blocks, flights, GETs
 *   bcache_fill.c      STREAMING: a GET's body landed block by block as
 *                      it arrives, each verified (BS1-BS4)
 *   bcache_prefetch.c  sequential reads and PREFETCH, the worker threads
 *   bcache_priv.h      the structures and functions they share
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
 *       never wait for flights of blocks: a flight is ended before its
 *       reader waits or moves to its next block, and a prefetch's when its
 *       job ends, so every flight ends and no wait is forever.  Anyone may
 *       wait for a header's flight (B8): its owner waits for nothing while
 *       it holds it, only for its GET.
 *   B7  ahead = the cost of the memory entries marked ahead + mem.reserved
 *       <= ahead_max (half the memory tier).  Making room for a prefetch
 *       never evicts an entry marked ahead; a reader's making room evicts
 *       them only after every other unused entry.  So prefetches never
 *       throw out what a reader is about to read, and always leave half
 *       the tier to what readers read.  A read of the block clears the
 *       mark; entries abandoned with it are evicted like any other once
 *       readers need the room.
 *   B8  An object's header is fetched once: the first reader or prefetch
 *       that misses it lists it as a flight (first HDR_IDX), and every
 *       other one waits for it to land (a header that landed and is gone
 *       again, or whose GET failed, each waiter fetches for itself,
 *       listing no flight).  A reader's fetch brings the object's first
 *       window along in the same GET (a read from the first block: the
 *       blocks of seq_first, or as many as it wants up to readahead, that
 *       nobody holds, listed as a flight of their own), verified and
 *       cached like any other blocks (B1), the wanted ones copied out.
 *       A prefetch from the object's first block brings its own run
 *       along the same way (the run is its flight already), and a
 *       prefetch of a later run sends its GET before it waits for the
 *       header, to verify what came.  So no prefetch idles while another
 *       one's GET brings the header (on moto, which reads a whole object
 *       per range GET, prefetches that waited for a header that came
 *       with a large run made 0.47x of boto3's cold GETs, 0.71x once
 *       they no longer waited), and an object a sequential reader
 *       reaches costs no GET for its header alone.
 *   BA1 A prefetch's window grows to readahead unless the bytes ahead
 *       (B7) could not hold PF_DEEP (2) such GETs in flight and one
 *       window landed besides: pf_max = ahead_max / (PF_DEEP + 1), at
 *       most readahead.  With a 64 MiB tier and an 8 MiB readahead
 *       (the defaults before BA2) that is 8 MiB: an object of the
 *       default size (16 MiB) comes in two GETs, aligned to its start,
 *       the second in flight while the first lands, and the store has a
 *       GET to serve while the reader consumes what landed.  (Room for a
 *       GET per worker,
 *       NWORKERS + 1, cut windows to 6.4 MiB: 3 runs per object, the
 *       last a short one; s3rver pays milliseconds of its one thread per
 *       request, and the cold read reached 0.71x of boto3's whole-object
 *       GETs.)
 *   BA2 The defaults make BA1's window a whole object of the default
 *       object_size (16 MiB): readahead 16 MiB and a 128 MiB memory tier
 *       (ahead_max 64 MiB holds two such GETs in flight and one landed).
 *       So a sequential reader that reaches an object by prefetch gets
 *       it, header and all, in one GET, as boto3 gets it whole: 21 GETs
 *       for 256 MiB in 16 MiB objects, not 36.  Per-request cost is what
 *       limits the test servers (s3rver's one thread; moto reads the whole
 *       object for a range GET, so two ranges of one cost it two objects).
 *       The price is memory: the cache holds up to 128 MiB, 64 of it read
 *       ahead (cache_size sets the tier; with 64 MiB, BA1 cuts windows
 *       to 10.6 MiB: two GETs per object, as before).
 *   BA3 A run's window is seq_first (1 MiB) for its first GET (the one
 *       that brings the header, B8, or its first prefetch), then
 *       RA_GROW (4) times the one before, up to readahead (cut by BA1):
 *       1, 4, 16 MiB; and its prefetches reach as far past the read as
 *       the run has read, no farther (a window that starts before that
 *       horizon is planned whole, cut only at its object's end).  With
 *       the defaults a sequential reader of objects of 16 MiB sets off
 *       [1, 5) MiB once it has read 512 KiB, [5, 16) MiB at 2.5 MiB and
 *       the next object whole, with its header, at 8 MiB, then one
 *       object per GET, two in flight: 18 GETs for 256 MiB.  A reader
 *       that stops just past its first window has had 4 MiB fetched
 *       ahead that it never reads; one that stops within its first
 *       half (`head`, `file`) none.  (Before streaming (BS2) this rule
 *       was "whole windows after the first, one window past the read":
 *       17 GETs for 256 MiB, but 31 MiB fetched for a reader stopping
 *       just past 1 MiB; with streaming a reader takes each block of a
 *       GET as it lands, so a GET set off later, while the one before
 *       still streams, costs it less waiting, and moto, which reads the
 *       whole object for every range GET, reads the first object three
 *       times instead of two.)
 *   BW1 jobs (queued or running) <= nworkers: a planned prefetch starts at
 *       once, so a reader waiting for its flight waits for one GET only.
 *   BW2 nrs_bcache_close() stops the workers and joins them: a running
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
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obj/bcache.h"
#include "obj/bcache_priv.h"
#include "util/log.h"

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
	err = nrs_bc_tier_init(&c->mem, o && o->mem_bytes ? o->mem_bytes : DEF_MEM);
	if (!err && o && o->disk_dir) {
		err = nrs_bc_disk_open(c, o->disk_dir);
		if (err)
			nrs_err("bcache: disk tier %s: %s", o->disk_dir,
				strerror(-err));
	}
	if (err) {
		nrs_bcache_close(c);
		return err;
	}
	c->ahead_max = c->mem.budget / 2;
	/* BA1: room ahead for PF_DEEP GETs and one window landed. */
	c->pf_max = (uint32_t)(c->ahead_max / (PF_DEEP + 1) / NRS_OBJ_BLOCK);
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
				     nrs_bc_worker_main, c);
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
		pthread_join(c->workers[i], NULL);	/* BW2 */
	assert(c->jobs == 0 && c->mem.reserved == 0);
	while (c->mem.lru) {
		struct ent *e = c->mem.lru;

		/* B3: closing under a reader is a caller bug. */
		if (e->refs != 1)
			nrs_err("bcache: closed with a read in flight");
		nrs_bc_mem_drop(c, e);
	}
	while (c->disk.lru) {
		struct ent *e = c->disk.lru;

		nrs_bc_tier_del(&c->disk, e);
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
	err = nrs_bc_hdr_get(c, &r, off, len);
	if (err)
		return err;
	cur = (uint32_t)(r.rel / NRS_OBJ_BLOCK);
	if (r.served > cur) {	/* B8: they came with the header */
		err = r.run_err;
		cur = r.served;
	}
	while (!err && cur <= r.last)
		err = nrs_bc_read_step(c, &r, &cur);
	pthread_mutex_lock(&c->lock);
	nrs_bc_ent_put(r.hdr);
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
	e = nrs_bc_tier_find(&c->mem, h, HDR_IDX);
	if (e)
		nrs_bc_mem_drop(c, e);		/* a reader's reference keeps it */
	for (uint32_t i = 0; i < nblocks; i++) {
		e = nrs_bc_tier_find(&c->mem, h, i);
		if (e)
			nrs_bc_mem_drop(c, e);
		e = nrs_bc_tier_find(&c->disk, h, i);
		if (e)
			nrs_bc_disk_drop(c, e, &victims);
	}
	pthread_mutex_unlock(&c->lock);
	nrs_bc_disk_reap(c, victims);
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
	ok = nrs_bc_tier_check(&c->mem, true, &ahead) &&
	     nrs_bc_tier_check(&c->disk, false, &none) &&
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
