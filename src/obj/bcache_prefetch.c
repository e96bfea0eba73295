/*
 * bcache_prefetch.c - sequential reads of the block cache (bcache.c) and
 * the threads that fetch ahead of them.
 *
 * SEQUENTIAL READS
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
 * PREFETCH
 *
 * One GET at a time leaves the store idle while the reader consumes, and a
 * store like s3rver serves one connection at 165 MB/s but four at 340.  So
 * a sequential read also plans prefetches, which NWORKERS threads owned by
 * the cache run, each one range GET of a run, listed as a flight from the
 * moment it is planned (so a reader never fetches what a prefetch will).
 * The plan, under the lock, in the read's thread:
 *   - the horizon is the end of the read plus as many bytes as the run has
 *     read so far (BA3), at most `lookahead` (NWORKERS * readahead, at
 *     most half the memory tier and NRS_BCACHE_FOLLOW): a read that
 *     merely starts at an object's start sets off one window, a long run
 *     keeps `lookahead` bytes coming;
 *   - from where the stream's prefetches got to (or the read's first
 *     block), each block not held is planned in runs of the stream's
 *     window, which is SEQ_FIRST for the run's first GET, then RA_GROW
 *     (4) times the last one (BA3) up to `readahead`, or less if the
 *     bytes ahead (B7) could not hold PF_DEEP (2) GETs in flight and one window landed besides (BA1: with
 *     the default 128 MiB tier, the whole 16 MiB, an object of the
 *     default size, BA2; with fewer in flight the reader would wait for a
 *     full window to be read before the next GET could start);
 *   - past the object's end it goes on into the object the reader named as
 *     the next one (nrs_bcache_follow, from the stream's index), whose
 *     header the worker fetches with the run from its first block (B8);
 *   - it stops when every worker has a job (BW1), no flight slot is free,
 *     or the bytes read ahead (B7) or the memory tier would go over.
 * A worker verifies each block as a reader's GET does and caches it marked
 * `ahead` (prefetched, not yet read), writing it to the disk tier too.  A
 * prefetch that fails (a store error, a bad block, no memory) is logged
 * (store errors at debug level only) and fails nothing: whoever wanted the
 * bytes finds no flight and no block, and fetches them itself.  The
 * objects a prefetch reads are not covered by the reader's gate
 * (reader.h): one deleted meanwhile is a failed prefetch, nothing worse.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "obj/bcache_priv.h"

/* ---- where the reads of a stream got to -------------------------------- */

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
	if (!nrs_bc_obj_is(&s->cur, h))
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
	uint64_t horizon, at;
	uint32_t cap = c->pf_max;
	bool queued = false;

	/* BA3: as far past the read as the run has read, no farther */
	horizon = end + (run < c->lookahead ? run : c->lookahead);
	at = s->pf >= off && s->pf <= horizon ? s->pf : off;
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
		if (nrs_bc_is_held(c, h, idx)) {
			at = h->start + (uint64_t)(idx + 1) * NRS_OBJ_BLOCK;
			at = at < h->end ? at : h->end;
			continue;
		}
		reserve = nrs_bc_blk_cost(blk_len(h, idx));
		for (n = 1; n < (s->ra < cap ? s->ra : cap) && idx + n < nb &&
			    !nrs_bc_is_held(c, h, idx + n); n++)
			reserve += nrs_bc_blk_cost(blk_len(h, idx + n));
		/* A window wider than ahead_max could ever hold is cut to
		 * fit; one that does not fit now waits for the reader to
		 * catch up (cutting it would make many small GETs). */
		while (n > 1 && reserve > c->ahead_max)
			reserve -= nrs_bc_blk_cost(blk_len(h, idx + --n));
		if (c->ahead + reserve > c->ahead_max ||
		    !nrs_bc_mem_make_room(c, reserve, true))
			break;
		/* only now: making room may have evicted an unreferenced
		 * header entry of a following object */
		hdr = h == r->h ? r->hdr : nrs_bc_tier_find(&c->mem, h, HDR_IDX);
		j = malloc(sizeof(*j));
		if (!j)
			break;
		slot = nrs_bc_flight_add(c, h, idx, n);
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
		s->ra = nrs_bc_ra_next(s->ra, cap);	/* BA3 */
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
int nrs_bc_hdr_get(struct nrs_bcache *c, struct req *r, uint64_t off,
		   size_t len)
{
	const struct nrs_objhdr *h = r->h;
	uint64_t end = off + len, landed_to = 0;
	struct seq *s;
	bool near;
	int landed;

	landed = nrs_bc_hdr_ref(c, h, NULL, r, &r->hdr);	/* B8 */
	if (landed < 0)
		return landed;
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
	if (landed > 0 && r->seq) {	/* B8: the run's first window */
		landed_to = h->start + (uint64_t)landed * NRS_OBJ_BLOCK;
		if (landed_to > h->end)
			landed_to = h->end;
		s->pf = landed_to;
		s->ra = nrs_bc_ra_next(c->seq_first, c->pf_max); /* BA3 */
	}
	if (!near || end > s->next)
		s->next = end;
	s->seen = true;
	r->win = s->ra;
	if (r->seq)
		prefetch_plan(c, r, s, end);
	if (s->pf < landed_to)	/* planned as far, by the header's GET */
		s->pf = landed_to;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- prefetch workers -------------------------------------------------- */

/* Give back what job j holds: the memory of blocks that did not land, its
 * flight (waking the readers waiting for it), its header; and free it. */
static void job_end(struct nrs_bcache *c, struct job *j)
{
	pthread_mutex_lock(&c->lock);
	c->mem.reserved -= j->reserve;
	c->ahead -= j->reserve;
	nrs_bc_flight_end_locked(c, j->slot);
	if (j->hdr)
		nrs_bc_ent_put(j->hdr);
	c->jobs--;
	pthread_mutex_unlock(&c->lock);
	free(j);
}

/* A prefetch thread: runs jobs until the cache closes; jobs still queued
 * then are ended without a GET (BW2). */
void *nrs_bc_worker_main(void *arg)
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
			nrs_bc_fetch_job(c, j);
		job_end(c, j);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
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

