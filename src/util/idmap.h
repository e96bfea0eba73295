/*
 * idmap.h - a hash map from a 64-bit id to a pointer: the stream table
 * (stream/table.c).  Ids come from the disk (metadata rows, the SQLite
 * sequence), so the map must not care how large an id is: its memory
 * follows the number of entries (at most max(16, 8 n) slots for n live
 * entries), never the largest id, and every id, 0 and UINT64_MAX
 * included, is a valid key.
 *
 * Open addressing with linear probing over a power-of-two table; a slot is
 * empty when its value is NULL (values are never NULL).  Removal shifts the
 * following entries back (no tombstones), so a lookup stops at the first
 * empty slot and the table never fills with dead slots.
 *
 *   H1 Growth doubles the table when an insert would take it past 1/2
 *      full, with the slot count and its byte size checked for overflow
 *      (-ENOMEM, map unchanged); removal halves it when it falls below
 *      1/8 full (best effort: a failed shrink keeps the larger table).
 *   H2 Iteration (nrs_idmap_next) visits each live entry once, in no
 *      particular order, and costs the table size, not the id range.
 *
 * No locking: the caller serialises (stream/table.c holds its lock).
 */
#ifndef NRS_IDMAP_H
#define NRS_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct nrs_idmap_slot {
	uint64_t key;
	void *val;		/* NULL: empty */
};

struct nrs_idmap {
	struct nrs_idmap_slot *slots;
	size_t cap;		/* 0 or a power of two */
	size_t n;		/* live entries */
};

/* An empty map; nothing is allocated until the first put. */
void nrs_idmap_init(struct nrs_idmap *m);
/* Frees the table (not the values); the map is empty and usable again. */
void nrs_idmap_free(struct nrs_idmap *m);
/* The value of key, or NULL. */
void *nrs_idmap_get(const struct nrs_idmap *m, uint64_t key);
/* Add key -> val (val != NULL): 0, -EEXIST (key present, map unchanged),
 * -EINVAL (val NULL) or -ENOMEM (map unchanged). */
int nrs_idmap_put(struct nrs_idmap *m, uint64_t key, void *val);
/* Remove key; its value, or NULL if it was absent. */
void *nrs_idmap_remove(struct nrs_idmap *m, uint64_t key);
static inline size_t nrs_idmap_count(const struct nrs_idmap *m)
{
	return m->n;
}
/*
 * H2: start with *pos = 0; each call returns the next live value (and its
 * key in *key if not NULL) or NULL at the end.  The map must not change
 * during a walk.
 */
void *nrs_idmap_next(const struct nrs_idmap *m, size_t *pos, uint64_t *key);

#endif
