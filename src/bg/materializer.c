/*
 * materializer.c - WAL-resident committed ranges become segment objects,
 * published as new generations (DESIGN.md section 1 event 4, section 6,
 * I2, I5, I6); its builder threads also run the WAL's GC (walgc.c), which
 * deletes the WAL segments no range needs any more (event 5).
 *
 * Appends never wait for any of this.  Workers take streams one at a time
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
 *  (The WAL reclaim and the seal of an idle dead segment, GC work the
 *  builders run, have their rules, M5 and M7, in walgc.c.)
 *  M9 A stream that is due but whose next byte no WAL record holds (a
 *     range recovery found with no copy, recovery.c R5b) is logged and
 *     retried after a pause, like a failed build: materializing it stops
 *     there, since `materialized` never moves past bytes no object holds
 *     (W3), until a trim (user.nereus.trim, retention) raises its start
 *     past them.  Other streams go on.
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
 *  W1-W4 Workers.  Each materializer thread (-o materializers) is a worker
 *     of two threads, so that building one object (M2: reading, CRCs,
 *     SHA-256, MD5 -- CPU) overlaps uploading the one before (M3-M4:
 *     network, the server, a synced publication):
 *  W1 The builder picks a stream (M1), marks it busy, and builds its
 *     objects one after another from max(materialized, start): the next
 *     one starts where the last one built ends, not at `materialized`,
 *     which moves only at M4.  It keeps the stream while it is due and has
 *     objects to make -- up to RUN_MAX in a row when another stream is due
 *     too, so that one busy stream does not starve the others.
 *  W2 Each object built goes to the worker's uploader through a slot of
 *     one: the builder waits until the uploader is done with the object
 *     before (M3, M4, served), so a worker holds at most two objects, one
 *     uploading and one built.  The uploader does a worker's objects in the
 *     order handed, hence a stream's in offset order, and the intent of
 *     each (M3) was recorded before it was handed, so before its PUT.
 *  W3 If an object of a stream is not published (store away at stop,
 *     quarantine cut short, publication failed), the objects of the
 *     stream built after it are not published either -- that would move
 *     `materialized` past a range no object holds, which the next mount
 *     (walking the WAL only above `materialized`) would lose: the uploader
 *     deletes their intents (their PUT never started) and the stream is
 *     retried after a pause from `materialized`.  The object that carries
 *     `last` (or an object-less job, when a build fails after one was
 *     handed) releases the stream, after everything handed before it, so
 *     no other worker takes it up while an object of it is on its way.
 *  W4 At the stop the builder hands nothing more; the uploader finishes
 *     the object it has (an upload is not cut short, only its retries), and
 *     drops a built one whose PUT has not started (its intent deleted).
 *     Compaction (C2) goes through the same two threads, one object at a
 *     time: the builder waits for it.
 *
 * A crash anywhere converges: before M4 the range is still served from the
 * WAL and the intent is cleaned up (M6); after M4 recovery serves it from
 * the object and stops the commit chain walk at `materialized`; a segment
 * deleted by M5 (walgc.c) held nothing a published head needs.  A crash
 * with two objects of a stream on their way (W2) leaves two intents, both
 * orphans.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bg/materializer.h"
#include "bg/services.h"
#include "bg/walgc.h"
#include "obj/objfmt.h"
#include "stream/reader.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/sat.h"
#include "util/waitms.h"
#include "wal/wal.h"

#define TICK_MS			100
#define RETRY_MIN_MS		100
#define DEFAULT_MIN_BYTES	(4ull << 20)
#define DEFAULT_MAX_AGE_MS	5000
#define DEFAULT_OBJECT_SIZE	(16ull << 20)
#define DEFAULT_THREADS		2
#define DEFAULT_RETRY_MAX_MS	10000
#define DEFAULT_COMPACT_SIZE	(64ull << 20)
#define MAX_COMPACT		64	/* objects merged at most at once */
#define RUN_MAX			4	/* objects of one stream in a row while
					 * another stream is due (W1) */

struct worker;

struct nrs_mat {
	const struct nrs_services *svc;
	struct nrs_mat_opts o;
	struct worker *workers;
	unsigned int nworkers;		/* started */

	pthread_mutex_t lock;
	pthread_cond_t cond;		/* stopping */
	pthread_cond_t idle;		/* stopping, or a stream released */
	bool stopping;			/* protected by lock */
	bool orphans_done;		/* protected by lock */
	/* M6: the prepared rows found at start; owned by the thread that
	 * cleans them (orphans_done) */
	struct nrs_obj_row *orphans;
	size_t norphans;
	size_t orphans_next;		/* the first not removed yet */
	struct nrs_walgc walgc;		/* M5, M7 (walgc.c) */
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

/* Wait on cv (m->cond or m->idle) for up to ms, or less if stopping.
 * Returns true if stopping. */
static bool wait_on(struct nrs_mat *m, pthread_cond_t *cv, uint64_t ms)
{
	return nrs_wait_ms(cv, &m->lock, &m->stopping, ms);
}

/* Sleep up to ms, or less if stopping.  Returns true if stopping. */
static bool nap(struct nrs_mat *m, uint64_t ms)
{
	return wait_on(m, &m->cond, ms);
}

/* A builder with nothing to do: wait up to ms for a stream to be released
 * (by any uploader) or for the stop. */
static void idle_wait(struct nrs_mat *m, uint64_t ms)
{
	wait_on(m, &m->idle, ms);
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
	const struct nrs_services *svc = m->svc;
	unsigned int attempt = 0;

	for (;;) {
		struct nrs_obj_meta got = { 0 };
		enum nrs_put_verdict v;
		int perr, herr;

		perr = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUT);
		if (!perr)
			perr = nrs_obj_put(svc->store, key, buf, len, md5, sha);
		if (!perr)
			perr = nrs_failpoint(NRS_FP_OBJ_AFTER_PUT);
		herr = nrs_obj_head(svc->store, key, &got);
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
			nrs_count(&svc->metrics->obj_quarantined, 1);
			return -EBADMSG;
		}
		nrs_count(&svc->metrics->obj_retries, 1);
		if (attempt % 10 == 0)
			nrs_warn("object %s: upload not proven (PUT: %s, HEAD:"
				 " %s); retrying with backoff", key,
				 perr ? strerror(-perr) : "ok",
				 herr ? strerror(-herr) : "other length");
		if (nap(m, backoff_ms(m, attempt++)))
			return -ECANCELED;
	}
}

/* Where the next object of st starts: past `materialized`, the start,
 * and from (the end of an object of it still on its way, or 0). */
static uint64_t next_from(const struct nrs_stream *st, uint64_t from)
{
	uint64_t a = st->materialized > st->start ? st->materialized : st->start;

	return from > a ? from : a;
}

/* M1: the range to materialize, starting at next_from(st, from), or
 * false.  Called under st->lock. */
static bool plan(const struct nrs_mat *m, const struct nrs_stream *st,
		 uint64_t from, uint64_t *a_out, uint64_t *b_out)
{
	uint64_t a = next_from(st, from);
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

/* M1's rule for the bytes above next_from(st, from): enough of them, or
 * the oldest waited long enough.  Called under st->lock. */
static bool worth(const struct nrs_mat *m, const struct nrs_stream *st,
		  uint64_t from, uint64_t now)
{
	uint64_t a = next_from(st, from);
	uint64_t pending = st->head > a ? st->head - a : 0;

	if (pending == 0)
		return false;
	if (pending >= m->o.min_bytes)
		return true;
	return st->unmat_since_ns &&	/* SAT1 */
	       nrs_elapsed_ms((int64_t)now, st->unmat_since_ns, m->o.max_age_ms);
}

static bool due(const struct nrs_mat *m, const struct nrs_stream *st,
		uint64_t now)
{
	if (st->mat_busy || now < st->mat_retry_ns)
		return false;
	return worth(m, st, 0, now);
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

	nrs_streams_each(m->svc->streams, consider, &p);
	if (!p.best)
		return NULL;
	st = nrs_streams_get(m->svc->streams, p.best);
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

/* Done with st (marked busy, with a reference the caller gives up): after
 * a failure, not again before a pause.  Idle builders look again. */
static void release(struct nrs_mat *m, struct nrs_stream *st, int err)
{
	pthread_mutex_lock(&st->lock);
	st->mat_busy = false;
	if (err && err != -ECANCELED)
		st->mat_retry_ns = nrs_sat_add(nrs_now_mono_ns(),
					       nrs_sat_mul(backoff_ms(m, 3),
							   NRS_NS_PER_MS));
	pthread_mutex_unlock(&st->lock);
	nrs_stream_put(st);
	pthread_mutex_lock(&m->lock);
	pthread_cond_broadcast(&m->idle);
	pthread_mutex_unlock(&m->lock);
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
static void apply(const struct nrs_services *svc, struct nrs_stream *st,
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
		svc->poke(svc->ctx, st->id);
	nrs_count(&svc->metrics->obj_uploads, 1);
	nrs_count(&svc->metrics->obj_upload_bytes, o->length);
}

/*
 * An object between M2 and M4: built (read, recorded as an intent, sealed,
 * digested) by a worker's builder, then uploaded, proven and published by
 * its uploader (W1-W4 at the top).
 */
struct job {
	struct nrs_stream *st;	/* busy; its reference goes with `last` */
	struct nrs_obj_row o;	/* prepared: gen, length, sha256 */
	struct olds olds;	/* what it replaces (compaction) */
	unsigned char *buf;	/* the object, o.length bytes, owned; NULL:
				 * no object, only the release (err) */
	unsigned char md5[NRS_MD5_LEN];
	bool has_md5;		/* the store wants one (objstore.h) */
	bool last;		/* the stream is released after it (W3) */
	int err;		/* buf NULL: why the builder gave up */
};

/* One materializer thread: a builder and the uploader it hands to. */
struct worker {
	struct nrs_mat *m;
	pthread_t builder, uploader;
	bool has_uploader;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job slot;	/* protected by lock, while full */
	bool full;		/* protected by lock: a job in the uploader's
				 * hands, until it is done with it (W2) */
	bool quit;		/* protected by lock: no more jobs (W4) */
	uint64_t broken;	/* protected by lock: a stream whose chain
				 * failed (W3), 0: none */
	int broken_err;		/* protected by lock: why */
	int last_err;		/* protected by lock: of the last job done */
};

/* Header, block CRCs and digests of j's object, for generation j->o.gen. */
static int seal_digest(struct job *j)
{
	struct nrs_objhdr h = { .stream_id = j->o.stream_id,
				.start = j->o.start, .end = j->o.end,
				.gen = j->o.gen };

	return nrs_objfmt_seal(j->buf, &h) ?:
	       nrs_objfmt_digest(j->buf, j->o.length, j->o.sha256,
				 j->has_md5 ? j->md5 : NULL);
}

static void job_key(char key[NRS_OBJKEY_MAX], const struct job *j)
{
	struct nrs_objhdr h = { .stream_id = j->o.stream_id,
				.start = j->o.start, .end = j->o.end,
				.gen = j->o.gen };

	nrs_objfmt_key(key, &h);
}

/*
 * M2 for [a, b) of st (busy): read it through the reader (every byte
 * verified, from the WAL or from the objects olds names), record the
 * intent, seal and digest it into *j (written only on success; the
 * caller then owns j->buf).  0, or -errno (-ENODATA: trimmed meanwhile).
 */
static int build(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
		 uint64_t b, const struct olds *olds, struct job *out)
{
	const struct nrs_services *svc = m->svc;
	size_t len = (size_t)(b - a), hl = nrs_objfmt_hdr_len(len);
	struct nrs_reader rd = *svc->reader;
	struct job j = {
		.st = st,
		.o = { .stream_id = st->id, .start = a, .end = b,
		       .length = hl + len },
		.olds = *olds,
		.has_md5 = nrs_obj_wants_md5(svc->store),
	};
	ssize_t n;
	int err;

	j.buf = malloc(hl + len);
	if (!j.buf)
		return -ENOMEM;
	rd.metrics = NULL;	/* not a read anyone asked for */
	n = nrs_reader_read(&rd, st, j.buf + hl, len, a, false);
	if (n != (ssize_t)len) {
		err = n < 0 ? (int)n : -EAGAIN;
		if (err != -ENODATA)	/* trimmed meanwhile: look again */
			nrs_err("stream %" PRIu64 ": cannot read [%" PRIu64 ", %"
				PRIu64 ") to make an object of it: %s", st->id,
				a, b, strerror(-err));
		goto out_free;
	}
	/* a merged object is as young as its youngest part, not younger:
	 * retention by time counts from there (lifecycle.c L2) */
	j.o.ctime_ns = olds->n ? olds->ctime_ns : nrs_now_real_ns();
	err = nrs_meta_obj_prepare(svc->meta, &j.o);
	if (err)
		goto out_free;
	err = seal_digest(&j);
	if (err) {
		nrs_meta_obj_delete(svc->meta, j.o.gen);	/* nothing was put */
		goto out_free;
	}
	*out = j;
	return 0;
out_free:
	free(j.buf);
	return err;
}

/*
 * M3-M4 for the job j built: upload until proven (a quarantined key gives
 * way to a new generation, sealed and digested again), publish (replacing
 * j->olds, if any, in the same transaction), serve.  0, or -errno.
 */
static int finish(struct nrs_mat *m, struct job *j)
{
	const struct nrs_services *svc = m->svc;
	char key[NRS_OBJKEY_MAX];
	int err;

	for (;;) {
		job_key(key, j);
		err = upload(m, key, j->buf, j->o.length,
			     j->has_md5 ? j->md5 : NULL, j->o.sha256);
		if (err != -EBADMSG)
			break;
		if (nrs_meta_obj_set_state(svc->meta, j->o.gen, NRS_OBJ_PREPARED,
					   NRS_OBJ_QUARANTINED,
					   nrs_now_real_ns()) != 0 ||
		    stopping(m))
			return err;
		err = nrs_meta_obj_prepare(svc->meta, &j->o) ?: seal_digest(j);
		if (err)
			return err;
	}
	if (err)
		return err;	/* stopping: the intent is an orphan (M6) */
	err = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUBLISH);
	if (!err)
		err = j->olds.n ? nrs_meta_obj_replace(svc->meta, j->o.gen,
						       j->o.sha256,
						       j->olds.gen, j->olds.n,
						       nrs_now_real_ns())
				: nrs_meta_obj_publish(svc->meta, j->o.gen,
						       j->o.sha256);
	if (!err)
		err = nrs_failpoint(NRS_FP_OBJ_AFTER_PUBLISH);
	if (err == -ESTALE && j->olds.n) {
		/* a generation it replaces went to draining meanwhile (a
		 * trim): this one is not published and nothing needs it */
		nrs_info("stream %" PRIu64 ": compaction into %s gave way to a"
			 " trim; the upload is removed", j->st->id, key);
		if (nrs_obj_del(svc->store, key) == 0)
			nrs_meta_obj_delete(svc->meta, j->o.gen);
		return err;
	}
	if (err) {
		nrs_err("stream %" PRIu64 ": publishing object %s failed: %s",
			j->st->id, key, strerror(-err));
		return err;
	}
	j->o.state = NRS_OBJ_COMMITTED;
	apply(svc, j->st, &j->o, &j->olds);
	if (j->olds.n) {
		nrs_count(&svc->metrics->compactions, 1);
		nrs_count(&svc->metrics->compacted_objects, j->olds.n);
		nrs_debug("stream %" PRIu64 ": compacted %zu objects into [%"
			  PRIu64 ", %" PRIu64 ")", j->st->id, j->olds.n,
			  j->o.start, j->o.end);
	}
	return 0;
}

/* W2: the uploader does one job; the slot stays full until it is done. */
static void run_job(struct worker *w, struct job *j)
{
	struct nrs_mat *m = w->m;
	uint64_t id = j->st->id;
	bool broken;
	int err = j->err;

	pthread_mutex_lock(&w->lock);
	broken = w->broken == id;
	pthread_mutex_unlock(&w->lock);
	if (j->buf && (broken || stopping(m))) {
		/* W3: an object before it in the stream is not published,
		 * so neither is this one (or the stop came first); its PUT
		 * never started */
		nrs_meta_obj_delete(m->svc->meta, j->o.gen);
		if (!broken)
			err = -ECANCELED;
	} else if (j->buf) {
		err = finish(m, j);
	}
	free(j->buf);
	pthread_mutex_lock(&w->lock);
	if (err && !broken) {
		w->broken = id;
		w->broken_err = err;
	}
	if (!err && w->broken == id)
		err = w->broken_err;
	if (j->last && w->broken == id)
		w->broken = 0;
	w->last_err = err;
	pthread_mutex_unlock(&w->lock);
	if (j->last)
		release(m, j->st, err);
}

static void *uploader_main(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		struct job j;

		pthread_mutex_lock(&w->lock);
		while (!w->full && !w->quit)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->full) {
			pthread_mutex_unlock(&w->lock);
			return NULL;
		}
		j = w->slot;
		pthread_mutex_unlock(&w->lock);
		run_job(w, &j);
		pthread_mutex_lock(&w->lock);
		w->full = false;
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
	}
}

/* W2: give j to the uploader once it is done with the one before. */
static void hand(struct worker *w, const struct job *j)
{
	pthread_mutex_lock(&w->lock);
	while (w->full)
		pthread_cond_wait(&w->cond, &w->lock);
	w->slot = *j;
	w->full = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Wait until the uploader has done every job handed; the last one's
 * error. */
static int drain(struct worker *w)
{
	int err;

	pthread_mutex_lock(&w->lock);
	while (w->full)
		pthread_cond_wait(&w->cond, &w->lock);
	err = w->last_err;
	pthread_mutex_unlock(&w->lock);
	return err;
}

static bool is_broken(struct worker *w, uint64_t id)
{
	bool b;

	pthread_mutex_lock(&w->lock);
	b = w->broken == id;
	pthread_mutex_unlock(&w->lock);
	return b;
}

struct other {
	const struct nrs_mat *m;
	uint64_t id, now;
	bool due;
};

static void consider_other(void *ctx, struct nrs_stream *st)
{
	struct other *o = ctx;

	if (st->id != o->id && due(o->m, st, o->now))
		o->due = true;
}

/* Is a stream other than id due (M1)?  Not under any stream's lock. */
static bool other_due(struct nrs_mat *m, uint64_t id)
{
	struct other o = { .m = m, .id = id, .now = nrs_now_mono_ns() };

	nrs_streams_each(m->svc->streams, consider_other, &o);
	return o.due;
}

/*
 * W1: the objects of st (busy, with a reference that this gives up) from
 * max(materialized, start), in offset order, each handed to the uploader
 * as soon as it is built, while the next one is built.  The stream stays
 * with the worker while it is due and has whole objects to make, or up to
 * RUN_MAX objects when another stream is due too.
 */
static void materialize(struct worker *w, struct nrs_stream *st)
{
	struct nrs_mat *m = w->m;
	struct olds none = { .n = 0 };
	uint64_t a, b;
	unsigned int run = 0;
	bool ok;

	pthread_mutex_lock(&st->lock);
	ok = plan(m, st, 0, &a, &b);
	a = next_from(st, 0);
	pthread_mutex_unlock(&st->lock);
	if (!ok) {
		/* M9: due, yet no WAL record starts where it must (a range
		 * recovery found with no copy, R5b): retried after a pause,
		 * never at once, or this thread would spin on it for good */
		nrs_err("stream %" PRIu64 ": committed bytes from %" PRIu64
			" have no copy (nereusfs-fsck names the range): its"
			" materialization waits until a trim passes them",
			st->id, a);
		release(m, st, -EIO);
		return;
	}
	for (;;) {
		struct job j;
		int err = build(m, st, a, b, &none, &j);

		if (err) {
			if (run == 0) {	/* nothing of it handed */
				release(m, st, err);
			} else {
				struct job r = { .st = st, .last = true,
						 .err = err };

				hand(w, &r);
			}
			return;
		}
		run++;
		pthread_mutex_lock(&st->lock);
		ok = worth(m, st, b, nrs_now_mono_ns()) &&
		     plan(m, st, b, &a, &b);
		pthread_mutex_unlock(&st->lock);
		j.last = !ok || stopping(m) || is_broken(w, st->id) ||
			 (run >= RUN_MAX && other_due(m, st->id));
		hand(w, &j);
		nrs_walgc_reclaim(&m->walgc);	/* the builder has the time: W2 */
		if (j.last)
			return;
	}
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
	bool idle = st->materialized >= st->head && st->mtime_ns > 0 &&
		    nrs_elapsed_ms(nrs_now_real_ns(), st->mtime_ns,
				   nrs_sat_mul(m->o.max_age_ms, 10));	/* SAT1 */

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

/* C2: compact one run of one stream, if any, through the worker's
 * uploader, and wait for it; true if it did. */
static bool compact_some(struct worker *w)
{
	struct nrs_mat *m = w->m;
	struct pick p = { .m = m };
	struct nrs_stream *st;
	struct olds olds;
	struct job j;
	uint64_t a, b;
	bool ok;
	int err;

	if (m->o.compact_size == NRS_COMPACT_OFF)
		return false;
	nrs_streams_each(m->svc->streams, consider_compact, &p);
	if (!p.best || !(st = nrs_streams_get(m->svc->streams, p.best)))
		return false;
	pthread_mutex_lock(&st->lock);
	ok = !st->mat_busy && plan_compact(m, st, &a, &b, &olds);
	if (ok)
		st->mat_busy = true;
	pthread_mutex_unlock(&st->lock);
	if (!ok) {
		nrs_stream_put(st);
		return false;
	}
	olds.ctime_ns = 0;
	err = nrs_meta_obj_foreach(m->svc->meta, st->id, newest_ctime, &olds);
	if (!err && olds.ctime_ns == 0)
		olds.ctime_ns = nrs_now_real_ns();
	if (!err)
		err = build(m, st, a, b, &olds, &j);
	if (err) {
		release(m, st, err);
		return false;
	}
	j.last = true;
	hand(w, &j);
	return drain(w) == 0;
}

/* M6: delete the objects of the orphans found at start, then their rows;
 * the ones removed are not tried again.  0 when all are gone. */
static int clean_orphans(struct nrs_mat *m)
{
	const struct nrs_services *svc = m->svc;
	struct nrs_obj_row *v = m->orphans;
	int err;

	for (; m->orphans_next < m->norphans; m->orphans_next++) {
		const struct nrs_obj_row *o = &v[m->orphans_next];
		struct nrs_objhdr h = { .stream_id = o->stream_id,
					.start = o->start, .end = o->end,
					.gen = o->gen };
		char key[NRS_OBJKEY_MAX];

		nrs_objfmt_key(key, &h);
		err = nrs_obj_del(svc->store, key);
		if (!err)
			err = nrs_meta_obj_delete(svc->meta, o->gen);
		if (!err) {
			nrs_info("removed orphan object %s (an upload a stop or"
				 " crash interrupted)", key);
			nrs_count(&svc->metrics->obj_orphans_removed, 1);
		} else {
			nrs_warn("orphan object %s: cannot remove it yet: %s",
				 key, strerror(-err));
			return err;
		}
	}
	return 0;
}

/* W4: the builder's end: its uploader finishes what it has, then ends. */
static void worker_quit(struct worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void *builder_main(void *arg)
{
	struct worker *w = arg;
	struct nrs_mat *m = w->m;
	unsigned int orphan_attempt = 0;
	bool first;

	pthread_mutex_lock(&m->lock);
	first = !m->orphans_done;
	m->orphans_done = true;		/* one thread does it */
	pthread_mutex_unlock(&m->lock);
	while (first && clean_orphans(m) != 0)
		if (nap(m, backoff_ms(m, orphan_attempt++)))
			goto out;
	while (!stopping(m)) {
		struct nrs_stream *st = pick(m);

		if (!st) {
			nrs_walgc_seal_dead(&m->walgc);
			nrs_walgc_reclaim(&m->walgc);
			if (!compact_some(w))
				idle_wait(m, TICK_MS);
			continue;
		}
		materialize(w, st);
	}
out:
	worker_quit(w);
	return NULL;
}

/* A worker's threads; on failure nothing of it is left running. */
static int worker_start(struct nrs_mat *m, struct worker *w)
{
	int err;

	w->m = m;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	err = -pthread_create(&w->uploader, NULL, uploader_main, w);
	if (err)
		goto out_destroy;
	err = -pthread_create(&w->builder, NULL, builder_main, w);
	if (err) {
		worker_quit(w);
		pthread_join(w->uploader, NULL);
		goto out_destroy;
	}
	(void)pthread_setname_np(w->uploader, "nrs-mat-upload");
	(void)pthread_setname_np(w->builder, "nrs-mat-build");
	return 0;
out_destroy:
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	return err;
}

int nrs_mat_start(const struct nrs_services *svc,
		  const struct nrs_mat_opts *o, struct nrs_mat **out)
{
	struct nrs_mat *m = calloc(1, sizeof(*m));
	int err = 0;

	if (!m)
		return -ENOMEM;
	m->svc = svc;
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
	pthread_cond_init(&m->idle, NULL);
	nrs_walgc_init(&m->walgc, svc);
	/* M6: the orphans are the intents there are before any thread runs */
	err = nrs_meta_obj_rows(svc->meta, 0, NRS_OBJ_PREPARED, &m->orphans,
				&m->norphans);
	if (err) {
		nrs_err("cannot read the object intents a stop or crash left: %s",
			strerror(-err));
		nrs_mat_stop(m);
		return err;
	}
	m->workers = calloc(m->o.threads, sizeof(*m->workers));
	if (!m->workers) {
		nrs_mat_stop(m);
		return -ENOMEM;
	}
	for (; m->nworkers < m->o.threads; m->nworkers++) {
		err = worker_start(m, &m->workers[m->nworkers]);
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
	pthread_cond_broadcast(&m->idle);
	pthread_mutex_unlock(&m->lock);
	for (unsigned int i = 0; i < m->nworkers; i++) {
		struct worker *w = &m->workers[i];

		pthread_join(w->builder, NULL);
		pthread_join(w->uploader, NULL);
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
	}
	nrs_walgc_destroy(&m->walgc);
	pthread_cond_destroy(&m->idle);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m->orphans);
	free(m->workers);
	free(m);
}
