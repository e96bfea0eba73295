/*
 * test_pool.c - the bounded free list (util/pool.h): blocks come back
 * in LIFO order, at most max are kept (PO1), and a burst from several
 * threads leaves the pool whole.
 */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/pool.h"

static void test_reuse(void **state)
{
	struct nrs_pool p;
	void *a, *b;

	(void)state;
	nrs_pool_init(&p, 100, 4);
	a = nrs_pool_get(&p);
	assert_non_null(a);
	memset(a, 0xab, 100);		/* the whole block is the caller's */
	nrs_pool_put(&p, a);
	assert_int_equal(p.n, 1);
	b = nrs_pool_get(&p);
	assert_ptr_equal(a, b);		/* kept, handed out again */
	assert_int_equal(p.n, 0);
	nrs_pool_put(&p, b);
	nrs_pool_put(&p, NULL);		/* no-op */
	assert_int_equal(p.n, 1);
	nrs_pool_destroy(&p);
}

/* PO1: beyond max, put frees (ASan and valgrind see no leak either way) */
static void test_bound(void **state)
{
	struct nrs_pool p;
	void *b[10];

	(void)state;
	nrs_pool_init(&p, 2, 3);	/* a block holds at least a pointer */
	assert_true(p.size >= sizeof(void *));
	for (int i = 0; i < 10; i++) {
		b[i] = nrs_pool_get(&p);
		assert_non_null(b[i]);
	}
	for (int i = 0; i < 10; i++)
		nrs_pool_put(&p, b[i]);
	assert_int_equal(p.n, 3);
	nrs_pool_destroy(&p);
}

struct burst {
	struct nrs_pool *p;
	int rounds;
};

static void *churn(void *arg)
{
	struct burst *bu = arg;
	void *held[8];

	for (int r = 0; r < bu->rounds; r++) {
		for (int i = 0; i < 8; i++) {
			held[i] = nrs_pool_get(bu->p);
			if (!held[i])
				return arg;
			memset(held[i], r & 0xff, bu->p->size);
		}
		for (int i = 0; i < 8; i++)
			nrs_pool_put(bu->p, held[i]);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct nrs_pool p;
	struct burst bu = { &p, 2000 };
	pthread_t t[4];

	(void)state;
	nrs_pool_init(&p, 64, 16);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn, &bu), 0);
	for (int i = 0; i < 4; i++) {
		void *ret;

		assert_int_equal(pthread_join(t[i], &ret), 0);
		assert_null(ret);
	}
	assert_true(p.n <= 16);
	nrs_pool_destroy(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse),
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
