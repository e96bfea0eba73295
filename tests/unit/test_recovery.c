/*
 * test_recovery.c - start-up recovery (recovery.c RC3) through the core's
 * public API: a real data directory, a real SQLite file, a real local WAL.
 *
 * Each test commits one append through the core, closes it, then puts one
 * more record straight into the WAL with the WAL's own API -- the record a
 * crash between the WAL write and the head's publication leaves behind --
 * and reopens the core.  Recovery must re-publish that record exactly when
 * it continues the stream's head (RC3): same base, the head's last LSN as
 * its predecessor, an epoch not lower than the stream's, every chunk
 * verified.  Each test changes one of those and checks the head did not
 * move; the control shows the untouched record does move it, so none of
 * these can pass by recovery ignoring the WAL.
 *
 * The second half calls nrs_recover() through its seam (recovery.h,
 * struct nrs_recover_env): a real SQLite store in a temporary directory, a
 * fake WAL (fixture_wal.h) whose scan returns the records a
 * test lists and whose sync_all a test can fail, and a stream table of the
 * test's own.  So each rule of recovery.c is seen on its own: RC1 (unlinked
 * inodes forgotten), RC3 (every condition of a continuation, in LSN order),
 * RC4 (no publication when the sync fails), RC5 (the index from objects,
 * then the WAL; a lost record a gap of exactly its range), RC6 (the next
 * LSN), RC7 (nothing onto a corrupt row), RD2, RD3 and RD4.  Stream "s" starts at head 5, version 1, epoch 3, last LSN
 * 10, with its record (LSN 10, [0, 5)) in the fake WAL.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "fixture.h"
#include "fixture_wal.h"
#include "core/core.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "stream/recovery.h"
#include "stream/table.h"
#include "wal/wal.h"
#include "wal_append.h"
#include "wal/walrec.h"

struct fix {
	char dir[4096];
	uint64_t ino, id, last_lsn;
};

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(nrs_fixture_mkdtemp(f->dir, sizeof(f->dir),
					     "test_recovery"), 0);
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;

	assert_int_equal(nrs_fixture_rmtree(f->dir), 0);
	free(f);
	return 0;
}

static struct nrs_core *core_open(struct fix *f)
{
	struct nrs_core_opts o = {
		.data_dir = f->dir,
		/* nothing materializes while a test runs */
		.mat_min_bytes = UINT64_MAX / 2,
		.mat_max_age_ms = 3600 * 1000,
	};
	struct nrs_core *c = NULL;

	assert_int_equal(nrs_core_new(&o, &c), 0);
	return c;
}

struct done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool called;
	int err;
};

static void append_done(void *cookie, int err, size_t len)
{
	struct done *d = cookie;

	(void)len;
	pthread_mutex_lock(&d->mu);
	d->called = true;
	d->err = err;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void append(struct nrs_core *c, struct nrs_handle *h, const char *s)
{
	struct done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			  false, 0 };

	assert_int_equal(nrs_core_append(c, h, s, strlen(s), 0, true, true,
					 append_done, &d), 0);
	pthread_mutex_lock(&d.mu);
	while (!d.called)
		pthread_cond_wait(&d.cv, &d.mu);
	pthread_mutex_unlock(&d.mu);
	assert_int_equal(d.err, 0);
}

static uint64_t xattr_u64(struct nrs_core *c, uint64_t ino, const char *name)
{
	char buf[64];
	ssize_t n = nrs_core_getxattr(c, ino, name, buf, sizeof(buf) - 1);

	assert_true(n > 0);
	buf[n] = '\0';
	return strtoull(buf, NULL, 10);
}

static void set_epoch(struct nrs_core *c, uint64_t ino, uint64_t epoch)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%" PRIu64, epoch);

	assert_int_equal(nrs_core_setxattr(c, ino, "user.nereus.epoch", buf,
					   (size_t)n, 0), 0);
}

struct last {
	uint64_t id, lsn, max_lsn;
};

static int last_cb(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct last *l = ctx;

	if (ri->rec.lsn > l->max_lsn)
		l->max_lsn = ri->rec.lsn;
	if (ri->rec.stream_id == l->id && ri->rec.lsn > l->lsn)
		l->lsn = ri->rec.lsn;
	return 0;
}

static struct nrs_wal *wal_open(struct fix *f)
{
	char path[4200];
	struct nrs_wal_local_opts o = { 0 };
	struct nrs_wal *w = NULL;

	snprintf(path, sizeof(path), "%s/wal", f->dir);
	assert_int_equal(nrs_wal_local_open(path, &o, &w), 0);
	return w;
}

/* One stream "s" holding "hello" under epoch 3; f->last_lsn its commit. */
static void make_stream(struct fix *f)
{
	struct nrs_core *c = core_open(f);
	struct nrs_handle *h = NULL;
	struct stat st;
	struct nrs_wal *w;
	struct last l = { 0 };

	assert_int_equal(nrs_core_create(c, 1, "s", 0644, 0, 0,
					 O_WRONLY | O_APPEND, &st, &h), 0);
	f->ino = st.st_ino;
	nrs_core_release(c, h);
	set_epoch(c, f->ino, 3);	/* handles open after it write under 3 */
	assert_int_equal(nrs_core_open(c, f->ino, O_WRONLY | O_APPEND, true,
				       &h), 0);
	append(c, h, "hello");
	f->id = xattr_u64(c, f->ino, "user.nereus.id");
	nrs_core_release(c, h);
	nrs_core_free(c);

	w = wal_open(f);
	l.id = f->id;
	assert_int_equal(nrs_wal_scan(w, last_cb, &l), 0);
	assert_true(l.lsn > 0);
	f->last_lsn = l.lsn;
	nrs_wal_close(w);
}

struct tweak {
	int64_t base_delta;	/* added to the head */
	int64_t prev_delta;	/* added to the head's last LSN */
	int64_t epoch_delta;	/* added to the stream's epoch (3) */
	bool bad_chunk;		/* a payload byte changed after encoding */
};

/* Put the record a crash before publication leaves: " world" at head 5. */
static void put_record(struct fix *f, const struct tweak *t)
{
	struct nrs_wal *w = wal_open(f);
	struct last l = { .id = f->id };
	char payload[] = " world";
	static const char zero[NRS_WALREC_ALIGN];
	unsigned char hdr[256];
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA,
		.stream_id = f->id,
		.base = (uint64_t)(5 + t->base_delta),
		.len = (uint32_t)strlen(payload),
		.n_appends = 1,
		.epoch = (uint64_t)(3 + t->epoch_delta),
		.prev_lsn = (uint64_t)((int64_t)f->last_lsn + t->prev_delta),
	};
	struct iovec iov[3] = { { payload, r.len } };
	struct nrs_wal_pos pos;
	ssize_t hl;
	size_t pad;

	assert_int_equal(nrs_wal_scan(w, last_cb, &l), 0);
	r.lsn = l.max_lsn + 1;
	hl = nrs_walrec_encode_hdr(&r, iov, 1, hdr, sizeof(hdr));
	assert_true(hl > 0);
	if (t->bad_chunk)
		payload[1] ^= 0x20;
	pad = nrs_walrec_total_len(r.len) - (size_t)hl - r.len;
	iov[0] = (struct iovec){ hdr, (size_t)hl };
	iov[1] = (struct iovec){ payload, r.len };
	iov[2] = (struct iovec){ (void *)zero, pad };
	assert_int_equal(nrs_wal_append(w, iov, pad ? 3 : 2, &pos), 0);
	if (t->bad_chunk) {
		/* a record after it, so the bad one is not a torn tail to cut
		 * but a record whose chunk fails (data_ok false) */
		struct nrs_walrec o = r;

		o.lsn++;
		o.stream_id = f->id + 1000;	/* no such stream */
		o.base = 0;
		o.prev_lsn = 0;
		payload[1] ^= 0x20;
		iov[0] = (struct iovec){ payload, r.len };
		hl = nrs_walrec_encode_hdr(&o, iov, 1, hdr, sizeof(hdr));
		assert_true(hl > 0);
		iov[0] = (struct iovec){ hdr, (size_t)hl };
		assert_int_equal(nrs_wal_append(w, iov, pad ? 3 : 2, &pos), 0);
	}
	nrs_wal_close(w);
}

/* Reopen (recovery runs) and return the head. */
static uint64_t recovered_head(struct fix *f)
{
	struct nrs_core *c = core_open(f);
	uint64_t head = xattr_u64(c, f->ino, "user.nereus.head");
	struct nrs_handle *h = NULL;
	char buf[32] = { 0 };

	/* what is published reads back (I1), and nothing past it (I4) */
	assert_int_equal(nrs_core_open(c, f->ino, O_RDONLY, true, &h), 0);
	assert_int_equal(nrs_core_read(c, h, buf, sizeof(buf), 0),
			 (ssize_t)head);
	assert_memory_equal(buf, "hello world", head);
	nrs_core_release(c, h);
	nrs_core_free(c);
	return head;
}

static void run(void **state, const struct tweak *t, uint64_t want)
{
	struct fix *f = *state;

	make_stream(f);
	put_record(f, t);
	assert_int_equal(recovered_head(f), want);
	/* a second recovery finds the same (RC3 is a pure function) */
	assert_int_equal(recovered_head(f), want);
}

static void test_continuation_republished(void **state)
{
	struct tweak t = { 0 };

	run(state, &t, 11);
}

static void test_higher_epoch_republished(void **state)
{
	struct tweak t = { .epoch_delta = 1 };

	run(state, &t, 11);
}

static void test_stale_epoch_orphan(void **state)
{
	struct tweak t = { .epoch_delta = -1 };

	run(state, &t, 5);
}

static void test_wrong_base_orphan(void **state)
{
	struct tweak t = { .base_delta = -1 };

	run(state, &t, 5);
}

static void test_wrong_prev_orphan(void **state)
{
	struct tweak t = { .prev_delta = -1 };

	run(state, &t, 5);
}

static void test_bad_chunk_orphan(void **state)
{
	struct tweak t = { .bad_chunk = true };

	run(state, &t, 5);
}

/* ---- through the seam: nrs_recover() on a fake WAL -------------------- */

struct seam {
	char db[4200];
	struct nrs_meta *meta;
	struct nrs_fixture_wal fw;
	struct nrs_fixture_wal ofw;	/* the object WAL, if use_owal */
	bool use_owal;
	struct nrs_streams t;
	bool t_live;
	uint64_t id, ino;
	uint64_t next_lsn;
	uint64_t epoch;			/* assert_head's: 3 unless RC9 moved it */
};

static void rec_add(struct seam *s, uint64_t lsn, uint64_t id, uint64_t base,
		    uint32_t len, uint64_t epoch, uint64_t prev, bool ok)
{
	assert_true(s->fw.n < NRS_FIXTURE_WAL_MAX);
	s->fw.v[s->fw.n++] = (struct nrs_wal_rec_info){
		.rec = {
			.kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = id,
			.base = base, .len = len, .n_appends = 1,
			.epoch = epoch, .prev_lsn = prev,
		},
		.pos = { .seg = 1, .off = lsn * 100 },
		.data_ok = ok,
	};
}

/* A store holding stream "s" at head 5, version 1, epoch 3, last LSN 10;
 * the fake WAL holds that record. */
static struct seam *seam_open(void **state)
{
	struct fix *f = *state;
	struct seam *s = calloc(1, sizeof(*s));
	struct nrs_attr a;
	struct nrs_stream_row row;
	struct nrs_head_update u;

	assert_non_null(s);
	snprintf(s->db, sizeof(s->db), "%s/meta.db", f->dir);
	assert_int_equal(nrs_meta_open(s->db, &s->meta), 0);
	assert_int_equal(nrs_meta_create(s->meta, 1, "s", 0644, 0, 0, 1, &a,
					 &row), 0);
	s->id = row.id;
	s->ino = a.ino;
	u = (struct nrs_head_update){ .id = s->id, .old_version = 0,
				      .head = 5, .version = 1, .epoch = 3,
				      .last_lsn = 10, .mtime_ns = 1 };
	assert_int_equal(nrs_meta_publish(s->meta, &u, 1, true), 0);
	nrs_fixture_wal_init(&s->fw);
	s->epoch = 3;
	rec_add(s, 10, s->id, 0, 5, 3, 0, true);
	return s;
}

/* Run recovery into a fresh table; its result. */
static int seam_recover(struct seam *s)
{
	struct nrs_recover_env e = {
		.meta = s->meta, .wal = &s->fw.w, .streams = &s->t,
		.data_dir = "(test)",
	};

	if (s->use_owal) {
		nrs_fixture_wal_init(&s->ofw);
		e.owal = &s->ofw.w;
	}

	if (s->t_live)
		nrs_streams_destroy(&s->t);
	nrs_streams_init(&s->t);
	s->t_live = true;
	return nrs_recover(&e, &s->next_lsn);
}

static void seam_close(struct seam *s)
{
	if (s->t_live)
		nrs_streams_destroy(&s->t);
	nrs_meta_close(s->meta);
	free(s);
}

/* Run SQL on the store with the store closed (to damage a row). */
static void seam_sql(struct seam *s, const char *sql)
{
	sqlite3 *db;

	nrs_meta_close(s->meta);
	assert_int_equal(sqlite3_open(s->db, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	assert_int_equal(nrs_meta_open(s->db, &s->meta), 0);
}

static struct nrs_stream *seam_stream(struct seam *s)
{
	struct nrs_stream *st = nrs_streams_peek(&s->t, s->id);

	assert_non_null(st);
	return st;
}

/* The stream, in memory and in the store, is at head, version, last_lsn. */
static void assert_head(struct seam *s, uint64_t head, uint64_t version,
			uint64_t last_lsn)
{
	struct nrs_stream *st = seam_stream(s);
	struct nrs_stream_row row;

	assert_int_equal(st->head, head);
	assert_int_equal(st->version, version);
	assert_int_equal(st->last_lsn, last_lsn);
	assert_int_equal(st->epoch, s->epoch);
	assert_int_equal(st->ord_epoch, s->epoch);
	/* the ordering view and the read limit start equal (stream.h) */
	assert_int_equal(st->ord_head, head);
	assert_int_equal(st->read_limit, head);
	assert_int_equal(st->ord_lsn, last_lsn);
	assert_int_equal(nrs_meta_stream_get(s->meta, s->id, &row), 0);
	assert_int_equal(row.head, head);
	assert_int_equal(row.version, version);
	assert_int_equal(row.last_lsn, last_lsn);
	assert_int_equal(row.epoch, s->epoch);
}

static void assert_ent(const struct nrs_index_ent *e, uint64_t start,
		       uint64_t end, int kind)
{
	assert_int_equal(e->start, start);
	assert_int_equal(e->end, end);
	assert_int_equal(e->kind, kind);
}

/* RC3, RC5, RC6: the continuation is re-published and indexed. */
static void test_seam_continuation(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_stream *st;

	rec_add(s, 11, s->id, 5, 6, 3, 10, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 11, 2, 11);
	assert_int_equal(s->next_lsn, 12);
	assert_int_equal(s->fw.syncs, 1);			/* RC4 */
	st = seam_stream(s);
	assert_int_equal(st->index.n, 2);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_WAL);
	assert_ent(&st->index.v[1], 5, 11, NRS_TARGET_WAL);
	assert_int_equal(st->index.v[1].seg, 1);
	assert_int_equal(st->index.v[1].off, 1100);
	assert_int_equal(st->wal_bytes,
			 nrs_walrec_total_len(5) + nrs_walrec_total_len(6));
	assert_int_equal(st->materialized, 0);
	assert_true(st->unmat_since_ns > 0);
	/* a second recovery finds the same (a pure function) */
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 11, 2, 11);
	seam_close(s);
}

/* A record in the object WAL (the seam's ofw). */
static void orec_add(struct seam *s, uint64_t lsn, uint64_t base, uint32_t len,
		     uint64_t prev)
{
	struct nrs_fixture_wal saved = s->fw;

	s->fw = s->ofw;
	rec_add(s, lsn, s->id, base, len, 3, prev, true);
	s->ofw = s->fw;
	s->fw = saved;
	s->use_owal = true;
}

/* RC8: a record counts only in the WAL of its stream's profile. */
static void test_seam_two_wals(void **state)
{
	struct seam *s = seam_open(state);

	/* local-wal stream: the object WAL's continuation is an orphan */
	orec_add(s, 11, 5, 6, 10);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 5, 1, 10);
	assert_int_equal(s->next_lsn, 12);	/* RC6 counts it all the same */
	assert_int_equal(s->ofw.syncs, 1);	/* RC4: both WALs */
	/* object-wal: the object WAL's record continues it, the local one's
	 * (LSN 12, the same base) does not count */
	assert_int_equal(nrs_meta_set_profile(s->meta, s->ino,
					      NRS_PROFILE_OBJECT_WAL), 0);
	rec_add(s, 12, s->id, 5, 2, 3, 10, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 11, 2, 11);
	seam_close(s);
}

/* RC3: in LSN order, whatever order the WAL returns them in. */
static void test_seam_lsn_order(void **state)
{
	struct seam *s = seam_open(state);

	rec_add(s, 12, s->id, 11, 3, 3, 11, true);
	rec_add(s, 11, s->id, 5, 6, 3, 10, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 14, 3, 12);
	assert_int_equal(seam_stream(s)->index.n, 3);
	assert_int_equal(s->next_lsn, 13);
	seam_close(s);
}

/* RC3: one record that fails one condition is an orphan (head stays 5),
 * and still counts for RC6. */
static void orphan(void **state, uint64_t base, uint64_t epoch, uint64_t prev,
		   bool ok)
{
	struct seam *s = seam_open(state);
	struct nrs_stream *st;

	rec_add(s, 11, s->id, base, 6, epoch, prev, ok);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 5, 1, 10);
	st = seam_stream(s);
	assert_int_equal(st->index.n, 1);	/* only [0, 5) */
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_WAL);
	assert_int_equal(s->next_lsn, 12);
	seam_close(s);
}

static void test_seam_base_below(void **state)
{
	orphan(state, 4, 3, 10, true);
}

static void test_seam_base_above(void **state)
{
	orphan(state, 6, 3, 10, true);
}

static void test_seam_wrong_prev(void **state)
{
	orphan(state, 5, 3, 9, true);
}

static void test_seam_no_prev(void **state)
{
	orphan(state, 5, 3, 0, true);
}

static void test_seam_stale_epoch(void **state)
{
	orphan(state, 5, 2, 10, true);
}

static void test_seam_chunk_failed(void **state)
{
	orphan(state, 5, 3, 10, false);
}

/* One record (LSN lsn, [base, +len), epoch, prev_lsn 10) after the
 * stream's; recovery leaves the stream at head, version, last_lsn, and
 * its epoch at the larger of 3 and a continuation's (RC9). */
static void one_record(void **state, uint64_t lsn, uint64_t base,
		       uint32_t len, uint64_t epoch, uint64_t head,
		       uint64_t version, uint64_t last_lsn)
{
	struct seam *s = seam_open(state);
	bool continues = last_lsn != 10;

	if (continues && epoch > s->epoch)
		s->epoch = epoch;				/* RC9 */
	rec_add(s, lsn, s->id, base, len, epoch, 10, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, head, version, last_lsn);
	assert_int_equal(s->next_lsn, (lsn > 10 ? lsn : 10) + 1);	/* RC6 */
	seam_close(s);
}

/* RC3: epoch >= the stream's; RC9: the stream's epoch becomes it. */
static void test_seam_higher_epoch(void **state)
{
	one_record(state, 11, 5, 6, 4, 11, 2, 11);
}

/* RC3: an empty record continues nothing (its version step would count). */
static void test_seam_empty_record(void **state)
{
	one_record(state, 11, 5, 0, 3, 5, 1, 10);
}

/* A record of no bytes: a fence (pipeline.c PL9). */
static void fence_add(struct seam *s, uint64_t lsn, uint64_t base,
		      uint64_t epoch, uint64_t prev)
{
	rec_add(s, lsn, s->id, base, 0, epoch, prev, true);
	s->fw.v[s->fw.n - 1].rec.n_appends = 0;
}

/* RC9: a fence record at the head raises the epoch and nothing else; the
 * append after it names the same predecessor and continues; one under
 * the old epoch after it is an orphan; fences off the head move nothing. */
static void test_seam_fence_record(void **state)
{
	struct seam *s = seam_open(state);

	fence_add(s, 11, 5, 7, 10);
	fence_add(s, 12, 4, 9, 10);		/* not at the head */
	fence_add(s, 13, 5, 9, 11);		/* names the fence: not */
	rec_add(s, 14, s->id, 5, 6, 7, 10, true);
	rec_add(s, 15, s->id, 11, 2, 3, 14, true);	/* fenced: orphan */
	s->epoch = 7;
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 11, 2, 14);
	assert_int_equal(s->next_lsn, 16);
	assert_int_equal(seam_stream(s)->index.n, 2);	/* not indexed */
	assert_int_equal(seam_recover(s), 0);		/* a pure function */
	assert_head(s, 11, 2, 14);
	seam_close(s);
}

/* RC9: a fence alone (no append after it) is brought back too. */
static void test_seam_fence_alone(void **state)
{
	struct seam *s = seam_open(state);

	fence_add(s, 11, 5, 8, 10);
	s->epoch = 8;
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 5, 1, 10);
	assert_int_equal(s->next_lsn, 12);
	seam_close(s);
}

/* RC3: a record at or below the head's last LSN is not a continuation. */
static void test_seam_old_lsn(void **state)
{
	one_record(state, 7, 5, 6, 3, 5, 1, 10);
}

/* RC3: a record of a stream that does not exist is an orphan; RC6 counts
 * it; RD4: no new stream takes its id. */
static void test_seam_no_stream(void **state)
{
	struct seam *s = seam_open(state);
	uint64_t gone = s->id + 50;
	struct nrs_attr a;
	struct nrs_stream_row row;

	rec_add(s, 11, gone, 0, 6, 0, 0, true);
	assert_int_equal(seam_recover(s), 0);
	assert_null(nrs_streams_peek(&s->t, gone));
	assert_head(s, 5, 1, 10);
	assert_int_equal(s->next_lsn, 12);
	assert_int_equal(nrs_meta_create(s->meta, 1, "new", 0644, 0, 0, 1, &a,
					 &row), 0);
	assert_true(row.id > gone);				/* RD4 */
	seam_close(s);
}

/* RC4: the scanned WAL is synced before anything is published on it; if
 * that fails, recovery fails and nothing is published. */
static void test_seam_sync_fails(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_stream_row row;

	rec_add(s, 11, s->id, 5, 6, 3, 10, true);
	s->fw.sync_err = -EIO;
	assert_int_equal(seam_recover(s), -EIO);
	assert_int_equal(s->fw.syncs, 1);
	assert_int_equal(s->fw.syncs_at_scan, 0);	/* after the scan */
	assert_int_equal(nrs_meta_stream_get(s->meta, s->id, &row), 0);
	assert_int_equal(row.head, 5);
	assert_int_equal(row.last_lsn, 10);
	seam_close(s);
}

/* RC6: the next LSN is above the store's last LSN too. */
static void test_seam_next_lsn_from_store(void **state)
{
	struct seam *s = seam_open(state);

	s->fw.n = 0;		/* the WAL was reclaimed */
	assert_int_equal(seam_recover(s), 0);
	assert_int_equal(s->next_lsn, 11);
	seam_close(s);
}

/* RD2: a record no daemon writes is an orphan and out of RC6. */
static void test_seam_impossible_record(void **state)
{
	struct seam *s = seam_open(state);

	rec_add(s, NRS_WALREC_LSN_MAX + 1, s->id, 5, 6, 3, 10, true);
	rec_add(s, 20, s->id + 50, NRS_HEAD_MAX - 2, 6, 0, 0, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 5, 1, 10);
	assert_int_equal(s->next_lsn, 11);
	seam_close(s);
}

/* RC1: an inode unlinked while open, left by a crash, is forgotten. */
static void test_seam_unlinked_forgotten(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_attr a, out;
	struct nrs_stream_row row;

	assert_int_equal(nrs_meta_create(s->meta, 1, "u", 0644, 0, 0, 1, &a,
					 &row), 0);
	assert_int_equal(nrs_meta_unlink(s->meta, 1, "u", 2, &out), 0);
	assert_int_equal(nrs_meta_getattr(s->meta, a.ino, &out), 0);
	assert_int_equal(seam_recover(s), 0);
	assert_int_equal(nrs_meta_getattr(s->meta, a.ino, &out), -ENOENT);
	assert_int_equal(nrs_meta_stream_get(s->meta, row.id, &row), -ENOENT);
	assert_null(nrs_streams_peek(&s->t, row.id));
	seam_close(s);
}

/* Commit an object row of the stream for [start, end), length len, at
 * (seg, off) (0 0: a copied object). */
static void obj_commit_at(struct seam *s, uint64_t start, uint64_t end,
			  uint64_t len, uint64_t seg, uint64_t off)
{
	static const unsigned char sha[32];
	struct nrs_obj_row o = {
		.stream_id = s->id, .start = start, .end = end, .length = len,
		.ctime_ns = 1, .seg = seg, .off = off,
	};

	assert_int_equal(nrs_meta_obj_prepare(s->meta, &o), 0);
	assert_int_equal(nrs_meta_obj_publish(s->meta, o.gen, sha), 0);
}

static void obj_commit(struct seam *s, uint64_t start, uint64_t end,
		       uint64_t len)
{
	obj_commit_at(s, start, end, len, 0, 0);
}

/* RC5: the committed objects first, then the WAL above materialized. */
static void test_seam_index_objects(void **state)
{
	struct seam *s = seam_open(state);
	uint64_t len = nrs_objfmt_hdr_len(5) + 5;
	struct nrs_stream *st;

	obj_commit(s, 0, 5, len);
	rec_add(s, 11, s->id, 5, 6, 3, 10, true);
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 11, 2, 11);
	st = seam_stream(s);
	assert_int_equal(st->materialized, 5);
	assert_int_equal(st->obj_bytes, len);
	assert_int_equal(st->index.n, 2);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_OBJ);
	assert_ent(&st->index.v[1], 5, 11, NRS_TARGET_WAL);
	assert_int_equal(st->wal_bytes, nrs_walrec_total_len(6));
	seam_close(s);
}

/* RC5a, RC5b: a lost record in the middle of the chain leaves exactly its
 * range a gap; the records on both sides are indexed. */
static void test_seam_index_gap(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_head_update u = {
		.id = s->id, .old_version = 1, .head = 14, .version = 3,
		.epoch = 3, .last_lsn = 12, .mtime_ns = 2,
	};
	struct nrs_stream *st;

	assert_int_equal(nrs_meta_publish(s->meta, &u, 1, true), 0);
	rec_add(s, 12, s->id, 11, 3, 3, 11, true);	/* LSN 11 is lost */
	assert_int_equal(seam_recover(s), 0);
	assert_head(s, 14, 3, 12);
	st = seam_stream(s);
	assert_int_equal(st->index.n, 2);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_WAL);
	assert_ent(&st->index.v[1], 11, 14, NRS_TARGET_WAL);
	seam_close(s);
}

/* RD3: an object row no materializer writes is not indexed. */
static void test_seam_impossible_object(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_stream *st;

	obj_commit(s, 0, 5, nrs_objfmt_hdr_len(5) + 4);
	assert_int_equal(seam_recover(s), 0);
	st = seam_stream(s);
	assert_int_equal(st->materialized, 0);
	assert_int_equal(st->obj_bytes, 0);
	assert_int_equal(st->index.n, 1);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_WAL);
	seam_close(s);
}

/* RD5: an adopted row is indexed where its record is, unread; RD3: one
 * whose offset no record can have is not indexed at all. */
static void test_seam_index_adopted(void **state)
{
	struct seam *s = seam_open(state);
	uint64_t len = nrs_walrec_total_len(5);
	struct nrs_stream *st;

	obj_commit_at(s, 0, 5, len, 3, 4096);
	rec_add(s, 11, s->id, 5, 6, 3, 10, true);
	assert_int_equal(seam_recover(s), 0);
	st = seam_stream(s);
	assert_int_equal(st->materialized, 5);
	assert_int_equal(st->obj_bytes, len);
	assert_int_equal(st->index.n, 2);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_ADOPT);
	assert_int_equal(st->index.v[0].seg, 3);
	assert_int_equal(st->index.v[0].off, 4096);
	assert_ent(&st->index.v[1], 5, 11, NRS_TARGET_WAL);
	seam_close(s);
}

static void test_seam_impossible_adopted(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_stream *st;

	obj_commit_at(s, 0, 5, nrs_walrec_total_len(5), 3, 4100);
	assert_int_equal(seam_recover(s), 0);
	st = seam_stream(s);
	assert_int_equal(st->materialized, 0);
	assert_int_equal(st->index.n, 1);
	assert_ent(&st->index.v[0], 0, 5, NRS_TARGET_WAL);
	seam_close(s);
}

/* RC7: a row failing its checksum is offline; nothing is re-published
 * onto it, and no index is built. */
static void test_seam_corrupt_row(void **state)
{
	struct seam *s = seam_open(state);
	struct nrs_stream_row row;
	struct nrs_stream *st;
	char sql[128];

	snprintf(sql, sizeof(sql), "UPDATE streams SET head = 6 WHERE id = %"
		 PRIu64 ";", s->id);
	seam_sql(s, sql);
	/* what would continue a stream known as nothing but its id */
	rec_add(s, 11, s->id, 0, 6, 0, 0, true);
	assert_int_equal(seam_recover(s), 0);
	st = seam_stream(s);
	assert_true(st->corrupt);
	assert_int_equal(st->head, 0);
	assert_int_equal(st->last_lsn, 0);
	assert_int_equal(st->index.n, 0);
	assert_int_equal(nrs_meta_stream_get(s->meta, s->id, &row), -EUCLEAN);
	assert_int_equal(s->next_lsn, 12);
	seam_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_continuation_republished,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_higher_epoch_republished,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_stale_epoch_orphan,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_wrong_base_orphan,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_wrong_prev_orphan,
						fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_bad_chunk_orphan,
						fix_setup, fix_teardown),
#define SEAM(t) cmocka_unit_test_setup_teardown(t, fix_setup, fix_teardown)
		SEAM(test_seam_continuation),
		SEAM(test_seam_lsn_order),
		SEAM(test_seam_two_wals),
		SEAM(test_seam_base_below),
		SEAM(test_seam_base_above),
		SEAM(test_seam_wrong_prev),
		SEAM(test_seam_no_prev),
		SEAM(test_seam_stale_epoch),
		SEAM(test_seam_chunk_failed),
		SEAM(test_seam_higher_epoch),
		SEAM(test_seam_empty_record),
		SEAM(test_seam_fence_record),
		SEAM(test_seam_fence_alone),
		SEAM(test_seam_old_lsn),
		SEAM(test_seam_no_stream),
		SEAM(test_seam_sync_fails),
		SEAM(test_seam_next_lsn_from_store),
		SEAM(test_seam_impossible_record),
		SEAM(test_seam_unlinked_forgotten),
		SEAM(test_seam_index_objects),
		SEAM(test_seam_index_gap),
		SEAM(test_seam_impossible_object),
		SEAM(test_seam_index_adopted),
		SEAM(test_seam_impossible_adopted),
		SEAM(test_seam_corrupt_row),
#undef SEAM
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
