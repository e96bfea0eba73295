/*
 * wal_object_put.c - the object WAL's workers (wal_object.c has the format
 * and the rules): each takes the oldest sealed object no one PUTs and
 * PUTs it until HEAD proves it (OW1, by objstore.h OB1) or shows other
 * bytes under its key (a quarantine), sending the same bytes again after
 * a back-off for as long as it takes (OW2) -- also after the sync that
 * waited for it gave up -- until the WAL stops.
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
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal_object_priv.h"

#define BACKOFF_BASE_MS		50	/* OW2 */
#define BACKOFF_CAP_MS		2000

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

/* Sleep ms unless stopping (lock held); true if stopping. */
bool ow_nap(struct wal_object *w, unsigned int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	while (!w->stop)
		if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT)
			break;
	return w->stop;
}

static unsigned int backoff_ms(unsigned int attempt)
{
	unsigned int d = BACKOFF_BASE_MS;

	while (attempt-- > 0 && d < BACKOFF_CAP_MS)
		d *= 2;
	if (d > BACKOFF_CAP_MS)
		d = BACKOFF_CAP_MS;
	return d / 2 + (unsigned int)random() % (d / 2 + 1);
}

/* One PUT and its proof (OW1, OB1); no lock held. */
static enum nrs_put_verdict put_once(struct wal_object *w, struct ow_obj *o,
				     int *perr, int *herr,
				     struct nrs_obj_meta *got)
{
	unsigned char md5[NRS_MD5_LEN];
	bool want_md5 = nrs_obj_wants_md5(w->store);
	char key[NRS_OBJKEY_MAX];

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
	return nrs_put_decide(*herr, got, o->size, o->sha256);
}

/* OW1, OW2: a worker takes the oldest object no one PUTs, until proven. */
void *ow_worker(void *arg)
{
	struct wal_object *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		struct ow_obj *o;
		unsigned int attempt = 0;

		for (o = w->head; o; o = o->next)
			if (o->state == OW_PUTTING && !o->taken)
				break;
		if (!o) {
			pthread_cond_wait(&w->cond, &w->lock);
			continue;
		}
		o->taken = true;
		for (;;) {
			struct nrs_obj_meta got = { 0 };
			enum nrs_put_verdict v;
			char key[NRS_OBJKEY_MAX];
			uint64_t t0 = nrs_now_mono_ns();
			int perr, herr;

			pthread_mutex_unlock(&w->lock);
			v = put_once(w, o, &perr, &herr, &got);
			ow_key(key, o->seg);
			pthread_mutex_lock(&w->lock);
			if (w->metrics)
				nrs_hist_observe(&w->metrics->owal_put_us,
					     (nrs_now_mono_ns() - t0) / 1000);
			if (v == NRS_PUT_PROVEN) {
				struct ow_hdr h;

				o->state = OW_PROVEN;
				if (ow_hdr_decode(o->buf, &h) == 0)
					pend_recorded(w, &h);
				w->cached_bytes += o->size;
				if (w->metrics) {
					nrs_count(&w->metrics->owal_objects, 1);
					nrs_count(&w->metrics->owal_bytes,
						  o->size);
				}
				break;
			}
			if (v == NRS_PUT_QUARANTINE) {
				nrs_err("object WAL: %s holds %" PRIu64 " bytes"
					" %s, not the %" PRIu64 " sent: "
					"quarantined, never used; the object WAL"
					" refuses appends until a remount", key,
					got.length, got.has_sha256 ?
					"with another SHA-256" : "without a SHA-256",
					o->size);
				o->state = OW_BAD;
				w->broken = true;
				break;
			}
			if (w->metrics)
				nrs_count(&w->metrics->owal_retries, 1);
			if (attempt % 10 == 0)
				nrs_warn("object WAL: %s not proven (PUT: %s, "
					 "HEAD: %s); retrying with back-off",
					 key, perr ? strerror(-perr) : "ok",
					 herr ? strerror(-herr) : "other bytes");
			if (ow_nap(w, backoff_ms(attempt++)))
				break;
		}
		o->taken = false;
		if (o->state != OW_PUTTING)
			w->unproven--;
		ow_evict(w);
		pthread_cond_broadcast(&w->cond);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}
