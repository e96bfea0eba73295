/*
 * wal_object.c - the object WAL (DESIGN.md section 5, object-wal; issue
 * 15): a WAL provider (wal.h) whose segments are objects in an object
 * store (obj/objstore.h: the embedded directory store or S3).  An append
 * to an object-wal stream is acknowledged only once the object holding it
 * is stored and proven.
 *
 * SEGMENTS.  A segment is one object: the batches the pipeline wrote
 * (the records of every object-wal stream it took, so a WAL object is
 * multi-stream) while it was open, under a header (OW9).  A segment number
 * is run << 40 | seq: a run is one open of the WAL that wrote something
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
 *   40  5 x { u64 lo_seg, u64 lo_off, u64 hi_seg }: records abandoned
 *       (OW4), every one at a position >= (lo_seg, lo_off) in a segment
 *       <= hi_seg; unused entries 0
 *   160 u32 CRC32C of bytes [0, 160)
 *   164 28 bytes reserved, 0
 *   192 records, back to back: walrec.c's format (each slice's commit
 *       intent -- stream id, base offset, length, epoch, previous commit --
 *       under a header CRC32C, and a CRC32C per 64 KiB block of payload)
 *
 * All integers little-endian.  The object's SHA-256 is stored with it as
 * the store's metadata (x-amz-meta-sha256; objstore.h).  A key is written
 * with one set of bytes only, ever: retries and re-PUTs send the same bytes.
 *
 * THE KEYS of the object WAL, each written once and never rewritten (the
 * only keys of the bucket ever rewritten are the owner record, "owner",
 * and the checkpoint pointer, "ckpt/latest"):
 *   owal/<run>/<seq>          a WAL object, above
 *   owal/<run>/0000000000     the run's marker (OW11)
 *   owal/<run>/seal           the run's seal, written by the first scan
 *                             after the run, before anything is published
 *                             from it: where the run ends (its last seq,
 *                             and the seqs below that it never stored); an
 *                             object of the run that lands later is
 *                             ignored by every scan (wal_object_seal.c has
 *                             its format and SL1-SL4)
 *
 * RULES
 *
 *  OW1 Proof.  sync(end) returns 0 only once every object of this run up
 *      to end.seg not wholly cut is stored and proven by OB1 (objstore.h:
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
 *  OW4 Abandon.  cut(pos) drops what is still in the open object from
 *      pos on (nothing of it was sent), and marks every record from pos
 *      on in objects already sealed as abandoned: their appends failed,
 *      and they must never be published, even if a PUT lands later (by
 *      OW2).  Every abandoned range not yet recorded is written into the
 *      header of each object sealed later, and counts as recorded once one
 *      of those is proven -- so before any later append is acknowledged.
 *      After a scan, the seqs a crashed run may still have had in flight
 *      (the inflight_max seqs above the last it left) are recorded
 *      abandoned the same way.  The scan (OW8) never returns a record that
 *      a range of any found header names.
 *  OW5 Window.  At most inflight_max objects are unproven at a time (a
 *      write beyond waits, at most timeout_ms, then fails -ETIMEDOUT with
 *      nothing written).  So a run leaves at most inflight_max missing
 *      seqs at a crash, and the scan that probes inflight_max keys past
 *      the last object found has found every object of the run.
 *  OW11 Runs are found without a listing.  Before the first object of a
 *      run, its marker -- key "owal/RUN/0000000000" (seq 0, which no
 *      object takes), 32 bytes: "NRSOWRN1", u64 run, u64 0, u32 CRC32C of
 *      [0, 24), u32 0 -- is stored and proven like an object (OW1, OW2).
 *      A scan (OW8) goes on past the last run its state file names for as
 *      long as markers are found (a gap of fewer than OW_RUN_PROBE missing
 *      markers is crossed: a crash between the state file's update and the
 *      marker's PUT leaves one), so a host that knows only an old floor
 *      (a checkpoint's) finds every later run.  Markers are not deleted.
 *  OW9 Flush.  Batches go into the open object until it holds
 *      flush_bytes (a batch never spans two objects), or until the sync
 *      of one of them finds the linger over (OW13): then it is sealed --
 *      its header made, its SHA-256 computed -- and PUT.  Several objects
 *      are PUT at once (OW5); the pipeline syncs batches in log order, so
 *      heads are published in log order whatever order the PUTs end in.
 *  OW13 A lone writer does not linger.  While the object sealed last
 *      held a single append (one batch of one record whose header says
 *      n_appends 1; or none was sealed yet), the linger counts from that
 *      seal rather than from the open object's first write: a sync seals
 *      the open object once linger_ms have passed since the previous
 *      seal.  So a lone writer's append, whose previous append waited for
 *      its PUT and proof, is PUT at once.  Once an object held two
 *      appends or more, writers are sharing objects and the next one
 *      lingers linger_ms from its first write (OW9) again: an object
 *      opened under load gathers as many appends as before.  Either way
 *      objects that are not full are sealed one per linger_ms at most,
 *      the PUT rate a long linger (the cost profile's 200 ms) is chosen
 *      for.
 *  OW15 A call that appends nothing does not linger.  While the open
 *      object holds no appended byte -- only META records (a namespace
 *      or xattr change, core_metalog.c NS1) and records of no bytes (a
 *      fence, pipeline.c PL9) -- and no other object of the run is
 *      unproven, a sync seals it at once: the call waits on its record,
 *      with nothing to share an object with.  While one is unproven, the
 *      changes of concurrent callers gather in the open object as before
 *      (OW9, OW13), and the sync that finds the last unproven one proven
 *      seals them together: one PUT per PUT latency, whatever the linger.
 *      Such batches count as no append for OW13.  (Namespace changes are
 *      few beside appends; before the change log each cost a checkpoint
 *      PUT, so the cost profile's PUT rate is not worse than it was.)
 *  OW17 The unproven are a list of their own.  Every object from its seal
 *      (OW9) until its verdict (proven, or quarantined) is on w->unp as
 *      well, in seg order: a sync waits on the first needed object there
 *      (or on the open one, cut to nothing, OW4), and a worker takes its
 *      job from there (OW10), so neither walks the objects held, which
 *      with materialization behind are thousands.  An object on the list
 *      is never freed: a reclaim keeps what is being PUT (OW7).
 *  OW19 A change wakes who waits for it, and no waiter polls.  Three
 *      condition variables under lock (CLOCK_MONOTONIC): "work" is
 *      signalled, one idle worker, when an object is sealed, and when a
 *      worker takes one while hedges are on (an idle worker then watches
 *      the PUTs in flight, until the first one's hedge delay, OW10);
 *      "done" is broadcast when an object is settled (proven or
 *      quarantined), cut (OW4), the WAL is broken, or the open object
 *      gets its first bytes: the sync, a write waiting for the window
 *      (OW5), a worker's back-off (OW2: a hedge may settle its object)
 *      and the close wait on it, each until its own deadline (the
 *      linger, the timeout) and no longer; "nap" only for the stop, for
 *      back-offs of markers and seals.  Each waiter checks what it waits
 *      for under lock before it waits, and each change is made under
 *      lock, so none is lost.
 *  OW20 A sync does not hold back the open object behind it.  The
 *      pipeline syncs one segment after the other (one thread), so while
 *      a sync waits for older objects to be proven, the batches written
 *      since sit in the open object, which only the next sync would seal.
 *      So a sync that waits also seals the open object past its end once
 *      that one's linger is over (OW9, OW13) and the window has room
 *      (OW5; it never waits for the window on the newer one's behalf):
 *      objects not full are PUT one linger apart, several at once, not
 *      one PUT and proof apart.  Only the PUT starts earlier: nothing is
 *      acknowledged before its own sync finds it proven (OW1), and a cut
 *      of those batches marks them abandoned (OW4) rather than dropping
 *      them.
 *
 * (The append path, OW3-OW5, OW9, OW13 and OW15, is in wal_object_append.c;
 * OW6, the state file, and OW8, the scan, are in wal_object_scan.c; the
 * workers that PUT, OW1's proof and OW2's retries, in wal_object_put.c;
 * the reclaim, OW7, OW18 and its grace period OWG1-OWG2, in wal_object_gc.c;
 * the seal of a past run, SL1-SL4, in wal_object_seal.c.)
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
#include "util/fileio.h"
#include "util/le.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/sat.h"
#include "wal/wal.h"
#include "wal/wal_object_priv.h"
#include "wal/walrec.h"

#define DEFAULT_INFLIGHT	8
#define DEFAULT_TIMEOUT_MS	30000
#define DEFAULT_CACHE		(64ull << 20)

static struct wal_object *wo(struct nrs_wal *w)
{
	return (struct wal_object *)w;
}

_Static_assert(OW_HDR == NRS_WAL_OBJECT_HDR, "wal.h names the header size");

void ow_key(char key[NRS_OBJKEY_MAX], uint64_t seg)
{
	snprintf(key, NRS_OBJKEY_MAX, "owal/%06" PRIx64 "/%010" PRIx64,
		 ow_run_of(seg), ow_seq_of(seg));
}

void nrs_wal_object_key(char *key, uint64_t seg)
{
	ow_key(key, seg);
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
		nrs_le64_put(out + 40 + 24 * i, h->aband[i].lo_seg);
		nrs_le64_put(out + 48 + 24 * i, h->aband[i].lo_off);
		nrs_le64_put(out + 56 + 24 * i, h->aband[i].hi_seg);
	}
	nrs_le32_put(out + 160, nrs_crc32c(0, out, 160));
}

int ow_hdr_decode(const unsigned char in[OW_HDR], struct ow_hdr *out)
{
	struct ow_hdr h = { 0 };

	if (memcmp(in, OW_MAGIC, 8) != 0 ||
	    nrs_le32_get(in + 160) != nrs_crc32c(0, in, 160) ||
	    nrs_le32_get(in + 8) != OW_VERSION)
		return -EBADMSG;
	for (size_t i = 164; i < OW_HDR; i++)
		if (in[i] != 0)
			return -EBADMSG;
	h.n_aband = nrs_le32_get(in + 12);
	h.seg = nrs_le64_get(in + 16);
	h.rec_len = nrs_le64_get(in + 24);
	if (h.n_aband > OW_ABAND_MAX || nrs_le64_get(in + 32) != 0 ||
	    ow_run_of(h.seg) == 0 || ow_seq_of(h.seg) == 0 ||
	    h.rec_len > UINT64_MAX - OW_HDR)
		return -EBADMSG;
	for (uint32_t i = 0; i < h.n_aband; i++) {
		h.aband[i].lo_seg = nrs_le64_get(in + 40 + 24 * i);
		h.aband[i].lo_off = nrs_le64_get(in + 48 + 24 * i);
		h.aband[i].hi_seg = nrs_le64_get(in + 56 + 24 * i);
		if (h.aband[i].lo_seg > h.aband[i].hi_seg)
			return -EBADMSG;
	}
	*out = h;
	return 0;
}

void ow_unp_add(struct wal_object *w, struct ow_obj *o)
{
	w->unproven++;
	o->unp_next = NULL;
	o->unp_prev = w->unp_tail;
	if (w->unp_tail)
		w->unp_tail->unp_next = o;
	else
		w->unp = o;
	w->unp_tail = o;
}

void ow_unp_del(struct wal_object *w, struct ow_obj *o)
{
	w->unproven--;
	if (o->unp_prev)
		o->unp_prev->unp_next = o->unp_next;
	else
		w->unp = o->unp_next;
	if (o->unp_next)
		o->unp_next->unp_prev = o->unp_prev;
	else
		w->unp_tail = o->unp_prev;
	o->unp_prev = o->unp_next = NULL;
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
int ow_pend_add(struct wal_object *w, const struct ow_range *add)
{
	for (unsigned int i = 0; i < w->n_pend; i++) {
		struct ow_range *r = &w->pend[i];

		if (add->lo_seg > r->hi_seg + 1 || add->hi_seg + 1 < r->lo_seg)
			continue;
		if (add->lo_seg < r->lo_seg ||
		    (add->lo_seg == r->lo_seg && add->lo_off < r->lo_off)) {
			r->lo_seg = add->lo_seg;
			r->lo_off = add->lo_off;
		}
		if (add->hi_seg > r->hi_seg)
			r->hi_seg = add->hi_seg;
		return 0;
	}
	if (w->n_pend == OW_ABAND_MAX)
		return -EOVERFLOW;
	w->pend[w->n_pend++] = *add;
	return 0;
}


/* Drop the bytes of the oldest proven objects past cache_bytes. */
void ow_evict(struct wal_object *w)
{
	for (struct ow_obj *o = w->head;
	     o && w->cached_bytes > w->cache_bytes; o = o->next) {
		if (o->state != OW_PROVEN || !o->buf || o->users)
			continue;
		free(o->buf);
		o->buf = NULL;
		w->cached_bytes -= o->size;
	}
}





/* OW9, OW13: when the linger of the open object o is over. */
static uint64_t linger_end(const struct wal_object *w, const struct ow_obj *o)
{
	uint64_t from = w->lone ? w->t_sealed_ns : o->t_write_ns;

	return from + w->linger_ns;
}

/* Whether o must be proven for a sync (lock held): not wholly cut. */
static bool needed(const struct wal_object *w, const struct ow_obj *o)
{
	return o->aband_from != 0 && ow_run_of(o->seg) == w->run &&
	       o->state != OW_PROVEN;
}

/* OW1, OW9: every object of this run up to end.seg, not wholly cut, is
 * proven; the open one is sealed linger_ms after its first write, or
 * after the previous seal if that object held one append (OW13; or once
 * it is full). */
static int ow_sync(struct nrs_wal *wal, struct nrs_wal_pos end)
{
	struct wal_object *w = wo(wal);
	int err = 0;

	if (w->read_only)
		return -EROFS;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct ow_obj *wait = NULL, *o;
		uint64_t now = nrs_now_mono_ns(), until;

		if (w->broken) {
			err = -EIO;
			break;
		}
		o = w->open;
		if (o && o->seg <= end.seg && o->size > OW_HDR) {
			uint64_t due = linger_end(w, o);

			if ((!o->appends && w->unproven == 0) ||	/* OW15 */
			    now >= due || w->stop) {
				err = ow_wait_window(w, o->t_write_ns +
						  w->timeout_ns);
				if (err)
					break;
				if (w->open == o)
					ow_seal_open(w, o);
			} else {				/* OW19 */
				ow_wait_until(w, &w->done, due);
			}
			continue;
		}
		if (w->open && w->open->seg <= end.seg && needed(w, w->open))
			wait = w->open;		/* cut to nothing (OW4) */
		for (o = w->unp; !wait && o && o->seg <= end.seg;
		     o = o->unp_next) {				/* OW17 */
			if (needed(w, o))
				wait = o;
		}
		if (!wait)
			break;
		until = wait->t_write_ns + w->timeout_ns;
		if (now >= until) {
			err = -ETIMEDOUT;
			break;
		}
		o = w->open;
		if (o && o->seg > end.seg && o->size > OW_HDR) {	/* OW20 */
			uint64_t due = linger_end(w, o);

			if (now >= due && w->unproven < w->inflight_max) {
				ow_seal_open(w, o);
				continue;
			}
			if (now < due && due < until)
				until = due;
		}
		ow_wait_until(w, &w->done, until);		/* OW19 */
		if (w->stop) {
			err = -ESHUTDOWN;
			break;
		}
	}
	pthread_mutex_unlock(&w->lock);
	if (!err && w->may_ack && !w->may_ack(w->may_ack_ctx)) {
		nrs_warn("object WAL: object %016" PRIx64 " proven, but this "
			 "mount may not acknowledge it (the bucket's owner "
			 "lease): the appends fail ESTALE", end.seg);
		err = -ESTALE;			/* OW1, I8 */
	}
	return err;
}

/* OW4 */
static int ow_cut(struct nrs_wal *wal, struct nrs_wal_pos pos, int why)
{
	struct wal_object *w = wo(wal);
	struct ow_range r = { pos.seg, pos.off, 0 };
	bool any = false;
	int err = 0;

	if (w->read_only)
		return -EROFS;
	pthread_mutex_lock(&w->lock);
	for (struct ow_obj *o = w->head; o; o = o->next) {
		uint64_t from = o->seg == pos.seg ? pos.off : 0;

		if (o->seg < pos.seg)
			continue;
		if (o->state == OW_OPEN) {
			/* nothing of it was sent: the bytes just go */
			w->held_bytes -= o->size - (OW_HDR + from);
			o->size = OW_HDR + from;
			continue;
		}
		if (from < o->aband_from)
			o->aband_from = from;
		r.hi_seg = o->seg;
		any = true;
	}
	if (any) {
		err = ow_pend_add(w, &r);
		if (err)
			w->broken = true;	/* cannot record it: refuse */
		nrs_warn("object WAL: records from %016" PRIx64 ":%" PRIu64
			 " to object %016" PRIx64 " abandoned (%s); the next "
			 "object records it", r.lo_seg, r.lo_off, r.hi_seg,
			 strerror(-why));
		pthread_cond_broadcast(&w->done);	/* OW19: not needed */
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
	for (struct ow_obj *o = w->head; o; o = o->next) {
		out->segments++;
		if (o->state == OW_OPEN || o->state == OW_SEALING ||
		    o->state == OW_PUTTING)
			out->waiting_bytes += o->size;
	}
	out->inflight = w->unproven;
	out->last_seg = w->last_seg;
	out->broken = w->broken;
	out->floor = w->floor;					/* OW18 */
	out->reclaim_due_ns = ow_reclaim_due(w);		/* OWG1 */
	pthread_mutex_unlock(&w->lock);
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
	while (w->unproven > 0 && !w->broken && !w->stop &&
	       nrs_now_mono_ns() < deadline)
		ow_wait_until(w, &w->done, deadline);		/* OW19 */
	if (w->unproven > 0)
		nrs_warn("object WAL: closing with %u objects not proven",
			 w->unproven);
	w->stop = true;
	pthread_cond_broadcast(&w->work);
	pthread_cond_broadcast(&w->done);
	pthread_cond_broadcast(&w->nap);
	pthread_mutex_unlock(&w->lock);
	for (unsigned int i = 0; i < w->nworkers; i++)
		pthread_join(w->workers[i], NULL);
	while (w->head) {
		struct ow_obj *o = w->head;

		w->head = o->next;
		free(o->buf);
		free(o);
	}
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	pthread_cond_destroy(&w->nap);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->gc_lock);
	free(w->workers);
	free(w->views);
	free(w->owed);
	free(w->gc_path);
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

/*
 * OWG3: the DELETEs a reclaim of an earlier run owed, sent again by the
 * first reclaim of this one.  A damaged record is reported and ignored:
 * its objects stay in the store, orphans (nereusfs-fsck F32), and nothing
 * needed is deleted.
 */
static void read_owed(struct wal_object *w)
{
	int err = ow_gc_read(w->gc_path, w->last_run, w->owed, &w->n_owed);

	if (err) {
		nrs_err("object WAL: gc record %s is damaged or unreadable "
			"(%s, OWG3): ignored; the WAL objects it owed the "
			"DELETE stay in the store (nereusfs-fsck F32 names "
			"them)", w->gc_path, strerror(-err));
		w->n_owed = 0;
		w->gc_stale = true;
	}
	if (w->n_owed || w->gc_stale)
		w->owed_due_ns = 1;		/* the first reclaim: at once */
}

int nrs_wal_object_open(const struct nrs_wal_object_opts *o,
			struct nrs_wal **out)
{
	struct wal_object *w;
	pthread_condattr_t ca;
	char path[4096], gc[4096];
	int err;

	if (!o->store || !o->dir ||
	    o->inflight_max > NRS_WAL_OBJECT_INFLIGHT_MAX)	/* OW14 */
		return -EINVAL;
	if (snprintf(path, sizeof(path), "%s/state", o->dir) >=
	    (int)sizeof(path) ||
	    snprintf(gc, sizeof(gc), "%s/gc", o->dir) >= (int)sizeof(gc))
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
	w->flush_bytes = o->flush_bytes ? o->flush_bytes :
			 NRS_WAL_OBJECT_FLUSH_BYTES;
	if (w->flush_bytes > OW_OBJ_MAX)
		w->flush_bytes = OW_OBJ_MAX;
	w->linger_ns = o->linger_ms * 1000000ull;
	w->lone = true;					/* OW13 */
	w->grace_ns = nrs_sat_mul(o->grace_ms, NRS_NS_PER_MS);	/* SAT1 */
	w->may_ack = o->may_ack;
	w->may_ack_ctx = o->may_ack_ctx;
	w->metrics = o->metrics;
	w->read_only = o->read_only;
	w->stored = o->stored;
	w->stored_ctx = o->stored_ctx;
	w->named = o->named;
	w->named_ctx = o->named_ctx;
	w->damage = o->damage;
	w->damage_ctx = o->damage_ctx;
	w->progress = o->progress;
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->gc_lock, NULL);
	pthread_condattr_init(&ca);			/* OW19: deadlines */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->work, &ca);
	pthread_cond_init(&w->done, &ca);
	pthread_cond_init(&w->nap, &ca);
	pthread_condattr_destroy(&ca);
	w->state_path = strdup(path);
	w->gc_path = strdup(gc);
	w->dir = strdup(o->dir);
	w->workers = calloc(w->inflight_max, sizeof(*w->workers));
	w->owed = calloc(OW_OWED_MAX, sizeof(*w->owed));
	err = !w->state_path || !w->gc_path || !w->dir || !w->workers ||
	      !w->owed ? -ENOMEM : 0;
	if (!err && !o->read_only)
		err = nrs_mkdir_durable(o->dir);		/* OW6 */
	if (!err)
		err = ow_state_read(w->state_path, &w->floor, &w->last_run);
	if (!err)
		read_owed(w);					/* OWG3 */
	for (unsigned int i = 0; !err && !o->read_only && i < w->inflight_max;
	     i++) {
		err = -pthread_create(&w->workers[i], NULL, ow_worker, w);
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
