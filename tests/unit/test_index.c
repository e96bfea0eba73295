/* test_index.c - the offset index: append rules, lookup, trim, format. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "index.h"

static struct nrs_index_ent ent(uint64_t s, uint64_t e, uint64_t seg,
				uint64_t off)
{
	struct nrs_index_ent x = { .start = s, .end = e, .gen = 0,
				   .kind = NRS_TARGET_WAL, .seg = seg, .off = off };
	return x;
}

static void build(struct nrs_index *ix, size_t n)
{
	/* entries [10i, 10i+10) except a gap at [50, 60) */
	for (size_t i = 0; i < n; i++) {
		struct nrs_index_ent e;

		if (i == 5)
			continue;
		e = ent(10 * i, 10 * i + 10, 1, 64 + 100 * i);
		assert_int_equal(nrs_index_append(ix, &e), 0);
	}
}

static void test_append_rules(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent e;

	(void)state;
	e = ent(0, 10, 1, 64);
	assert_int_equal(nrs_index_append(&ix, &e), 0);
	e = ent(5, 20, 1, 64);		/* overlaps */
	assert_int_equal(nrs_index_append(&ix, &e), -EINVAL);
	e = ent(10, 10, 1, 64);		/* empty */
	assert_int_equal(nrs_index_append(&ix, &e), -EINVAL);
	e = ent(20, 10, 1, 64);		/* reversed */
	assert_int_equal(nrs_index_append(&ix, &e), -EINVAL);
	e = ent(10, 20, 1, 200);
	assert_int_equal(nrs_index_append(&ix, &e), 0);
	assert_int_equal(ix.n, 2);
	assert_true(nrs_index_check(&ix));
	nrs_index_free(&ix);
	assert_int_equal(ix.n, 0);
}

static void test_find_collect(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent out[8];
	size_t n;

	(void)state;
	build(&ix, 1000);
	assert_true(nrs_index_check(&ix));
	assert_int_equal(ix.v[nrs_index_find(&ix, 0)].start, 0);
	assert_int_equal(ix.v[nrs_index_find(&ix, 9)].start, 0);
	assert_int_equal(ix.v[nrs_index_find(&ix, 10)].start, 10);
	/* in the gap: the next entry after it */
	assert_int_equal(ix.v[nrs_index_find(&ix, 55)].start, 60);
	assert_int_equal(ix.v[nrs_index_find(&ix, 9995)].start, 9990);
	assert_int_equal(nrs_index_find(&ix, 10000), ix.n);
	n = nrs_index_collect(&ix, 35, 75, out, 8);
	assert_int_equal(n, 4);		/* 30, 40, 60, 70 */
	assert_int_equal(out[0].start, 30);
	assert_int_equal(out[1].start, 40);
	assert_int_equal(out[2].start, 60);
	assert_int_equal(out[3].start, 70);
	n = nrs_index_collect(&ix, 0, 10000, out, 8);
	assert_int_equal(n, 8);
	nrs_index_free(&ix);
}

static void test_drop_below(void **state)
{
	struct nrs_index ix = { 0 };

	(void)state;
	build(&ix, 10);
	nrs_index_drop_below(&ix, 25);	/* keeps the entry holding 25 */
	assert_int_equal(ix.v[0].start, 20);
	nrs_index_drop_below(&ix, 30);
	assert_int_equal(ix.v[0].start, 30);
	nrs_index_drop_below(&ix, 100);
	assert_int_equal(ix.n, 0);
	nrs_index_free(&ix);
}

static void test_format(void **state)
{
	struct nrs_index ix = { 0 };
	char buf[512];
	ssize_t n;
	const char *want =
		"0 10 0 wal:1:64\n10 20 0 wal:1:164\n20 30 0 wal:1:264\n"
		"30 40 0 wal:1:364\n40 50 0 wal:1:464\n50 60 0 missing\n"
		"60 70 0 wal:1:664\n";

	(void)state;
	build(&ix, 7);
	n = nrs_index_format(&ix, NULL, 0);
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_int_equal(nrs_index_format(&ix, buf, (size_t)n - 1), -ERANGE);
	assert_int_equal(nrs_index_format(&ix, buf, sizeof(buf)), n);
	assert_memory_equal(buf, want, (size_t)n);
	nrs_index_free(&ix);
	assert_int_equal(nrs_index_format(&ix, buf, sizeof(buf)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_rules),
		cmocka_unit_test(test_find_collect),
		cmocka_unit_test(test_drop_below),
		cmocka_unit_test(test_format),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
