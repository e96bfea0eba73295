/*
 * materializer.c - WAL-resident committed ranges become segment objects,
 * published as new generations; then the WAL segments no range needs are
 * deleted (DESIGN.md section 1 events 4 and 5, section 6, I2, I5, I6).
 *
 * Appends never wait for any of this.  Threads take streams one at a time
 * (st->mat_busy), so a stream's objects are built in offset order.
 *
 *  M1 Choose.  A stream is due when the committed bytes above
 *     max(materialized, start) reach min_bytes, or the oldest of them has
 *     waited max_age_ms.  The range is a run of whole WAL records from
 *     that point, at most object_size bytes (at least one record).
 *  M2 Build.  The payload is read through the reader (every WAL chunk
 *     CRC-verified, I6), sealed (objfmt.c: header and block CRCs) and
 *     digested (SHA-256; MD5 only for a store that sends it, objstore.h).
 *     If the range was trimmed meanwhile the stream is simply looked at
 *     again.
 *  M3 Intent, upload, proof.  A prepared row is recorded durably first
 *     (it names the key: an upload a crash interrupts is an orphan found
 *     from this row, never from a listing).  The PUT carries Content-MD5
 *     and the SHA-256 as metadata.  Whatever the PUT answered, a HEAD must
 *     then show the exact length and SHA-256 (nrs_put_decide): missing ->
 *     the same bytes go again under the same key; other bytes -> the row is
 *     quarantined and the key never written again (the next try is a new
 *     generation, hence a new key); no answer -> retry with backoff
 *     (logged, counted), for as long as it takes.
 *  M4 Publish.  One durable transaction moves the row prepared ->
 *     committed.  Only then does the index serve the range from the object
 *     (under the stream lock), and `materialized` move.
 *  M5 Reclaim.  A WAL segment may go when no stream's index names it (a
 *     stream's WAL entries are a suffix of its index, in segment order, so
 *     its first one is its oldest), the pipeline holds no written but
 *     unindexed record in it (nrs_pipeline_wal_floor, read first), and
 *     appends no longer go to it.  Before deleting, the reclaimer takes the
 *     read gate exclusively once: every read that started with an older
 *     index snapshot has finished by then (reader.h).  Trimmed and unlinked
 *     ranges drop out of the indexes the same way, so their segments go too.
 *  M6 Start-up.  Prepared rows left by a crash are orphans: their objects
 *     are deleted (a missing one is fine) and then the rows.  Committed
 *     rows were restored into the indexes by recovery.  The orphans are
 *     the prepared rows found before any thread starts (nrs_mat_start),
 *     never rows read later: the other threads prepare uploads of their
 *     own meanwhile, and the deletions may take as long as the store is
 *     away, so a later read would take a live upload for an orphan and
 *     delete its row and object, even after M4 published it.
 *
 *  C1-C2 Compaction (issue 5), when nothing waits to be materialized:
 *     runs of small adjacent objects of a stream are read back (verified)
 *     and stored as one new generation, published with the replaced ones
 *     moving to draining in the same transaction (meta.h); reads that hold
 *     the old ones finish on them, and GC deletes them after its grace
 *     period (lifecycle.c G2).  Same M2-M4 path, same proof.
 *
 * A crash anywhere converges: before M4 the range is still served from the
 * WAL and the intent is cleaned up (M6); after M4 recovery serves it from
 * the object and stops the commit chain walk at `materialized`; a segment
 * deleted by M5 held nothing a published head needs.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_priv.h"
#include "failpoint.h"
#include "lifecycle.h"
#include "log.h"
#include "materializer.h"
#include "objfmt.h"
#include "pipeline.h"
#include "reader.h"
#include "wal.h"

#define TICK_MS			100
#define RETRY_MIN_MS		100
#define DEFAULT_MIN_BYTES	(4ull << 20)
#define DEFAULT_MAX_AGE_MS	5000
#define DEFAULT_OBJECT_SIZE	(16ull << 20)
#define DEFAULT_THREADS		2
#define DEFAULT_RETRY_MAX_MS	10000
#define DEFAULT_COMPACT_SIZE	(64ull << 20)
#define MAX_COMPACT		64	/* objects merged at most at once */

struct nrs_mat {
	struct nrs_core *c;
	struct nrs_mat_opts o;
	pthread_t *threads;
	unsigned int nthreads;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping;			/* protected by lock */
	bool orphans_done;		/* protected by lock */
	/* M6: the prepared rows found at start, a row of gen 0 after the
	 * last; owned by the thread that cleans them (orphans_done) */
	struct nrs_obj_row *orphans;
	size_t orphans_next;		/* the first not removed yet */
	pthread_mutex_t reclaim_lock;	/* one reclaimer at a time */
	uint64_t reclaimed_below;	/* protected by reclaim_lock */
};

enum nrs_put_verdict nrs_put_decide(int head_err, const struct nrs_obj_meta *got,
				    uint64_t len,
				    const unsigned char sha256[NRS_SHA256_LEN])
{
	if (head_err == -ENOENT)
		return NRS_PUT_AGAIN;
	if (head_err)
		return NRS_PUT_LATER;
	if (got->length == len && got->has_sha256 &&
	    memcmp(got->sha256, sha256, NRS_SHA256_LEN) == 0)
		return NRS_PUT_PROVEN;
	return NRS_PUT_QUARANTINE;
}

static bool stopping(struct nrs_mat *m)
{
	bool s;

	pthread_mutex_lock(&m->lock);
	s = m->stopping;
	pthread_mutex_unlock(&m->lock);
	return s;
}

/* Sleep up to ms, or less if stopping.  Returns true if stopping. */
static bool nap(struct nrs_mat *m, uint64_t ms)
{
	struct timespec ts;
	bool s;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&m->lock);
	if (!m->stopping)
		pthread_cond_timedwait(&m->cond, &m->lock, &ts);
	s = m->stopping;
	pthread_mutex_unlock(&m->lock);
	return s;
}

static uint64_t backoff_ms(const struct nrs_mat *m, unsigned int attempt)
{
	uint64_t ms = RETRY_MIN_MS;

	while (attempt-- > 0 && ms < m->o.retry_max_ms)
		ms *= 2;
	return ms < m->o.retry_max_ms ? ms : m->o.retry_max_ms;
}

/* M3: PUT until HEAD proves the object.  0, -EBADMSG (quarantine), or
 * -ECANCELED (stopping). */
static int upload(struct nrs_mat *m, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha[NRS_SHA256_LEN])
{
	struct nrs_core *c = m->c;
	unsigned int attempt = 0;

	for (;;) {
		struct nrs_obj_meta got = { 0 };
		enum nrs_put_verdict v;
		int perr, herr;

		perr = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUT);
		if (!perr)
			perr = nrs_obj_put(c->store, key, buf, len, md5, sha);
		if (!perr)
			perr = nrs_failpoint(NRS_FP_OBJ_AFTER_PUT);
		herr = nrs_obj_head(c->store, key, &got);
		v = nrs_put_decide(herr, &got, len, sha);
		if (v == NRS_PUT_PROVEN) {
			if (attempt > 0)
				nrs_info("object %s stored after %u retries",
					 key, attempt);
			return 0;
		}
		if (v == NRS_PUT_QUARANTINE) {
			nrs_err("object %s: the store holds %" PRIu64 " bytes"
				" %s under its key, not the %zu sent;"
				" quarantined, never overwritten", key,
				got.length, got.has_sha256 ?
				"with another SHA-256" : "without a SHA-256",
				len);
			nrs_count(&c->metrics.obj_quarantined, 1);
			return -EBADMSG;
		}
		nrs_count(&c->metrics.obj_retries, 1);
		if (attempt % 10 == 0)
			nrs_warn("object %s: upload not proven (PUT: %s, HEAD:"
				 " %s); retrying with backoff", key,
				 perr ? strerror(-perr) : "ok",
				 herr ? strerror(-herr) : "other length");
		if (nap(m, backoff_ms(m, attempt++)))
			return -ECANCELED;
	}
}

/* M1: the range to materialize, or false.  Called under st->lock. */
static bool plan(const struct nrs_mat *m, const struct nrs_stream *st,
		 uint64_t *a_out, uint64_t *b_out)
{
	uint64_t a = st->materialized > st->start ? st->materialized : st->start;
	size_t i = nrs_index_find(&st->index, a);
	uint64_t b = a;

	if (a >= st->head)
		return false;
	for (; i < st->index.n; i++) {
		const struct nrs_index_ent *e = &st->index.v[i];

		if (e->kind != NRS_TARGET_WAL || e->start > b ||
		    e->end > st->head)
			break;
		if (b > a && e->end - a > m->o.object_size)
			break;
		b = e->end;
	}
	if (b == a)
		return false;
	*a_out = a;
	*b_out = b;
	return true;
}

static bool due(const struct nrs_mat *m, const struct nrs_stream *st,
		uint64_t now)
{
	uint64_t from = st->materialized > st->start ? st->materialized
						     : st->start;
	uint64_t pending = st->head > from ? st->head - from : 0;

	if (pending == 0 || st->mat_busy || now < st->mat_retry_ns)
		return false;
	if (pending >= m->o.min_bytes)
		return true;
	return st->unmat_since_ns &&
	       now - (uint64_t)st->unmat_since_ns >= m->o.max_age_ms * 1000000;
}

struct pick {
	const struct nrs_mat *m;
	uint64_t now, best_pending;
	uint64_t best;		/* stream id, 0: none */
};

static void consider(void *ctx, struct nrs_stream *st)
{
	struct pick *p = ctx;

	if (due(p->m, st, p->now) &&
	    st->head - st->materialized >= p->best_pending) {
		p->best_pending = st->head - st->materialized;
		p->best = st->id;
	}
}

/* A due stream, marked busy, with a reference; NULL if none (also if it
 * left the table or another thread took it since it was chosen). */
static struct nrs_stream *pick(struct nrs_mat *m)
{
	struct pick p = { .m = m, .now = nrs_now_mono_ns() };
	struct nrs_stream *st;

	nrs_core_streams_each(m->c, consider, &p);
	if (!p.best)
		return NULL;
	st = nrs_core_stream_get(m->c, p.best);
	if (!st)
		return NULL;
	pthread_mutex_lock(&st->lock);
	if (st->mat_busy) {
		pthread_mutex_unlock(&st->lock);
		nrs_stream_put(st);
		return NULL;
	}
	st->mat_busy = true;
	pthread_mutex_unlock(&st->lock);
	return st;
}

/* Done with st (marked busy by the caller): after a failure, not again
 * before a pause. */
static void release(const struct nrs_mat *m, struct nrs_stream *st, int err)
{
	pthread_mutex_lock(&st->lock);
	st->mat_busy = false;
	if (err && err != -ECANCELED)
		st->mat_retry_ns = nrs_now_mono_ns() + backoff_ms(m, 3) * 1000000;
	pthread_mutex_unlock(&st->lock);
}

/* What a new generation replaces: WAL records (materialize) or whole
 * smaller objects of the stream (compact). */
struct olds {
	uint64_t gen[MAX_COMPACT];
	size_t n;
	uint64_t bytes;		/* their object bytes */
	int64_t ctime_ns;	/* the newest of their intents' times */
};

/* M4, the in-memory half: serve [o->start, o->end) from generation
 * o->gen instead of what the index named there. */
static void apply(struct nrs_core *c, struct nrs_stream *st,
		  const struct nrs_obj_row *o, const struct olds *olds)
{
	struct nrs_index_ent e = {
		.start = o->start, .end = o->end, .gen = o->gen,
		.kind = NRS_TARGET_OBJ, .ostart = o->start, .oend = o->end,
	};
	uint64_t wal_bytes = 0;
	int n;

	pthread_mutex_lock(&st->lock);
	if (st->start > e.start)
		e.start = st->start < e.end ? st->start : e.end;
	n = e.start < e.end ? nrs_index_replace(&st->index, &e, &wal_bytes) : 0;
	if (n < 0)
		nrs_err("stream %" PRIu64 ": cannot index object generation %"
			PRIu64 " [%" PRIu64 ", %" PRIu64 "): %s; the range keeps"
			" its old copy until the next mount", st->id, o->gen,
			o->start, o->end, strerror(-n));
	if (n >= 0) {
		st->wal_bytes -= wal_bytes < st->wal_bytes ? wal_bytes
							    : st->wal_bytes;
		st->obj_bytes += o->length;
		st->obj_bytes -= olds->bytes < st->obj_bytes ? olds->bytes
							      : st->obj_bytes;
		if (o->end > st->materialized)
			st->materialized = o->end;
		if (st->materialized >= st->head)
			st->unmat_since_ns = 0;
	}
	pthread_mutex_unlock(&st->lock);
	if (n == 0)	/* trimmed while it was made: GC's (lifecycle.c G1) */
		nrs_lc_poke(c->lc, st->id);
	nrs_count(&c->metrics.obj_uploads, 1);
	nrs_count(&c->metrics.obj_upload_bytes, o->length);
}

/*
 * M2-M4 for [a, b) of st: read it through the reader (every byte verified,
 * from the WAL or from the objects it replaces), upload it as a new
 * generation, publish it (replacing olds, if any, in the same
 * transaction), serve it.  0, or -errno (the stream is retried later).
 */
static int make_object(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
		       uint64_t b, const struct olds *olds)
{
	struct nrs_core *c = m->c;
	struct nrs_obj_row o = { .stream_id = st->id, .start = a, .end = b };
	struct nrs_objhdr h = { .stream_id = st->id, .start = a, .end = b };
	size_t len = (size_t)(b - a), hl = nrs_objfmt_hdr_len(len);
	struct nrs_reader rd = c->reader;
	unsigned char md5buf[NRS_MD5_LEN];
	unsigned char *md5 = nrs_obj_wants_md5(c->store) ? md5buf : NULL;
	char key[NRS_OBJKEY_MAX];
	unsigned char *buf;
	ssize_t n;
	int err;

	buf = malloc(hl + len);
	if (!buf)
		return -ENOMEM;
	rd.metrics = NULL;	/* not a read anyone asked for */
	n = nrs_reader_read(&rd, st, buf + hl, len, a, false);
	if (n != (ssize_t)len) {
		err = n < 0 ? (int)n : -EAGAIN;
		if (err != -ENODATA)	/* trimmed meanwhile: look again */
			nrs_err("stream %" PRIu64 ": cannot read [%" PRIu64 ", %"
				PRIu64 ") to make an object of it: %s", st->id,
				a, b, strerror(-err));
		goto out;
	}
	o.length = hl + len;
	/* a merged object is as young as its youngest part, not younger:
	 * retention by time counts from there (lifecycle.c L2) */
	o.ctime_ns = olds->n ? olds->ctime_ns : nrs_now_real_ns();
	do {
		err = nrs_meta_obj_prepare(c->meta, &o);
		if (err)
			goto out;
		h.gen = o.gen;
		err = nrs_objfmt_seal(buf, &h) ?:
		      nrs_objfmt_digest(buf, hl + len, o.sha256, md5);
		if (err)
			goto out;
		nrs_objfmt_key(key, &h);
		err = upload(m, key, buf, hl + len, md5, o.sha256);
		if (err == -EBADMSG &&
		    nrs_meta_obj_set_state(c->meta, o.gen, NRS_OBJ_PREPARED,
					   NRS_OBJ_QUARANTINED,
					   nrs_now_real_ns()) != 0)
			goto out;
	} while (err == -EBADMSG && !stopping(m));
	if (err)
		goto out;	/* stopping: the intent is an orphan (M6) */
	err = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUBLISH);
	if (!err)
		err = olds->n ? nrs_meta_obj_replace(c->meta, o.gen, o.sha256,
						     olds->gen, olds->n,
						     nrs_now_real_ns())
			      : nrs_meta_obj_publish(c->meta, o.gen, o.sha256);
	if (!err)
		err = nrs_failpoint(NRS_FP_OBJ_AFTER_PUBLISH);
	if (err == -ESTALE && olds->n) {
		/* a generation it replaces went to draining meanwhile (a
		 * trim): this one is not published and nothing needs it */
		nrs_info("stream %" PRIu64 ": compaction into %s gave way to a"
			 " trim; the upload is removed", st->id, key);
		if (nrs_obj_del(c->store, key) == 0)
			nrs_meta_obj_delete(c->meta, o.gen);
		goto out;
	}
	if (err) {
		nrs_err("stream %" PRIu64 ": publishing object %s failed: %s",
			st->id, key, strerror(-err));
		goto out;
	}
	o.state = NRS_OBJ_COMMITTED;
	apply(c, st, &o, olds);
out:
	free(buf);
	return err;
}

static int materialize(struct nrs_mat *m, struct nrs_stream *st)
{
	struct olds none = { .n = 0 };
	uint64_t a, b;
	bool ok;

	pthread_mutex_lock(&st->lock);
	ok = plan(m, st, &a, &b);
	pthread_mutex_unlock(&st->lock);
	return ok ? make_object(m, st, a, b, &none) : 0;
}

/*
 * C1 Compaction plan, under st->lock: the first run of at least two
 *    adjacent objects, each whole (not cut by a trim) and smaller than a
 *    quarter of compact_size, merged while the sum stays within
 *    compact_size -- once the run adds up to a quarter of compact_size, so
 *    that a byte is rewritten about once, not once per doubling; a shorter
 *    run only when the stream is idle (everything materialized, no commit
 *    for 10 x materialize_age_ms), which compacts the idle tail.  An object
 *    of a quarter of compact_size or more is never rewritten.
 */
static bool plan_compact(const struct nrs_mat *m, const struct nrs_stream *st,
			 uint64_t *a, uint64_t *b, struct olds *olds)
{
	uint64_t small = m->o.compact_size / 4;
	uint64_t idle_ms = m->o.max_age_ms < UINT64_MAX / 10000000 ?
			   m->o.max_age_ms * 10 : UINT64_MAX / 1000000;
	bool idle = st->materialized >= st->head && st->mtime_ns > 0 &&
		    (uint64_t)(nrs_now_real_ns() - st->mtime_ns) / 1000000 >
			idle_ms;

	for (size_t i = 0; i < st->index.n; i++) {
		const struct nrs_index_ent *e = &st->index.v[i];
		size_t j = i;

		olds->n = 0;
		olds->bytes = 0;
		*a = *b = e->start;
		for (; j < st->index.n && olds->n < MAX_COMPACT; j++) {
			const struct nrs_index_ent *x = &st->index.v[j];
			uint64_t len = x->oend - x->ostart;

			if (x->kind != NRS_TARGET_OBJ || x->start != x->ostart ||
			    x->end != x->oend || x->start != *b || len >= small ||
			    x->end - *a > m->o.compact_size)
				break;
			olds->gen[olds->n++] = x->gen;
			olds->bytes += nrs_objfmt_hdr_len(len) + len;
			*b = x->end;
		}
		if (olds->n >= 2 && (idle || *b - *a >= small))
			return true;
		i = j > i ? j - 1 : i;
	}
	return false;
}

static void consider_compact(void *ctx, struct nrs_stream *st)
{
	struct pick *p = ctx;
	uint64_t a, b;
	struct olds olds;

	if (!p->best && !st->mat_busy && plan_compact(p->m, st, &a, &b, &olds))
		p->best = st->id;
}

/* The newest intent time among the rows olds names. */
static int newest_ctime(void *ctx, const struct nrs_obj_row *o)
{
	struct olds *olds = ctx;

	for (size_t i = 0; i < olds->n; i++)
		if (olds->gen[i] == o->gen && o->ctime_ns > olds->ctime_ns)
			olds->ctime_ns = o->ctime_ns;
	return 0;
}

/* C2: compact one run of one stream, if any; true if it did. */
static bool compact_some(struct nrs_mat *m)
{
	struct pick p = { .m = m };
	struct nrs_stream *st;
	struct olds olds;
	uint64_t a, b;
	bool ok;
	int err;

	if (m->o.compact_size == NRS_COMPACT_OFF)
		return false;
	nrs_core_streams_each(m->c, consider_compact, &p);
	if (!p.best || !(st = nrs_core_stream_get(m->c, p.best)))
		return false;
	pthread_mutex_lock(&st->lock);
	ok = !st->mat_busy && plan_compact(m, st, &a, &b, &olds);
	if (ok)
		st->mat_busy = true;
	pthread_mutex_unlock(&st->lock);
	if (ok) {
		olds.ctime_ns = 0;
		err = nrs_meta_obj_foreach(m->c->meta, st->id, newest_ctime,
					   &olds);
		if (!err && olds.ctime_ns == 0)
			olds.ctime_ns = nrs_now_real_ns();
		if (!err)
			err = make_object(m, st, a, b, &olds);
		if (!err) {
			nrs_count(&m->c->metrics.compactions, 1);
			nrs_count(&m->c->metrics.compacted_objects, olds.n);
			nrs_debug("stream %" PRIu64 ": compacted %zu objects into"
				  " [%" PRIu64 ", %" PRIu64 ")", st->id, olds.n,
				  a, b);
		}
		release(m, st, err);
		ok = err == 0;
	}
	nrs_stream_put(st);
	return ok;
}

static void oldest_seg(void *ctx, struct nrs_stream *st)
{
	uint64_t *below = ctx, s = nrs_index_min_seg(&st->index);

	if (s < *below)
		*below = s;
}

/* M5 */
static void reclaim(struct nrs_mat *m)
{
	struct nrs_core *c = m->c;
	struct nrs_wal_stats ws;
	uint64_t below, floor, bytes = 0;
	int n;

	nrs_wal_stats(c->wal, &ws);
	below = ws.cur_seg ? ws.cur_seg : UINT64_MAX;
	floor = nrs_pipeline_wal_floor(c->pipe);
	if (floor < below)
		below = floor;
	nrs_core_streams_each(c, oldest_seg, &below);

	pthread_mutex_lock(&m->reclaim_lock);
	/* nothing but the current segment; or nothing new since last time
	 * (with no current segment, `below` says nothing: no appends yet) */
	if (ws.segments <= (ws.cur_seg ? 1u : 0u) ||
	    (ws.cur_seg && below <= m->reclaimed_below)) {
		pthread_mutex_unlock(&m->reclaim_lock);
		return;
	}
	if (nrs_failpoint(NRS_FP_WAL_BEFORE_RECLAIM) == 0) {
		/* readers holding an older index snapshot finish first */
		pthread_rwlock_wrlock(&c->gate);
		pthread_rwlock_unlock(&c->gate);
		n = nrs_wal_reclaim(c->wal, below, &bytes);
		if (n > 0) {
			nrs_count(&c->metrics.wal_reclaimed_segments,
				  (uint64_t)n);
			nrs_count(&c->metrics.wal_reclaimed_bytes, bytes);
			nrs_debug("reclaimed %d WAL segments below %016" PRIx64
				  " (%" PRIu64 " bytes)", n, below, bytes);
		}
		if (n >= 0 && ws.cur_seg)
			m->reclaimed_below = below;
	}
	pthread_mutex_unlock(&m->reclaim_lock);
}

static int collect_prepared(void *ctx, const struct nrs_obj_row *o)
{
	struct nrs_obj_row **v = ctx;
	size_t n = 0;
	struct nrs_obj_row *nv;

	if (o->state != NRS_OBJ_PREPARED)
		return 0;
	while (*v && (*v)[n].gen)
		n++;
	nv = realloc(*v, (n + 2) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	nv[n] = *o;
	nv[n + 1].gen = 0;
	*v = nv;
	return 0;
}

/* M6: delete the objects of the orphans found at start, then their rows;
 * the ones removed are not tried again.  0 when all are gone. */
static int clean_orphans(struct nrs_mat *m)
{
	struct nrs_core *c = m->c;
	struct nrs_obj_row *v = m->orphans;
	int err;

	for (; v && v[m->orphans_next].gen; m->orphans_next++) {
		const struct nrs_obj_row *o = &v[m->orphans_next];
		struct nrs_objhdr h = { .stream_id = o->stream_id,
					.start = o->start, .end = o->end,
					.gen = o->gen };
		char key[NRS_OBJKEY_MAX];

		nrs_objfmt_key(key, &h);
		err = nrs_obj_del(c->store, key);
		if (!err)
			err = nrs_meta_obj_delete(c->meta, o->gen);
		if (!err) {
			nrs_info("removed orphan object %s (an upload a stop or"
				 " crash interrupted)", key);
			nrs_count(&c->metrics.obj_orphans_removed, 1);
		} else {
			nrs_warn("orphan object %s: cannot remove it yet: %s",
				 key, strerror(-err));
			return err;
		}
	}
	return 0;
}

static void *mat_thread(void *arg)
{
	struct nrs_mat *m = arg;
	unsigned int orphan_attempt = 0;
	bool first;

	pthread_mutex_lock(&m->lock);
	first = !m->orphans_done;
	m->orphans_done = true;		/* one thread does it */
	pthread_mutex_unlock(&m->lock);
	while (first && clean_orphans(m) != 0)
		if (nap(m, backoff_ms(m, orphan_attempt++)))
			return NULL;
	while (!stopping(m)) {
		struct nrs_stream *st = pick(m);
		int err;

		if (!st) {
			reclaim(m);
			if (!compact_some(m))
				nap(m, TICK_MS);
			continue;
		}
		err = materialize(m, st);
		release(m, st, err);
		nrs_stream_put(st);
		if (!err)
			reclaim(m);
	}
	return NULL;
}

int nrs_mat_start(struct nrs_core *c, const struct nrs_mat_opts *o,
		  struct nrs_mat **out)
{
	struct nrs_mat *m = calloc(1, sizeof(*m));
	int err = 0;

	if (!m)
		return -ENOMEM;
	m->c = c;
	m->o = *o;
	if (!m->o.min_bytes)
		m->o.min_bytes = DEFAULT_MIN_BYTES;
	if (!m->o.max_age_ms)
		m->o.max_age_ms = DEFAULT_MAX_AGE_MS;
	if (!m->o.object_size)
		m->o.object_size = DEFAULT_OBJECT_SIZE;
	if (m->o.object_size >= NRS_OBJ_MAX_LEN)
		m->o.object_size = NRS_OBJ_MAX_LEN - 1;
	if (!m->o.threads)
		m->o.threads = DEFAULT_THREADS;
	if (!m->o.retry_max_ms)
		m->o.retry_max_ms = DEFAULT_RETRY_MAX_MS;
	if (!m->o.compact_size)
		m->o.compact_size = DEFAULT_COMPACT_SIZE;
	if (m->o.compact_size >= NRS_OBJ_MAX_LEN &&
	    m->o.compact_size != NRS_COMPACT_OFF)
		m->o.compact_size = NRS_OBJ_MAX_LEN - 1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cond, NULL);
	pthread_mutex_init(&m->reclaim_lock, NULL);
	/* M6: the orphans are the intents there are before any thread runs */
	err = nrs_meta_obj_foreach(c->meta, 0, collect_prepared, &m->orphans);
	if (err) {
		nrs_err("cannot read the object intents a stop or crash left: %s",
			strerror(-err));
		nrs_mat_stop(m);
		return err;
	}
	m->threads = calloc(m->o.threads, sizeof(*m->threads));
	if (!m->threads) {
		nrs_mat_stop(m);
		return -ENOMEM;
	}
	for (; m->nthreads < m->o.threads; m->nthreads++) {
		err = -pthread_create(&m->threads[m->nthreads], NULL,
				      mat_thread, m);
		if (err) {
			nrs_mat_stop(m);
			return err;
		}
	}
	*out = m;
	return 0;
}

void nrs_mat_stop(struct nrs_mat *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	for (unsigned int i = 0; i < m->nthreads; i++)
		pthread_join(m->threads[i], NULL);
	pthread_mutex_destroy(&m->reclaim_lock);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m->orphans);
	free(m->threads);
	free(m);
}
