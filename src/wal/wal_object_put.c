/*
 * wal_object_put.c - the object WAL's workers (wal_object.c has the format
 * and the rules): each takes the oldest sealed object no one PUTs and
 * PUTs it until HEAD proves it (OW1, by objstore.h OB1) or shows other
 * bytes under its key (a quarantine), sending the same bytes again after
 * a back-off for as long as it takes (OW2) -- also after the sync that
 * waited for it gave up -- until the WAL stops.
 *
 *  OW12 Quarantine needs two opinions.  A store whose PUT is not atomic
 *      on overwrite (s3rver writes the file in place) can show a HEAD
 *      the bytes of a PUT of ours half written -- a hedge, or the retry
 *      of a PUT whose answer was lost.  So other bytes under the key
 *      quarantine the object only when two attempts in a row (PUT, then
 *      HEAD) saw them and no other PUT of ours of that key is under way;
 *      else it is sent again.  A key holding another writer's bytes is
 *      still refused for good.
 *  OW10 Hedge.  The tail latency of object stores is long: a PUT that has
 *      run longer than srtt + 4 * rttvar of the PUTs proven so far (at
 *      least 20 ms; none before 8 were measured) gets a second, identical
 *      PUT of the same key by a free worker.  That is safe because a key
 *      never holds other bytes (OW3): whichever is proven first settles
 *      the object, the other's answer is then ignored; a hedge that fails
 *      is not retried (the first PUT is).  Both read the object's bytes,
 *      which are not freed while a worker uses them (users).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/backoff.h"
#include "util/clock.h"
#include "util/crc32c.h"
#include "util/failpoint.h"
#include "util/le.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal_object_priv.h"

#define BACKOFF_BASE_MS		50	/* OW2 */
#define BACKOFF_CAP_MS		2000
#define HEDGE_MIN_MS		20	/* OW10 */
#define HEDGE_SAMPLES		8

/* OW4: o is proven: the ranges its header carried are recorded. */
static void pend_recorded(struct wal_object *w, const struct ow_hdr *h)
{
	for (uint32_t k = 0; k < h->n_aband; k++) {
		const struct ow_range *c = &h->aband[k];

		for (unsigned int i = 0; i < w->n_pend; i++) {
			struct ow_range *r = &w->pend[i];

			if (c->lo_seg != r->lo_seg || c->lo_off != r->lo_off)
				continue;
			if (c->hi_seg >= r->hi_seg) {
				w->pend[i] = w->pend[--w->n_pend];
				i--;
			} else {
				r->lo_seg = c->hi_seg + 1;
				r->lo_off = 0;
			}
		}
	}
}

void ow_wait_until(struct wal_object *w, pthread_cond_t *cv,
		   uint64_t deadline)
{
	struct timespec ts;

	if (w->stop)
		return;
	if (deadline == UINT64_MAX) {
		pthread_cond_wait(cv, &w->lock);
		return;
	}
	ts.tv_sec = (time_t)(deadline / 1000000000u);
	ts.tv_nsec = (long)(deadline % 1000000000u);
	(void)pthread_cond_timedwait(cv, &w->lock, &ts);
}

/* Sleep ms unless stopping (lock held); true if stopping. */
bool ow_nap(struct wal_object *w, unsigned int ms)
{
	uint64_t until = nrs_now_mono_ns() + ms * 1000000ull;

	while (!w->stop && nrs_now_mono_ns() < until)
		ow_wait_until(w, &w->nap, until);
	return w->stop;
}

/* OW2, OW19: a worker's back-off, cut short once o is settled (by a
 * hedge: its worker is free at once) or the WAL stops; true if stopping. */
static bool backoff_wait(struct wal_object *w, struct ow_obj *o,
			 unsigned int ms)
{
	uint64_t until = nrs_now_mono_ns() + ms * 1000000ull;

	while (!w->stop && o->state == OW_PUTTING &&
	       nrs_now_mono_ns() < until)
		ow_wait_until(w, &w->done, until);
	return w->stop;
}

static unsigned int backoff_ms(unsigned int attempt)
{
	static __thread unsigned int seed;

	if (!seed)
		seed = (unsigned int)nrs_now_mono_ns() | 1;
	return (unsigned int)nrs_backoff_jitter_ms(attempt, BACKOFF_BASE_MS,
						   BACKOFF_CAP_MS, &seed);
}

/* One PUT and its proof (OW1, OB1); no lock held. */
static enum nrs_put_verdict put_once(struct wal_object *w, struct ow_obj *o,
				     int *perr, int *herr,
				     struct nrs_obj_meta *got)
{
	unsigned char md5[NRS_MD5_LEN];
	bool want_md5 = nrs_obj_wants_md5(w->store);
	char key[NRS_OBJKEY_MAX];
	enum nrs_put_verdict v;

	ow_key(key, o->seg);
	*perr = nrs_failpoint(NRS_FP_OWAL_BEFORE_PUT);
	if (!*perr && want_md5)
		*perr = nrs_objfmt_digest(o->buf, o->size, NULL, md5);
	if (!*perr)
		*perr = nrs_obj_put(w->store, key, o->buf, o->size,
				    want_md5 ? md5 : NULL, o->sha256);
	if (!*perr)
		*perr = nrs_failpoint(NRS_FP_OWAL_AFTER_PUT);
	*herr = nrs_obj_head(w->store, key, got);
	v = nrs_put_decide(*herr, got, o->size, o->sha256);
	if (v == NRS_PUT_PROVEN && nrs_failpoint(NRS_FP_OWAL_AFTER_PROOF))
		v = NRS_PUT_LATER;	/* as if the HEAD's answer were lost */
	return v;
}

/*
 * OW10: the hedge delay, from the PUT latencies measured so far (lock
 * held): srtt + 4 * rttvar (RFC 6298's retransmission timer, over PUT +
 * HEAD), at least HEDGE_MIN_MS; none until HEDGE_SAMPLES were measured.
 */
static uint64_t hedge_ns(const struct wal_object *w)
{
	uint64_t d;

	if (w->lat_samples < HEDGE_SAMPLES)
		return UINT64_MAX;
	d = w->srtt_ns + 4 * w->rttvar_ns;
	return d < HEDGE_MIN_MS * 1000000ull ? HEDGE_MIN_MS * 1000000ull : d;
}

/* Fold one proven PUT's latency into srtt and rttvar (lock held). */
static void measured(struct wal_object *w, uint64_t ns)
{
	uint64_t dev;

	if (w->lat_samples++ == 0) {
		w->srtt_ns = ns;
		w->rttvar_ns = ns / 2;
		return;
	}
	dev = ns > w->srtt_ns ? ns - w->srtt_ns : w->srtt_ns - ns;
	w->rttvar_ns = w->rttvar_ns - w->rttvar_ns / 4 + dev / 4;
	w->srtt_ns = w->srtt_ns - w->srtt_ns / 8 + ns / 8;
}

/* The object a free worker takes (lock held): the oldest no one PUTs, or
 * one whose PUT has run past the hedge delay and has no hedge yet.  With
 * none, *due is when a PUT in flight may need a hedge (UINT64_MAX: none
 * in flight, wait for work). */
static struct ow_obj *next_job(struct wal_object *w, bool *hedge,
			       uint64_t *due_out)
{
	uint64_t now = nrs_now_mono_ns(), after = hedge_ns(w);
	uint64_t soonest = UINT64_MAX;

	*due_out = UINT64_MAX;
	for (struct ow_obj *o = w->unp; o; o = o->unp_next) {	/* OW17 */
		uint64_t due;

		if (o->state != OW_PUTTING)
			continue;
		if (!o->taken) {
			*hedge = false;
			return o;
		}
		if (o->hedged || after == UINT64_MAX)
			continue;
		due = o->t_attempt_ns + after;
		if (now >= due) {
			*hedge = true;
			return o;
		}
		if (due < soonest)
			soonest = due;
	}
	*due_out = soonest;
	return NULL;
}

/* o has a verdict (lock held): the first one counts. */
static void settle(struct wal_object *w, struct ow_obj *o, enum ow_state to)
{
	struct ow_hdr h;

	o->state = to;
	ow_unp_del(w, o);				/* OW17 */
	if (to == OW_PROVEN) {
		if (ow_hdr_decode(o->buf, &h) == 0)
			pend_recorded(w, &h);
		w->cached_bytes += o->size;
		if (w->stored)
			w->stored(w->stored_ctx, o->size);
		if (w->metrics) {
			nrs_count(&w->metrics->owal_objects, 1);
			nrs_count(&w->metrics->owal_bytes, o->size);
		}
	} else {
		w->broken = true;
	}
	pthread_cond_broadcast(&w->done);		/* OW19 */
}

/* OW1, OW2, OW10: a worker PUTs an object until it is proven. */
void *ow_worker(void *arg)
{
	struct wal_object *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		unsigned int attempt = 0, other = 0;
		struct ow_obj *o;
		bool hedge = false;
		uint64_t due;

		o = next_job(w, &hedge, &due);
		if (!o) {
			ow_wait_until(w, &w->work, due);	/* OW19 */
			continue;
		}
		if (hedge) {
			o->hedged = true;
			if (w->metrics)
				nrs_count(&w->metrics->owal_hedges, 1);
		} else {
			o->taken = true;
			/* OW19: an idle worker takes this one's place as the
			 * watch for lateness (OW10), or the next job */
			if (hedge_ns(w) != UINT64_MAX || o->unp_next)
				pthread_cond_signal(&w->work);
		}
		o->users++;
		while (o->state == OW_PUTTING) {
			struct nrs_obj_meta got = { 0 };
			enum nrs_put_verdict v;
			char key[NRS_OBJKEY_MAX];
			uint64_t t0 = nrs_now_mono_ns();
			int perr, herr;

			if (!hedge)
				o->t_attempt_ns = t0;
			pthread_mutex_unlock(&w->lock);
			v = put_once(w, o, &perr, &herr, &got);
			ow_key(key, o->seg);
			pthread_mutex_lock(&w->lock);
			if (w->metrics)
				nrs_hist_observe(&w->metrics->owal_put_us,
					     (nrs_now_mono_ns() - t0) / 1000);
			if (o->state != OW_PUTTING)
				break;		/* the other PUT settled it */
			if (v == NRS_PUT_PROVEN) {
				measured(w, nrs_now_mono_ns() - t0);
				settle(w, o, OW_PROVEN);
				break;
			}
			/* OW12: other bytes twice in a row, and no PUT of
			 * ours under way beside this one */
			if (v == NRS_PUT_QUARANTINE &&
			    (++other < 2 || o->users > 1))
				v = NRS_PUT_AGAIN;
			else if (v != NRS_PUT_QUARANTINE)
				other = 0;
			if (v == NRS_PUT_QUARANTINE) {
				nrs_err("object WAL: %s holds %" PRIu64 " bytes"
					" %s, not the %" PRIu64 " sent: "
					"quarantined, never used; the object WAL"
					" refuses appends until a remount", key,
					got.length, got.has_sha256 ?
					"with another SHA-256" : "without a SHA-256",
					o->size);
				settle(w, o, OW_BAD);
				break;
			}
			if (hedge)
				break;		/* the first PUT goes on retrying */
			if (w->metrics)
				nrs_count(&w->metrics->owal_retries, 1);
			if (attempt % 10 == 0)
				nrs_warn("object WAL: %s not proven (PUT: %s, "
					 "HEAD: %s); retrying with back-off",
					 key, perr ? strerror(-perr) : "ok",
					 herr ? strerror(-herr) : "other bytes");
			if (backoff_wait(w, o, backoff_ms(attempt++)))
				break;
		}
		o->users--;
		if (hedge)
			o->hedged = false;
		else
			o->taken = false;
		if (o->state == OW_PUTTING)		/* OW19: free to hedge */
			pthread_cond_signal(&w->work);
		ow_evict(w);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

void ow_marker_encode(uint64_t run, unsigned char out[OW_MARKER_LEN])
{
	memset(out, 0, OW_MARKER_LEN);
	memcpy(out, "NRSOWRN1", 8);
	nrs_le64_put(out + 8, run);
	nrs_le32_put(out + 24, nrs_crc32c(0, out, 24));
}

int ow_put_marker(struct wal_object *w, uint64_t run, uint64_t deadline)
{
	unsigned char buf[OW_MARKER_LEN], sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	bool want_md5 = nrs_obj_wants_md5(w->store);
	char key[NRS_OBJKEY_MAX];
	unsigned int attempt = 0;
	int err;

	ow_marker_encode(run, buf);
	ow_key(key, ow_seg(run, 0));
	err = nrs_objfmt_digest(buf, sizeof(buf), sha, want_md5 ? md5 : NULL);
	if (err)
		return err;
	for (;;) {
		struct nrs_obj_meta got = { 0 };
		enum nrs_put_verdict v;
		int perr, herr;

		perr = nrs_obj_put(w->store, key, buf, sizeof(buf),
				   want_md5 ? md5 : NULL, sha);
		herr = nrs_obj_head(w->store, key, &got);
		v = nrs_put_decide(herr, &got, sizeof(buf), sha);
		if (v == NRS_PUT_PROVEN)
			return 0;
		if (v == NRS_PUT_QUARANTINE) {
			nrs_err("object WAL: %s holds other bytes: another daemon"
				" writes this bucket's object WAL; appends of "
				"object-wal streams fail", key);
			return -EIO;
		}
		if (nrs_now_mono_ns() >= deadline) {
			nrs_warn("object WAL: marker %s not stored (PUT: %s, "
				 "HEAD: %s)", key, perr ? strerror(-perr) : "ok",
				 herr ? strerror(-herr) : "other bytes");
			return -ETIMEDOUT;
		}
		pthread_mutex_lock(&w->lock);
		(void)ow_nap(w, backoff_ms(attempt++));
		pthread_mutex_unlock(&w->lock);
	}
}
