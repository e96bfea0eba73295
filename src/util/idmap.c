/*
 * idmap.c - the id -> pointer hash map of idmap.h (the rules H1, H2 are
 * there).
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/idmap.h"

#define MIN_CAP	16

/* splitmix64's finaliser: consecutive ids spread over the whole table */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

void nrs_idmap_init(struct nrs_idmap *m)
{
	m->slots = NULL;
	m->cap = 0;
	m->n = 0;
}

void nrs_idmap_free(struct nrs_idmap *m)
{
	free(m->slots);
	nrs_idmap_init(m);
}

/* The slot holding key, or the empty slot where it would go (cap > 0). */
static size_t probe(const struct nrs_idmap *m, uint64_t key)
{
	size_t mask = m->cap - 1, i = (size_t)mix(key) & mask;

	while (m->slots[i].val && m->slots[i].key != key)
		i = (i + 1) & mask;
	return i;
}

void *nrs_idmap_get(const struct nrs_idmap *m, uint64_t key)
{
	return m->cap ? m->slots[probe(m, key)].val : NULL;
}

/* Move every entry into a table of cap slots (a power of two >= 2n). */
static int rehash(struct nrs_idmap *m, size_t cap)
{
	struct nrs_idmap_slot *old = m->slots;
	size_t ocap = m->cap;

	if (cap > SIZE_MAX / sizeof(*m->slots))			/* H1 */
		return -ENOMEM;
	m->slots = calloc(cap, sizeof(*m->slots));
	if (!m->slots) {
		m->slots = old;
		return -ENOMEM;
	}
	m->cap = cap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].val)
			m->slots[probe(m, old[i].key)] = old[i];
	free(old);
	return 0;
}

int nrs_idmap_put(struct nrs_idmap *m, uint64_t key, void *val)
{
	size_t i;

	if (!val)
		return -EINVAL;
	if (m->cap && m->slots[probe(m, key)].val)
		return -EEXIST;
	if (m->n + 1 > m->cap / 2) {				/* H1 */
		size_t cap = m->cap ? m->cap : MIN_CAP / 2;

		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		if (rehash(m, cap * 2))
			return -ENOMEM;
	}
	i = probe(m, key);
	m->slots[i].key = key;
	m->slots[i].val = val;
	m->n++;
	return 0;
}

void *nrs_idmap_remove(struct nrs_idmap *m, uint64_t key)
{
	size_t mask, i, j;
	void *val;

	if (!m->cap)
		return NULL;
	mask = m->cap - 1;
	i = probe(m, key);
	val = m->slots[i].val;
	if (!val)
		return NULL;
	/* Shift back every entry of the run after i that may move to i. */
	for (j = (i + 1) & mask; m->slots[j].val; j = (j + 1) & mask) {
		size_t home = (size_t)mix(m->slots[j].key) & mask;

		/* j's entry stays if its home lies cyclically in (i, j] */
		if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
			continue;
		m->slots[i] = m->slots[j];
		i = j;
	}
	m->slots[i].val = NULL;
	m->n--;
	if (m->cap > MIN_CAP && m->n < m->cap / 8)		/* H1 */
		(void)rehash(m, m->cap / 2);
	return val;
}

void *nrs_idmap_next(const struct nrs_idmap *m, size_t *pos, uint64_t *key)
{
	for (; *pos < m->cap; (*pos)++) {
		const struct nrs_idmap_slot *s = &m->slots[*pos];

		if (s->val) {
			(*pos)++;
			if (key)
				*key = s->key;
			return s->val;
		}
	}
	return NULL;
}
