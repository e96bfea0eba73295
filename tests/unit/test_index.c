/* test_index.c - the offset index: append rules, lookup, trim, format. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stream/index.h"
#include "wal/walrec.h"

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
	/* X3: the adjacent records of segment 1 are one line */
	const char *want =
		"0 50 0 wal:1:64\n50 60 0 missing\n60 70 0 wal:1:664\n";

	(void)state;
	build(&ix, 7);
	n = nrs_index_format(&ix, 7, false, 0, NULL, 0);
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_int_equal(nrs_index_format(&ix, 7, false, 0, buf, (size_t)n - 1), -ERANGE);
	assert_int_equal(nrs_index_format(&ix, 7, false, 0, buf, sizeof(buf)), n);
	assert_memory_equal(buf, want, (size_t)n);
	nrs_index_free(&ix);
	assert_int_equal(nrs_index_format(&ix, 7, false, 0, buf, sizeof(buf)), 0);
}

static struct nrs_index_ent obj(uint64_t s, uint64_t e, uint64_t gen,
				uint64_t os, uint64_t oe)
{
	struct nrs_index_ent x = { .start = s, .end = e, .gen = gen,
				   .kind = NRS_TARGET_OBJ, .ostart = os,
				   .oend = oe };
	return x;
}

/* Materialization replaces WAL entries by object entries, from below. */
static void test_replace(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent e, out[8];
	uint64_t bytes = 99;

	(void)state;
	for (uint64_t i = 0; i < 6; i++) {
		e = ent(10 * i, 10 * i + 10, 3 + i / 2, 64 + 100 * i);
		assert_int_equal(nrs_index_append(&ix, &e), 0);
	}
	assert_int_equal(nrs_index_min_seg(&ix), 3);
	/* [0, 30): three records of 10 bytes, each 64 + 8 bytes on disk */
	e = obj(0, 30, 1, 0, 30);
	assert_int_equal(nrs_index_replace(&ix, &e, &bytes), 3);
	assert_int_equal(bytes, 3 * nrs_walrec_total_len(10));
	assert_int_equal(ix.n, 4);
	assert_true(nrs_index_check(&ix));
	/* segment 4 is only partly covered ([20, 30) is, [30, 40) is not):
	 * it is still the oldest the stream needs, so it is never reclaimed */
	assert_int_equal(nrs_index_min_seg(&ix), 4);
	/* a reach past the end of a record is refused, nothing changes */
	e = obj(30, 45, 2, 30, 45);
	assert_int_equal(nrs_index_replace(&ix, &e, &bytes), -EINVAL);
	assert_int_equal(ix.n, 4);
	/* reads resolve across generations: the object, then the WAL */
	assert_int_equal(nrs_index_collect(&ix, 25, 40, out, 8), 2);
	assert_int_equal(out[0].gen, 1);
	assert_int_equal(out[0].kind, NRS_TARGET_OBJ);
	assert_int_equal(out[1].gen, 0);
	assert_int_equal(out[1].kind, NRS_TARGET_WAL);
	/* a range cut below by a trim: the first record begins below it */
	nrs_index_drop_below(&ix, 35);
	assert_int_equal(ix.n, 3);
	e = obj(35, 60, 2, 35, 60);
	assert_int_equal(nrs_index_replace(&ix, &e, &bytes), 3);
	assert_int_equal(ix.n, 1);
	assert_int_equal(nrs_index_min_seg(&ix), UINT64_MAX);
	assert_int_equal(nrs_index_collect(&ix, 35, 60, out, 8), 1);
	assert_int_equal(out[0].gen, 2);
	assert_int_equal(out[0].start, 35);
	/* nothing left to replace above the head */
	e = obj(60, 70, 3, 60, 70);
	assert_int_equal(nrs_index_replace(&ix, &e, &bytes), 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(ix.n, 1);
	nrs_index_free(&ix);
}

static void test_format_obj(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent e = obj(0, 30, 1, 0, 30);
	char buf[512];
	const char *want =
		"0 30 1 obj:s/0000000000000007/0000000000000000-"
		"000000000000001e-g0000000000000001\n"
		"30 40 0 wal:4:364\n";
	ssize_t n;

	(void)state;
	assert_int_equal(nrs_index_append(&ix, &e), 0);
	e = ent(30, 40, 4, 364);
	assert_int_equal(nrs_index_append(&ix, &e), 0);
	n = nrs_index_format(&ix, 7, false, 0, buf, sizeof(buf));
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(buf, want, (size_t)n);
	nrs_index_free(&ix);
}

/* X3: only adjacent WAL entries of one segment merge; paging from an
 * offset starts at the range (or gap) holding it. */
static void test_format_merge_page(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent e;
	char buf[512];
	ssize_t n;
	const char *want =
		"0 20 0 wal:1:64\n20 40 0 wal:2:264\n40 50 0 missing\n"
		"50 60 0 wal:2:564\n";

	(void)state;
	for (uint64_t i = 0; i < 6; i++) {
		if (i == 4)
			continue;
		e = ent(10 * i, 10 * i + 10, i < 2 ? 1 : 2, 64 + 100 * i);
		assert_int_equal(nrs_index_append(&ix, &e), 0);
	}
	n = nrs_index_format(&ix, 7, false, 0, buf, sizeof(buf));
	assert_int_equal(n, (ssize_t)strlen(want));
	assert_memory_equal(buf, want, (size_t)n);
	/* from 25: the line of [20, 40) (it holds 25) on */
	n = nrs_index_format(&ix, 7, false, 25, buf, sizeof(buf));
	assert_int_equal(n, (ssize_t)strlen(want + 16));
	assert_memory_equal(buf, want + 16, (size_t)n);
	/* from 45: the gap holding it, then the rest */
	n = nrs_index_format(&ix, 7, false, 45, buf, sizeof(buf));
	assert_int_equal(n, (ssize_t)strlen(want + 34));
	assert_memory_equal(buf, want + 34, (size_t)n);
	/* from 40: the gap starts there */
	assert_int_equal(nrs_index_format(&ix, 7, false, 40, buf, sizeof(buf)), n);
	assert_int_equal(nrs_index_format(&ix, 7, false, 60, buf, sizeof(buf)), 0);
	nrs_index_free(&ix);
}

/* X2: 5,000 ranges that cannot merge: at most 64 KiB, a trailer that
 * counts the rest, and pages from the last end cover every range once. */
static void test_format_bound(void **state)
{
	struct nrs_index ix = { 0 };
	struct nrs_index_ent e;
	static char buf[NRS_INDEX_TEXT_MAX + 1];
	uint64_t from = 0, next = 0, lines = 0;
	ssize_t n;

	(void)state;
	for (uint64_t i = 0; i < 5000; i++) {
		e = ent(10 * i, 10 * i + 10, 1 + i, 64);	/* one per segment */
		assert_int_equal(nrs_index_append(&ix, &e), 0);
	}
	for (int page = 0;; page++) {
		char *p, *last, *nl;
		unsigned long long more = 0, s, t;

		assert_true(page < 5000);
		n = nrs_index_format(&ix, 7, false, from, NULL, 0);
		assert_true(n > 0 && n <= NRS_INDEX_TEXT_MAX);
		assert_int_equal(nrs_index_format(&ix, 7, false, from, buf, sizeof(buf)), n);
		buf[n] = '\0';
		assert_int_equal(buf[n - 1], '\n');
		last = NULL;
		for (p = buf; *p; p = nl + 1) {
			nl = strchr(p, '\n');
			assert_non_null(nl);
			if (p[0] == '#') {
				assert_int_equal(sscanf(p, "# %llu more ranges", &more), 1);
				assert_ptr_equal(nl + 1, buf + n);	/* the last line */
				break;
			}
			assert_int_equal(sscanf(p, "%llu %llu", &s, &t), 2);
			assert_int_equal(s, next);	/* every range, once, in order */
			next = t;
			lines++;
			last = p;
		}
		assert_non_null(last);
		if (!more)
			break;
		/* the trailer counts exactly what the next pages hold */
		assert_int_equal(more, 5000 - lines);
		from = next;
	}
	assert_int_equal(lines, 5000);
	assert_int_equal(next, 50000);
	nrs_index_free(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_rules),
		cmocka_unit_test(test_find_collect),
		cmocka_unit_test(test_drop_below),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_replace),
		cmocka_unit_test(test_format_obj),
		cmocka_unit_test(test_format_merge_page),
		cmocka_unit_test(test_format_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
