/*
 * index.c - the per-stream offset index (see index.h for the model).
 *
 * A sorted array: appends add at the end (the committer thread, once per
 * record), readers binary-search.  Invariant X1: for i > 0,
 * v[i-1].end <= v[i].start and v[i].start < v[i].end.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "objfmt.h"
#include "walrec.h"

int nrs_index_append(struct nrs_index *ix, const struct nrs_index_ent *e)
{
	if (e->end <= e->start)
		return -EINVAL;
	if (ix->n > 0 && e->start < ix->v[ix->n - 1].end)
		return -EINVAL;		/* X1 */
	if (ix->n == ix->cap) {
		size_t cap = ix->cap ? ix->cap * 2 : 16;
		struct nrs_index_ent *v = realloc(ix->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ix->v = v;
		ix->cap = cap;
	}
	ix->v[ix->n++] = *e;
	return 0;
}

size_t nrs_index_find(const struct nrs_index *ix, uint64_t off)
{
	size_t lo = 0, hi = ix->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ix->v[mid].end > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void nrs_index_drop_below(struct nrs_index *ix, uint64_t off)
{
	size_t i = nrs_index_find(ix, off);

	if (i == 0)
		return;
	memmove(ix->v, ix->v + i, (ix->n - i) * sizeof(*ix->v));
	ix->n -= i;
}

int nrs_index_replace(struct nrs_index *ix, const struct nrs_index_ent *e,
		      uint64_t *wal_bytes)
{
	size_t i = nrs_index_find(ix, e->start), j;
	uint64_t bytes = 0;

	if (e->end <= e->start)
		return -EINVAL;
	for (j = i; j < ix->n && ix->v[j].start < e->end; j++) {
		if (ix->v[j].end > e->end)
			return -EINVAL;
		if (j > i && ix->v[j].start < e->start)
			return -EINVAL;
		if (ix->v[j].kind == NRS_TARGET_WAL)
			bytes += nrs_walrec_total_len(
				(uint32_t)(ix->v[j].end - ix->v[j].start));
	}
	if (j == i) {
		*wal_bytes = 0;
		return 0;
	}
	ix->v[i] = *e;
	memmove(ix->v + i + 1, ix->v + j, (ix->n - j) * sizeof(*ix->v));
	ix->n -= j - i - 1;
	*wal_bytes = bytes;
	return (int)(j - i);
}

uint64_t nrs_index_min_seg(const struct nrs_index *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		if (ix->v[i].kind == NRS_TARGET_WAL)
			return ix->v[i].seg;
	return UINT64_MAX;
}

size_t nrs_index_collect(const struct nrs_index *ix, uint64_t off, uint64_t end,
			 struct nrs_index_ent *out, size_t max)
{
	size_t i = nrs_index_find(ix, off), k = 0;

	for (; i < ix->n && k < max && ix->v[i].start < end; i++)
		out[k++] = ix->v[i];
	return k;
}

static int format_line(char *line, size_t len, uint64_t start, uint64_t end,
		       const struct nrs_index_ent *e, uint64_t stream_id)
{
	if (!e)
		return snprintf(line, len, "%" PRIu64 " %" PRIu64 " 0 missing\n",
				start, end);
	if (e->kind == NRS_TARGET_OBJ) {
		char key[NRS_OBJKEY_MAX];
		struct nrs_objhdr h = { .stream_id = stream_id, .start = e->ostart,
					.end = e->oend, .gen = e->gen };

		nrs_objfmt_key(key, &h);
		return snprintf(line, len, "%" PRIu64 " %" PRIu64 " %" PRIu64
				" obj:%s\n", start, end, e->gen, key);
	}
	return snprintf(line, len, "%" PRIu64 " %" PRIu64 " %" PRIu64
			" wal:%" PRIu64 ":%" PRIu64 "\n",
			start, end, e->gen, e->seg, e->off);
}

ssize_t nrs_index_format(const struct nrs_index *ix, uint64_t stream_id,
			 char *buf, size_t size)
{
	char line[128 + NRS_OBJKEY_MAX];
	size_t total = 0;
	uint64_t prev_end = ix->n ? ix->v[0].start : 0;

	for (size_t i = 0; i < ix->n; i++) {
		const struct nrs_index_ent *e = &ix->v[i];
		int pass;

		/* pass 0: the gap before e, if any; pass 1: e itself */
		for (pass = 0; pass < 2; pass++) {
			int n;

			if (pass == 0 && e->start == prev_end)
				continue;
			n = pass == 0 ? format_line(line, sizeof(line), prev_end,
						    e->start, NULL, 0)
				      : format_line(line, sizeof(line), e->start,
						    e->end, e, stream_id);
			if (n < 0 || (size_t)n >= sizeof(line))
				return -EOVERFLOW;
			if (size > 0) {
				if (total + (size_t)n > size)
					return -ERANGE;
				memcpy(buf + total, line, (size_t)n);
			}
			total += (size_t)n;
		}
		prev_end = e->end;
	}
	return (ssize_t)total;
}

bool nrs_index_check(const struct nrs_index *ix)
{
	for (size_t i = 0; i < ix->n; i++) {
		if (ix->v[i].start >= ix->v[i].end)
			return false;
		if (i > 0 && ix->v[i - 1].end > ix->v[i].start)
			return false;
	}
	return ix->n <= ix->cap;
}

void nrs_index_free(struct nrs_index *ix)
{
	free(ix->v);
	ix->v = NULL;
	ix->n = ix->cap = 0;
}
