/*
 * test_recovery.c - start-up recovery (recovery.c R3) through the core's
 * public API: a real data directory, a real SQLite file, a real local WAL.
 *
 * Each test commits one append through the core, closes it, then puts one
 * more record straight into the WAL with the WAL's own API -- the record a
 * crash between the WAL write and the head's publication leaves behind --
 * and reopens the core.  Recovery must re-publish that record exactly when
 * it continues the stream's head (R3): same base, the head's last LSN as
 * its predecessor, an epoch not lower than the stream's, every chunk
 * verified.  Each test changes one of those and checks the head did not
 * move; the control shows the untouched record does move it, so none of
 * these can pass by recovery ignoring the WAL.
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

#include "fixture.h"
#include "core/core.h"
#include "wal/wal.h"
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
	/* a second recovery finds the same (R3 is a pure function) */
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
