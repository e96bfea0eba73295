/*
 * pipeline_batch.c - a batch built and written (pipeline.c PL1 and PL2's
 * write): requests ordered against each stream's ordering view, appends of
 * one stream packed into one WAL record (walrec.h) with the next LSN, the
 * head updates PL3 will publish, and the records formatted into iovecs and
 * written to the batch's WAL in one write.  Runs in the holder of the
 * commit role only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "commit/pipeline.h"
#include "commit/pipeline_priv.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"
#include "wal/metarec.h"
#include "wal/walrec.h"

static const unsigned char zero_pad[NRS_WALREC_ALIGN];

/* The stream's head update in this batch, created on first use. */
static int upd_slot(struct batch *b, struct nrs_stream *st)
{
	struct batch_upd *bu;

	if (st->batch_upd >= 0)
		return st->batch_upd;
	if (nrs_grow((void **)&b->upds, &b->cap_upds, b->nupds + 1,
		     sizeof(*b->upds)) ||
	    nrs_grow((void **)&b->bu, &b->cap_bu, b->nupds + 1,
		     sizeof(*b->bu)))
		return -ENOMEM;
	memset(&b->upds[b->nupds], 0, sizeof(b->upds[0]));
	b->upds[b->nupds].id = st->id;
	b->upds[b->nupds].old_version = st->ord_version;
	bu = &b->bu[b->nupds];
	bu->st = st;
	bu->head = st->ord_head;
	bu->version = st->ord_version;
	bu->epoch = st->ord_epoch;
	bu->lsn = st->ord_lsn;
	bu->inval = false;
	st->batch_upd = (int)b->nupds++;
	return st->batch_upd;
}

/* PL1: no LSN is left to issue (logged once); the append fails. */
static int lsn_exhausted(struct nrs_pipeline *p)
{
	if (!p->lsn_warned) {
		p->lsn_warned = true;
		nrs_err("pipeline: the next LSN %" PRIu64 " is above the largest"
			" one (%" PRIu64 "): appends fail EOVERFLOW; reads "
			"work; see nereusfs-fsck(8)", atomic_load(p->lsn),
			NRS_WALREC_LSN_MAX);
	}
	return -EOVERFLOW;
}

/* A new DATA record of st in b at its ordering head, naming the head's
 * last LSN, under epoch, with the next LSN; NULL: no memory. */
static struct batch_rec *data_rec(struct nrs_pipeline *p, struct batch *b,
				  struct nrs_stream *st, uint64_t epoch)
{
	struct batch_rec *br;

	if (nrs_grow((void **)&b->recs, &b->cap_recs, b->nrecs + 1,
		     sizeof(*b->recs)))
		return NULL;
	br = &b->recs[b->nrecs++];
	memset(br, 0, sizeof(*br));
	br->st = st;
	br->rec.kind = NRS_WALREC_DATA;
	br->rec.lsn = atomic_fetch_add(p->lsn, 1);		/* PL7 */
	br->rec.stream_id = st->id;
	br->rec.base = st->ord_head;
	br->rec.epoch = epoch;
	br->rec.prev_lsn = st->ord_lsn;
	return br;
}

/* PL1 for one append; returns 0 or the error to complete it with. */
static int order_append(struct nrs_pipeline *p, struct batch *b,
			struct nrs_req *r, size_t ri)
{
	struct nrs_stream *st = r->st;
	struct batch_rec *br;
	int err;

	if (r->epoch < st->ord_epoch) /* PL1: a fenced handle */
		return -ESTALE;
	if (r->expect != NRS_EXPECT_ANY && r->expect != st->ord_head)
		return -ESPIPE;
	if (r->len > NRS_WALREC_MAX_LEN || r->len > NRS_HEAD_MAX - st->ord_head)
		return -EFBIG;					/* PL1 */
	if ((st->batch_slot < 0 ||
	     b->recs[st->batch_slot].rec.len + r->len > NRS_WALREC_MAX_LEN) &&
	    atomic_load(p->lsn) > NRS_WALREC_LSN_MAX)		/* PL1 */
		return lsn_exhausted(p);
	err = upd_slot(b, st);
	if (err < 0)
		return err;
	if (st->batch_slot >= 0 &&
	    b->recs[st->batch_slot].rec.len + r->len > NRS_WALREC_MAX_LEN)
		st->batch_slot = -1;	/* start another record */
	if (st->batch_slot < 0) {
		br = data_rec(p, b, st, st->ord_epoch);
		if (!br)
			return -ENOMEM;
		br->first_req = ri;
		st->ord_lsn = br->rec.lsn;
		st->batch_slot = (int)(br - b->recs);
	} else {
		br = &b->recs[st->batch_slot];
		b->rnext[br->last_req] = ri;
	}
	br->last_req = ri;
	b->rnext[ri] = SIZE_MAX;
	br->rec.len += (uint32_t)r->len;
	br->rec.n_appends++;
	r->offset = st->ord_head;
	st->ord_head += r->len;
	st->ord_version++;
	return 0;
}

/* PL9: the fence as a record of no bytes at the stream's ordering head,
 * beside its commit chain (it names the head's last LSN; no record names
 * its LSN). */
static int fence_record(struct nrs_pipeline *p, struct batch *b,
			struct nrs_stream *st, uint64_t epoch)
{
	struct batch_rec *br;

	if (NRS_WALREC_LSN_MAX < atomic_load(p->lsn))		/* PL1 */
		return lsn_exhausted(p);
	br = data_rec(p, b, st, epoch);
	if (!br)
		return -ENOMEM;
	br->first_req = br->last_req = SIZE_MAX;	/* no payload */
	return 0;
}

/* PL1 for one fence. */
static int order_fence(struct nrs_pipeline *p, struct batch *b,
		       struct nrs_req *r)
{
	struct nrs_stream *st = r->st;
	int err;

	if (r->epoch < st->ord_epoch)
		return r->bind ? -ESTALE : -EINVAL;
	if (r->epoch == st->ord_epoch)
		return 0;
	err = upd_slot(b, st);
	if (err < 0)
		return err;
	if (p->cfg.fence_records) {
		err = fence_record(p, b, st, r->epoch);		/* PL9 */
		if (err)
			return err;
	}
	st->ord_epoch = r->epoch;
	st->batch_slot = -1;	/* later appends: a record of the new epoch */
	b->durable = true;
	return 0;
}

/* PL8: a META record of its own, in submission order with the appends. */
static int order_meta(struct nrs_pipeline *p, struct batch *b,
		      struct nrs_req *r, size_t ri)
{
	struct batch_rec *br;
	int err;

	if (NRS_WALREC_LSN_MAX < atomic_load(p->lsn))		/* PL1 */
		return lsn_exhausted(p);
	if (nrs_grow((void **)&b->recs, &b->cap_recs, b->nrecs + 1,
		     sizeof(*b->recs)))
		return -ENOMEM;
	br = &b->recs[b->nrecs];
	memset(br, 0, sizeof(*br));
	err = nrs_metarec_make(atomic_load(p->lsn), r->meta_seq, r->len,
			       &br->rec, br->meta_fixed);
	if (err)
		return err;
	br->rec.lsn = atomic_fetch_add(p->lsn, 1);		/* PL7 */
	br->first_req = br->last_req = ri;
	b->rnext[ri] = SIZE_MAX;
	b->nrecs++;
	return 0;
}

/* PL2: format the records into iovecs and write them to w. */
static int write_batch(struct batch *b, struct nrs_wal *w)
{
	size_t hdr_bytes = 0, niov = 0, k = 0, h = 0;
	struct nrs_wal_pos pos;
	uint64_t off;
	int err;

	if (b->nrecs == 0)
		return 0;
	for (size_t i = 0; i < b->nrecs; i++) {
		hdr_bytes += nrs_walrec_hdr_len(b->recs[i].rec.len);
		niov += 3 + b->recs[i].rec.n_appends;	/* + META's fixed */
	}
	if (nrs_grow((void **)&b->hdrs, &b->cap_hdrs, hdr_bytes, 1) ||
	    nrs_grow((void **)&b->iov, &b->cap_iov, niov, sizeof(*b->iov)))
		return -ENOMEM;
	for (size_t i = 0; i < b->nrecs; i++) {
		struct batch_rec *br = &b->recs[i];
		size_t hl = nrs_walrec_hdr_len(br->rec.len);
		size_t first = k + 1, pad;
		ssize_t n;

		b->iov[k].iov_base = b->hdrs + h;
		b->iov[k++].iov_len = hl;
		if (br->rec.kind == NRS_WALREC_META) {
			b->iov[k].iov_base = br->meta_fixed;
			b->iov[k++].iov_len = sizeof(br->meta_fixed);
		}
		for (size_t ri = br->first_req; ri != SIZE_MAX; ri = b->rnext[ri]) {
			b->iov[k].iov_base = (void *)b->reqs[ri]->data;
			b->iov[k++].iov_len = b->reqs[ri]->len;
		}
		n = nrs_walrec_encode_hdr(&br->rec, &b->iov[first],
					  (int)(k - first), b->hdrs + h, hl);
		if (n < 0)
			return (int)n;
		br->total = nrs_walrec_total_len(br->rec.len);
		pad = br->total - hl - br->rec.len;
		if (pad) {
			b->iov[k].iov_base = (void *)zero_pad;
			b->iov[k++].iov_len = pad;
		}
		h += hl;
	}
	atomic_store(&b->wal, w);	/* before floor: nrs_pipeline_wal_floor_of */
	atomic_store(&b->floor, 0);	/* the segment is not known yet */
	err = nrs_wal_write(w, b->iov, (int)k, &pos);
	if (err < 0) {
		atomic_store(&b->floor, UINT64_MAX);
		return err;
	}
	atomic_store(&b->floor, pos.seg);
	b->written = true;
	b->wpos = pos;
	b->wlen = 0;
	off = pos.off;
	for (size_t i = 0; i < b->nrecs; i++) {
		b->recs[i].seg = pos.seg;
		b->recs[i].off = off;
		off += b->recs[i].total;
		b->wlen += b->recs[i].total;
	}
	return 0;
}

/* Put every stream's ordering view back to what it was before b's PL1. */
void pl_undo_order(struct batch *b)
{
	for (size_t i = 0; i < b->nupds; i++) {
		struct batch_upd *bu = &b->bu[i];
		struct nrs_stream *st = bu->st;

		st->ord_head = bu->head;
		st->ord_version = bu->version;
		st->ord_epoch = bu->epoch;
		st->ord_lsn = bu->lsn;
	}
}

/* Stage 1: PL1 and PL2's write, by the commit role. */
void pl_stage_write(struct nrs_pipeline *p, struct batch *b,
			struct nrs_req *list, struct nrs_wal *w)
{
	struct nrs_metrics *m = p->cfg.metrics;

	b->list = list;
	b->nreqs = b->nrecs = b->nupds = 0;
	b->durable = false;
	b->written = false;
	b->err = 0;
	b->payload = b->appends = 0;
	if (atomic_load(&p->failed)) {
		b->err = -EIO;
		return;
	}
	for (struct nrs_req *r = list; r; r = r->next) {
		if (nrs_grow((void **)&b->reqs, &b->cap_reqs, b->nreqs + 1,
			     sizeof(struct nrs_req *)) ||
		    nrs_grow((void **)&b->rnext, &b->cap_rnext, b->nreqs + 1,
			     sizeof(*b->rnext)))
			r->err = -ENOMEM;	/* completed with it in PL5 */
		else
			b->reqs[b->nreqs++] = r;
	}
	/* PL1 */
	for (size_t i = 0; i < b->nreqs; i++) {
		struct nrs_req *r = b->reqs[i];

		if (r->kind == NRS_REQ_FENCE) {
			r->err = order_fence(p, b, r);
		} else if (r->kind == NRS_REQ_META) {
			r->err = order_meta(p, b, r, i);
		} else {
			r->err = order_append(p, b, r, i);
			if (r->err == 0) {
				b->payload += r->len;
				b->appends++;
			}
		}
	}
	/* PL2 */
	b->err = write_batch(b, w);
	if (b->err)
		pl_undo_order(b);
	for (size_t i = 0; i < b->nupds; i++) {
		struct nrs_stream *st = b->bu[i].st;
		struct nrs_head_update *u = &b->upds[i];

		if (!b->err) {	/* what PL3 publishes */
			u->head = st->ord_head;
			u->version = st->ord_version;
			u->epoch = st->ord_epoch;
			u->last_lsn = st->ord_lsn;
		}
		st->batch_upd = -1;
		st->batch_slot = -1;
	}
	if (b->err) {
		if (m)
			nrs_count(&m->wal_errors, 1);
		nrs_err("WAL write of %zu records failed: %s", b->nrecs,
			strerror(-b->err));
	}
}
