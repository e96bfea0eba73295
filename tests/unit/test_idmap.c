/* test_idmap.c - the id -> pointer hash map of the stream table (idmap.h):
 * any 64-bit id is a key, memory follows the entries (H1), a walk visits
 * each live entry once (H2), removal keeps every other entry reachable;
 * and the array-growing helper beside it (grow.h) refuses a size that
 * would overflow instead of looping or allocating too little (GR2), and a
 * count above its cap whatever memory there is (GR1). */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"
#include "util/idmap.h"

/* A distinct non-NULL value per key (never dereferenced). */
static void *val_of(uint64_t key)
{
	return (void *)(uintptr_t)(key * 2 + 1);
}

static void test_basic(void **state)
{
	struct nrs_idmap m;
	int dummy;

	(void)state;
	nrs_idmap_init(&m);
	assert_null(nrs_idmap_get(&m, 1));
	assert_null(nrs_idmap_remove(&m, 1));
	assert_int_equal(nrs_idmap_put(&m, 1, &dummy), 0);
	assert_ptr_equal(nrs_idmap_get(&m, 1), &dummy);
	assert_int_equal(nrs_idmap_put(&m, 1, val_of(1)), -EEXIST);
	assert_ptr_equal(nrs_idmap_get(&m, 1), &dummy);
	assert_int_equal(nrs_idmap_put(&m, 2, NULL), -EINVAL);
	assert_null(nrs_idmap_get(&m, 2));
	assert_int_equal(nrs_idmap_count(&m), 1);
	assert_ptr_equal(nrs_idmap_remove(&m, 1), &dummy);
	assert_null(nrs_idmap_get(&m, 1));
	assert_int_equal(nrs_idmap_count(&m), 0);
	nrs_idmap_free(&m);
	nrs_idmap_free(&m);		/* a freed map is empty */
	assert_null(nrs_idmap_get(&m, 1));
}

/* The ids that crashed the array table: memory stays that of 4 entries. */
static void test_huge_ids(void **state)
{
	const uint64_t ids[] = { UINT64_MAX - 1, UINT64_MAX, 1ULL << 63,
				 1ULL << 62, 0 };
	struct nrs_idmap m;
	uint64_t key, seen = 0;
	size_t pos = 0, n = 0;
	void *v;

	(void)state;
	nrs_idmap_init(&m);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(nrs_idmap_put(&m, ids[i], val_of(ids[i])), 0);
	for (size_t i = 0; i < 5; i++)
		assert_ptr_equal(nrs_idmap_get(&m, ids[i]), val_of(ids[i]));
	assert_null(nrs_idmap_get(&m, (1ULL << 62) + 1));
	assert_true(m.cap <= 16);			/* H1 */
	while ((v = nrs_idmap_next(&m, &pos, &key))) {	/* H2 */
		size_t i;

		for (i = 0; i < 5 && ids[i] != key; i++)
			;
		assert_true(i < 5);
		assert_ptr_equal(v, val_of(key));
		assert_false(seen & (1u << i));
		seen |= 1u << i;
		n++;
	}
	assert_int_equal(n, 5);
	assert_ptr_equal(nrs_idmap_remove(&m, 1ULL << 63), val_of(1ULL << 63));
	assert_null(nrs_idmap_get(&m, 1ULL << 63));
	assert_ptr_equal(nrs_idmap_get(&m, UINT64_MAX - 1),
			 val_of(UINT64_MAX - 1));
	nrs_idmap_free(&m);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Many ids, dense and scattered; removing half in random order keeps the
 * others reachable (the backward shift), and the table shrinks after. */
static void test_many(void **state)
{
	enum { N = 50000 };
	uint64_t *keys = malloc(2 * N * sizeof(*keys)), s = 88172645463325252ULL;
	unsigned char *gone = calloc(2 * N, 1);
	struct nrs_idmap m;
	size_t pos = 0, n = 0, peak;
	uint64_t key;

	(void)state;
	assert_non_null(keys);
	assert_non_null(gone);
	nrs_idmap_init(&m);
	for (size_t i = 0; i < N; i++) {
		keys[i] = i + 1;			/* a dense run */
		keys[N + i] = rng(&s) | (1ULL << 63);	/* scattered */
	}
	for (size_t i = 0; i < 2 * N; i++)
		assert_int_equal(nrs_idmap_put(&m, keys[i], val_of(keys[i])),
				 0);
	assert_int_equal(nrs_idmap_count(&m), 2 * N);
	assert_true(m.cap <= 8 * 2 * N);		/* H1 */
	peak = m.cap;
	for (size_t k = 0; k < N; k++) {
		size_t i = (size_t)(rng(&s) % (2 * N));

		if (gone[i])
			continue;
		assert_ptr_equal(nrs_idmap_remove(&m, keys[i]), val_of(keys[i]));
		gone[i] = 1;
	}
	for (size_t i = 0; i < 2 * N; i++)
		assert_ptr_equal(nrs_idmap_get(&m, keys[i]),
				 gone[i] ? NULL : val_of(keys[i]));
	while (nrs_idmap_next(&m, &pos, &key))
		n++;
	assert_int_equal(n, nrs_idmap_count(&m));
	for (size_t i = 0; i < 2 * N; i++)
		if (!gone[i])
			assert_ptr_equal(nrs_idmap_remove(&m, keys[i]),
					 val_of(keys[i]));
	assert_int_equal(nrs_idmap_count(&m), 0);
	assert_true(m.cap < peak && m.cap <= 16);	/* H1: it shrank */
	pos = 0;
	assert_null(nrs_idmap_next(&m, &pos, NULL));
	nrs_idmap_free(&m);
	free(keys);
	free(gone);
}

/* A walk costs the table, not the id range: a map holding ids 1 and 2^62
 * has at most 16 slots to visit. */
static void test_walk_cost(void **state)
{
	struct nrs_idmap m;

	(void)state;
	nrs_idmap_init(&m);
	assert_int_equal(nrs_idmap_put(&m, 1, val_of(1)), 0);
	assert_int_equal(nrs_idmap_put(&m, 1ULL << 62, val_of(1ULL << 62)), 0);
	assert_int_equal(m.cap, 16);
	nrs_idmap_free(&m);
}

/* On 34f84c2, want above SIZE_MAX / 2 doubled n to 0 and looped forever;
 * want above SIZE_MAX / sz wrapped n * sz into a small realloc. */
static void test_grow_overflow(void **state)
{
	uint64_t *v = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(nrs_grow((void **)&v, &cap, 100, sizeof(*v)), 0);
	assert_int_equal(cap, 128);
	v[99] = 1;
	assert_int_equal(nrs_grow((void **)&v, &cap, SIZE_MAX, sizeof(*v)),
			 -ENOMEM);
	assert_int_equal(nrs_grow((void **)&v, &cap, SIZE_MAX / 8 + 1,
				  sizeof(*v)), -ENOMEM);
	assert_int_equal(cap, 128);			/* unchanged */
	assert_int_equal(v[99], 1);
	free(v);
}

/* GR1: a count from the disk or a user never grows an array past max;
 * the doubling stops at max itself. */
static void test_grow_cap(void **state)
{
	uint32_t *v = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(nrs_grow_max((void **)&v, &cap, 100, sizeof(*v), 1000),
			 0);
	assert_int_equal(cap, 128);
	v[99] = 7;
	assert_int_equal(nrs_grow_max((void **)&v, &cap, 1001, sizeof(*v), 1000),
			 -E2BIG);
	assert_int_equal(cap, 128);			/* unchanged */
	assert_int_equal(nrs_grow_max((void **)&v, &cap, 1000, sizeof(*v), 1000),
			 0);
	assert_int_equal(cap, 1000);			/* clamped, not 1024 */
	v[999] = 8;
	assert_int_equal(v[99], 7);
	assert_int_equal(nrs_grow_max((void **)&v, &cap, 1000, sizeof(*v), 1000),
			 0);				/* already room */
	assert_int_equal(nrs_grow_max((void **)&v, &cap, SIZE_MAX, sizeof(*v),
				      1000), -E2BIG);
	assert_int_equal(cap, 1000);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_huge_ids),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_walk_cost),
		cmocka_unit_test(test_grow_overflow),
		cmocka_unit_test(test_grow_cap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
