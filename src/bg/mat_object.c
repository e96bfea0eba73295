/*
 * mat_object.c - one object's way from committed bytes to a published
 * generation (DESIGN.md section 6, I2, I5, I6), for the materializer
 * (materializer.c) and compaction (compaction.c): build, intent, upload,
 * proof, quarantine, publication.  Which threads run these steps, and in
 * what order (MW1-MW4), is mat_worker.c's.
 *
 *  MZ2 Build.  The payload is read through the reader (every WAL chunk
 *     CRC-verified, I6), sealed (objfmt.c: header and block CRCs) and
 *     digested (SHA-256; MD5 only for a store that sends it, objstore.h).
 *     If the range was trimmed meanwhile the stream is simply looked at
 *     again.
 *  MZ3 Intent, upload, proof.  A prepared row is recorded durably first
 *     (it names the key: an upload a crash interrupts is an orphan found
 *     from this row, never from a listing).  The PUT carries Content-MD5
 *     and the SHA-256 as metadata.  Whatever the PUT answered, a HEAD must
 *     then show the exact length and SHA-256 (nrs_put_decide): missing ->
 *     the same bytes go again under the same key; other bytes -> the row is
 *     quarantined and the key never written again (the next try is a new
 *     generation, hence a new key); no answer -> retry with backoff
 *     (logged, counted), for as long as it takes.
 *  MZ4 Publish.  One durable transaction moves the row prepared ->
 *     committed.  Only then does the index serve the range from the object
 *     (under the stream lock), and `materialized` move.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bg/mat_priv.h"
#include "bg/materializer.h"
#include "bg/services.h"
#include "obj/objfmt.h"
#include "stream/reader.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/metrics.h"

/* MZ3: PUT until HEAD proves the object.  0, -EBADMSG (quarantine), or
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
		if (nrs_mat_nap(m, nrs_mat_backoff_ms(m, attempt++)))
			return -ECANCELED;
	}
}

/* MZ4, the in-memory half: serve [o->start, o->end) from generation
 * o->gen instead of what the index named there (an adopted record,
 * o->seg >= 1, from where it is: mat_adopt.c MZ11). */
void nrs_mat_apply(const struct nrs_services *svc, struct nrs_stream *st,
		   const struct nrs_obj_row *o, const struct olds *olds)
{
	struct nrs_index_ent e = {
		.start = o->start, .end = o->end, .gen = o->gen,
		.kind = o->seg ? NRS_TARGET_ADOPT : NRS_TARGET_OBJ,
		.seg = o->seg, .off = o->off,
		.ostart = o->start, .oend = o->end,
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
 * MZ2 for [a, b) of st (busy): read it through the reader (every byte
 * verified, from the WAL or from the objects olds names), record the
 * intent, seal and digest it into *j (written only on success; the
 * caller then owns j->buf).  0, or -errno (-ENODATA: trimmed meanwhile).
 */
int nrs_mat_build(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
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
 * MZ3-MZ4 for the job j built: upload until proven (a quarantined key gives
 * way to a new generation, sealed and digested again), publish (replacing
 * j->olds, if any, in the same transaction), serve.  0, or -errno.
 */
int nrs_mat_finish(struct nrs_mat *m, struct job *j)
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
		    nrs_mat_stopping(m))
			return err;
		err = nrs_meta_obj_prepare(svc->meta, &j->o) ?: seal_digest(j);
		if (err)
			return err;
	}
	if (err)
		return err;	/* stopping: the intent is an orphan (MZ6) */
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
	nrs_mat_apply(svc, j->st, &j->o, &j->olds);
	if (j->olds.n) {
		nrs_count(&svc->metrics->compactions, 1);
		nrs_count(&svc->metrics->compacted_objects, j->olds.n);
		nrs_debug("stream %" PRIu64 ": compacted %zu objects into [%"
			  PRIu64 ", %" PRIu64 ")", j->st->id, j->olds.n,
			  j->o.start, j->o.end);
	}
	return 0;
}
