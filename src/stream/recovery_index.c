/*
 * recovery_index.c - the offset index of each stream rebuilt at start-up
 * from its committed object generations and the WAL's commit chain
 * (recovery.c gives the whole of recovery and its order of steps); the
 * chain walk and the object rules are pure functions that fsck.c applies
 * too (recovery.h).
 *
 *  RC5 The offset index of each stream is rebuilt: first the committed
 *     object generations (mat_object.c MZ4), whose highest end is the
 *     stream's `materialized`; then the WAL records above the floor
 *     max(start, materialized) (nrs_recover_chain, shared with fsck):
 *     RC5a walks the commit chain back from the head's last LSN: each
 *     record must end where the next one (in logical order) begins.  The
 *     walk stops at the floor because the WAL segments below may have
 *     been reclaimed (walgc.c MZ5).
 *     RC5b If it stops above the floor (a record the chain needs is lost:
 *     a torn tail that hit the newest acknowledged record, corruption),
 *     the records below are rebuilt upwards from the floor along
 *     prev_lsn (each record names its stream, base and predecessor),
 *     taking only records older than the LSN the walk back missed and
 *     ending at or below where it stopped.  Where two records continue
 *     the chain at the same base (a fenced or failed writer's orphan
 *     beside the committed one), the walk stops there rather than guess
 *     (I2); where it meets the walk back, the record below must be the
 *     one the walk back named, else it is an orphan standing in the lost
 *     record's place and is not served.  So only the range truly missing
 *     (or not told apart) is a gap: reads of it fail with EIO, the error
 *     is logged with the stream and exactly that range, and
 *     nereusfs-fsck's F9 names the same range -- the committed range is
 *     never shortened.  (An orphan whose committed twin is lost whole
 *     and that the walk back does not reach cannot be told from it.)
 *
 * Values from the disk are checked before they are indexed (recovery.h has
 * the bounds, shared with fsck.c, which reports each case):
 *  RD3 A committed object row a materializer could not have written (an
 *     empty or inverted range, a length that is not header + payload) is
 *     logged and not indexed: the range it claims reads EIO.  fsck: F20.
 *     An adopted row (seg >= 1, mat_adopt.c MZ11) is possible only as one
 *     WAL record: its off at or past the segment header (64) and a
 *     multiple of 8, its length the record's total bytes for its range
 *     (walrec.h), seg no higher than a segment number can be.  Off 0 with
 *     seg 0 is a copied object; a copied row with an offset is damage.
 *  RD5 A committed adopted row is restored as what it is, without reading
 *     its file: an NRS_TARGET_ADOPT entry at (seg, off) of the embedded
 *     store's nrs_objfmt_adopt_key(seg), read and verified as a WAL
 *     record at the first read (reader.c RA1).  Its end is `materialized`
 *     as an object's is.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"
#include "obj/objfmt.h"
#include "stream/recovery.h"
#include "stream/recovery_priv.h"
#include "stream/table.h"
#include "util/grow.h"
#include "util/log.h"
#include "wal/wal.h"

int nrs_recover_obj_cmp(const void *a, const void *b)
{
	const struct nrs_obj_row *x = a, *y = b;

	if (x->stream_id != y->stream_id)
		return x->stream_id < y->stream_id ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

enum nrs_obj_use nrs_recover_obj_use(const struct nrs_obj_row *o,
				     uint64_t start, uint64_t head,
				     uint64_t last_end)
{
	if (o->end <= start)
		return NRS_OBJ_USE_TRIMMED;
	if (o->end > head)
		return NRS_OBJ_USE_PAST_HEAD;
	if (o->start < last_end)
		return NRS_OBJ_USE_OVERLAPS;
	return NRS_OBJ_USE_SERVES;
}

bool nrs_recover_obj_is_possible(const struct nrs_obj_row *o)
{
	struct nrs_objhdr h = {
		.stream_id = o->stream_id, .start = o->start, .end = o->end,
		.gen = o->gen,
	};

	if (!nrs_objfmt_hdr_is_valid(&h))
		return false;
	if (o->seg == 0)
		return o->off == 0 &&
		       o->length == nrs_objfmt_hdr_len(o->end - o->start) +
				    (o->end - o->start);
	/* RD3: an adopted row is one WAL record where its segment holds it */
	return o->seg <= INT64_MAX && o->off >= NRS_OBJ_FIXED &&
	       o->off % 8 == 0 && o->off <= INT64_MAX &&
	       o->end - o->start <= NRS_WALREC_MAX_LEN &&
	       o->length == nrs_walrec_total_len((uint32_t)(o->end - o->start));
}

/* RC5, objects: the entries of one stream's committed generations. */
int nrs_recover_index_objects(struct nrs_stream *st, const struct objs *l,
			      size_t *i)
{
	for (; *i < l->n && l->v[*i].stream_id == st->id; (*i)++) {
		const struct nrs_obj_row *o = &l->v[*i];
		uint64_t last_end;
		struct nrs_index_ent e = {
			.start = o->start, .end = o->end, .gen = o->gen,
			.kind = NRS_TARGET_OBJ, .ostart = o->start,
			.oend = o->end,
		};
		int err;

		if (o->seg) {					/* RD5 */
			e.kind = NRS_TARGET_ADOPT;
			e.seg = o->seg;
			e.off = o->off;
		}
		if (!nrs_recover_obj_is_possible(o)) {			/* RD3 */
			nrs_err("stream %" PRIu64 ": object generation %" PRIu64
				" [%" PRIu64 ", %" PRIu64 ") length %" PRIu64
				" is impossible (damaged metadata row); ignored",
				st->id, o->gen, o->start, o->end, o->length);
			continue;
		}
		last_end = st->index.n ? st->index.v[st->index.n - 1].end : 0;
		switch (nrs_recover_obj_use(o, st->start, st->head, last_end)) {
		case NRS_OBJ_USE_SERVES:
			break;
		case NRS_OBJ_USE_OVERLAPS:
			nrs_err("stream %" PRIu64 ": object generation %" PRIu64
				" [%" PRIu64 ", %" PRIu64 ") overlaps another;"
				" ignored", st->id, o->gen, o->start, o->end);
			continue;
		default:
			continue;	/* trimmed away, or not ours */
		}
		err = nrs_index_append(&st->index, &e);
		if (err)
			return err;
		st->materialized = o->end;
		st->obj_bytes += o->length;
	}
	return 0;
}

/* ---- RC5: the commit chain ---------------------------------------------- */

/* The record of lsn in recs (sorted by LSN), or NULL. */
static const struct nrs_wal_rec_info *find_lsn(
	const struct nrs_wal_rec_info *recs, size_t n, uint64_t lsn)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (recs[mid].rec.lsn == lsn)
			return &recs[mid];
		if (recs[mid].rec.lsn < lsn)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

struct chain_build {
	size_t *v;
	size_t n, cap;
};

static int chain_push(struct chain_build *b, size_t i)
{
	int err = nrs_grow((void **)&b->v, &b->cap, b->n + 1, sizeof(*b->v));

	if (!err)
		b->v[b->n++] = i;
	return err;
}

/* Candidates of RC5b (indexes into ctx, the records) by base, then LSN. */
static int cmp_base(const void *a, const void *b, void *ctx)
{
	const struct nrs_wal_rec_info *recs = ctx;
	const struct nrs_walrec *x = &recs[*(const size_t *)a].rec;
	const struct nrs_walrec *y = &recs[*(const size_t *)b].rec;

	if (x->base != y->base)
		return x->base < y->base ? -1 : 1;
	return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

/*
 * RC5b: from floor upwards along prev_lsn, through the records (cand,
 * sorted by base) that lie in [.., low).  Stops where no record continues
 * the last one taken, or where two do (*twin).  Returns 0 or -ENOMEM;
 * *pos is where it stopped.
 */
static int walk_up(const struct nrs_wal_rec_info *recs, const size_t *cand,
		   size_t nc, uint64_t floor, uint64_t low,
		   struct chain_build *up, uint64_t *pos, uint64_t twin[2])
{
	uint64_t at = floor, prev = 0;
	bool first = true;
	size_t lo = 0;

	while (at < low) {
		size_t found = SIZE_MAX, nfound = 0;

		/* the first record covers floor; a later one starts at `at` */
		while (!first && lo < nc && recs[cand[lo]].rec.base < at)
			lo++;
		for (size_t k = first ? 0 : lo; k < nc; k++) {
			const struct nrs_walrec *r = &recs[cand[k]].rec;

			if (first ? r->base > at : r->base != at)
				break;
			if (!first && (r->prev_lsn != prev || r->lsn <= prev))
				continue;
			if (nfound++ == 0) {
				found = cand[k];
			} else {
				twin[0] = recs[found].rec.lsn;
				twin[1] = r->lsn;
				break;
			}
		}
		if (nfound != 1)
			break;			/* missing, or two (I2) */
		if (chain_push(up, found))
			return -ENOMEM;
		prev = recs[found].rec.lsn;
		at = recs[found].rec.base + recs[found].rec.len;
		first = false;
	}
	*pos = at;
	return 0;
}

int nrs_recover_chain(const struct nrs_wal_rec_info *recs, size_t n,
		      uint64_t id, uint64_t head, uint64_t last_lsn,
		      uint64_t floor, struct nrs_chain *out)
{
	struct chain_build down = { 0 }, up = { 0 };
	uint64_t want = head, lsn = last_lsn, pos = 0, twin[2] = { 0, 0 };
	size_t *cand = NULL, nc = 0;
	int err = 0;

	/* RC5a: back from the head, by LSN. */
	while (want > floor && lsn != 0) {
		const struct nrs_wal_rec_info *ri = find_lsn(recs, n, lsn);
		const struct nrs_walrec *r = ri ? &ri->rec : NULL;

		if (!r || r->kind != NRS_WALREC_DATA || r->stream_id != id ||
		    r->len == 0 || r->base > want || want - r->base != r->len)
			break;
		err = chain_push(&down, (size_t)(ri - recs));
		if (err)
			goto out;
		want = r->base;
		lsn = r->prev_lsn;
	}
	memset(out, 0, sizeof(*out));
	if (want > floor) {
		/* RC5b: the newest links are lost; from floor upwards, through
		 * records older than the one the walk missed, that end at or
		 * below where it stopped. */
		uint64_t below = lsn ? lsn : last_lsn + 1;

		cand = malloc((n ? n : 1) * sizeof(*cand));
		if (!cand) {
			err = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < n; i++) {
			const struct nrs_walrec *r = &recs[i].rec;

			if (r->kind == NRS_WALREC_DATA && r->stream_id == id &&
			    r->len > 0 && r->lsn < below && r->base < want &&
			    want - r->base >= r->len && r->base + r->len > floor)
				cand[nc++] = i;
		}
		if (nc > 1)
			qsort_r(cand, nc, sizeof(*cand), cmp_base,
				(void *)recs);
		err = walk_up(recs, cand, nc, floor, want, &up, &pos, twin);
		if (err)
			goto out;
		/* Where both walks meet, the record below must be the one the
		 * walk back named: else it is an orphan in its place. */
		if (pos == want && up.n && recs[up.v[up.n - 1]].rec.lsn != lsn)
			pos = recs[up.v[--up.n]].rec.base;
		out->miss_start = pos;
		out->miss_end = want;
		out->broken_lsn = lsn;
		out->twin[0] = twin[0];
		out->twin[1] = twin[1];
	}
	/* up (ascending), then down reversed */
	for (size_t i = down.n; i > 0; i--) {
		err = chain_push(&up, down.v[i - 1]);
		if (err)
			goto out;
	}
	out->idx = up.v;
	out->n = up.n;
	up.v = NULL;
out:
	free(cand);
	free(down.v);
	free(up.v);
	return err;
}

void nrs_chain_free(struct nrs_chain *ch)
{
	if (!ch)
		return;
	free(ch->idx);
	ch->idx = NULL;
	ch->n = 0;
}

/* RC5, WAL: one stream's records above max(start, materialized) */
int nrs_recover_rebuild_index(struct nrs_stream *st, const struct scan *s)
{
	uint64_t floor = nrs_recover_chain_floor(st->start, st->materialized);
	struct nrs_chain ch;
	int err;

	err = nrs_recover_chain(s->v, s->n, st->id, st->head, st->last_lsn,
				floor, &ch);
	if (err)
		return err;
	if (ch.twin[0])
		nrs_err("stream %" PRIu64 ": WAL records LSN %" PRIu64 " and %"
			PRIu64 " both continue the commit chain at offset %"
			PRIu64 "; committed range [%" PRIu64 ", %" PRIu64 ") "
			"cannot be told and reads of it fail", st->id,
			ch.twin[0], ch.twin[1], ch.miss_start, ch.miss_start,
			ch.miss_end);
	else if (ch.miss_end > ch.miss_start)
		nrs_err("stream %" PRIu64 ": commit chain broken at LSN %"
			PRIu64 "; committed range [%" PRIu64 ", %" PRIu64 ") "
			"has no copy and reads of it fail", st->id,
			ch.broken_lsn, ch.miss_start, ch.miss_end);
	for (size_t i = 0; i < ch.n; i++) {
		const struct nrs_wal_rec_info *ri = &s->v[ch.idx[i]];
		struct nrs_index_ent e = {
			.start = ri->rec.base,
			.end = ri->rec.base + ri->rec.len,
			.gen = 0,
			.kind = NRS_TARGET_WAL,
			.seg = ri->pos.seg,
			.off = ri->pos.off,
		};

		if (!ri->data_ok)
			nrs_err("stream %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64
				") fail their checksum in WAL segment %016" PRIx64
				"; reads of them fail", st->id, e.start, e.end,
				ri->pos.seg);
		err = nrs_index_append(&st->index, &e);
		if (err)
			break;
		st->wal_bytes += nrs_walrec_total_len(ri->rec.len);
	}
	nrs_chain_free(&ch);
	return err;
}
