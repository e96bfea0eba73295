/*
 * recovery.c - start-up recovery of the local-wal profile (DESIGN.md
 * section 6).
 *
 * Why it is shaped so.  An append is acknowledged after (a) its WAL record
 * is fdatasync'ed and (b) its head is published in the metadata store by a
 * transaction that is *not* synced (meta.h).  After a process crash the
 * store has every published head.  After a power loss it may have lost the
 * last published heads, but the WAL has every acknowledged record, and each
 * record says exactly which head it continues (base offset, the LSN of the
 * stream's previous commit, epoch).  So recovery re-publishes:
 *
 *  R1 The store's heads are the truth to start from.  Unlinked inodes left
 *     by a crash (nlink 0, no handle can survive a restart) are forgotten.
 *  R2 The WAL is scanned in log order; the provider cuts a torn or corrupt
 *     tail (wal_local.c).
 *  R3 In LSN order, a record whose stream exists and which continues that
 *     stream's head exactly -- base == head, prev_lsn == the head's last
 *     LSN, epoch >= the stream's epoch, every payload chunk verified -- is
 *     re-published: head += len, version += n_appends, last LSN = its LSN.
 *     Anything else past a head is an orphan (a failed or fenced write, or
 *     one whose stream is gone) and stays invisible forever (I3).  An
 *     orphan cannot later be mistaken for a continuation: every new record
 *     gets a larger LSN and names the published last LSN, never an orphan's.
 *  R4 The re-published heads are written in one synced transaction.
 *  R5 The offset index of each stream is rebuilt: first the committed
 *     object generations (materializer.c M4), whose highest end is the
 *     stream's `materialized`; then the WAL records above
 *     max(start, materialized), found by walking its commit chain back from
 *     the head's last LSN: each record must end where the next one (in
 *     logical order) begins.  The walk stops there because the WAL
 *     segments below may have been reclaimed (materializer.c M5).  A record the chain needs but the
 *     WAL lacks (corruption) leaves a gap: reads of it fail with EIO, and
 *     the error is logged with the stream and the range -- the committed
 *     range is never shortened.
 *  R6 The next LSN is larger than every LSN in the WAL and the store.
 *  R7 A stream whose metadata row fails its checksum (meta_sqlite.c C3)
 *     has no head to start from: it takes no part in R3-R6 (nothing is
 *     re-published onto it, no index is built), is logged, and stays
 *     offline (core.c); the other streams recover as usual.  Its records
 *     stay in the WAL, so nothing of it is lost that a repair of its row
 *     could bring back.
 *
 * Steps R3-R6 are pure functions of the store and the WAL, so a crash
 * during recovery just makes the next start do them again.
 *
 * Evidence for the SQLite settings (synchronous=NORMAL for heads, FULL for
 * everything else): t0400 replays the daemon's writes and syncs up to
 * random points as a power loss would leave them (tests/helpers/
 * nrs-powerreplay.c states the model) and finds every acknowledged record
 * after recovery; recovery re-publishes up to hundreds of records per cut,
 * so lost head publications do happen and R3 repairs them.  With the
 * WAL's syncs ignored (the negative control) acknowledged records vanish.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core_priv.h"
#include "failpoint.h"
#include "log.h"
#include "pipeline.h"
#include "recovery.h"
#include "wal.h"

struct rec {
	uint64_t lsn, stream_id, base, epoch, prev_lsn, seg, off;
	uint32_t len, n_appends;
	bool data_ok;
};

struct scan {
	struct rec *v;
	size_t n, cap;
};

static int scan_cb(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct scan *s = ctx;
	struct rec *r;

	if (ri->rec.kind != NRS_WALREC_DATA)
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct rec *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	r = &s->v[s->n++];
	r->lsn = ri->rec.lsn;
	r->stream_id = ri->rec.stream_id;
	r->base = ri->rec.base;
	r->epoch = ri->rec.epoch;
	r->prev_lsn = ri->rec.prev_lsn;
	r->len = ri->rec.len;
	r->n_appends = ri->rec.n_appends;
	r->seg = ri->pos.seg;
	r->off = ri->pos.off;
	r->data_ok = ri->data_ok;
	return 0;
}

static int cmp_lsn(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

static const struct rec *find_lsn(const struct scan *s, uint64_t lsn)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->v[mid].lsn == lsn)
			return &s->v[mid];
		if (s->v[mid].lsn < lsn)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int load_stream(void *ctx, const struct nrs_stream_row *row)
{
	struct nrs_core *c = ctx;
	struct nrs_stream *st;
	int err;

	if (row->corrupt)	/* R7; whether it is unlinked is unknown too */
		nrs_err("recovery: stream %" PRIu64 " is offline: its metadata "
			"row in %s/meta.db fails its checksum; reads and appends "
			"of it fail EIO, other streams are not affected",
			row->id, c->data_dir);
	else if (row->unlinked)
		return 0;
	st = nrs_stream_new(row);
	if (!st)
		return -ENOMEM;
	err = nrs_core_stream_insert(c, st);
	if (err)
		nrs_stream_put(st);
	return err;
}

struct ino_list {
	uint64_t *v;
	size_t n, cap;
};

static int collect_ino(void *ctx, uint64_t ino)
{
	struct ino_list *l = ctx;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		uint64_t *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ino;
	return 0;
}

/* R1 */
static int forget_unlinked(struct nrs_core *c)
{
	struct ino_list l = { 0 };
	int err;

	err = nrs_meta_unlinked_foreach(c->meta, collect_ino, &l);
	for (size_t i = 0; !err && i < l.n; i++)
		err = nrs_meta_forget_inode(c->meta, l.v[i]);
	if (!err && l.n)
		nrs_info("forgot %zu unlinked streams left by a crash", l.n);
	free(l.v);
	return err;
}

/*
 * R4: what the scan returned may be only in the page cache (a process
 * crash between a batch's write and its sync); every byte of it is made
 * durable before anything is published on it (I7).
 */
static int sync_scanned(struct nrs_core *c)
{
	int err = nrs_wal_sync_all(c->wal);

	if (err)
		nrs_err("recovery: cannot make the WAL in %s/wal durable: %s; "
			"nothing is re-published", c->data_dir, strerror(-err));
	return err;
}

/* R3, R4 */
static int republish(struct nrs_core *c, const struct scan *s)
{
	struct nrs_head_update *u = NULL;
	size_t nu = 0, cap = 0, recs = 0;
	int err = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->v[i];
		struct nrs_stream *st = r->stream_id < c->nstreams ?
					c->streams[r->stream_id] : NULL;

		if (!st || st->corrupt || r->len == 0 ||	/* R7 */
		    r->lsn <= st->last_lsn)
			continue;
		if (r->base != st->head || r->prev_lsn != st->last_lsn ||
		    r->epoch < st->epoch || !r->data_ok)
			continue;	/* an orphan */
		if (st->batch_upd < 0) {
			if (nu == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				struct nrs_head_update *v =
					realloc(u, ncap * sizeof(*v));

				if (!v) {
					err = -ENOMEM;
					goto out;
				}
				u = v;
				cap = ncap;
			}
			u[nu].id = st->id;
			u[nu].old_version = st->version;
			st->batch_upd = (int)nu++;
		}
		st->head += r->len;
		st->version += r->n_appends;
		st->last_lsn = r->lsn;
		recs++;
	}
	for (size_t i = 0; i < nu; i++) {
		struct nrs_stream *st = c->streams[u[i].id];

		u[i].head = st->head;
		u[i].version = st->version;
		u[i].epoch = st->epoch;
		u[i].last_lsn = st->last_lsn;
		u[i].mtime_ns = st->mtime_ns;
		st->batch_upd = -1;
	}
	if (nu) {
		err = nrs_failpoint(NRS_FP_RECOVERY_BEFORE_PUBLISH);
		if (!err)
			err = nrs_meta_publish(c->meta, u, nu, true);
		if (err)
			nrs_err("recovery: publishing %zu heads failed: %s", nu,
				strerror(-err));
		else
			nrs_info("recovery: re-published %zu WAL records on %zu "
				 "streams", recs, nu);
	}
out:
	free(u);
	return err;
}

/* The committed rows, sorted by nrs_recover_obj_cmp. */
struct objs {
	struct nrs_obj_row *v;
	size_t n;
};

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

/* R5, objects: the entries of one stream's committed generations. */
static int index_objects(struct nrs_stream *st, const struct objs *l,
			 size_t *i)
{
	for (; *i < l->n && l->v[*i].stream_id == st->id; (*i)++) {
		const struct nrs_obj_row *o = &l->v[*i];
		struct nrs_index_ent e = {
			.start = o->start, .end = o->end, .gen = o->gen,
			.kind = NRS_TARGET_OBJ, .ostart = o->start,
			.oend = o->end,
		};
		uint64_t last_end = st->index.n ?
				    st->index.v[st->index.n - 1].end : 0;
		int err;

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

/* R5, WAL: one stream's records above max(start, materialized) */
static int rebuild_index(struct nrs_stream *st, const struct scan *s)
{
	const struct rec **chain = NULL;
	size_t n = 0, cap = 0;
	uint64_t want_end = st->head, lsn = st->last_lsn;
	uint64_t floor = nrs_recover_chain_floor(st->start, st->materialized);
	int err = 0;

	while (want_end > floor && lsn != 0) {
		const struct rec *r = find_lsn(s, lsn);

		if (!r || r->stream_id != st->id ||
		    r->base + r->len != want_end) {
			nrs_err("stream %" PRIu64 ": commit chain broken at LSN %"
				PRIu64 "; committed range [%" PRIu64 ", %" PRIu64
				") has no copy and reads of it fail", st->id, lsn,
				st->start, want_end);
			break;
		}
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			const struct rec **v =
				realloc(chain, ncap * sizeof(const struct rec *));

			if (!v) {
				err = -ENOMEM;
				goto out;
			}
			chain = v;
			cap = ncap;
		}
		chain[n++] = r;
		want_end = r->base;
		lsn = r->prev_lsn;
	}
	while (n > 0) {
		const struct rec *r = chain[--n];
		struct nrs_index_ent e = {
			.start = r->base,
			.end = r->base + r->len,
			.gen = 0,
			.kind = NRS_TARGET_WAL,
			.seg = r->seg,
			.off = r->off,
		};

		if (!r->data_ok)
			nrs_err("stream %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64
				") fail their checksum in WAL segment %016" PRIx64
				"; reads of them fail", st->id, e.start, e.end,
				r->seg);
		err = nrs_index_append(&st->index, &e);
		if (err)
			goto out;
		st->wal_bytes += nrs_walrec_total_len(r->len);
	}
out:
	free(chain);
	return err;
}

int nrs_recover(struct nrs_core *c, uint64_t *next_lsn)
{
	struct scan s = { 0 };
	struct objs ol = { 0 };
	size_t oi = 0;
	uint64_t max_lsn = 0;
	int err;

	err = forget_unlinked(c);
	if (err)
		goto out;
	err = nrs_meta_stream_foreach(c->meta, load_stream, c);
	if (err)
		goto out;
	err = nrs_wal_scan(c->wal, scan_cb, &s);
	if (err) {
		nrs_err("recovery: WAL scan failed: %s", strerror(-err));
		goto out;
	}
	err = sync_scanned(c);
	if (err)
		goto out;
	if (s.n > 1)
		qsort(s.v, s.n, sizeof(*s.v), cmp_lsn);
	err = republish(c, &s);
	if (err)
		goto out;
	err = nrs_meta_obj_rows(c->meta, 0, NRS_OBJ_COMMITTED, &ol.v, &ol.n);
	if (err)
		goto out;
	if (ol.n > 1)
		qsort(ol.v, ol.n, sizeof(*ol.v), nrs_recover_obj_cmp);
	for (size_t i = 0; i < c->nstreams; i++) {
		struct nrs_stream *st = c->streams[i];

		if (!st || st->corrupt)		/* R7 */
			continue;
		while (oi < ol.n && ol.v[oi].stream_id < st->id)
			oi++;
		err = index_objects(st, &ol, &oi);
		if (!err)
			err = rebuild_index(st, &s);
		if (err)
			goto out;
		if (st->head > st->materialized && st->head > st->start)
			st->unmat_since_ns = (int64_t)nrs_now_mono_ns();
		st->ord_head = st->head;
		st->read_limit = st->head;
		st->ord_version = st->version;
		st->ord_epoch = st->epoch;
		st->ord_lsn = st->last_lsn;
		if (st->last_lsn > max_lsn)
			max_lsn = st->last_lsn;
	}
	if (s.n && s.v[s.n - 1].lsn > max_lsn)
		max_lsn = s.v[s.n - 1].lsn;
	*next_lsn = max_lsn + 1;	/* R6 */
out:
	if (err)
		nrs_err("recovery failed: %s", strerror(-err));
	free(ol.v);
	free(s.v);
	return err;
}
