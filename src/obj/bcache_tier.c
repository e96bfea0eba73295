/*
 * bcache_tier.c - the entries of the block cache (bcache.c, ENTRIES) and
 * the two structures every tier keeps them in: a hash table on (stream,
 * start, end, gen, idx) and an LRU list, with the bytes they count against
 * the tier's budget.  The disk tier (bcache_disk.c) indexes its files in
 * one of these; the memory tier is all here:
 *
 * Memory: a hash table and an LRU list, bounded by mem_bytes (entry struct
 * plus data are counted).  An entry that does not fit once every unused
 * entry is evicted is not cached: the reader uses its private copy.
 *
 * A memory entry is freed by its last reference (B3); eviction takes the
 * least recently used unused entry, those read ahead and not yet read only
 * after every other and never to make room for a prefetch (B5, B7).
 * Unless a comment says otherwise, callers hold c->lock.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "obj/bcache_priv.h"

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

static bool ent_is(const struct ent *e, const struct nrs_objhdr *h,
		   uint32_t idx)
{
	return e->idx == idx && nrs_bc_obj_is(&e->h, h);
}

/* A new unlinked entry with room for len bytes, which the caller fills
 * (they are not zeroed: blocks are written whole); no lock needed. */
struct ent *nrs_bc_ent_new(const struct nrs_objhdr *h, uint32_t idx,
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

int nrs_bc_tier_init(struct tier *t, uint64_t budget)
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

struct ent *nrs_bc_tier_find(const struct tier *t, const struct nrs_objhdr *h,
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

void nrs_bc_tier_touch(struct tier *t, struct ent *e)
{
	if (t->mru != e) {
		lru_unlink(t, e);
		lru_push(t, e);
	}
}

void nrs_bc_tier_add(struct tier *t, struct ent *e, uint64_t cost)
{
	struct ent **b = &t->buckets[ent_hash(t, &e->h, e->idx)];

	e->hnext = *b;
	*b = e;
	lru_push(t, e);
	e->cost = cost;
	e->linked = true;
	t->bytes += cost;
}

void nrs_bc_tier_del(struct tier *t, struct ent *e)
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
void nrs_bc_ent_put(struct ent *e)
{
	if (--e->refs == 0)
		free(e);
}

void nrs_bc_mem_drop(struct nrs_bcache *c, struct ent *e)
{
	if (e->ahead) {
		e->ahead = false;
		c->ahead -= e->cost;
	}
	nrs_bc_tier_del(&c->mem, e);
	nrs_bc_ent_put(e);
}

/*
 * Evict unused memory entries until cost more bytes fit beside what is
 * reserved (B5): least recently used first, entries read ahead and not yet
 * read only after every other, and never for a prefetch (B7).  false:
 * they do not fit.
 */
bool nrs_bc_mem_make_room(struct nrs_bcache *c, uint64_t cost, bool prefetch)
{
	struct tier *t = &c->mem;

	if (cost > t->budget || t->reserved > t->budget - cost)
		return false;
	for (int pass = 0; pass < (prefetch ? 1 : 2); pass++) {
		struct ent *e = t->lru;

		while (t->bytes + t->reserved + cost > t->budget && e) {
			struct ent *prev = e->prev;

			if (e->refs == 1 && (pass == 1 || !e->ahead))
				nrs_bc_mem_drop(c, e);
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
void nrs_bc_mem_insert(struct nrs_bcache *c, struct ent *e, struct job *j)
{
	uint64_t cost = nrs_bc_blk_cost(e->len);
	struct ent *old;

	pthread_mutex_lock(&c->lock);
	if (j) {
		assert(j->reserve >= cost && c->mem.reserved >= cost);
		j->reserve -= cost;
		c->mem.reserved -= cost;
	}
	old = nrs_bc_tier_find(&c->mem, &e->h, e->idx);
	if (old) {
		nrs_bc_tier_touch(&c->mem, old);
	} else if (nrs_bc_mem_make_room(c, cost, j != NULL)) {
		e->refs = 1;
		e->ahead = j != NULL;
		nrs_bc_tier_add(&c->mem, e, cost);
		e = NULL;
	}
	if (e && j)
		c->ahead -= cost;	/* not kept: no longer ahead */
	pthread_mutex_unlock(&c->lock);
	free(e);
}


/* One tier's hash and LRU hold the same entries, and its bytes add up;
 * *ahead gets the bytes of its entries read ahead. */
bool nrs_bc_tier_check(const struct tier *t, bool mem, uint64_t *ahead)
{
	uint64_t bytes = 0;
	size_t in_lru = 0, in_hash = 0;

	*ahead = 0;
	for (const struct ent *e = t->mru; e; e = e->next) {
		if (!e->linked || (e->next && e->next->prev != e) ||
		    (!e->next && t->lru != e) ||
		    nrs_bc_tier_find(t, &e->h, e->idx) != e ||
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
