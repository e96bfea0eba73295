/*
 * mat_adopt.c - write once on the embedded store (README, "Write once on
 * the embedded store"): a large committed WAL record becomes a generation
 * where the WAL wrote it, in its segment file linked into the embedded
 * store (objstore_dir_adopt.c OD6), instead of being copied into an object
 * on the same disk.  The threads and the order of jobs are
 * mat_worker.c's (MW1-MW4): an adoption is a job like an object's, so a
 * stream's generations are still published in offset order (MW3).
 *
 * This departs, for the embedded store on the WAL's file system only, from
 * DESIGN.md section 1 event 4 and section 7: such a generation is named by
 * its WAL segment and offset (its objects row, schema 5: seg, off), not by
 * a key from its stream and generation.  Its bytes are verified by the
 * reader as a WAL record (reader.c RA1, I6).
 *
 *  MZ10 Choice.  With write once on (services.h adopt set: -o
 *      write_once=auto and the embedded store on the WAL's file system,
 *      core_obj.c CO1), a committed record of a local-wal stream holding
 *      at least NRS_ADOPT_MIN payload bytes is adopted; smaller ones, and
 *      every record of an object-wal stream, are copied as before (MZ1,
 *      MZ2).  A run (MZ1) is all of one kind: up to object_size payload
 *      bytes and NRS_ADOPT_MAX records.  Only a segment appends no longer
 *      go to is adopted (wal_local_seg.c WD3): a large record in the
 *      current one waits, and the builder has that segment sealed once the
 *      pipeline has been idle ADOPT_SEAL_IDLE_MS (nrs_pipeline_wal_seal,
 *      PL6), else looks at the stream again after ADOPT_WAIT_MS; under
 *      load the segment rotates when full.
 *  MZ11 Adopt.  The run's rows -- one per record: its stream, its whole
 *      [start, end), its total record bytes as length, seg and off -- are
 *      prepared in one durable transaction (I7) before any link.  Each
 *      segment they name is then linked into the store (OD6: the link and
 *      its directories synced), and only then are the rows published, in
 *      one durable transaction; the index then serves each record from its
 *      NRS_TARGET_ADOPT entry and `materialized` moves (as MZ4).  A link
 *      refused (EXDEV, or any error): the rows of that segment and after it
 *      are deleted (nothing was linked for them) and their range is copied
 *      (MZ2-MZ4) in the same job; the rows before are published.  EXDEV,
 *      EOPNOTSUPP, EPERM and EROFS turn adoption off for the mount, logged
 *      once.
 *  MZ12 Orphans.  A prepared adopted row found at start (MZ6) goes; the
 *      store's name of its segment (nrs_objfmt_adopt_key) goes with it only
 *      if no other row names that segment: a committed one reads from it,
 *      and a live builder records its row before its link (MZ11).  The
 *      look at the rows and the deletion hold adopt_lock, which every link
 *      holds too, so a link made meanwhile is either seen through its row
 *      or made again after the deletion.  The WAL's own name of a segment
 *      is never removed here.
 *  MZ13 Object-wal streams.  With write once on and the embedded store
 *      (services.h owal_adopt: -o write_once=auto, no s3; -o objects=DIR
 *      on another file system too, since the WAL objects already are in
 *      the store and nothing is linked), a committed record of an
 *      object-wal stream of at least NRS_ADOPT_MIN payload bytes is
 *      adopted where the object WAL stored it: its row's seg is
 *      NRS_ADOPT_OWAL | the WAL object's segment (objfmt.h; a run of
 *      2^22 or more is copied), its off the record's byte in the store's
 *      file (64 + NRS_WAL_OBJECT_HDR + its WAL offset), so RA1, RD3, RD5,
 *      F21 and G6 read it as any adopted record.  Nothing is linked: a
 *      committed record's object is stored and proven under its one key
 *      (wal_object.c OW1).  The object WAL keeps such an object when its
 *      floor passes it (wal_object_gc.c OW18); lifecycle.c G9 punches and
 *      deletes it.  An orphan row of it (MZ12) goes alone: the object is
 *      the WAL's.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bg/mat_priv.h"
#include "bg/services.h"
#include "obj/objfmt.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/sat.h"
#include "wal/wal.h"
#include "wal/walrec.h"

#define ADOPT_SEAL_IDLE_MS	100	/* MZ10 */
#define ADOPT_WAIT_MS		100	/* MZ10 */

bool nrs_mat_adopt_on(struct nrs_mat *m, const struct nrs_stream *st)
{
	bool on;

	if (st->profile == NRS_PROFILE_OBJECT_WAL)
		return m->svc->owal_adopt;			/* MZ13 */
	if (!m->svc->adopt)
		return false;
	pthread_mutex_lock(&m->adopt_lock);
	on = !m->adopt_off;
	pthread_mutex_unlock(&m->adopt_lock);
	return on;
}

/* MZ10: how WAL entry e is materialized; below: the first segment that
 * may still be current (walgc.c nrs_mat_reclaim_bound), or NRS_ADOPT_OWAL
 * for an object-wal stream (MZ13: no WAL object is current). */
enum nrs_plan nrs_mat_adopt_kind(const struct nrs_index_ent *e, bool on,
				 uint64_t below)
{
	if (!on || e->end - e->start < NRS_ADOPT_MIN)
		return NRS_PLAN_COPY;
	if (below == NRS_ADOPT_OWAL && e->seg >= NRS_ADOPT_OWAL)
		return NRS_PLAN_COPY;		/* MZ13: no bit left */
	return e->seg < below ? NRS_PLAN_ADOPT : NRS_PLAN_WAIT;
}

/* MZ10: seal segment seg if the pipeline idled; true if it was. */
bool nrs_mat_adopt_seal(struct nrs_mat *m, uint64_t seg)
{
	const struct nrs_services *svc = m->svc;

	return svc->wal_seal(svc->ctx, svc->wal, seg,
			     (uint64_t)ADOPT_SEAL_IDLE_MS * NRS_NS_PER_MS) > 0;
}

/*
 * MZ11, the intents: the rows of the records of st (busy) in [a, b),
 * prepared in one durable transaction, into *out (o.start a, o.end b;
 * written only on success, the caller then owns out->rows).  0, -ENODATA
 * (trimmed meanwhile: look again), -EAGAIN (the index changed), -errno.
 */
int nrs_mat_adopt_build(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
			uint64_t b, struct job *out)
{
	bool owal = st->profile == NRS_PROFILE_OBJECT_WAL;	/* MZ13 */
	struct nrs_obj_row *v = calloc(NRS_ADOPT_MAX, sizeof(*v));
	int64_t now = nrs_now_real_ns();
	size_t n = 0, i;
	int err = 0;

	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&st->lock);
	for (i = nrs_index_find(&st->index, a);
	     i < st->index.n && st->index.v[i].start < b; i++) {
		const struct nrs_index_ent *e = &st->index.v[i];

		if (e->kind != NRS_TARGET_WAL || e->end > b ||
		    n == NRS_ADOPT_MAX || (owal && (e->seg >= NRS_ADOPT_OWAL ||
						   e->off > INT64_MAX))) {
			err = -EAGAIN;
			break;
		}
		v[n++] = (struct nrs_obj_row){
			.stream_id = st->id, .start = e->start, .end = e->end,
			.length = nrs_walrec_total_len((uint32_t)(e->end -
								  e->start)),
			.seg = e->seg, .off = e->off, .ctime_ns = now,
		};
		if (owal) {	/* MZ13: the WAL object's byte in its file */
			v[n - 1].seg = NRS_ADOPT_OWAL | e->seg;
			v[n - 1].off = NRS_OBJ_ADOPT_HDR + NRS_WAL_OBJECT_HDR +
				       e->off;
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!err && n == 0)
		err = -ENODATA;
	if (!err)
		err = nrs_meta_obj_prepare_n(m->svc->meta, v, n);	/* I7 */
	if (err) {
		free(v);
		return err;
	}
	*out = (struct job){
		.st = st, .rows = v, .nrows = n,
		.o = { .stream_id = st->id, .start = a, .end = b },
	};
	return 0;
}

/* MW3, MW4: the intents of j's rows from k on go (nothing names them). */
static void drop_from(struct nrs_mat *m, struct job *j, size_t k)
{
	for (size_t i = k; i < j->nrows; i++)
		nrs_meta_obj_delete(m->svc->meta, j->rows[i].gen);
}

void nrs_mat_adopt_drop(struct nrs_mat *m, struct job *j)
{
	drop_from(m, j, 0);
}

/* A refusal that holds for every segment of this mount (MZ11). */
static bool for_good(int err)
{
	return err == -EXDEV || err == -EOPNOTSUPP || err == -EPERM ||
	       err == -EROFS;
}

/* MZ11: link segment seg into the store, under adopt_lock (MZ12). */
static int link_seg(struct nrs_mat *m, uint64_t seg)
{
	const struct nrs_services *svc = m->svc;
	int err;

	pthread_mutex_lock(&m->adopt_lock);
	if (m->adopt_off) {
		pthread_mutex_unlock(&m->adopt_lock);
		return -EXDEV;
	}
	err = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUT) ?:
	      svc->adopt(svc->ctx, seg) ?:
	      nrs_failpoint(NRS_FP_OBJ_AFTER_PUT);
	if (err && for_good(err)) {
		m->adopt_off = true;
		nrs_warn("write once: WAL segment %016" PRIx64 " cannot be"
			 " adopted by the object store (%s): records are"
			 " copied from now on", seg, strerror(-err));
	} else if (err) {
		nrs_warn("write once: WAL segment %016" PRIx64 " not adopted"
			 " (%s): its records are copied", seg, strerror(-err));
	}
	pthread_mutex_unlock(&m->adopt_lock);
	return err;
}

/* MZ11: publish j's first k rows (their segments linked), then serve. */
static int publish(struct nrs_mat *m, struct job *j, size_t k)
{
	const struct nrs_services *svc = m->svc;
	struct olds none = { .n = 0 };
	uint64_t bytes = 0;
	int err;

	err = nrs_failpoint(NRS_FP_OBJ_BEFORE_PUBLISH) ?:
	      nrs_meta_obj_publish_n(svc->meta, j->rows, k) ?:
	      nrs_failpoint(NRS_FP_OBJ_AFTER_PUBLISH);
	if (err) {
		nrs_err("stream %" PRIu64 ": publishing %zu adopted WAL records"
			" [%" PRIu64 ", %" PRIu64 ") failed: %s", j->st->id, k,
			j->rows[0].start, j->rows[k - 1].end, strerror(-err));
		return err;
	}
	for (size_t i = 0; i < k; i++) {
		j->rows[i].state = NRS_OBJ_COMMITTED;
		nrs_mat_apply(svc, j->st, &j->rows[i], &none);
		bytes += j->rows[i].end - j->rows[i].start;
	}
	nrs_count(&svc->metrics->obj_adopted, k);
	nrs_count(&svc->metrics->obj_adopted_bytes, bytes);
	return 0;
}

/* MZ11: what a refused link leaves, [from, j->o.end), copied. */
static int copy_rest(struct nrs_mat *m, struct job *j, uint64_t from)
{
	struct olds none = { .n = 0 };
	struct job c;
	int err;

	if (from >= j->o.end)
		return 0;
	err = nrs_mat_build(m, j->st, from, j->o.end, &none, &c);
	if (err)
		return err;
	err = nrs_mat_finish(m, &c);
	free(c.buf);
	return err;
}

/*
 * MZ11 for the job j built by nrs_mat_adopt_build: link, publish, serve;
 * what cannot be linked is copied.  0, or -errno (the rows not published
 * are left to MZ6, or deleted when nothing was linked for them).
 */
int nrs_mat_adopt_finish(struct nrs_mat *m, struct job *j)
{
	size_t k = 0;
	int err;

	while (k < j->nrows) {
		uint64_t seg = j->rows[k].seg;
		size_t e = k;

		while (e < j->nrows && j->rows[e].seg == seg)
			e++;
		if (!(seg & NRS_ADOPT_OWAL) &&	/* MZ13: no link */
		    link_seg(m, seg) != 0)
			break;
		k = e;
	}
	drop_from(m, j, k);
	if (k > 0) {
		err = publish(m, j, k);
		if (err)
			return err;
	}
	return k < j->nrows ? copy_rest(m, j, k ? j->rows[k - 1].end
					      : j->o.start)
			    : 0;
}

/* MZ12: does a row other than gen name segment seg?  1, 0 or -errno. */
static int seg_named(struct nrs_mat *m, uint64_t seg, uint64_t gen)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	int err = nrs_meta_obj_rows(m->svc->meta, 0, 0, &v, &n), named = 0;

	for (size_t i = 0; !err && i < n && !named; i++)
		named = v[i].seg == seg && v[i].gen != gen;
	free(v);
	return err ? err : named;
}

/* MZ12 for orphan i (an adopted row, m->orphans[i]): 0 once it is gone. */
int nrs_mat_adopt_orphan(struct nrs_mat *m, size_t i)
{
	const struct nrs_services *svc = m->svc;
	const struct nrs_obj_row *o = &m->orphans[i];
	char key[NRS_OBJKEY_MAX];
	int err;

	nrs_objfmt_adopt_key(key, o->seg);
	pthread_mutex_lock(&m->adopt_lock);
	err = o->seg & NRS_ADOPT_OWAL ? 1 :	/* MZ13: the WAL's object */
	      seg_named(m, o->seg, o->gen);
	if (err == 0)
		err = nrs_obj_del(svc->store, key);
	else if (err == 1)
		err = 0;		/* another row reads from it: it stays */
	pthread_mutex_unlock(&m->adopt_lock);
	if (!err)
		err = nrs_meta_obj_delete(svc->meta, o->gen);
	if (!err) {
		nrs_info("removed orphan adoption of WAL segment %016" PRIx64
			 " offset %" PRIu64 " (generation %" PRIu64 ", a stop"
			 " or crash interrupted it)", o->seg, o->off, o->gen);
		nrs_count(&svc->metrics->obj_orphans_removed, 1);
	} else {
		nrs_warn("orphan adoption of WAL segment %016" PRIx64
			 " (generation %" PRIu64 "): cannot remove it yet: %s",
			 o->seg, o->gen, strerror(-err));
	}
	return err;
}
