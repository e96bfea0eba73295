/*
 * pipeline_group.c - PL20's merge (pipeline.c): the head updates of a
 * group of batches, in batch order, as one update per stream.
 *
 * Each batch's update of a stream goes from the ordering view before that
 * batch to the one after it (PL1), so the updates of one stream across the
 * group form a chain: the group's update takes the CAS (old_version) of
 * the stream's first batch in the group and every other field (head,
 * version, epoch, last_lsn, mtime) from its last.  The merged set names
 * distinct streams (meta.h MC5), ordered by stream id.  The state is the
 * publisher's alone (struct pl_group in pipeline_priv.h).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "commit/pipeline.h"
#include "commit/pipeline_priv.h"
#include "meta/meta.h"
#include "util/grow.h"

struct pl_gkey {
	uint64_t id;
	uint32_t k;		/* the batch's place in the group */
	uint32_t i;		/* its update's index in that batch */
};

static int key_cmp(const void *a, const void *b)
{
	const struct pl_gkey *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->k < y->k ? -1 : x->k > y->k;
}

int pl_group_merge(struct pl_group *g, struct batch *const *bs, int n)
{
	size_t total = 0, nk = 0;

	g->n = 0;
	for (int k = 0; k < n; k++)
		total += bs[k]->nupds;
	if (total == 0)
		return 0;
	if (nrs_grow((void **)&g->keys, &g->cap_keys, total,
		     sizeof(*g->keys)) ||
	    nrs_grow((void **)&g->upds, &g->cap_upds, total,
		     sizeof(*g->upds)))
		return -ENOMEM;
	for (int k = 0; k < n; k++)
		for (size_t i = 0; i < bs[k]->nupds; i++) {
			g->keys[nk].id = bs[k]->upds[i].id;
			g->keys[nk].k = (uint32_t)k;
			g->keys[nk].i = (uint32_t)i;
			nk++;
		}
	qsort(g->keys, nk, sizeof(*g->keys), key_cmp);
	for (size_t j = 0; j < nk; j++) {
		const struct pl_gkey *key = &g->keys[j];
		const struct nrs_head_update *u = &bs[key->k]->upds[key->i];

		if (j > 0 && g->keys[j - 1].id == key->id) {
			/* a later batch of the same stream: PL20 */
			uint64_t old = g->upds[g->n - 1].old_version;

			g->upds[g->n - 1] = *u;
			g->upds[g->n - 1].old_version = old;
		} else {
			g->upds[g->n++] = *u;
		}
	}
	return 0;
}
