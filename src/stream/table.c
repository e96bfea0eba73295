/*
 * table.c - the stream table (table.h has its rules and lock order).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "stream/table.h"

struct nrs_stream *nrs_stream_new(const struct nrs_stream_row *row)
{
	struct nrs_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->id = row->id;
	atomic_init(&st->refs, 1);
	pthread_mutex_init(&st->lock, NULL);
	st->batch_slot = -1;
	st->batch_upd = -1;
	atomic_init(&st->privs, true);	/* K1: not looked at yet */
	if (row->corrupt) {	/* nothing else of the row is trusted */
		st->corrupt = true;
		return st;
	}
	st->ino = row->ino;
	st->head = st->ord_head = st->read_limit = row->head;
	st->version = st->ord_version = row->version;
	st->epoch = st->ord_epoch = row->epoch;
	st->last_lsn = st->ord_lsn = row->last_lsn;
	st->start = row->start;
	st->mtime_ns = row->mtime_ns;
	st->profile = row->profile;
	st->unlinked = row->unlinked;
	return st;
}

void nrs_stream_put(struct nrs_stream *st)
{
	if (!st || atomic_fetch_sub(&st->refs, 1) != 1)
		return;
	nrs_index_free(&st->index);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

void nrs_streams_init(struct nrs_streams *t)
{
	pthread_rwlock_init(&t->lock, NULL);
	nrs_idmap_init(&t->map);
}

void nrs_streams_destroy(struct nrs_streams *t)
{
	struct nrs_stream *st;

	for (size_t pos = 0; (st = nrs_idmap_next(&t->map, &pos, NULL));)
		nrs_stream_put(st);
	nrs_idmap_free(&t->map);
	pthread_rwlock_destroy(&t->lock);
}

struct nrs_stream *nrs_streams_get(struct nrs_streams *t, uint64_t id)
{
	struct nrs_stream *st = NULL;

	pthread_rwlock_rdlock(&t->lock);
	st = nrs_idmap_get(&t->map, id);
	if (st)
		atomic_fetch_add(&st->refs, 1);
	pthread_rwlock_unlock(&t->lock);
	return st;
}

struct nrs_stream *nrs_streams_peek(struct nrs_streams *t, uint64_t id)
{
	struct nrs_stream *st;

	pthread_rwlock_rdlock(&t->lock);
	st = nrs_idmap_get(&t->map, id);
	pthread_rwlock_unlock(&t->lock);
	return st;
}

static int cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int nrs_streams_ids(struct nrs_streams *t, uint64_t **ids, size_t *n)
{
	uint64_t *v;
	size_t k = 0, pos = 0;
	uint64_t id;

	pthread_rwlock_rdlock(&t->lock);
	v = malloc((nrs_idmap_count(&t->map) + 1) * sizeof(*v));
	if (!v) {
		pthread_rwlock_unlock(&t->lock);
		return -ENOMEM;
	}
	while (nrs_idmap_next(&t->map, &pos, &id))
		v[k++] = id;
	pthread_rwlock_unlock(&t->lock);
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_id);
	*ids = v;
	*n = k;
	return 0;
}

int nrs_streams_insert(struct nrs_streams *t, struct nrs_stream *st)
{
	int err;

	pthread_rwlock_wrlock(&t->lock);
	err = nrs_idmap_put(&t->map, st->id, st);
	pthread_rwlock_unlock(&t->lock);
	return err;
}

void nrs_streams_each(struct nrs_streams *t,
		      void (*fn)(void *ctx, struct nrs_stream *st), void *ctx)
{
	struct nrs_stream *st;
	size_t pos = 0;

	pthread_rwlock_rdlock(&t->lock);
	while ((st = nrs_idmap_next(&t->map, &pos, NULL))) {	/* H2 */
		pthread_mutex_lock(&st->lock);
		fn(ctx, st);
		pthread_mutex_unlock(&st->lock);
	}
	pthread_rwlock_unlock(&t->lock);
}

void nrs_streams_remove(struct nrs_streams *t, uint64_t id)
{
	struct nrs_stream *st;

	pthread_rwlock_wrlock(&t->lock);
	st = nrs_idmap_remove(&t->map, id);
	pthread_rwlock_unlock(&t->lock);
	nrs_stream_put(st);
}
