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
 *  RC6 The next LSN is larger than every LSN in the WAL and the store.
 *  RC8 Two WALs.  The local WAL and the object WAL (wal_object.c) are
 *     scanned one after the other into one list, sorted by LSN (LSNs are
 *     unique across them, pipeline.c PL7).  A record counts only in the
 *     WAL of its stream's profile -- a stream's profile changes only
 *     while it is empty, so its records are all in one -- and one found
 *     in the other is an orphan (whose LSN RC6 still counts).  RC3-RC6
 *     then run as for one WAL.
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
 *
 * The code is cut by concern (recovery_priv.h): this file holds the scan,
 * the streams' loading, the re-publication and the driver (RC1-RC4,
 * RC6-RC9, RD1, RD2, RD4); recovery_meta.c the replay of the META records
 * (RM1); recovery_index.c the rebuilt offset indexes and the commit chain
 * (RC5, RD3, RD5).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"
#include "stream/recovery.h"
#include "stream/recovery_priv.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/grow.h"
#include "util/log.h"
#include "wal/wal.h"

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

/* recovery_priv.h: WAL records by LSN (a qsort comparator). */
int nrs_recover_cmp_lsn(const void *a, const void *b)
{
	const struct nrs_wal_rec_info *x = a, *y = b;

	return x->rec.lsn < y->rec.lsn ? -1 : x->rec.lsn > y->rec.lsn;
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
	err = nrs_recover_replay_meta(e, &s) ?:				/* RM1 */
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
		qsort(s.v, s.n, sizeof(*s.v), nrs_recover_cmp_lsn);
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
		err = nrs_recover_index_objects(st, &ol, &oi);
		if (!err)
			err = nrs_recover_rebuild_index(st, &s);
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
