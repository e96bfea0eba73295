/*
 * test_wal_object_linger.c - when the object WAL seals its open object
 * (wal_object.c OW9, OW13, OW15), over the real embedded directory store: a
 * lone writer's linger counts from the previous seal, so the first object
 * of a quiet WAL is PUT at its first sync, and one opened soon after a
 * seal still gathers the batches written during the linger; after an
 * object that appends shared, the linger counts from the first write;
 * an object that holds no appended byte (META records, fences) is sealed
 * by its sync at once while no other is unproven, and gathers the
 * changes written while one is (OW15).
 *
 * No figure is measured: a sync that would linger is told apart by a
 * linger far longer than the wait (20 s against 4 s), and an object still
 * open by where the next batch goes.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture_owal.h"
#include "obj/objstore.h"
#include "util/failpoint.h"
#include "wal/metarec.h"
#include "wal/wal.h"
#include "wal/walrec.h"

/* The test's directory and store (fixture_owal.h). */
struct fx {
	struct nrs_fixture_owal d;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || nrs_fixture_owal_open(&f->d, "owlinger")) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc = nrs_fixture_owal_close(&f->d);

	free(f);
	return rc;
}

static struct nrs_wal *wopen(struct fx *f, uint64_t linger_ms)
{
	struct nrs_wal_object_opts o = {
		.store = f->d.store, .dir = f->d.state, .inflight_max = 4,
		.timeout_ms = 60000, .linger_ms = linger_ms,
	};
	struct nrs_wal *w = NULL;

	assert_int_equal(nrs_wal_object_open(&o, &w), 0);
	return w;
}

/* A batch of one append: one record of 1000 bytes; *end: just past it. */
static void put_batch(struct nrs_wal *w, struct nrs_wal_pos *pos,
		      struct nrs_wal_pos *end)
{
	assert_int_equal(nrs_fixture_owal_batch(w, pos, end), 0);
}

/* OW15: a batch that appends nothing: a META record of a change (meta
 * false: a fence, a record of no bytes); *end: just past it. */
static void put_nothing(struct nrs_wal *w, bool meta, struct nrs_wal_pos *pos,
			struct nrs_wal_pos *end)
{
	static const unsigned char change[40] = "a changeset";
	unsigned char fixed[NRS_METAREC_FIXED], buf[256] = { 0 };
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = 3, .stream_id = 9, .base = 1000,
		.epoch = 2, .prev_lsn = 1,
	};
	struct iovec payload[2] = { { fixed, sizeof(fixed) },
				    { (void *)change, sizeof(change) } };
	struct iovec iov = { buf, 0 };
	size_t hl;

	if (meta)
		assert_int_equal(nrs_metarec_make(3, 7, sizeof(change), &r,
						  fixed), 0);
	hl = nrs_walrec_hdr_len(r.len);
	assert_int_equal(nrs_walrec_encode_hdr(&r, payload, meta ? 2 : 0, buf,
					       hl), (ssize_t)hl);
	if (meta) {
		memcpy(buf + hl, fixed, sizeof(fixed));
		memcpy(buf + hl + sizeof(fixed), change, sizeof(change));
	}
	iov.iov_len = nrs_walrec_total_len(r.len);
	assert_true(iov.iov_len <= sizeof(buf));
	assert_int_equal(nrs_wal_write(w, &iov, 1, pos), 0);
	*end = *pos;
	end->off += iov.iov_len;
}

/* A sync on a thread of its own. */
struct bg {
	struct nrs_wal *w;
	struct nrs_wal_pos end;
	int err;
	atomic_bool done;
	pthread_t t;
};

static void *bg_run(void *arg)
{
	struct bg *b = arg;

	b->err = nrs_wal_sync(b->w, b->end);
	atomic_store(&b->done, true);
	return NULL;
}

static void bg_start(struct bg *b, struct nrs_wal *w, struct nrs_wal_pos end)
{
	b->w = w;
	b->end = end;
	b->err = 1;
	atomic_store(&b->done, false);
	assert_int_equal(pthread_create(&b->t, NULL, bg_run, b), 0);
}

/* Whether b's sync returned within ms. */
static bool bg_done_within(struct bg *b, unsigned int ms)
{
	for (unsigned int i = 0; i < ms / 10 && !atomic_load(&b->done); i++)
		usleep(10000);
	return atomic_load(&b->done);
}

/* A sync up to end returns well within the linger of 20 s, and proves. */
static void assert_sync_prompt(struct nrs_wal *w, struct nrs_wal_pos end)
{
	struct bg b;
	bool prompt;

	bg_start(&b, w, end);
	prompt = bg_done_within(&b, 4000);
	pthread_join(b.t, NULL);	/* at the latest after the linger */
	assert_true(prompt);
	assert_int_equal(b.err, 0);
}

/* OW13: nothing sealed yet -- a WAL just opened, a writer's first append
 * -- so the first sync PUTs the object at once, whatever the linger. */
static void test_first_at_once(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 20000);
	struct nrs_wal_pos pos, end;

	put_batch(w, &pos, &end);
	assert_sync_prompt(w, end);
	nrs_wal_close(w);
}

/* OW9, OW13: an object opened within the linger after a seal of a lone
 * batch is not sealed by its sync until the linger is over: a batch
 * written meanwhile joins it, and one sync proves both. */
static void test_linger_after_seal(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 2000);
	struct nrs_wal_pos a, b, c, ea, eb, ec;
	struct bg s;

	put_batch(w, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), 0);	/* sealed at once */
	put_batch(w, &b, &eb);
	assert_true(b.seg > a.seg);
	bg_start(&s, w, eb);
	usleep(100000);
	put_batch(w, &c, &ec);		/* the sync still lingers */
	pthread_join(s.t, NULL);
	assert_int_equal(s.err, 0);
	assert_int_equal(c.seg, b.seg);
	assert_int_equal(c.off, eb.off);
	assert_int_equal(nrs_wal_sync(w, ec), 0);
	nrs_wal_close(w);
}

/* OW9, OW13: after an object that two appends shared, the next lingers
 * from its own first write, however long ago the last seal was. */
static void test_shared_lingers(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 1000);
	struct nrs_wal_pos a, b, c, d, ea, eb, ec, ed;
	struct bg s;

	put_batch(w, &a, &ea);
	put_batch(w, &b, &eb);
	assert_int_equal(b.seg, a.seg);
	assert_int_equal(nrs_wal_sync(w, eb), 0);	/* the first: at once */
	usleep(1200000);		/* the linger since that seal is over */
	put_batch(w, &c, &ec);
	bg_start(&s, w, ec);
	usleep(100000);
	put_batch(w, &d, &ed);		/* the sync still lingers */
	pthread_join(s.t, NULL);
	assert_int_equal(s.err, 0);
	assert_int_equal(d.seg, c.seg);
	assert_int_equal(nrs_wal_sync(w, ed), 0);
	nrs_wal_close(w);
}

/* OW15: with nothing unproven, an object that holds no appended byte --
 * a META record, a fence's record -- is sealed by its sync at once, also
 * right after a seal (where OW13 alone would linger 20 s). */
static void test_nothing_appended_at_once(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 20000);
	struct nrs_wal_pos a, b, c, ea, eb, ec;

	put_nothing(w, true, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), 0);	/* the first: at once */
	put_nothing(w, true, &b, &eb);
	assert_true(b.seg > a.seg);
	assert_sync_prompt(w, eb);
	put_nothing(w, false, &c, &ec);
	assert_true(c.seg > b.seg);
	assert_sync_prompt(w, ec);
	nrs_wal_close(w);
}

/* OW15: while an object is unproven (its PUT fails, and is retried), the
 * changes written meanwhile gather in the open object, which its sync
 * seals once that one is proven: one object for both. */
static void test_nothing_appended_gathers(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 20000);
	struct nrs_wal_pos a, b, c, d, ea, eb, ec, ed;
	struct bg sb, sc;

	put_nothing(w, true, &a, &ea);
	assert_int_equal(nrs_wal_sync(w, ea), 0);	/* the run's marker */
	assert_int_equal(nrs_failpoint_parse("owal.before_put=error:EIO"), 0);
	put_nothing(w, true, &b, &eb);
	bg_start(&sb, w, eb);		/* sealed at once; its PUT fails */
	usleep(300000);
	put_nothing(w, true, &c, &ec);
	assert_true(c.seg > b.seg);
	bg_start(&sc, w, ec);		/* b is unproven: c's object stays */
	usleep(300000);
	put_nothing(w, false, &d, &ed);
	assert_int_equal(d.seg, c.seg);
	assert_int_equal(d.off, ec.off);
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
	pthread_join(sb.t, NULL);
	assert_int_equal(sb.err, 0);
	pthread_join(sc.t, NULL);	/* sealed once b is proven */
	assert_int_equal(sc.err, 0);
	assert_int_equal(nrs_wal_sync(w, ed), 0);
	nrs_wal_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_first_at_once, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_linger_after_seal, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shared_lingers, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_nothing_appended_at_once,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_appended_gathers,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
