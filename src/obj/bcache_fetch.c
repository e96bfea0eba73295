/*
 * bcache_fetch.c - how a read of the block cache (bcache.c) gets its
 * blocks: the object's header and CRC table, then each block from memory,
 * from the disk tier (bcache_disk.c), from a flight another reader or a
 * prefetch has under way, or with a range GET of its own, verified before
 * it is cached or copied (B1).
 *
 * READS
 *
 * A read takes a reference on the object's header entry (fetched once,
 * with the object's first window when the read starts there: bcache.c
 * B8), then walks the blocks it wants.  A block in memory is copied out under a reference; a
 * block on disk is read and verified; a block a flight carries (below) is
 * waited for; a missing run is fetched with one range GET by the reader
 * itself.  A run stops at a block that memory or disk already holds or a
 * flight carries, and at `readahead` bytes.  A read that is not sequential
 * fetches only the blocks it wants.
 *
 * Whether a read is sequential, and so how far its own GET reaches, is
 * bcache_prefetch.c's.
 *
 * A GET's body lands block by block as it arrives (bcache_fill.c,
 * STREAMING).  Each block of a GET is verified before it is cached or
 * copied; a bad
 * block is logged (key, stream, logical offset), counted, never cached,
 * and fails the read (-EBADMSG) if the read wanted it.  A bad block
 * fetched for anyone else fails nothing.
 *
 * A run being fetched is a flight, listed until its blocks are cached: a
 * reader that misses a block of a flight waits for it to land instead of
 * fetching it again, then looks again: normally the block is in memory by
 * then; if not (the fetch failed, or memory had no room), the reader
 * fetches it itself, so that only its own GET can fail it.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "obj/bcache_priv.h"
#include "util/log.h"


/* The flight carrying block idx of h, or NULL.  Lock held; the pointer is
 * good while it is. */
static const struct flight *flight_of(const struct nrs_bcache *c,
				      const struct nrs_objhdr *h, uint32_t idx)
{
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		const struct flight *f = &c->flights[i];

		if (f->n && idx - f->first < f->n && idx >= f->next &&
		    nrs_bc_obj_is(&f->h, h))	/* BS2 */
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
bool nrs_bc_is_held(const struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint32_t idx)
{
	return nrs_bc_tier_find(&c->mem, h, idx) ||
	       nrs_bc_tier_find(&c->disk, h, idx) || in_flight(c, h, idx);
}

/* List [first, first + n) of h as a flight: its slot, or -1 if none is
 * free.  Lock held. */
int nrs_bc_flight_add(struct nrs_bcache *c, const struct nrs_objhdr *h,
		      uint32_t first, uint32_t n)
{
	for (unsigned i = 0; i < MAX_FLIGHTS; i++) {
		if (c->flights[i].n == 0) {
			c->flights[i] = (struct flight){ .h = *h,
							 .first = first, .n = n,
							 .next = first };
			return (int)i;
		}
	}
	return -1;
}



/* End flight slot (-1: none) and wake the readers waiting for it.  Lock
 * held. */
void nrs_bc_flight_end_locked(struct nrs_bcache *c, int slot)
{
	if (slot < 0)
		return;
	c->flights[slot].n = 0;
	pthread_cond_broadcast(&c->landed);
}

static void flight_end(struct nrs_bcache *c, int slot)
{
	pthread_mutex_lock(&c->lock);
	nrs_bc_flight_end_locked(c, slot);
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
	       !nrs_bc_is_held(c, r->h, first + n)) {
		if (first + n <= r->last)
			c->st.misses++;
		n++;
	}
	*slot = nrs_bc_flight_add(c, r->h, first, n);
	return n;
}

/*
 * Fetch blocks [first, first + n) with one GET whose body lands block by
 * block as it comes (bcache_fill.c: verified, cached, the wanted ones
 * copied out, the flight in slot moved past each).
 */
int nrs_bc_fetch_run(struct nrs_bcache *c, const struct req *r,
		     uint32_t first, uint32_t n, int slot)
{
	struct fill f;

	nrs_bc_fill_init(&f, c, r, first, n, slot);
	return nrs_bc_fill_end(&f, nrs_bc_fill_get(&f, false));
}

/*
 * The header entry f->hdr, just parsed from f's GET and verified: publish
 * it as soon as it is in, before the blocks that follow it in the GET, so
 * that the readers waiting for it (B8) wake then and take those blocks as
 * they land (BS2).  The entry memory holds already (fetched twice, without
 * a flight) wins over ours; ours is added if there is room.  f->hdr is
 * then a reference of the fetch's own, and the header's flight
 * (*f->hslot) is ended.
 */
void nrs_bc_hdr_publish(struct fill *f)
{
	struct nrs_bcache *c = f->c;
	struct ent *e, *mine = f->hdr;

	pthread_mutex_lock(&c->lock);
	e = nrs_bc_tier_find(&c->mem, f->r->h, HDR_IDX);
	if (e) {
		e->refs++;
		nrs_bc_tier_touch(&c->mem, e);
	} else {
		e = mine;
		mine = NULL;
		e->refs = 1;
		if (nrs_bc_mem_make_room(c, sizeof(*e) + e->len,
					 f->r->job != NULL)) {
			e->refs++;
			nrs_bc_tier_add(&c->mem, e, sizeof(*e) + e->len);
		}
	}
	f->hdr = e;
	nrs_bc_flight_end_locked(c, *f->hslot);	/* B8 */
	*f->hslot = -1;
	f->published = true;
	pthread_mutex_unlock(&c->lock);
	free(mine);
}

/*
 * Fetch the header and table of h into a new entry and, in the same GET
 * (B8), payload blocks [0, nrun), landed as they come against that table
 * (the flight in slot moved past each); for reader r, the ones it wants
 * are copied out, and r->served and r->run_err say how far that got.  A
 * GET that fails after the header came keeps the header and what landed
 * (BS1): r fetches the rest itself.  *out is a reference to the header
 * entry, published (nrs_bc_hdr_publish) as soon as it came.
 */
static int hdr_fetch(struct nrs_bcache *c, const struct nrs_objhdr *h,
		     struct job *j, struct req *r, uint32_t nrun, int slot,
		     int *hslot, struct ent **out)
{
	struct req run = r ? *r : (struct req){ .h = h, .job = j };
	struct fill f;
	ssize_t got;
	int err;

	run.hdr = NULL;
	nrs_bc_fill_init(&f, c, &run, 0, nrun, slot);
	f.hslot = hslot;	/* published as soon as it is in */
	got = nrs_bc_fill_get(&f, true);
	if (!f.hdr) {		/* nothing landed: the header did not */
		nrs_bc_fill_end(&f, got);
		if (got >= 0)	/* the body ended within the header */
			return nrs_bc_hdr_parse(c, h, NULL, 0, out);
		return (int)got;
	}
	if (!f.published)
		nrs_bc_hdr_publish(&f);
	err = nrs_bc_fill_end(&f, got);
	if (got < 0)
		err = f.err;	/* BS1: the blocks past the cut, r's own */
	*out = f.hdr;
	if (r) {
		r->served = got < 0 ? f.done : nrun;
		r->run_err = err;
	}
	return got < 0 ? (int)f.done : (int)nrun;
}

/* Is h's header in flight (B8)?  Lock held. */
static bool hdr_in_flight(const struct nrs_bcache *c,
			  const struct nrs_objhdr *h)
{
	return in_flight(c, h, HDR_IDX);
}

/* The blocks a fetch of h's header brings along (B8): prefetch j's run
 * if it starts at the first block (listed as j's flight already), else
 * none; for reader r starting at the first block, its wanted
 * blocks (at least seq_first if it starts at the object's start, which
 * makes it sequential), within readahead, as far as nobody holds them (a
 * flight of their own in *rslot).  Lock held. */
static uint32_t hdr_run(struct nrs_bcache *c, const struct nrs_objhdr *h,
			const struct job *j, const struct req *r, int *rslot)
{
	uint32_t want, n = 0, nb = nrs_objfmt_nblocks(h->end - h->start);

	if (j)		/* B8: a prefetch's own run, its flight */
		return j->first == 0 ? j->n : 0;
	if (!r || r->rel >= NRS_OBJ_BLOCK)
		return 0;
	want = r->last + 1;
	if (r->rel == 0 && want < c->seq_first)
		want = c->seq_first;
	if (want > c->readahead / NRS_OBJ_BLOCK)
		want = c->readahead / NRS_OBJ_BLOCK;
	while (n < want && n < nb && !nrs_bc_is_held(c, h, n))
		n++;
	if (n)
		*rslot = nrs_bc_flight_add(c, h, 0, n);
	return *rslot < 0 ? 0 : n;
}

/*
 * A reference to the header entry of h in *out, fetched if need be, once
 * (B8): while another reader or prefetch fetches it, wait for it to land.
 * A fetch of our own for reader r brings its first blocks along (hdr_run:
 * r then wants no GET for blocks [0, r->served), r->run_err says if they
 * were good); for prefetch j it brings j's run if j starts at the first
 * block (its blocks cached as read ahead, j's reservation), is quiet and
 * evicts nothing read ahead (B7).  Returns how many blocks came with the
 * header, or an error (no reference taken).
 */
int nrs_bc_hdr_ref(struct nrs_bcache *c, const struct nrs_objhdr *h,
		   struct job *j, struct req *r, struct ent **out)
{
	struct ent *e;
	int hslot = -1, rslot = -1, landed;
	uint32_t nrun = 0;
	bool waited = false;

	pthread_mutex_lock(&c->lock);
	/* B6: a header flight's owner waits for nothing while it holds it */
	while (!(e = nrs_bc_tier_find(&c->mem, h, HDR_IDX)) &&
	       hdr_in_flight(c, h)) {
		waited = true;
		pthread_cond_wait(&c->landed, &c->lock);
	}
	if (e) {
		e->refs++;
		nrs_bc_tier_touch(&c->mem, e);
		pthread_mutex_unlock(&c->lock);
		*out = e;
		return 0;
	}
	/* Landed and gone already (no room), or its GET failed: fetch it
	 * ourselves, as a block's reader does, but listed as no flight, so
	 * a failing store is not waited for once per reader. */
	if (!waited) {
		hslot = nrs_bc_flight_add(c, h, HDR_IDX, 1);	/* B8 */
		nrun = hdr_run(c, h, j, r, &rslot);
	}
	if (r && nrun > r->rel / NRS_OBJ_BLOCK)	/* wanted, missed */
		c->st.misses += (nrun < r->last + 1 ? nrun : r->last + 1) -
				(uint32_t)(r->rel / NRS_OBJ_BLOCK);
	pthread_mutex_unlock(&c->lock);

	landed = hdr_fetch(c, h, j, r, nrun, j ? j->slot : rslot, &hslot, &e);
	pthread_mutex_lock(&c->lock);
	if (landed >= 0)
		*out = e;	/* published, a reference ours */
	nrs_bc_flight_end_locked(c, hslot);
	nrs_bc_flight_end_locked(c, rslot);
	pthread_mutex_unlock(&c->lock);
	return landed;
}

/*
 * Prefetch job j's blocks, and its object's header if it holds none: a
 * run from the first block fetches the header (once, B8) and itself in
 * one GET, unless another's GET brings the header, which it waits for;
 * any other run sends its GET at once and waits for the header only to
 * verify what came, so a prefetch does not idle while another one's GET
 * brings the header.  What fails is logged at most.
 */
void nrs_bc_fetch_job(struct nrs_bcache *c, struct job *j)
{
	struct req r = { .h = &j->h, .job = j, .hdr = j->hdr };
	size_t bytes;
	unsigned char *buf;
	struct fill f;
	ssize_t got;

	if (!j->hdr && j->first == 0) {
		int landed = nrs_bc_hdr_ref(c, &j->h, j, NULL, &j->hdr);

		if (landed != 0)
			return;		/* B8: the run came with the header,
					 * or what did not failed */
		r.hdr = j->hdr;
	}
	if (r.hdr) {
		nrs_bc_fetch_run(c, &r, j->first, j->n, j->slot);
		return;
	}
	/* The header is not here to verify blocks against as they come:
	 * the run waits in a buffer (what the job reserved, B5). */
	bytes = nrs_bc_run_bytes(&j->h, j->first, j->n);
	buf = malloc(bytes);
	if (!buf)
		return;
	got = nrs_bc_store_get(c, &j->h,
			       nrs_objfmt_hdr_len(j->h.end - j->h.start) +
			       (uint64_t)j->first * NRS_OBJ_BLOCK, buf, bytes,
			       true);
	if (got >= 0 && nrs_bc_hdr_ref(c, &j->h, j, NULL, &j->hdr) >= 0) {
		r.hdr = j->hdr;
		nrs_bc_fill_init(&f, c, &r, j->first, j->n, j->slot);
		nrs_bc_fill_end(&f, nrs_bc_land_buf(&f, buf, (size_t)got) ?:
				    got);
	}
	free(buf);
}

/* Serve block *cur of r and step *cur past what was served. */
int nrs_bc_read_step(struct nrs_bcache *c, const struct req *r, uint32_t *cur)
{
	uint32_t idx = *cur, n = 0;
	struct ent *e;
	bool on_disk = false, waited = false;
	int slot = -1, err;

	pthread_mutex_lock(&c->lock);
	/* B6: this reader owns no flight here, nor when it waits below */
	while (!(e = nrs_bc_tier_find(&c->mem, r->h, idx)) &&
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
		nrs_bc_tier_touch(&c->mem, e);
	} else {
		c->st.misses++;
		on_disk = nrs_bc_tier_find(&c->disk, r->h, idx) != NULL;
		if (!on_disk)
			n = plan_fetch(c, r, idx, &slot);
	}
	pthread_mutex_unlock(&c->lock);

	if (e) {
		nrs_bc_copy_out(r, idx, e->data, e->len);
		pthread_mutex_lock(&c->lock);
		nrs_bc_ent_put(e);
		pthread_mutex_unlock(&c->lock);
		*cur = idx + 1;
		return 0;
	}
	if (on_disk) {
		err = nrs_bc_disk_load(c, r, idx, &e);
		if (!err) {
			nrs_bc_copy_out(r, idx, e->data, e->len);
			nrs_bc_mem_insert(c, e, NULL);
			*cur = idx + 1;
			return 0;
		}
		if (err == -ENOMEM)
			return err;
		pthread_mutex_lock(&c->lock);
		n = plan_fetch(c, r, idx, &slot);
		pthread_mutex_unlock(&c->lock);
	}
	err = nrs_bc_fetch_run(c, r, idx, n, slot);
	flight_end(c, slot);
	*cur = idx + n;
	return err;
}

