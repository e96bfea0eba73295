/*
 * lifecycle.c - retention and the physical GC of object generations
 * (DESIGN.md section 1 event 5, I5, section 6; issue 5).  One background
 * thread runs GC every LC_TICK_MS and retention every second (and, being
 * the daemon's steady tick, writes the log's rate-limit summaries).
 *
 * RETENTION
 *
 *  L1 A stream's policy is the nearest set value of retention.bytes and
 *     retention.ms on it or its directories (0: keep forever).
 *  L2 The cut is the larger of the size cut and the time cut, taken at
 *     object boundaries, never in bytes still only in the WAL, then rounded
 *     down to a multiple of 4096: a stream whose start is not page aligned
 *     is read with direct I/O (core_handle.c), and retention must not take the
 *     page cache from its readers.  The object the rounding cuts into stays
 *     until a later cut passes its end:
 *      - size: the end of the highest committed object that leaves at
 *        least retention.bytes bytes above it (head - end >= bytes);
 *      - time: the end of the highest committed object whose intent was
 *        recorded more than retention.ms ago.  The intent comes at most
 *        materialize_age_ms after the append, so a byte is kept at least
 *        retention.ms after its append.
 *  L3 A cut above start trims the stream exactly as user.nereus.trim does
 *     (the trim upcall, services.h: durable, then the index drops the
 *     range).
 *
 * GC (generation states, meta.h)
 *
 *  G1 committed -> draining, when no published state needs the object any
 *     more: its stream is gone (unlinked and its last handle closed), or
 *     the object lies wholly below the stream's start.  (Compaction moves
 *     the generations it replaces in its own publishing transaction.)  The
 *     index no longer names it by then (trim and forget drop it first).
 *     Checked for the streams a trim or a forget pokes (nrs_lc_poke), and
 *     for every committed row once at start (a crash may have come between
 *     the trim and the check).
 *  G2 draining -> retired, once it has drained for gc_grace_ms and every
 *     read that might still hold it has finished (the read gate, taken
 *     exclusively once per pass, reader.h): its cached blocks are
 *     forgotten, the object deleted from the store (a missing one is
 *     fine), and the row marked retired.  A failed delete is retried next
 *     pass.
 *  G3 Every step is one durable state change, idempotent and re-derived
 *     from the store's rows each pass, so a crash anywhere converges: a
 *     retired row whose object still exists cannot happen (the state moves
 *     after the delete); a draining row whose object is gone is retired by
 *     the next delete (0 for a missing object).
 *  G6 An adopted generation (row seg >= 1: one WAL record in place in the
 *     embedded store's file nrs_objfmt_adopt_key(seg), README "Write once
 *     on the embedded store") is retired the same way, at the same step,
 *     except that its record is punched out of the file (objstore.h
 *     nrs_objstore_dir_punch, OD7: the bytes [off, off + length) of the
 *     file freed, its size kept) instead of an object being deleted.  The
 *     punch is refused (-EBUSY) while the WAL still has its own name of
 *     the segment (its scan would take a hole for damage): the row stays
 *     draining and the punch is tried again next pass, logged at debug
 *     level only (waiting for walgc is normal, not a fault).  A file
 *     already gone (a crash after G7's delete) leaves nothing to punch.
 *  G7 The file itself is deleted once no row names it any more: after the
 *     punches of a pass, one listing of the rows; a file whose every
 *     prepared, committed or draining row was punched in this pass goes
 *     before those rows are retired (G3's order: a crash in between leaves
 *     draining rows whose next punch finds no file).  Only a file whose
 *     punch found it with no second name is deleted: once the WAL's name
 *     is gone no new record of it can be adopted, so the listing, taken
 *     after the punch, sees every row that will ever name it.
 *  G9 A slice of a WAL object adopted for an object-wal stream (seg with
 *     NRS_ADOPT_OWAL, mat_adopt.c MZ13) is punched (G6) only once its
 *     object is below the object WAL's floor (wal_object_gc.c OW18): at
 *     or above it a scan still reads the object, and would take a hole
 *     for damage; until then the punch waits (-EBUSY) as for a segment the
 *     WAL still names.  The object has one name, so G7 then deletes it
 *     with the last row naming it; the WAL never does while one does.
 *  G5 A retired row is kept for an hour (what fsck can check: its object
 *     is gone), then forgotten, so the table does not grow with history.
 *  G4 Orphans -- objects uploaded and never published -- are the prepared
 *     rows found at start (materializer.c MZ6): found from the recorded
 *     intents, never from a listing.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bg/lifecycle.h"
#include "bg/services.h"
#include "obj/bcache.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/sat.h"
#include "util/waitms.h"
#include "wal/wal.h"

#define LC_TICK_MS		500
#define RETENTION_TICKS		2	/* retention every second */
#define PRUNE_TICKS		120	/* G5 every minute */
#define RETIRED_KEEP_MS		(3600 * 1000)	/* G5 */

struct nrs_lc {
	const struct nrs_services *svc;
	uint64_t grace_ms;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping;		/* protected by lock */
	bool sweep_all;		/* protected by lock: G1 for every row */
	uint64_t *dirty;	/* protected by lock: streams poked (G1) */
	size_t ndirty, cap;
	unsigned int ticks;	/* the thread's own */
};

struct rows {
	struct nrs_obj_row *v;
	size_t n;
};

/* L2 for one stream's rows: the cut, or 0.  (nrs_retention_cut) */
uint64_t nrs_retention_cut(const struct nrs_obj_row *v, size_t n, uint64_t head,
			   uint64_t ret_bytes, uint64_t ret_ms, int64_t now_ns)
{
	uint64_t cut = 0;

	for (size_t i = 0; i < n; i++) {
		const struct nrs_obj_row *o = &v[i];

		if (o->state != NRS_OBJ_COMMITTED || o->end > head)
			continue;
		if (ret_bytes && head - o->end >= ret_bytes && o->end > cut)
			cut = o->end;
		if (ret_ms && nrs_elapsed_ms(now_ns, o->ctime_ns, ret_ms) &&
		    o->end > cut)	/* SAT1: a huge ret_ms never elapses */
			cut = o->end;
	}
	return cut;
}

/* L1-L3 for one stream. */
static void retain(struct nrs_lc *l, struct nrs_stream *st, uint64_t ino)
{
	const struct nrs_services *svc = l->svc;
	struct rows r = { 0 };
	uint64_t rb = 0, rms = 0, head, start, cut;
	int err;

	if (nrs_meta_get_retention(svc->meta, ino, NRS_RET_BYTES, &rb) ||
	    nrs_meta_get_retention(svc->meta, ino, NRS_RET_MS, &rms) ||
	    (rb == 0 && rms == 0))
		return;
	if (nrs_meta_obj_rows(svc->meta, st->id, 0, &r.v, &r.n) != 0)
		goto out;
	pthread_mutex_lock(&st->lock);
	head = st->head;
	start = st->start;
	pthread_mutex_unlock(&st->lock);
	cut = nrs_retention_cut(r.v, r.n, head, rb, rms, nrs_now_real_ns()) &
	      ~(uint64_t)4095;
	if (cut <= start)
		goto out;
	err = svc->trim(svc->ctx, st, cut);
	if (err) {
		nrs_warn("retention: cannot trim stream %" PRIu64 " to %" PRIu64
			 ": %s", st->id, cut, strerror(-err));
		goto out;
	}
	nrs_info("retention: stream %" PRIu64 " trimmed from %" PRIu64 " to %"
		 PRIu64 " (retention.bytes %" PRIu64 ", retention.ms %" PRIu64
		 ")", st->id, start, cut, rb, rms);
	nrs_count(&svc->metrics->retention_trims, 1);
	nrs_count(&svc->metrics->retention_trimmed_bytes, cut - start);
out:
	free(r.v);
}

struct ids {
	uint64_t *v;
	size_t n, cap;
};

static void collect_id(void *ctx, struct nrs_stream *st)
{
	struct ids *l = ctx;

	if (st->corrupt)
		return;		/* offline: nothing of it is touched */
	/* an element is a pair: id, inode */
	if (nrs_grow((void **)&l->v, &l->cap, l->n + 1, 2 * sizeof(*l->v)))
		return;		/* this pass skips the rest */
	l->v[2 * l->n] = st->id;
	l->v[2 * l->n + 1] = st->ino;
	l->n++;
}

static void retention_pass(struct nrs_lc *l)
{
	struct ids ids = { 0 };

	nrs_streams_each(l->svc->streams, collect_id, &ids);
	for (size_t i = 0; i < ids.n; i++) {
		struct nrs_stream *st = nrs_streams_get(l->svc->streams,
							ids.v[2 * i]);

		if (!st)
			continue;
		retain(l, st, ids.v[2 * i + 1]);
		nrs_stream_put(st);
	}
	free(ids.v);
}

/* G1: does a published state still need committed row o?  The start in
 * memory, if the stream is loaded, is the one reads check: it moves after
 * the stored one (the trim upcall), so it is the one to trust. */
static bool needed(const struct nrs_services *svc, const struct nrs_obj_row *o)
{
	struct nrs_stream *st = nrs_streams_get(svc->streams, o->stream_id);
	struct nrs_stream_row s;
	uint64_t start;
	int err = nrs_meta_stream_get(svc->meta, o->stream_id, &s);

	if (err && err != -ENOENT) {
		nrs_stream_put(st);
		return true;		/* cannot tell: keep it */
	}
	if (err == -ENOENT) {
		nrs_stream_put(st);
		return false;		/* the stream is gone */
	}
	start = s.start;
	if (st) {
		pthread_mutex_lock(&st->lock);
		if (st->start < start)
			start = st->start;
		pthread_mutex_unlock(&st->lock);
		nrs_stream_put(st);
	}
	return o->end > start;
}

static void key_of(const struct nrs_obj_row *o, char key[NRS_OBJKEY_MAX],
		   struct nrs_objhdr *h)
{
	h->stream_id = o->stream_id;
	h->start = o->start;
	h->end = o->end;
	h->gen = o->gen;
	nrs_objfmt_key(key, h);
}

/* The row of o moves to retired (its object or record gone). */
static int mark_retired(struct nrs_lc *l, const struct nrs_obj_row *o,
			const char *key, int64_t now)
{
	const struct nrs_services *svc = l->svc;
	int err = nrs_meta_obj_set_state(svc->meta, o->gen, NRS_OBJ_DRAINING,
					 NRS_OBJ_RETIRED, now);

	if (err) {
		nrs_warn("gc: object %s: cannot retire it yet: %s", key,
			 strerror(-err));
		return err;
	}
	nrs_count(&svc->metrics->gc_deleted, 1);
	nrs_count(&svc->metrics->gc_deleted_bytes, o->length);
	atomic_store(&svc->metrics->gc_last_lag_ms,
		     ((uint64_t)now - (uint64_t)o->mtime_ns) / 1000000);
	nrs_debug("gc: retired object %s (%" PRIu64 " bytes)", key, o->length);
	return 0;
}

/* G2 for one draining row of a copied object whose grace is over; the
 * gate barrier was passed by the caller. */
static void retire(struct nrs_lc *l, const struct nrs_obj_row *o, int64_t now)
{
	const struct nrs_services *svc = l->svc;
	char key[NRS_OBJKEY_MAX];
	struct nrs_objhdr h;
	int err;

	key_of(o, key, &h);
	if (svc->bcache)
		nrs_bcache_forget(svc->bcache, &h);
	err = nrs_failpoint(NRS_FP_GC_BEFORE_DELETE);
	if (!err)
		err = nrs_obj_del(svc->store, key);
	if (!err)
		err = nrs_failpoint(NRS_FP_GC_AFTER_DELETE);
	if (err) {
		nrs_warn("gc: object %s: cannot retire it yet: %s", key,
			 strerror(-err));
		return;
	}
	(void)mark_retired(l, o, key, now);
}

/* What G2 does next with an adopted row whose record is out (G6). */
enum out_state {
	OUT_WAITS,	/* its file could not be deleted: not retired yet */
	OUT_GONE,	/* no file to punch: retired */
	OUT_PUNCHED,	/* punched, its file had no other name: G7, retired */
};

/* The adopted rows of one G2 pass whose records are out of their files,
 * by index into the pass's rows. */
struct out {
	size_t at;
	enum out_state st;
};

struct adopted {
	struct out *v;
	size_t n, cap;
};

/* G9: is the WAL object of adopted seg below the object WAL's floor? */
static bool owal_below_floor(struct nrs_lc *l, uint64_t seg)
{
	struct nrs_wal_stats ws;

	if (!l->svc->owal)
		return false;	/* no floor known: the bytes stay */
	nrs_wal_stats(l->svc->owal, &ws);
	return (seg & ~NRS_ADOPT_OWAL) < ws.floor;
}

/*
 * G6 for draining adopted row o (grace over, gate passed): punch its
 * record.  OUT_PUNCHED or OUT_GONE into *out and 0; -EBUSY: the WAL still
 * names the file; or the error of a punch that failed (logged).
 */
static int punch_adopted(struct nrs_lc *l, const struct nrs_obj_row *o,
			 enum out_state *out)
{
	char key[NRS_OBJKEY_MAX];
	int err;

	nrs_objfmt_adopt_key(key, o->seg);
	if (o->off < NRS_OBJ_ADOPT_HDR)
		err = -EINVAL;		/* no record starts in the header */
	else if (o->seg & NRS_ADOPT_OWAL && !owal_below_floor(l, o->seg))
		err = -EBUSY;				/* G9 */
	else
		err = nrs_failpoint(NRS_FP_GC_BEFORE_DELETE);
	if (!err)
		err = nrs_obj_punch(l->svc->store, key,
				    o->off - NRS_OBJ_ADOPT_HDR, o->length);
	if (err == -EBUSY) {
		nrs_debug("gc: generation %" PRIu64 " in %s: the WAL still "
			  "names the file, punched later", o->gen, key);
		return -EBUSY;
	}
	*out = OUT_PUNCHED;
	if (err == -ENOENT) {
		*out = OUT_GONE;
		err = 0;
	} else if (err == -EINVAL || err == -EOPNOTSUPP) {
		/* past the file's end, or no holes here: nothing to free
		 * before the file goes (G7) */
		nrs_info("gc: generation %" PRIu64 " in %s (bytes %" PRIu64
			 " + %" PRIu64 "): not punched: %s", o->gen, key,
			 o->off, o->length, strerror(-err));
		err = 0;
	}
	if (err)
		nrs_warn("gc: generation %" PRIu64 " in %s: cannot punch it "
			 "yet: %s", o->gen, key, strerror(-err));
	return err;
}

/* Is seg named by a row of all that is neither retired nor quarantined
 * (it names no file of its own) nor among a's? */
static bool seg_named(const struct rows *all, const struct rows *r,
		      const struct adopted *a, uint64_t seg)
{
	for (size_t i = 0; i < all->n; i++) {
		const struct nrs_obj_row *o = &all->v[i];
		bool going = false;

		if (o->seg != seg || o->state == NRS_OBJ_RETIRED ||
		    o->state == NRS_OBJ_QUARANTINED)
			continue;
		for (size_t k = 0; k < a->n && !going; k++)
			going = r->v[a->v[k].at].gen == o->gen;
		if (!going)
			return true;
	}
	return false;
}

/* Every row of a in seg's file moves to st. */
static void seg_to(const struct rows *r, struct adopted *a, uint64_t seg,
		   enum out_state st)
{
	for (size_t j = 0; j < a->n; j++)
		if (r->v[a->v[j].at].seg == seg)
			a->v[j].st = st;
}

/* G7, then G2's last step for the rows a holds (of the pass's rows r). */
static void retire_adopted(struct nrs_lc *l, const struct rows *r,
			   struct adopted *a, int64_t now)
{
	const struct nrs_services *svc = l->svc;
	struct rows all = { 0 };
	char key[NRS_OBJKEY_MAX];
	bool listed = false;

	for (size_t k = 0; k < a->n; k++) {
		const struct nrs_obj_row *o = &r->v[a->v[k].at];
		int err;

		if (a->v[k].st != OUT_PUNCHED)
			continue;
		if (!listed && nrs_meta_obj_rows(svc->meta, 0, 0, &all.v,
						 &all.n) != 0)
			goto out;	/* all punched again next pass */
		listed = true;
		nrs_objfmt_adopt_key(key, o->seg);
		if (seg_named(&all, r, a, o->seg)) {
			seg_to(r, a, o->seg, OUT_GONE);	/* the file stays */
			continue;
		}
		err = nrs_obj_del(l->svc->store, key);
		if (!err)
			err = nrs_failpoint(NRS_FP_GC_AFTER_DELETE);
		if (err) {
			nrs_warn("gc: %s: cannot delete it yet: %s", key,
				 strerror(-err));
			seg_to(r, a, o->seg, OUT_WAITS);
			continue;
		}
		nrs_debug("gc: %s deleted: no row names it", key);
		seg_to(r, a, o->seg, OUT_GONE);
	}
	for (size_t k = 0; k < a->n; k++) {
		const struct nrs_obj_row *o = &r->v[a->v[k].at];

		if (a->v[k].st == OUT_WAITS)
			continue;
		nrs_objfmt_adopt_key(key, o->seg);
		(void)mark_retired(l, o, key, now);
	}
out:
	free(all.v);
}

/* G1 for the committed rows in r. */
static void drain_unneeded(struct nrs_lc *l, const struct rows *r)
{
	int64_t now = nrs_now_real_ns();

	for (size_t i = 0; i < r->n; i++) {
		const struct nrs_obj_row *o = &r->v[i];

		if (o->state == NRS_OBJ_COMMITTED && !needed(l->svc, o) &&
		    nrs_meta_obj_set_state(l->svc->meta, o->gen, NRS_OBJ_COMMITTED,
					   NRS_OBJ_DRAINING, now) == 0)
			nrs_debug("gc: object generation %" PRIu64 " of stream %"
				  PRIu64 " is no longer needed", o->gen,
				  o->stream_id);
	}
}

/* G1 for the streams poked since the last pass (or all rows). */
static void g1_pass(struct nrs_lc *l)
{
	struct rows r = { 0 };
	uint64_t *dirty;
	size_t n;
	bool all;

	pthread_mutex_lock(&l->lock);
	all = l->sweep_all;
	dirty = l->dirty;
	n = l->ndirty;
	l->sweep_all = false;
	l->dirty = NULL;
	l->ndirty = l->cap = 0;
	pthread_mutex_unlock(&l->lock);
	if (all) {
		if (nrs_meta_obj_rows(l->svc->meta, 0, NRS_OBJ_COMMITTED, &r.v,
				      &r.n) == 0)
			drain_unneeded(l, &r);
		free(r.v);
	} else {
		for (size_t i = 0; i < n; i++) {
			if (nrs_meta_obj_rows(l->svc->meta, dirty[i], 0, &r.v,
					      &r.n) == 0)
				drain_unneeded(l, &r);
			free(r.v);
			r.v = NULL;
		}
	}
	free(dirty);
}

/* G2 over the draining rows. */
static void g2_pass(struct nrs_lc *l)
{
	const struct nrs_services *svc = l->svc;
	struct rows r = { 0 };
	struct adopted a = { 0 };
	int64_t now = nrs_now_real_ns();
	uint64_t draining = 0;
	bool barrier = false;

	if (nrs_meta_obj_rows(svc->meta, 0, NRS_OBJ_DRAINING, &r.v, &r.n) != 0)
		goto out;
	for (size_t i = 0; i < r.n; i++) {
		const struct nrs_obj_row *o = &r.v[i];
		enum out_state st;

		if (!nrs_elapsed_ms(now, o->mtime_ns, l->grace_ms)) {	/* SAT1 */
			draining += o->length;
			continue;
		}
		if (!barrier) {
			/* reads that may hold an older index finish first */
			svc->drain(svc->ctx);
			barrier = true;
		}
		if (o->seg == 0) {
			retire(l, o, now);
			continue;
		}
		if (punch_adopted(l, o, &st) != 0 ||
		    nrs_grow((void **)&a.v, &a.cap, a.n + 1, sizeof(*a.v)))
			draining += o->length;	/* tried again next pass */
		else
			a.v[a.n++] = (struct out){ .at = i, .st = st };
	}
	retire_adopted(l, &r, &a, now);
	atomic_store(&svc->metrics->gc_draining_bytes, draining);
out:
	free(a.v);
	free(r.v);
}

/* G5 */
static void prune_retired(struct nrs_lc *l)
{
	struct rows r = { 0 };
	int64_t now = nrs_now_real_ns();

	if (nrs_meta_obj_rows(l->svc->meta, 0, NRS_OBJ_RETIRED, &r.v, &r.n) == 0)
		for (size_t i = 0; i < r.n; i++)
			if (nrs_elapsed_ms(now, r.v[i].mtime_ns, RETIRED_KEEP_MS))
				nrs_meta_obj_delete(l->svc->meta, r.v[i].gen);
	free(r.v);
}

void nrs_lc_poke(struct nrs_lc *l, uint64_t stream_id)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	if (nrs_grow((void **)&l->dirty, &l->cap, l->ndirty + 1,
		     sizeof(*l->dirty))) {
		l->sweep_all = true;	/* the next pass looks at all */
		pthread_mutex_unlock(&l->lock);
		return;
	}
	l->dirty[l->ndirty++] = stream_id;
	pthread_mutex_unlock(&l->lock);
}

static bool nap(struct nrs_lc *l, uint64_t ms)
{
	return nrs_wait_ms(&l->cond, &l->lock, &l->stopping, ms);
}

static void *lc_thread(void *arg)
{
	struct nrs_lc *l = arg;

	while (!nap(l, LC_TICK_MS)) {
		if (l->ticks++ % RETENTION_TICKS == 0)
			retention_pass(l);
		g1_pass(l);
		g2_pass(l);
		if (l->ticks % PRUNE_TICKS == 0)
			prune_retired(l);
		nrs_log_flush(false);	/* log.c LG2: the "N more" lines */
	}
	return NULL;
}

int nrs_lc_start(const struct nrs_services *svc, uint64_t grace_ms,
		 struct nrs_lc **out)
{
	struct nrs_lc *l = calloc(1, sizeof(*l));
	int err;

	if (!l)
		return -ENOMEM;
	l->svc = svc;
	l->grace_ms = grace_ms ? grace_ms : NRS_GC_GRACE_MS_DEFAULT;
	l->sweep_all = true;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->cond, NULL);
	err = -pthread_create(&l->thread, NULL, lc_thread, l);
	if (err) {
		nrs_lc_stop(l);
		return err;
	}
	(void)pthread_setname_np(l->thread, "nrs-lifecycle");
	l->started = true;
	*out = l;
	return 0;
}

void nrs_lc_stop(struct nrs_lc *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->stopping = true;
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
	if (l->started)
		pthread_join(l->thread, NULL);
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	free(l->dirty);
	free(l);
}
