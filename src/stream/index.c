/*
 * index.c - the per-stream offset index (see index.h for the model).
 *
 * A sorted array: appends add at the end (the committer thread, once per
 * record), readers binary-search.  Invariant X1: for i > 0,
 * v[i-1].end <= v[i].start and v[i].start < v[i].end.
 *
 * The text form (user.nereus.index, nrs_index_format):
 *   X2 A value never exceeds NRS_INDEX_TEXT_MAX (64 KiB, the kernel's
 *      xattr value limit): lines are written while they fit in
 *      NRS_INDEX_TEXT_MAX - TRAILER_MAX bytes; if any is left out, the
 *      value ends with one line "# N more ranges" (N of them).  A reader
 *      goes on from the end of the last range it got
 *      (user.nereus.index.OFF, core_xattr.c).
 *   X3 Adjacent WAL entries in one segment are one line: "start end 0
 *      wal:SEG:OFF", OFF where its first record starts.  Thousands of
 *      small appends not yet materialized are then a line per segment.
 *   X4 A WAL entry of an object-wal stream names the WAL object and the
 *      offset in its records: "walobj:KEY:OFF" (wal_object.c's keys).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obj/objfmt.h"
#include "stream/index.h"
#include "util/grow.h"
#include "wal/wal.h"
#include "wal/walrec.h"

int nrs_index_append(struct nrs_index *ix, const struct nrs_index_ent *e)
{
	if (e->end <= e->start)
		return -EINVAL;
	if (ix->n > 0 && e->start < ix->v[ix->n - 1].end)
		return -EINVAL;		/* X1 */
	if (nrs_grow((void **)&ix->v, &ix->cap, ix->n + 1, sizeof(*ix->v)))
		return -ENOMEM;
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
		       const struct nrs_index_ent *e, uint64_t stream_id,
		       bool owal)
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
	if (e->kind == NRS_TARGET_ADOPT) {
		char key[NRS_OBJKEY_MAX];

		nrs_objfmt_adopt_key(key, e->seg);
		return snprintf(line, len, "%" PRIu64 " %" PRIu64 " %" PRIu64
				" adopt:%s:%" PRIu64 "\n", start, end, e->gen,
				key, e->off);
	}
	if (owal) {		/* X4 */
		char key[NRS_OBJKEY_MAX];

		nrs_wal_object_key(key, e->seg);
		return snprintf(line, len, "%" PRIu64 " %" PRIu64 " %" PRIu64
				" walobj:%s:%" PRIu64 "\n", start, end, e->gen,
				key, e->off);
	}
	return snprintf(line, len, "%" PRIu64 " %" PRIu64 " %" PRIu64
			" wal:%" PRIu64 ":%" PRIu64 "\n",
			start, end, e->gen, e->seg, e->off);
}

/* Room kept for "# N more ranges\n" (X2); N has at most 20 digits. */
#define TRAILER_MAX	64

/* One line of the text form: a gap (e NULL) or entries from e on. */
struct text_line {
	uint64_t start, end;
	const struct nrs_index_ent *e;
};

/*
 * The line at entry *i, where the previous line ended at *prev_end: the
 * gap before that entry, or the entry with the WAL entries that continue
 * it in its segment (X3).  Advances *i past what the line covers.
 */
static void next_line(const struct nrs_index *ix, size_t *i,
		      uint64_t *prev_end, struct text_line *l)
{
	const struct nrs_index_ent *e = &ix->v[*i];

	if (e->start > *prev_end) {
		l->start = *prev_end;
		l->end = e->start;
		l->e = NULL;
	} else {
		l->start = e->start;
		l->end = e->end;
		l->e = e;
		for ((*i)++; *i < ix->n && e->kind == NRS_TARGET_WAL &&
		     ix->v[*i].kind == NRS_TARGET_WAL &&
		     ix->v[*i].seg == e->seg && ix->v[*i].start == l->end;
		     (*i)++)
			l->end = ix->v[*i].end;
	}
	*prev_end = l->end;
}

/* Append n bytes of line at *total (when size > 0); -ERANGE if over. */
static int put(char *buf, size_t size, size_t *total, const char *line,
	       size_t n)
{
	if (size > 0) {
		if (*total + n > size)
			return -ERANGE;
		memcpy(buf + *total, line, n);
	}
	*total += n;
	return 0;
}

ssize_t nrs_index_format(const struct nrs_index *ix, uint64_t stream_id,
			 bool owal, uint64_t from, char *buf, size_t size)
{
	char line[128 + NRS_OBJKEY_MAX];
	size_t i = nrs_index_find(ix, from), total = 0, left = 0;
	uint64_t prev_end;
	struct text_line l;
	int n, err;

	if (i >= ix->n)
		return 0;
	/* the gap below the first entry shown counts only if from is in it */
	prev_end = i > 0 && ix->v[i].start > from ? ix->v[i - 1].end
						  : ix->v[i].start;
	while (i < ix->n) {
		next_line(ix, &i, &prev_end, &l);
		if (left > 0) {
			left++;
			continue;
		}
		n = format_line(line, sizeof(line), l.start, l.end, l.e,
				stream_id, owal);
		if (n < 0 || (size_t)n >= sizeof(line))
			return -EOVERFLOW;
		if (total + (size_t)n > NRS_INDEX_TEXT_MAX - TRAILER_MAX) {
			left++;		/* X2 */
			continue;
		}
		err = put(buf, size, &total, line, (size_t)n);
		if (err)
			return err;
	}
	if (left > 0) {
		n = snprintf(line, sizeof(line), "# %zu more ranges\n", left);
		err = put(buf, size, &total, line, (size_t)n);
		if (err)
			return err;
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
