/*
 * test_wal_object_wake.c - the object WAL's wakeups (wal_object.c OW19):
 * whoever waits for a state change is woken by it, not by a timer.  The
 * WAL runs with a linger and a timeout of 60 s, so a wakeup that is lost
 * leaves its waiter asleep for a minute; each step must be over within
 * 5 s (a deadline far from what it takes, not a figure measured).
 *
 * And a sync that waits does not hold back the open object behind it
 * (OW20).
 *
 * Over the real embedded directory store, wrapped: while the gate is
 * shut, a PUT of a WAL object (not a run's marker, OW11) waits for it.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture_owal.h"
#include "obj/objstore.h"
#include "wal/wal.h"
#include "wal/walrec.h"

#define LONG_MS		60000	/* linger and timeout: a lost wakeup */
#define PROMPT_MS	5000	/* what a woken waiter takes, at most */

/* The store: d.store, behind a gate. */
struct gated {
	struct nrs_objstore base;
	struct nrs_objstore *real;
	atomic_bool shut;	/* PUTs of objects wait */
	atomic_int stalled;	/* PUTs waiting now */
};

struct fx {
	struct nrs_fixture_owal d;
	struct gated g;
};

static struct nrs_objstore *real(struct nrs_objstore *s)
{
	return ((struct gated *)s)->real;
}

static int g_put(struct nrs_objstore *s, const char *key, const void *buf,
		 size_t len, const unsigned char md5[NRS_MD5_LEN],
		 const unsigned char sha[NRS_SHA256_LEN])
{
	struct gated *g = (struct gated *)s;
	size_t n = strlen(key);

	if (n < 11 || strcmp(key + n - 11, "/0000000000") != 0) {
		atomic_fetch_add(&g->stalled, 1);
		while (atomic_load(&g->shut))
			usleep(1000);
		atomic_fetch_sub(&g->stalled, 1);
	}
	return nrs_obj_put(g->real, key, buf, len, md5, sha);
}

static int g_head(struct nrs_objstore *s, const char *key,
		  struct nrs_obj_meta *out)
{
	return nrs_obj_head(real(s), key, out);
}

static ssize_t g_get(struct nrs_objstore *s, const char *key, uint64_t off,
		     void *buf, size_t len)
{
	return nrs_obj_get(real(s), key, off, buf, len);
}

static int g_del(struct nrs_objstore *s, const char *key)
{
	return nrs_obj_del(real(s), key);
}

static void g_close(struct nrs_objstore *s)
{
	(void)s;
}

static const struct nrs_objstore_ops gated_ops = {
	.name = "gated", .put = g_put, .head = g_head, .get = g_get,
	.del = g_del, .close = g_close,
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || nrs_fixture_owal_open(&f->d, "owwake")) {
		free(f);
		return -1;
	}
	f->g.base.ops = &gated_ops;
	f->g.real = f->d.store;
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

static struct nrs_wal *wopen(struct fx *f, unsigned int inflight,
			     uint64_t linger_ms)
{
	struct nrs_wal_object_opts o = {
		.store = &f->g.base, .dir = f->d.state,
		.inflight_max = inflight, .timeout_ms = LONG_MS,
		.linger_ms = linger_ms,
	};
	struct nrs_wal *w = NULL;

	assert_int_equal(nrs_wal_object_open(&o, &w), 0);
	return w;
}

static int put_batch(struct nrs_wal *w, struct nrs_wal_pos *pos,
		     struct nrs_wal_pos *end)
{
	return nrs_fixture_owal_batch(w, pos, end);
}

/* A sync, or a write, on a thread of its own. */
struct bg {
	struct nrs_wal *w;
	bool write;
	struct nrs_wal_pos pos, end;
	int err;
	atomic_bool done;
	pthread_t t;
};

static void *bg_run(void *arg)
{
	struct bg *b = arg;

	b->err = b->write ? put_batch(b->w, &b->pos, &b->end) :
		 nrs_wal_sync(b->w, b->end);
	atomic_store(&b->done, true);
	return NULL;
}

static void bg_start(struct bg *b, struct nrs_wal *w, bool write,
		     struct nrs_wal_pos end)
{
	memset(b, 0, sizeof(*b));
	b->w = w;
	b->write = write;
	b->end = end;
	b->err = 1;
	assert_int_equal(pthread_create(&b->t, NULL, bg_run, b), 0);
}

static bool within(atomic_bool *flag, unsigned int ms)
{
	for (unsigned int i = 0; i < ms / 5 && !atomic_load(flag); i++)
		usleep(5000);
	return atomic_load(flag);
}

static bool stalled_within(struct fx *f, int n, unsigned int ms)
{
	for (unsigned int i = 0; i < ms / 5; i++) {
		if (atomic_load(&f->g.stalled) >= n)
			return true;
		usleep(5000);
	}
	return false;
}

/* b is done within PROMPT_MS with 0; joined either way, once the WAL's
 * close (the caller's) has woken it. */
static void assert_prompt(struct bg *b, struct nrs_wal *w)
{
	bool prompt = within(&b->done, PROMPT_MS);

	if (!prompt)
		nrs_wal_close(w);	/* wakes it: -ESHUTDOWN */
	pthread_join(b->t, NULL);
	assert_true(prompt);
	assert_int_equal(b->err, 0);
}

/* OW19: the sealed object wakes a worker ("work"); its proof wakes the
 * sync that waits for it ("done"). */
static void test_sync_woken(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 2, LONG_MS);
	struct nrs_wal_pos pos, end;
	struct bg s;

	atomic_store(&f->g.shut, true);
	assert_int_equal(put_batch(w, &pos, &end), 0);
	bg_start(&s, w, false, end);	/* OW13: sealed at once, then waits */
	assert_true(stalled_within(f, 1, PROMPT_MS));
	usleep(100000);
	assert_false(atomic_load(&s.done));
	atomic_store(&f->g.shut, false);
	assert_prompt(&s, w);
	nrs_wal_close(w);
}

/* OW5, OW19: a write waiting for the window is woken by the proof that
 * frees it. */
static void test_window_woken(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 1, LONG_MS);
	struct nrs_wal_pos pos, end, none = { 0, 0 };
	struct bg s, wr;

	atomic_store(&f->g.shut, true);
	assert_int_equal(put_batch(w, &pos, &end), 0);
	bg_start(&s, w, false, end);
	assert_true(stalled_within(f, 1, PROMPT_MS));
	bg_start(&wr, w, true, none);	/* the window is full: it waits */
	usleep(100000);
	assert_false(atomic_load(&wr.done));
	atomic_store(&f->g.shut, false);
	assert_prompt(&s, w);
	assert_prompt(&wr, w);
	assert_true(wr.pos.seg > pos.seg);
	nrs_wal_close(w);
}

/* OW20, OW19: a sync waiting for an older object seals the open one
 * once its linger (200 ms) is over: the batches written meanwhile are PUT
 * while the first PUT still waits, with no sync of theirs yet (the open
 * object's first bytes woke the waiting sync to time that linger). */
static void test_open_sealed_behind(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f, 4, 200);
	struct nrs_wal_pos pos, end, pos2, end2;
	struct bg s;

	atomic_store(&f->g.shut, true);
	assert_int_equal(put_batch(w, &pos, &end), 0);
	bg_start(&s, w, false, end);	/* OW13: sealed at once, then waits */
	assert_true(stalled_within(f, 1, PROMPT_MS));
	assert_int_equal(put_batch(w, &pos2, &end2), 0);
	assert_true(pos2.seg > pos.seg);
	assert_true(stalled_within(f, 2, PROMPT_MS));
	assert_false(atomic_load(&s.done));
	atomic_store(&f->g.shut, false);
	assert_prompt(&s, w);
	assert_int_equal(nrs_wal_sync(w, end2), 0);
	nrs_wal_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sync_woken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_window_woken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_open_sealed_behind, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
