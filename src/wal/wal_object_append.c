/*
 * wal_object_append.c - the object WAL's append path (wal_object.c has
 * the format and the rules): a batch goes into the open object (OW9; its
 * run started first, OW3, OW6, OW11), which is sealed -- its header with
 * the abandoned ranges not yet recorded (OW4), its SHA-256 -- and handed
 * to the workers (OW19) once full, or by a sync once its linger is over
 * (OW13, OW15, OW20); never more than inflight_max unproven (OW5).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "obj/objfmt.h"
#include "util/clock.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_object_priv.h"
#include "wal/walrec.h"

/*
 * OW3, OW6: start this run (lock held; dropped while its marker is PUT):
 * take the next run number in the state file, then store the run's
 * marker (OW11) before any object of it, until deadline.
 */
static int start_run(struct wal_object *w, uint64_t deadline)
{
	int err;

	if (w->run == 0) {
		uint64_t run = w->last_run + 1;

		if (run > OW_RUN_MAX)
			return -EOVERFLOW;
		err = ow_state_write(w->state_path, w->dir, w->floor, run);
		if (err) {
			nrs_err("object WAL: cannot record run %" PRIu64 " in "
				"%s: %s", run, w->state_path, strerror(-err));
			return err;
		}
		w->run = w->last_run = run;
		w->next_seq = 1;
	}
	pthread_mutex_unlock(&w->lock);
	err = ow_put_marker(w, w->run, deadline);
	pthread_mutex_lock(&w->lock);
	if (!err)
		w->run_marked = true;
	return err;
}

/* Wait until fewer than inflight_max objects are unproven (OW5). */
int ow_wait_window(struct wal_object *w, uint64_t deadline)
{
	while (w->unproven >= w->inflight_max && !w->broken && !w->stop) {
		if (nrs_now_mono_ns() >= deadline)
			return -ETIMEDOUT;
		ow_wait_until(w, &w->done, deadline);		/* OW19 */
	}
	if (w->broken)
		return -EIO;
	return w->stop ? -ESHUTDOWN : 0;
}

/*
 * OW9: close the open object o to writes and hand it to the workers: its
 * header (with the abandoned ranges not yet recorded, OW4) and SHA-256
 * are made without the lock.  Lock held; dropped and taken again.
 */
void ow_seal_open(struct wal_object *w, struct ow_obj *o)
{
	struct ow_hdr h = { .seg = o->seg, .rec_len = o->size - OW_HDR,
			    .n_aband = w->n_pend };
	int err;

	memcpy(h.aband, w->pend, sizeof(h.aband));
	o->state = OW_SEALING;
	w->open = NULL;
	ow_unp_add(w, o);				/* OW17 */
	w->t_sealed_ns = nrs_now_mono_ns();		/* OW13 */
	w->lone = w->open_appends <= 1;
	w->open_appends = 0;
	pthread_mutex_unlock(&w->lock);
	ow_hdr_encode(&h, o->buf);
	err = nrs_objfmt_digest(o->buf, o->size, o->sha256, NULL);
	pthread_mutex_lock(&w->lock);
	if (err) {		/* nothing was sent: the crypto library failed */
		nrs_err("object WAL: digest of object %016" PRIx64 ": %s",
			o->seg, strerror(-err));
		o->state = OW_BAD;
		ow_unp_del(w, o);
		w->broken = true;
		pthread_cond_broadcast(&w->done);		/* OW19 */
	} else {
		o->state = OW_PUTTING;
		pthread_cond_signal(&w->work);			/* OW19 */
	}
}

/* A new open object for the next seq of this run (lock held). */
static int new_open(struct wal_object *w, uint64_t len, uint64_t now)
{
	struct ow_obj *o;
	int err = 0;

	if (!w->run_marked) {
		err = start_run(w, now + w->timeout_ns);
		/* the object's first write is now, after its run's marker:
		 * its sync's deadline (OW2) does not count the marker's PUT */
		now = nrs_now_mono_ns();
	}
	if (!err && w->next_seq > OW_SEQ_MAX)
		err = -EOVERFLOW;
	if (err)
		return err;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->cap = OW_HDR + (len > w->flush_bytes ? len : w->flush_bytes);
	o->buf = malloc(o->cap);
	if (!o->buf) {
		free(o);
		return -ENOMEM;
	}
	o->seg = ow_seg(w->run, w->next_seq++);
	o->size = OW_HDR;
	o->state = OW_OPEN;
	o->aband_from = UINT64_MAX;
	o->t_write_ns = now;
	ow_insert(w, o);
	w->open = o;
	return 0;
}

/* OW13: is this batch one append: one record, of one append? */
static bool one_append(const struct iovec *iov, int iovcnt, uint64_t len)
{
	struct nrs_walrec r;

	return iovcnt > 0 &&
	       nrs_walrec_decode_hdr(iov[0].iov_base, iov[0].iov_len, &r) == 0 &&
	       r.n_appends == 1 && nrs_walrec_total_len(r.len) == len;
}

/* OW15: does the batch (len bytes of whole records) append a byte?  One
 * that cannot be told is taken to. */
static bool appends_bytes(const unsigned char *p, uint64_t len)
{
	uint64_t off = 0;
	struct nrs_walrec r;

	while (off < len) {
		if (nrs_walrec_decode_hdr(p + off, len - off, &r) != 0)
			return true;
		if (r.kind == NRS_WALREC_DATA && r.len > 0)
			return true;
		off += nrs_walrec_total_len(r.len);
	}
	return false;
}

/* OW9: a batch goes into the open object, which is sealed once it holds
 * flush_bytes; a batch never spans two objects. */
int ow_write(struct nrs_wal *wal, const struct iovec *iov, int iovcnt,
		    struct nrs_wal_pos *pos)
{
	struct wal_object *w = (struct wal_object *)wal;
	uint64_t now = nrs_now_mono_ns(), len = 0;
	struct ow_obj *o;
	unsigned char *p;
	bool single, bytes;
	int err;

	if (w->read_only)
		return -EROFS;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > OW_OBJ_MAX - len)
			return -EINVAL;
		len += iov[i].iov_len;
	}
	single = one_append(iov, iovcnt, len);
	pthread_mutex_lock(&w->lock);
	err = w->broken ? -EIO : 0;
	o = w->open;
	if (!err && o && o->size > OW_HDR && o->size - OW_HDR + len >
	    w->flush_bytes) {
		err = ow_wait_window(w, now + w->timeout_ns);
		if (!err && w->open == o)
			ow_seal_open(w, o);
		o = w->open;
	}
	if (!err && !o) {
		err = ow_wait_window(w, now + w->timeout_ns);
		if (!err)
			err = new_open(w, len, now);
		o = w->open;
	}
	if (!err && o->size + len > o->cap) {
		uint64_t cap = o->size + len;

		if (cap < 2 * o->cap && 2 * o->cap <= OW_HDR + OW_OBJ_MAX)
			cap = 2 * o->cap;
		p = realloc(o->buf, cap);
		if (!p) {
			err = -ENOMEM;
		} else {
			o->buf = p;
			o->cap = cap;
		}
	}
	if (err) {
		pthread_mutex_unlock(&w->lock);
		return err;
	}
	pos->seg = o->seg;
	pos->off = o->size - OW_HDR;
	p = o->buf + o->size;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	bytes = appends_bytes(o->buf + o->size, len);	/* OW15 */
	o->appends = o->appends || bytes;
	if (o->size == OW_HDR && len > 0)	/* OW19: a sync may wait on it */
		pthread_cond_broadcast(&w->done);
	o->size += len;
	if (w->open_appends < 2 && bytes)		/* OW13, OW15 */
		w->open_appends += single ? 1 : 2;
	w->held_bytes += len;
	if (o->size - OW_HDR >= w->flush_bytes &&
	    ow_wait_window(w, now + w->timeout_ns) == 0 && w->open == o)
		ow_seal_open(w, o);
	pthread_mutex_unlock(&w->lock);
	return 0;
}
