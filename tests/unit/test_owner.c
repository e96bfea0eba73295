/*
 * test_owner.c - the owner record of a bucket (owner/owner.c OR1-OR5),
 * its fencing store (owner_store.c OS1) and the data directory's owner id
 * (owner_id.c), on the embedded store and a fake clock: two owners in one
 * process, one bucket.  CAS mode runs on the embedded store's conditional
 * puts; lease mode is forced on the same store (its plain puts).  The fake
 * clock's sleep advances time and lets the "other daemon" act (renew, or
 * stay silent as one cut off from the store).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objstore.h"
#include "owner/owner.h"

#define LEASE_MS	300
#define MARGIN_MS	(LEASE_MS / 5)
#define MS		1000000ull

static const char ID_A[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char ID_B[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

struct fx {
	char root[PATH_MAX];
	char dir[PATH_MAX + 16];
	struct nrs_objstore *st;
	uint64_t now;			/* the fake monotonic clock, ns */
	struct nrs_owner_clock clk;
	/* the other daemon, acting while someone sleeps */
	struct nrs_owner *other;
	bool other_renews;		/* false: cut off from the store */
	uint64_t other_next;		/* its next renewal, ns */
	uint64_t other_until;		/* it is cut off then (0: never) */
	uint64_t other_last_ack;	/* last time its may_ack was true */
};

static uint64_t f_mono(void *ctx)
{
	return ((struct fx *)ctx)->now;
}

static int64_t f_wall(void *ctx)
{
	return (int64_t)(((struct fx *)ctx)->now / MS) + 1700000000000;
}

/* Time passes in 1 ms steps; the other daemon renews every LEASE_MS / 3
 * (OR1) if it may. */
static void f_sleep(void *ctx, uint64_t ms)
{
	struct fx *f = ctx;

	for (uint64_t i = 0; i < ms; i++) {
		f->now += MS;
		if (!f->other)
			continue;
		if (nrs_owner_may_ack(f->other, f->now))
			f->other_last_ack = f->now;
		if (f->other_until && f->now >= f->other_until)
			f->other_renews = false;
		if (f->other_renews && f->now >= f->other_next) {
			(void)nrs_owner_renew(f->other);
			f->other_next = f->now + LEASE_MS / 3 * MS;
		}
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	assert_int_equal(nrs_fixture_mkdtemp(f->root, sizeof(f->root),
					     "test_owner"), 0);
	snprintf(f->dir, sizeof(f->dir), "%s/objects", f->root);
	assert_int_equal(nrs_objstore_dir_open(f->dir, &f->st), 0);
	f->now = 1000 * MS;
	f->clk = (struct nrs_owner_clock){
		.mono_ns = f_mono, .wall_ms = f_wall, .sleep_ms = f_sleep,
		.ctx = f,
	};
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	nrs_obj_close(f->st);
	rc = nrs_fixture_rmtree(f->root);
	free(f);
	return rc;
}

static struct nrs_owner *owner(struct fx *f, const char *id,
			       enum nrs_owner_mode mode)
{
	struct nrs_owner_opts o = {
		.store = f->st, .lease_ms = LEASE_MS, .clock = &f->clk,
		.mode = mode,
	};
	struct nrs_owner *w;

	snprintf(o.id, sizeof(o.id), "%s", id);
	assert_int_equal(nrs_owner_bucket_open(&o, &w), 0);
	return w;
}

static uint64_t epoch_of(struct nrs_owner *w)
{
	struct nrs_owner_status s;

	nrs_owner_status(w, &s);
	return s.epoch;
}

/* CAS: claim, refusal, takeover with epoch + 1, the old owner fenced
 * (OR2) for good, and a second daemon of the old id refused. */
static void test_cas_takeover(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_UNKNOWN);
	struct nrs_owner *b = owner(f, ID_B, NRS_OWNER_UNKNOWN), *a2;
	struct nrs_owner_status s;

	assert_int_equal(nrs_owner_claim(a, false), 0);
	nrs_owner_status(a, &s);
	assert_int_equal(s.mode, NRS_OWNER_CAS);	/* the probe (OC2) */
	assert_int_equal(s.state, NRS_OWNER_OWNED);
	assert_int_equal(s.epoch, 1);
	assert_true(nrs_owner_may_ack(a, f->now));
	assert_int_equal(nrs_owner_claim(b, false), -EBUSY);
	assert_false(nrs_owner_may_ack(b, f->now));
	assert_int_equal(nrs_owner_claim(b, true), 0);
	assert_int_equal(epoch_of(b), 2);
	assert_true(nrs_owner_may_ack(b, f->now));
	assert_false(nrs_owner_is_fenced(a));	/* it does not know yet */
	assert_int_equal(nrs_owner_renew(a), -ESTALE);	/* OR2 */
	assert_true(nrs_owner_is_fenced(a));
	assert_false(nrs_owner_may_ack(a, f->now));
	assert_int_equal(nrs_owner_claim(a, false), -ESTALE);	/* final */
	assert_int_equal(nrs_owner_renew(b), 0);
	/* the same id in a new daemon: the record is B's now */
	a2 = owner(f, ID_A, NRS_OWNER_UNKNOWN);
	assert_int_equal(nrs_owner_claim(a2, false), -EBUSY);
	nrs_owner_close(a2);
	nrs_owner_close(a);
	nrs_owner_close(b);
}

/* A daemon that finds its own record goes on with its epoch. */
static void test_ours_again(void **state)
{
	struct fx *f = *state;

	for (int m = NRS_OWNER_CAS; m <= NRS_OWNER_LEASE; m++) {
		struct nrs_owner *a = owner(f, ID_A, (enum nrs_owner_mode)m);

		assert_int_equal(nrs_owner_claim(a, false), 0);
		assert_int_equal(epoch_of(a), 1);
		nrs_owner_close(a);
	}
}

/* OR3: the window of acknowledgements ends lease - margin after the
 * start of the last good renewal, and moves with each. */
static void test_ack_window(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_CAS);
	uint64_t t0 = f->now, end = t0 + (LEASE_MS - MARGIN_MS) * MS;

	assert_int_equal(nrs_owner_claim(a, false), 0);
	assert_true(nrs_owner_may_ack(a, end - 1));
	assert_false(nrs_owner_may_ack(a, end));
	f->now += 100 * MS;
	assert_int_equal(nrs_owner_renew(a), 0);
	assert_true(nrs_owner_may_ack(a, end + 100 * MS - 1));
	assert_false(nrs_owner_may_ack(a, end + 100 * MS));
	nrs_owner_close(a);
}

/*
 * OR4: a takeover returns only once the old owner, cut off from the store
 * (it never learns it was fenced), can acknowledge nothing more.
 */
static void takeover_cut_off(struct fx *f, enum nrs_owner_mode mode,
			     bool renews_first)
{
	struct nrs_owner *a = owner(f, ID_A, mode);
	struct nrs_owner *b = owner(f, ID_B, mode);

	assert_int_equal(nrs_owner_claim(a, false), 0);
	f->other = a;
	f->other_renews = renews_first;
	f->other_next = f->now + LEASE_MS / 3 * MS;
	if (renews_first)	/* alive while B watches (OR5), then cut off */
		f_sleep(f, LEASE_MS / 2);
	f->other_renews = false;
	assert_int_equal(nrs_owner_claim(b, true), 0);
	assert_false(nrs_owner_may_ack(a, f->now));	/* OR4 */
	assert_true(f->other_last_ack < f->now);
	assert_true(nrs_owner_may_ack(b, f->now));
	assert_int_equal(epoch_of(b), 2);
	f->other = NULL;
	assert_int_equal(nrs_owner_renew(a), -ESTALE);
	nrs_owner_close(a);
	nrs_owner_close(b);
}

static void test_cas_cut_off(void **state)
{
	takeover_cut_off(*state, NRS_OWNER_CAS, false);
}

static void test_lease_dead_owner(void **state)
{
	struct fx *f = *state;
	uint64_t t0 = f->now;

	takeover_cut_off(f, NRS_OWNER_LEASE, false);
	/* OR5: it watched the record for a whole lease first */
	assert_true(f->now - t0 >= (LEASE_MS + MARGIN_MS) * MS);
}

/* OR5 then OR4: the record moved while B watched it (A renewed, then
 * lost the store): B waits A's window out after its write. */
static void test_lease_moved_then_cut(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_LEASE);
	struct nrs_owner *b = owner(f, ID_B, NRS_OWNER_LEASE);

	assert_int_equal(nrs_owner_claim(a, false), 0);
	f->other = a;
	f->other_renews = true;
	f->other_next = f->now + LEASE_MS / 3 * MS;
	/* A renews through B's watch (lease + margin, in naps of lease / 3:
	 * 4 naps, 400 ms) and is cut off right after its renewal at the end
	 * of the watch, just before B's write: its window is as late as it
	 * can be, and B's settle delay alone does not cover it */
	f->other_until = f->now + (4 * (LEASE_MS / 3) + 1) * MS;
	assert_int_equal(nrs_owner_claim(b, true), 0);
	assert_true(nrs_owner_is_fenced(a) || !nrs_owner_may_ack(a, f->now));
	assert_true(f->other_last_ack < f->now);
	assert_true(nrs_owner_may_ack(b, f->now));
	f->other = NULL;
	assert_int_equal(nrs_owner_renew(a), -ESTALE);
	nrs_owner_close(a);
	nrs_owner_close(b);
}

/* Lease: a live owner's next renewal finds the takeover and fences it
 * (OR2); the new owner renews on. */
static void test_lease_live_owner(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_LEASE);
	struct nrs_owner *b = owner(f, ID_B, NRS_OWNER_LEASE);

	assert_int_equal(nrs_owner_claim(a, false), 0);
	assert_int_equal(nrs_owner_claim(b, false), -EBUSY);
	f->other = a;
	f->other_renews = true;
	f->other_next = f->now + LEASE_MS / 3 * MS;
	assert_int_equal(nrs_owner_claim(b, true), 0);
	assert_true(nrs_owner_is_fenced(a));
	assert_true(f->other_last_ack < f->now);
	f->other = NULL;
	assert_int_equal(nrs_owner_renew(b), 0);
	assert_int_equal(epoch_of(b), 2);
	nrs_owner_close(a);
	nrs_owner_close(b);
}

/* Bytes under the key that are no record: refused, unless recover. */
static void test_damaged_record(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_CAS);
	char junk[64];

	memset(junk, 'x', sizeof(junk));
	assert_int_equal(nrs_obj_put(f->st, "owner", junk, sizeof(junk), NULL,
				     NULL), 0);
	assert_int_equal(nrs_owner_claim(a, false), -EUCLEAN);
	assert_int_equal(nrs_owner_claim(a, true), -EIO);	/* no etag */
	nrs_owner_close(a);
	/* one with an etag (a conditional put of junk) is taken over */
	assert_int_equal(nrs_obj_del(f->st, "owner"), 0);
	{
		char etag[NRS_ETAG_MAX];

		assert_int_equal(nrs_obj_put_cond(f->st, "owner", junk,
						  sizeof(junk), NULL, NULL,
						  NULL, etag), 0);
	}
	a = owner(f, ID_A, NRS_OWNER_CAS);
	assert_int_equal(nrs_owner_claim(a, true), 0);
	assert_int_equal(epoch_of(a), 1);
	nrs_owner_close(a);
}

/* OS1: a fenced owner's store PUTs and DELETEs nothing; reads go on. */
static void test_fenced_store(void **state)
{
	struct fx *f = *state;
	struct nrs_owner *a = owner(f, ID_A, NRS_OWNER_CAS);
	struct nrs_owner *b = owner(f, ID_B, NRS_OWNER_CAS);
	struct nrs_objstore *w;
	struct nrs_obj_meta m;
	char buf[8], etag[NRS_ETAG_MAX];

	assert_int_equal(nrs_owner_claim(a, false), 0);
	assert_int_equal(nrs_owner_store_wrap(f->st, a, &w), 0);
	assert_false(nrs_obj_wants_md5(w));	/* the dir store's */
	assert_int_equal(nrs_obj_put(w, "s/1", "abc", 3, NULL, NULL), 0);
	assert_int_equal(nrs_obj_put(w, "s/2", "def", 3, NULL, NULL), 0);
	assert_int_equal(nrs_owner_claim(b, true), 0);
	assert_int_equal(nrs_owner_renew(a), -ESTALE);
	assert_int_equal(nrs_obj_put(w, "s/3", "ghi", 3, NULL, NULL), -ESTALE);
	assert_int_equal(nrs_obj_put_cond(w, "s/4", "x", 1, NULL, NULL, NULL,
					  etag), -ESTALE);
	assert_int_equal(nrs_obj_del(w, "s/1"), -ESTALE);
	assert_int_equal(nrs_obj_head(f->st, "s/3", &m), -ENOENT);
	assert_int_equal(nrs_obj_head(w, "s/1", &m), 0);	/* still there */
	assert_int_equal(nrs_obj_get(w, "s/2", 0, buf, sizeof(buf)), 3);
	nrs_obj_close(w);
	nrs_owner_close(a);
	nrs_owner_close(b);
}

/* owner_id.c: made once, kept, marked; a damaged file refused. */
static void test_owner_id(void **state)
{
	struct fx *f = *state;
	char id[NRS_OWNER_ID_LEN + 1], id2[NRS_OWNER_ID_LEN + 1];
	char path[PATH_MAX * 2];
	bool was = true;
	FILE *fp;

	assert_int_equal(nrs_owner_id_load(f->root, id, &was), 0);
	assert_false(was);
	assert_int_equal(strlen(id), NRS_OWNER_ID_LEN);
	assert_int_equal(nrs_owner_id_load(f->root, id2, &was), 0);
	assert_string_equal(id, id2);
	assert_false(was);
	assert_int_equal(nrs_owner_id_mark_owner(f->root, id), 0);
	assert_int_equal(nrs_owner_id_load(f->root, id2, &was), 0);
	assert_string_equal(id, id2);
	assert_true(was);
	snprintf(path, sizeof(path), "%s/owner-id", f->root);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("not an id\n", fp);
	fclose(fp);
	assert_int_equal(nrs_owner_id_load(f->root, id2, &was), -EUCLEAN);
	/* the keys of the owner layer, not streams' (fsck skips them) */
	assert_true(nrs_owner_key_is_ours("owner"));
	assert_true(nrs_owner_key_is_ours("owner-probe/0123456789abcdef"));
	assert_false(nrs_owner_key_is_ours("owners"));
	assert_false(nrs_owner_key_is_ours("s/0000000000000001/x"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cas_takeover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ours_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cas_cut_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_dead_owner, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lease_moved_then_cut, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lease_live_owner, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_damaged_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fenced_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_owner_id, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
