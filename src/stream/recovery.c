/*
 * recovery.c - start-up recovery of both profiles' WALs (DESIGN.md
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
 *  RC1 The store's heads are the truth to start from.  Unlinked inodes left
 *     by a crash (nlink 0, no handle can survive a restart) are forgotten.
 *  RC2 The WAL is scanned in log order; the provider cuts a torn or corrupt
 *     tail (wal_local.c).
 *  RC3 In LSN order, a record whose stream exists and which continues that
 *     stream's head exactly -- base == head, prev_lsn == the head's last
 *     LSN, epoch >= the stream's epoch, every payload chunk verified -- is
 *     re-published: head += len, version += n_appends, last LSN = its LSN.
 *     Anything else past a head is an orphan (a failed or fenced write, or
 *     one whose stream is gone) and stays invisible forever (I3).  An
 *     orphan cannot later be mistaken for a continuation: every new record
 *     gets a larger LSN and names the published last LSN, never an orphan's.
 *  RC9 Epochs (pipeline.c PL9).  A record that continues a stream's head
 *     exactly (RC3's test) raises the stream's epoch to its own.  One of
 *     no bytes is a fence: it raises the epoch and nothing else -- head,
 *     version and last LSN stay, since the fence stands beside the chain
 *     and the next record names the same predecessor.  So the bucket
 *     alone brings back every epoch a fence acknowledged (a recovery with
 *     checkpoints off too), and an append under an older epoch that comes
 *     after the fence in LSN order is an orphan (RC3: epoch below).
 *  RC4 Before anything is published, every segment the scan read is made
 *     durable (wal.h sync_all, wal_local.c WA8): a process crash between a
 *     batch's write and its fdatasync leaves it only in the page cache,
 *     where the scan finds it, and a head published on it would name
 *     bytes a power loss then takes (DESIGN.md I7).  If that sync fails,
 *     nothing is published and the mount fails.  Then the re-published
 *     heads are written in one synced transaction.
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
 *  RC6 The next LSN is larger than every LSN in the WAL and the store.
 *  RC8 Two WALs.  The local WAL and the object WAL (wal_object.c) are
 *     scanned one after the other into one list, sorted by LSN (LSNs are
 *     unique across them, pipeline.c PL7).  A record counts only in the
 *     WAL of its stream's profile -- a stream's profile changes only
 *     while it is empty, so its records are all in one -- and one found
 *     in the other is an orphan (whose LSN RC6 still counts).  RC3-RC6
 *     then run as for one WAL.
 *  RM1 The metadata's change log (meta.h; core_metalog.c NS1): the META
 *     records of both WALs are applied, in the order of their numbers (a
 *     record tried again has a later LSN, core_metalog.c NS2), before RC1
 *     and before the streams are loaded -- so a stream a META record made
 *     exists before its appends are re-published, and one it unlinked is
 *     gone -- each one whose number is above the store's (sqlite_log.c
 *     ML2; a second copy is skipped).  A META record needed whose payload
 *     fails its CRC, or metarec.c MR1, or that the store refuses (a gap, a
 *     change that does not fit), stops the recovery with -EUCLEAN and a
 *     line naming it: a namespace change is never skipped silently.  Each
 *     change is applied with its number in one transaction, so a recovery
 *     killed midway runs again to the same state.  Their LSNs count for
 *     RC6.
 *  RC7 A stream whose metadata row fails its checksum (meta_sqlite.c CK3)
 *     has no head to start from: it takes no part in RC3-RC6 (nothing is
 *     re-published onto it, no index is built), is logged, and stays
 *     offline (core_handle.c); the other streams recover as usual.  Its records
 *     stay in the WAL, so nothing of it is lost that a repair of its row
 *     could bring back.
 *
 * Values from the disk are checked before they enter RC3-RC6 (recovery.h has
 * the bounds, shared with fsck.c, which reports each case):
 *  RD1 A stream row whose checksum holds but whose values no daemon writes
 *     (id 0 or above NRS_STREAM_ID_MAX, head above NRS_HEAD_MAX, last LSN
 *     above NRS_WALREC_LSN_MAX, start above head, a version or last LSN
 *     impossible at its head) is damage: logged, and the stream offline as
 *     in RC7 (nothing of the row is trusted).  fsck: F7, F8, F28.
 *  RD2 A WAL record with an LSN above NRS_WALREC_LSN_MAX, or ending past
 *     NRS_HEAD_MAX, is damage: logged and an orphan, which takes no part
 *     in RC3, RC5 or RC6; so RC6's "largest LSN + 1" never wraps, nor does a
 *     head RC3 moves.  When that next LSN is above the bound, the pipeline
 *     refuses appends (pipeline.c PL1).  fsck: F29.
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
 *  RD4 A stream id is never issued twice (meta_sqlite.c MT3), even when
 *     sqlite_sequence was damaged to a lower value: a new stream with an
 *     old id would be handed, by RC3 at the next start, the old stream's
 *     records still in the WAL (base 0, no predecessor: they continue an
 *     empty stream exactly).  So before RC3 the streams sequence is raised
 *     above every stream id a WAL record or an objects row names (a
 *     sequence that is not an integer is left alone; fsck reports it, F30).
 *
 * Steps RC3-RC6 are pure functions of the store and the WAL, so a crash
 * during recovery just makes the next start do them again.
 *
 * Evidence for the SQLite settings (synchronous=NORMAL for heads, FULL for
 * everything else): t0400 replays the daemon's writes and syncs up to
 * random points as a power loss would leave them (tests/helpers/
 * nrs-powerreplay.c states the model) and finds every acknowledged record
 * after recovery; recovery re-publishes up to hundreds of records per cut,
 * so lost head publications do happen and RC3 repairs them.  With the
 * WAL's syncs ignored (the negative control) acknowledged records vanish.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"
#include "obj/objfmt.h"
#include "stream/recovery.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/grow.h"
#include "util/log.h"
#include "wal/metarec.h"
#include "wal/wal.h"

struct scan {
	struct nrs_wal_rec_info *v;	/* data records; sorted by LSN */
	size_t n, cap;
	struct nrs_wal_rec_info *meta;	/* META records (RM1) */
	size_t nmeta, mcap;
	struct nrs_streams *streams;
	bool object;			/* scanning the object WAL (RC8) */
	uint64_t other_lsn;		/* the largest LSN RC8 left out (RC6) */
};

static int scan_cb(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct scan *s = ctx;
	const char *why;

	if (ri->rec.kind == NRS_WALREC_META) {			/* RM1 */
		if (nrs_grow((void **)&s->meta, &s->mcap, s->nmeta + 1,
			     sizeof(*s->meta)))
			return -ENOMEM;
		s->meta[s->nmeta] = *ri;
		s->meta[s->nmeta++].object = s->object;
		return 0;
	}
	if (ri->rec.kind != NRS_WALREC_DATA)
		return 0;
	if ((why = nrs_recover_rec_damage(&ri->rec))) {		/* RD2 */
		nrs_err("recovery: WAL record at segment %016" PRIx64 " offset %"
			PRIu64 " (stream %" PRIu64 ", LSN %" PRIu64 ", bytes [%"
			PRIu64 ", +%" PRIu32 ")): %s: damage, ignored as an "
			"orphan; see nereusfs-fsck(8)", ri->pos.seg, ri->pos.off,
			ri->rec.stream_id, ri->rec.lsn, ri->rec.base,
			ri->rec.len, why);
		return 0;
	}
	if (nrs_grow((void **)&s->v, &s->cap, s->n + 1, sizeof(*s->v)))
		return -ENOMEM;
	s->v[s->n] = *ri;
	s->v[s->n++].object = s->object;
	return 0;
}

/* RC8, once the streams are loaded (RM1 runs before): a record found in
 * the WAL of the other profile than its stream's is an orphan. */
static void filter_other(struct scan *s)
{
	size_t k = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct nrs_wal_rec_info *ri = &s->v[i];
		struct nrs_stream *st = nrs_streams_peek(s->streams,
							 ri->rec.stream_id);

		if (st && !st->corrupt &&
		    (st->profile == NRS_PROFILE_OBJECT_WAL) != ri->object) {
			if (ri->rec.lsn > s->other_lsn)
				s->other_lsn = ri->rec.lsn;
			continue;
		}
		s->v[k++] = *ri;
	}
	s->n = k;
}

static int cmp_lsn(const void *a, const void *b)
{
	const struct nrs_wal_rec_info *x = a, *y = b;

	return x->rec.lsn < y->rec.lsn ? -1 : x->rec.lsn > y->rec.lsn;
}

/* RM1: META records by their number, then LSN. */
static int cmp_seq(const void *a, const void *b)
{
	const struct nrs_wal_rec_info *x = a, *y = b;

	if (x->rec.base != y->rec.base)
		return x->rec.base < y->rec.base ? -1 : 1;
	return cmp_lsn(a, b);
}

/* RM1: one META record's change, read back, checked and applied. */
static int apply_meta(const struct nrs_recover_env *e,
		      const struct nrs_wal_rec_info *ri)
{
	struct nrs_wal *w = ri->object ? e->owal : e->wal;
	size_t hl = nrs_walrec_hdr_len(ri->rec.len);
	struct nrs_walrec r;
	struct nrs_metarec mr;
	const char *why = NULL;
	unsigned char *buf = NULL;
	ssize_t n;
	int err = -EUCLEAN;

	if (!ri->data_ok || !w) {
		why = "its payload fails its CRC";
		goto out;
	}
	buf = malloc(hl + ri->rec.len);
	if (!buf)
		return -ENOMEM;
	n = nrs_wal_read(w, ri->pos, buf, hl + ri->rec.len);
	if (n != (ssize_t)(hl + ri->rec.len)) {
		err = n < 0 ? (int)n : -EIO;
		why = "it cannot be read back";
		goto out;
	}
	if (nrs_walrec_decode_hdr(buf, hl, &r) || r.lsn != ri->rec.lsn ||
	    nrs_walrec_verify_chunks(buf, &r, 0, nrs_walrec_nchunks(r.len),
				     buf + hl, NULL) ||
	    nrs_metarec_decode(&r, buf + hl, &mr)) {	/* metarec.c MR1 */
		why = "it is damaged";
		goto out;
	}
	err = nrs_meta_log_apply(e->meta, mr.seq, mr.change, mr.change_len);
	if (err < 0)
		why = "the metadata store refuses it (logged above)";
	else
		err = 0;
out:
	if (why)
		nrs_err("recovery: META record of metadata change %" PRIu64
			" (LSN %" PRIu64 ") at %s segment %016" PRIx64 " offset %"
			PRIu64 ": %s: %s; the namespace cannot be brought back "
			"past it, and the mount stops (see nereusfs-fsck(8))",
			ri->rec.base, ri->rec.lsn, ri->object ? "object WAL" :
			"WAL", ri->pos.seg, ri->pos.off, why, strerror(-err));
	free(buf);
	return err;
}

/* RM1: the changes above the store's number, in number order. */
static int replay_meta(const struct nrs_recover_env *e, struct scan *s)
{
	uint64_t held = 0, from;
	size_t applied = 0;
	int err;

	if (s->nmeta == 0)
		return 0;
	qsort(s->meta, s->nmeta, sizeof(*s->meta), cmp_seq);
	err = nrs_meta_log_seq(e->meta, &held);
	if (err)
		return err;
	from = held;
	for (size_t i = 0; i < s->nmeta; i++) {
		const struct nrs_wal_rec_info *ri = &s->meta[i];

		if (ri->rec.base <= held)
			continue;			/* held, or a copy */
		err = apply_meta(e, ri);
		if (err)
			return err;
		held = ri->rec.base;
		applied++;
	}
	if (applied)
		nrs_info("recovery: %zu metadata changes (%" PRIu64 " to %"
			 PRIu64 ") replayed from the WAL's META records",
			 applied, from + 1, held);
	return 0;
}

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

static int load_stream(void *ctx, const struct nrs_stream_row *row)
{
	const struct nrs_recover_env *e = ctx;
	struct nrs_stream_row off = { .id = row->id, .corrupt = true };
	const char *damage = NULL;
	struct nrs_stream *st;
	int err;

	if (!row->corrupt && row->unlinked)
		return 0;
	if (!row->corrupt)
		damage = nrs_recover_row_damage(row);			/* RD1 */
	if (row->corrupt || damage)	/* RC7; unlinked or not is unknown */
		nrs_err("recovery: stream %" PRIu64 " is offline: its metadata "
			"row in %s/meta.db %s%s%s; reads and appends of it fail "
			"EIO, other streams are not affected", row->id,
			e->data_dir, damage ? "is damaged (" :
			"fails its checksum", damage ? damage : "",
			damage ? ")" : "");
	st = nrs_stream_new(damage ? &off : row);
	if (!st)
		return -ENOMEM;
	st->damage = damage;
	err = nrs_streams_insert(e->streams, st);
	if (err) {
		nrs_stream_put(st);
	} else if (e->progress) {				/* RP1 */
		e->progress->streams++;
		nrs_wal_progress_tick(e->progress, false);
	}
	return err;
}

struct ino_list {
	uint64_t *v;
	size_t n, cap;
};

static int collect_ino(void *ctx, uint64_t ino)
{
	struct ino_list *l = ctx;
	int err = nrs_grow((void **)&l->v, &l->cap, l->n + 1, sizeof(*l->v));

	if (!err)
		l->v[l->n++] = ino;
	return err;
}

/* RC1 */
static int forget_unlinked(const struct nrs_recover_env *e)
{
	struct ino_list l = { 0 };
	int err;

	err = nrs_meta_unlinked_foreach(e->meta, collect_ino, &l);
	for (size_t i = 0; !err && i < l.n; i++)
		err = nrs_meta_forget_inode(e->meta, l.v[i]);
	if (!err && l.n)
		nrs_info("forgot %zu unlinked streams left by a crash", l.n);
	free(l.v);
	return err;
}

/*
 * RC4: what the scan returned may be only in the page cache (a process
 * crash between a batch's write and its sync); every byte of it is made
 * durable before anything is published on it (I7).
 */
static int sync_scanned(const struct nrs_recover_env *e)
{
	int err = nrs_wal_sync_all(e->wal);

	if (!err && e->owal)
		err = nrs_wal_sync_all(e->owal);
	if (err)
		nrs_err("recovery: cannot make the WAL in %s/wal durable: %s; "
			"nothing is re-published", e->data_dir, strerror(-err));
	return err;
}

/* RC3, RC4 */
static int republish(const struct nrs_recover_env *e, const struct scan *s)
{
	struct nrs_head_update *u = NULL;
	size_t nu = 0, cap = 0, recs = 0;
	int err = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct nrs_walrec *r = &s->v[i].rec;
		struct nrs_stream *st = nrs_streams_peek(e->streams,
							 r->stream_id);

		if (!st || st->corrupt ||			/* RC7 */
		    r->lsn <= st->last_lsn)
			continue;
		if (r->base != st->head || r->prev_lsn != st->last_lsn ||
		    r->epoch < st->epoch || !s->v[i].data_ok)
			continue;	/* an orphan */
		if (r->len == 0 && r->epoch == st->epoch)
			continue;	/* RC9: no new epoch, nothing to do */
		if (st->batch_upd < 0) {
			err = nrs_grow((void **)&u, &cap, nu + 1, sizeof(*u));
			if (err)
				goto out;
			u[nu].id = st->id;
			u[nu].old_version = st->version;
			st->batch_upd = (int)nu++;
		}
		st->epoch = r->epoch;				/* RC9 */
		if (r->len == 0)
			continue;	/* RC9: a fence, beside the chain */
		st->head += r->len;
		st->version += r->n_appends;
		st->last_lsn = r->lsn;
		recs++;
	}
	for (size_t i = 0; i < nu; i++) {
		struct nrs_stream *st = nrs_streams_peek(e->streams, u[i].id);

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
			err = nrs_meta_publish(e->meta, u, nu, true);
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
static int index_objects(struct nrs_stream *st, const struct objs *l,
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
static int rebuild_index(struct nrs_stream *st, const struct scan *s)
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

/* RD4: no stream created from now on takes an id the WAL still names. */
static int raise_stream_seq(const struct nrs_recover_env *e, const struct scan *s)
{
	uint64_t top = 0;
	int err;

	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].rec.stream_id <= NRS_STREAM_ID_MAX &&
		    s->v[i].rec.stream_id > top)
			top = s->v[i].rec.stream_id;
	err = nrs_meta_stream_seq_raise(e->meta, top);
	if (err)
		nrs_err("recovery: raising the stream id sequence of %s/meta.db"
			" to %" PRIu64 ": %s", e->data_dir, top, strerror(-err));
	return err;
}

int nrs_recover(const struct nrs_recover_env *e, uint64_t *next_lsn)
{
	struct scan s = { 0 };
	struct objs ol = { 0 };
	uint64_t *ids = NULL;
	size_t oi = 0, nids = 0;
	uint64_t max_lsn = 0;
	int err;

	s.streams = e->streams;
	err = nrs_wal_scan(e->wal, scan_cb, &s);
	if (!err && e->owal) {
		s.object = true;
		err = nrs_wal_scan(e->owal, scan_cb, &s);
	}
	if (err) {
		nrs_err("recovery: %s WAL scan failed: %s",
			s.object ? "object" : "local", strerror(-err));
		goto out;
	}
	err = replay_meta(e, &s) ?:				/* RM1 */
	      forget_unlinked(e) ?:				/* RC1 */
	      nrs_meta_stream_foreach(e->meta, load_stream, (void *)e);
	if (err)
		goto out;
	if (e->owal)
		filter_other(&s);				/* RC8 */
	err = sync_scanned(e);
	if (!err)
		err = raise_stream_seq(e, &s);
	if (err)
		goto out;
	if (s.n > 1)
		qsort(s.v, s.n, sizeof(*s.v), cmp_lsn);
	err = republish(e, &s);
	if (err)
		goto out;
	err = nrs_meta_obj_rows(e->meta, 0, NRS_OBJ_COMMITTED, &ol.v, &ol.n);
	if (err)
		goto out;
	if (ol.n > 1)
		qsort(ol.v, ol.n, sizeof(*ol.v), nrs_recover_obj_cmp);
	err = nrs_streams_ids(e->streams, &ids, &nids); /* ascending, as ol */
	if (err)
		goto out;
	for (size_t i = 0; i < nids; i++) {
		struct nrs_stream *st = nrs_streams_peek(e->streams, ids[i]);

		if (!st || st->corrupt)		/* RC7 */
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
	if (s.n && s.v[s.n - 1].rec.lsn > max_lsn)
		max_lsn = s.v[s.n - 1].rec.lsn;
	if (s.other_lsn > max_lsn)		/* RC8's too */
		max_lsn = s.other_lsn;
	for (size_t i = 0; i < s.nmeta; i++)	/* and RM1's */
		if (s.meta[i].rec.lsn > max_lsn)
			max_lsn = s.meta[i].rec.lsn;
	*next_lsn = max_lsn + 1;	/* RC6; no wrap: RD1, RD2 */
out:
	if (err)
		nrs_err("recovery failed: %s", strerror(-err));
	free(ids);
	free(ol.v);
	free(s.v);
	free(s.meta);
	return err;
}
