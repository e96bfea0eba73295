/*
 * wal_object.c - the object WAL (DESIGN.md section 5, object-wal; issue
 * 15): a WAL provider (wal.h) whose segments are objects in an object
 * store (obj/objstore.h: the embedded directory store or S3).  An append
 * to an object-wal stream is acknowledged only once the object holding it
 * is stored and proven.
 *
 * SEGMENTS.  Every write() is one segment and one object: the batch the
 * pipeline wrote (the records of all object-wal streams it took, so a WAL
 * object is multi-stream), under a header.  A segment number is
 * run << 40 | seq: a run is one open of the WAL that wrote something
 * (numbered 1, 2, ... in the state file, OW6), seq counts its objects from
 * 1.  A position (seg, off) names byte off of the records of object seg.
 *
 * OBJECT FORMAT, key "owal/<run, 6 hex>/<seq, 10 hex>" (ow_key; ids and
 * counters only, never a user's name):
 *
 *   0   magic "NRSOWAL1"
 *   8   u32 version (1)
 *   12  u32 n_aband, at most 5
 *   16  u64 seg (run << 40 | seq; must match the key)
 *   24  u64 rec_len: bytes of records after the header
 *   32  u64 reserved, 0
 *   40  5 x { u64 lo, u64 hi }: segments recorded as abandoned (OW4),
 *       inclusive ranges; unused entries 0
 *   120 u32 CRC32C of bytes [0, 120)
 *   124 u32 reserved, 0
 *   128 records, back to back: walrec.c's format (each slice's commit
 *       intent -- stream id, base offset, length, epoch, previous commit --
 *       under a header CRC32C, and a CRC32C per 64 KiB block of payload)
 *
 * All integers little-endian.  The object's SHA-256 is stored with it as
 * the store's metadata (x-amz-meta-sha256; objstore.h).  A key is written
 * with one set of bytes only, ever: retries and re-PUTs send the same bytes.
 *
 * RULES
 *
 *  OW1 Proof.  sync(end) returns 0 only once every object of this run up
 *      to end.seg that was not cut is stored and proven by OB1 (objstore.h:
 *      HEAD shows the exact length and SHA-256 sent), and, if the owner
 *      gate is set, the gate still allows acknowledging (else -ESTALE,
 *      DESIGN I8).  A HEAD that shows other bytes under the key is a
 *      quarantine: the object is never used, logged, and the WAL refuses
 *      every later write and sync (-EIO, broken).
 *  OW2 Retry.  A PUT that fails, times out or is not proven is sent again,
 *      the same bytes under the same key, after a back-off (50 ms doubling
 *      to 2 s, with jitter), until proven -- also after its sync gave up:
 *      a sync waits at most timeout_ms from the object's write, then fails
 *      -ETIMEDOUT (the pipeline cuts it, OW4); the PUTs go on, so that a
 *      key that may hold the bytes ends up holding them for sure.
 *  OW3 A key is never reused.  Each run takes a new run number, recorded
 *      durably in the state file (OW6) before its first PUT; its seqs only
 *      grow.  A past run's PUT that lands late cannot hit a key of ours.
 *  OW4 Abandon.  cut(pos) marks every object from pos.seg on as abandoned:
 *      its appends failed, and it must never be published, even if its
 *      PUT lands later (by OW2).  Every abandoned range not yet recorded is
 *      written into the header of each later object, and it counts as
 *      recorded once one of those is proven -- so before any later append
 *      is acknowledged.  After a scan, the seqs a crashed run may still
 *      have had in flight (the inflight_max seqs above the last it left)
 *      are recorded abandoned the same way.  The scan (OW8) never returns
 *      a record of an object any found header names abandoned.
 *  OW5 Window.  At most inflight_max objects are unproven at a time (a
 *      write beyond waits, at most timeout_ms, then fails -ETIMEDOUT with
 *      nothing written).  So a run leaves at most inflight_max missing
 *      seqs at a crash, and the scan that probes inflight_max keys past
 *      the last object found has found every object of the run.
 *  OW7 Reclaim.  reclaim(below) first records durably (OW6) the new
 *      floor -- the lowest segment still held, at most below -- then
 *      deletes the objects under it.  An object still being PUT is kept
 *      (its key may yet be filled), and so holds the floor down.  A
 *      quarantined or damaged object is never deleted (an operator looks
 *      at it), but does not hold the floor.
 *
 * (OW6, the state file, and OW8, the scan, are in wal_object_scan.c.)
 *
 * READS: from the bytes in memory -- every object is kept until proven,
 * then while the proven ones take at most cache_bytes (oldest dropped
 * first) -- else a ranged GET of the key.  The reader verifies every
 * record's CRCs (reader.c), as it does for the local WAL (I6).
 *
 * THREADS: inflight_max workers PUT and prove objects (several flushes in
 * flight at once; the pipeline publishes their heads in log order, since
 * it syncs batches in order).  write() and cut() come from the commit
 * role, sync() from one thread at a time; lock guards the object list.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/clock.h"
#include "util/crc32c.h"
#include "util/failpoint.h"
#include "util/le.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"
#include "wal/wal_object_priv.h"

#define DEFAULT_INFLIGHT	8
#define DEFAULT_TIMEOUT_MS	30000
#define DEFAULT_CACHE		(64ull << 20)
#define BACKOFF_BASE_MS		50
#define BACKOFF_CAP_MS		2000

static struct wal_object *wo(struct nrs_wal *w)
{
	return (struct wal_object *)w;
}

void ow_key(char key[NRS_OBJKEY_MAX], uint64_t seg)
{
	snprintf(key, NRS_OBJKEY_MAX, "owal/%06" PRIx64 "/%010" PRIx64,
		 ow_run_of(seg), ow_seq_of(seg));
}

void ow_hdr_encode(const struct ow_hdr *h, unsigned char out[OW_HDR])
{
	memset(out, 0, OW_HDR);
	memcpy(out, OW_MAGIC, 8);
	nrs_le32_put(out + 8, OW_VERSION);
	nrs_le32_put(out + 12, h->n_aband);
	nrs_le64_put(out + 16, h->seg);
	nrs_le64_put(out + 24, h->rec_len);
	for (uint32_t i = 0; i < h->n_aband && i < OW_ABAND_MAX; i++) {
		nrs_le64_put(out + 40 + 16 * i, h->aband[i].lo);
		nrs_le64_put(out + 48 + 16 * i, h->aband[i].hi);
	}
	nrs_le32_put(out + 120, nrs_crc32c(0, out, 120));
}

int ow_hdr_decode(const unsigned char in[OW_HDR], struct ow_hdr *out)
{
	struct ow_hdr h = { 0 };

	if (memcmp(in, OW_MAGIC, 8) != 0 ||
	    nrs_le32_get(in + 120) != nrs_crc32c(0, in, 120) ||
	    nrs_le32_get(in + 8) != OW_VERSION)
		return -EBADMSG;
	h.n_aband = nrs_le32_get(in + 12);
	h.seg = nrs_le64_get(in + 16);
	h.rec_len = nrs_le64_get(in + 24);
	if (h.n_aband > OW_ABAND_MAX || nrs_le64_get(in + 32) != 0 ||
	    nrs_le32_get(in + 124) != 0 || ow_run_of(h.seg) == 0 ||
	    ow_seq_of(h.seg) == 0 || h.rec_len > UINT64_MAX - OW_HDR)
		return -EBADMSG;
	for (uint32_t i = 0; i < h.n_aband; i++) {
		h.aband[i].lo = nrs_le64_get(in + 40 + 16 * i);
		h.aband[i].hi = nrs_le64_get(in + 48 + 16 * i);
		if (h.aband[i].lo > h.aband[i].hi)
			return -EBADMSG;
	}
	*out = h;
	return 0;
}

void ow_insert(struct wal_object *w, struct ow_obj *o)
{
	struct ow_obj **pp = &w->head;

	if (w->tail && w->tail->seg < o->seg) {
		pp = &w->tail->next;
	} else {
		while (*pp && (*pp)->seg < o->seg)
			pp = &(*pp)->next;
	}
	o->next = *pp;
	*pp = o;
	if (!o->next)
		w->tail = o;
	w->held_bytes += o->size;
	if (o->seg > w->last_seg)
		w->last_seg = o->seg;
}

struct ow_obj *ow_find(struct wal_object *w, uint64_t seg)
{
	for (struct ow_obj *o = w->head; o && o->seg <= seg; o = o->next)
		if (o->seg == seg)
			return o;
	return NULL;
}

/* OW4: add [lo, hi] to the ranges not yet recorded, merging neighbours. */
int ow_pend_add(struct wal_object *w, uint64_t lo, uint64_t hi)
{
	for (unsigned int i = 0; i < w->n_pend; i++) {
		struct ow_range *r = &w->pend[i];

		if (lo <= r->hi + 1 && hi + 1 >= r->lo) {
			r->lo = lo < r->lo ? lo : r->lo;
			r->hi = hi > r->hi ? hi : r->hi;
			return 0;
		}
	}
	if (w->n_pend == OW_ABAND_MAX)
		return -EOVERFLOW;
	w->pend[w->n_pend++] = (struct ow_range){ lo, hi };
	return 0;
}

/* OW4: o is proven: the ranges its header carried are recorded. */
static void pend_recorded(struct wal_object *w, const struct ow_hdr *h)
{
	for (uint32_t k = 0; k < h->n_aband; k++) {
		for (unsigned int i = 0; i < w->n_pend; i++) {
			struct ow_range *r = &w->pend[i];

			if (h->aband[k].lo > r->lo || h->aband[k].hi < r->lo)
				continue;
			if (h->aband[k].hi >= r->hi) {
				w->pend[i] = w->pend[--w->n_pend];
				i--;
			} else {
				r->lo = h->aband[k].hi + 1;
			}
		}
	}
}

/* Drop the bytes of the oldest proven objects past cache_bytes. */
void ow_evict(struct wal_object *w)
{
	for (struct ow_obj *o = w->head;
	     o && w->cached_bytes > w->cache_bytes; o = o->next) {
		if (o->state != OW_PROVEN || !o->buf)
			continue;
		free(o->buf);
		o->buf = NULL;
		w->cached_bytes -= o->size;
	}
}

/* Sleep ms unless stopping (lock held); true if stopping. */
static bool nap(struct wal_object *w, unsigned int ms)
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
static void *worker(void *arg)
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
			if (nap(w, backoff_ms(attempt++)))
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

/* OW3, OW6: start this run (lock held). */
static int start_run(struct wal_object *w)
{
	uint64_t run = w->last_run + 1;
	int err;

	if (run > OW_RUN_MAX)
		return -EOVERFLOW;
	err = ow_state_write(w->state_path, w->dir, w->floor, run);
	if (err) {
		nrs_err("object WAL: cannot record run %" PRIu64 " in %s: %s",
			run, w->state_path, strerror(-err));
		return err;
	}
	w->run = w->last_run = run;
	w->next_seq = 1;
	return 0;
}

/* Wait until fewer than inflight_max objects are unproven (OW5). */
static int wait_window(struct wal_object *w, uint64_t deadline)
{
	while (w->unproven >= w->inflight_max && !w->broken && !w->stop) {
		if (nrs_now_mono_ns() >= deadline)
			return -ETIMEDOUT;
		(void)nap(w, 10);
	}
	if (w->broken)
		return -EIO;
	return w->stop ? -ESHUTDOWN : 0;
}

static int ow_write(struct nrs_wal *wal, const struct iovec *iov, int iovcnt,
		    struct nrs_wal_pos *pos)
{
	struct wal_object *w = wo(wal);
	uint64_t now = nrs_now_mono_ns(), len = 0;
	struct ow_hdr h = { 0 };
	struct ow_obj *o;
	unsigned char *p;
	int err;

	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SIZE_MAX - OW_HDR - len)
			return -EINVAL;
		len += iov[i].iov_len;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->buf = malloc(OW_HDR + len);
	if (!o->buf) {
		free(o);
		return -ENOMEM;
	}
	pthread_mutex_lock(&w->lock);
	err = w->broken ? -EIO : 0;
	if (!err && w->run == 0)
		err = start_run(w);
	if (!err)
		err = wait_window(w, now + w->timeout_ns);
	if (!err && w->next_seq > OW_SEQ_MAX)
		err = -EOVERFLOW;
	if (err) {
		pthread_mutex_unlock(&w->lock);
		free(o->buf);
		free(o);
		return err;
	}
	h.seg = ow_seg(w->run, w->next_seq++);
	h.rec_len = len;
	h.n_aband = w->n_pend;
	memcpy(h.aband, w->pend, sizeof(h.aband));
	pthread_mutex_unlock(&w->lock);

	ow_hdr_encode(&h, o->buf);
	p = o->buf + OW_HDR;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	o->seg = h.seg;
	o->size = OW_HDR + len;
	o->state = OW_PUTTING;
	o->t_write_ns = now;
	err = nrs_objfmt_digest(o->buf, o->size, o->sha256, NULL);

	pthread_mutex_lock(&w->lock);
	if (err) {
		/* the seq is never used: it is recorded abandoned (OW4) */
		(void)ow_pend_add(w, h.seg, h.seg);
		pthread_mutex_unlock(&w->lock);
		free(o->buf);
		free(o);
		return err;
	}
	w->unproven++;
	ow_insert(w, o);
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pos->seg = h.seg;
	pos->off = 0;
	return 0;
}

/* OW1: every object of this run up to end.seg, not cut, is proven. */
static int ow_sync(struct nrs_wal *wal, struct nrs_wal_pos end)
{
	struct wal_object *w = wo(wal);
	int err = 0;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct ow_obj *wait = NULL;

		if (w->broken) {
			err = -EIO;
			break;
		}
		for (struct ow_obj *o = w->head; o && o->seg <= end.seg;
		     o = o->next) {
			if (o->abandoned || ow_run_of(o->seg) != w->run)
				continue;
			if (o->state != OW_PROVEN) {
				wait = o;
				break;
			}
		}
		if (!wait)
			break;
		if (nrs_now_mono_ns() >= wait->t_write_ns + w->timeout_ns) {
			err = -ETIMEDOUT;
			break;
		}
		if (nap(w, 5)) {
			err = -ESHUTDOWN;
			break;
		}
	}
	pthread_mutex_unlock(&w->lock);
	if (!err && w->may_ack && !w->may_ack(w->may_ack_ctx))
		err = -ESTALE;			/* OW1, I8 */
	return err;
}

/* OW4 */
static int ow_cut(struct nrs_wal *wal, struct nrs_wal_pos pos, int why)
{
	struct wal_object *w = wo(wal);
	uint64_t lo = UINT64_MAX, hi = 0;
	int err = 0;

	pthread_mutex_lock(&w->lock);
	for (struct ow_obj *o = w->head; o; o = o->next) {
		if (o->seg < pos.seg || o->abandoned)
			continue;
		o->abandoned = true;
		lo = o->seg < lo ? o->seg : lo;
		hi = o->seg > hi ? o->seg : hi;
	}
	if (lo <= hi) {
		err = ow_pend_add(w, lo, hi);
		if (err)
			w->broken = true;	/* cannot record it: refuse */
		nrs_warn("object WAL: objects %016" PRIx64 "-%016" PRIx64
			 " abandoned (%s); the next object records it", lo, hi,
			 strerror(-why));
	}
	pthread_mutex_unlock(&w->lock);
	return err ? -EIO : 0;
}

static ssize_t ow_read(struct nrs_wal *wal, struct nrs_wal_pos pos, void *buf,
		       size_t len)
{
	struct wal_object *w = wo(wal);
	char key[NRS_OBJKEY_MAX];
	struct ow_obj *o;

	if (pos.off > UINT64_MAX - OW_HDR)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	o = ow_find(w, pos.seg);
	if (o && o->buf) {
		uint64_t at = OW_HDR + pos.off;
		size_t n = at >= o->size ? 0 : (size_t)(o->size - at);

		if (n > len)
			n = len;
		memcpy(buf, o->buf + at, n);
		pthread_mutex_unlock(&w->lock);
		return (ssize_t)n;
	}
	pthread_mutex_unlock(&w->lock);
	ow_key(key, pos.seg);
	return nrs_obj_get(w->store, key, OW_HDR + pos.off, buf, len);
}

/* Every object the scan returned is in the store and proven (OW8). */
static int ow_sync_all(struct nrs_wal *wal)
{
	(void)wal;
	return 0;
}

static void ow_stats(struct nrs_wal *wal, struct nrs_wal_stats *out)
{
	struct wal_object *w = wo(wal);

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&w->lock);
	out->bytes = w->held_bytes;
	for (struct ow_obj *o = w->head; o; o = o->next)
		out->segments++;
	out->last_seg = w->last_seg;
	out->broken = w->broken;
	pthread_mutex_unlock(&w->lock);
}

/* OW7 */
static int ow_reclaim(struct nrs_wal *wal, uint64_t below, uint64_t *bytes)
{
	struct wal_object *w = wo(wal);
	struct ow_obj *gone = NULL, **pp;
	uint64_t floor = below;
	int n = 0, err;

	*bytes = 0;
	pthread_mutex_lock(&w->lock);
	for (struct ow_obj *o = w->head; o && o->seg < below; o = o->next)
		if (o->state == OW_PUTTING && o->seg < floor)
			floor = o->seg;
	if (floor <= w->floor) {
		pthread_mutex_unlock(&w->lock);
		return 0;
	}
	err = ow_state_write(w->state_path, w->dir, floor, w->last_run);
	if (err) {
		pthread_mutex_unlock(&w->lock);
		nrs_warn("object WAL: cannot record floor %016" PRIx64 " in %s:"
			 " %s", floor, w->state_path, strerror(-err));
		return err;
	}
	w->floor = floor;
	pp = &w->head;
	while (*pp && (*pp)->seg < floor) {
		struct ow_obj *o = *pp;

		*pp = o->next;
		w->held_bytes -= o->size;
		if (o->buf)
			w->cached_bytes -= o->size;
		o->next = gone;
		gone = o;
	}
	if (!w->head)
		w->tail = NULL;
	pthread_mutex_unlock(&w->lock);
	while (gone) {
		struct ow_obj *o = gone;
		char key[NRS_OBJKEY_MAX];

		gone = o->next;
		ow_key(key, o->seg);
		err = o->state == OW_PROVEN ? nrs_obj_del(w->store, key) : 0;
		if (err)	/* below the floor: an orphan fsck names */
			nrs_warn("object WAL: delete of %s: %s", key,
				 strerror(-err));
		if (o->state == OW_PROVEN) {
			*bytes += o->size;
			n++;
		}
		free(o->buf);
		free(o);
	}
	return n;
}

/* Every write is a segment of its own: nothing to seal. */
static int ow_seal(struct nrs_wal *wal, uint64_t seg)
{
	(void)wal;
	(void)seg;
	return 0;
}

static void ow_close(struct nrs_wal *wal)
{
	struct wal_object *w = wo(wal);
	uint64_t deadline = nrs_now_mono_ns() + w->timeout_ns;

	pthread_mutex_lock(&w->lock);
	/* a clean close lets PUTs in flight finish (OW2), within a deadline */
	while (w->unproven > 0 && !w->broken &&
	       nrs_now_mono_ns() < deadline)
		(void)nap(w, 10);
	if (w->unproven > 0)
		nrs_warn("object WAL: closing with %u objects not proven",
			 w->unproven);
	w->stop = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (unsigned int i = 0; i < w->nworkers; i++)
		pthread_join(w->workers[i], NULL);
	while (w->head) {
		struct ow_obj *o = w->head;

		w->head = o->next;
		free(o->buf);
		free(o);
	}
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w->workers);
	free(w->state_path);
	free(w->dir);
	free(w);
}

static const struct nrs_wal_ops object_ops = {
	.name = "object-wal",
	.async = true,
	.write = ow_write,
	.sync = ow_sync,
	.cut = ow_cut,
	.read = ow_read,
	.scan = ow_scan,
	.sync_all = ow_sync_all,
	.stats = ow_stats,
	.reclaim = ow_reclaim,
	.seal = ow_seal,
	.close = ow_close,
};

int nrs_wal_object_open(const struct nrs_wal_object_opts *o,
			struct nrs_wal **out)
{
	struct wal_object *w;
	char path[4096];
	int err;

	if (!o->store || !o->dir)
		return -EINVAL;
	if (snprintf(path, sizeof(path), "%s/state", o->dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->base.ops = &object_ops;
	w->store = o->store;
	w->inflight_max = o->inflight_max ? o->inflight_max : DEFAULT_INFLIGHT;
	w->timeout_ns = (o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS) *
			1000000ull;
	w->cache_bytes = o->cache_bytes ? o->cache_bytes : DEFAULT_CACHE;
	w->may_ack = o->may_ack;
	w->may_ack_ctx = o->may_ack_ctx;
	w->metrics = o->metrics;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->state_path = strdup(path);
	w->dir = strdup(o->dir);
	w->workers = calloc(w->inflight_max, sizeof(*w->workers));
	err = !w->state_path || !w->dir || !w->workers ? -ENOMEM : 0;
	if (!err && mkdir(o->dir, 0700) < 0 && errno != EEXIST)
		err = -errno;
	if (!err)
		err = ow_state_read(w->state_path, &w->floor, &w->last_run);
	for (unsigned int i = 0; !err && i < w->inflight_max; i++) {
		err = -pthread_create(&w->workers[i], NULL, worker, w);
		if (!err)
			w->nworkers++;
	}
	if (err) {
		nrs_err("cannot open the object WAL in %s: %s", o->dir,
			strerror(-err));
		ow_close(&w->base);
		return err;
	}
	*out = &w->base;
	return 0;
}
