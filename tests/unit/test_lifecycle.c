/* test_lifecycle.c - the retention cut (lifecycle.c L2): the larger of the
 * size and time cuts, at object boundaries, committed objects only; a
 * retention too long to count in nanoseconds keeps forever (sat.h SAT1). */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bg/lifecycle.h"
#include "util/sat.h"

#define MS 1000000LL

/* four committed objects of 100 bytes, made at t = 1000, 2000, 3000, 4000 ms */
static void rows(struct nrs_obj_row v[4])
{
	for (int i = 0; i < 4; i++) {
		v[i] = (struct nrs_obj_row){
			.gen = (uint64_t)i + 1, .stream_id = 1,
			.start = 100 * (uint64_t)i, .end = 100 * (uint64_t)i + 100,
			.state = NRS_OBJ_COMMITTED, .ctime_ns = (i + 1) * 1000 * MS,
		};
	}
}

static void test_cut(void **state)
{
	struct nrs_obj_row v[4];

	(void)state;
	rows(v);
	/* no policy: nothing goes */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 0, 9000 * MS), 0);
	/* size: keep at least 250 of 450 bytes -> cut at 200 (250 kept) */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 250, 0, 0), 200);
	/* exactly at a boundary: 150 kept above 300 is >= 150 */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 150, 0, 0), 300);
	/* never into bytes above the last object (still in the WAL) */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 1, 0, 0), 400);
	/* more than the head asked for: nothing */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 1000, 0, 0), 0);
	/* time: older than 1500 ms at t = 3600 ms: objects 1 and 2 */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1500, 3600 * MS), 200);
	/* the larger of the two cuts */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 300, 1500, 3600 * MS), 200);
	assert_int_equal(nrs_retention_cut(v, 4, 450, 100, 1500, 3600 * MS), 300);
	/* only committed objects count */
	v[1].state = NRS_OBJ_PREPARED;
	v[2].state = NRS_OBJ_DRAINING;
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1, 9000 * MS), 400);
	v[3].state = NRS_OBJ_QUARANTINED;
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0, 1, 9000 * MS), 100);
}

/* SAT1: Java's Long.MAX_VALUE ms (what adapters pass for "forever") and
 * anything up to 2^64 - 1 keeps every object, however old. */
static void test_cut_forever(void **state)
{
	static const uint64_t huge[] = {
		INT64_MAX, UINT64_MAX, (uint64_t)INT64_MAX / 1000000 + 1,
		UINT64_MAX / 1000000, 18446744073709552ull,
	};
	struct nrs_obj_row v[4];

	(void)state;
	rows(v);
	for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		assert_int_equal(nrs_retention_cut(v, 4, 450, 0, huge[i],
						   9000 * MS), 0);
		assert_int_equal(nrs_retention_cut(v, 4, 450, 0, huge[i],
						   INT64_MAX), 0);
		/* the size cut still applies beside it */
		assert_int_equal(nrs_retention_cut(v, 4, 450, 250, huge[i],
						   9000 * MS), 200);
	}
	/* a long one that still counts, at the end of time */
	assert_int_equal(nrs_retention_cut(v, 4, 450, 0,
					   (uint64_t)INT64_MAX / 1000000 - 5000,
					   INT64_MAX), 400);
	/* an object stamped in the future (a clock step) has not aged */
	v[0].ctime_ns = INT64_MAX;
	v[1].ctime_ns = INT64_MAX;
	v[2].ctime_ns = INT64_MAX;
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, 1, 9000 * MS), 0);
	/* nor does one from before the epoch wrap around */
	v[0].ctime_ns = INT64_MIN;
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, 1, 9000 * MS), 100);
	assert_int_equal(nrs_retention_cut(v, 4, 300, 0, UINT64_MAX, 9000 * MS),
			 0);
}

/* SAT1 helpers: saturate, never wrap. */
static void test_sat(void **state)
{
	(void)state;
	assert_true(nrs_sat_mul(UINT64_MAX / 2, 3) == UINT64_MAX);
	assert_true(nrs_sat_mul(0, UINT64_MAX) == 0);
	assert_true(nrs_sat_mul(UINT64_MAX, 0) == 0);
	assert_true(nrs_sat_add(UINT64_MAX - 1, 2) == UINT64_MAX);
	assert_true(nrs_sat_add(1, 2) == 3);
	assert_true(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX / 1000000));
	assert_false(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX / 1000000 + 1));
	assert_false(nrs_elapsed_ms(INT64_MAX, INT64_MIN, UINT64_MAX));
	assert_false(nrs_elapsed_ms(0, 1, 0));
	assert_true(nrs_elapsed_ms(1, 1, 0));
	assert_true(nrs_elapsed_ms(2 * MS, MS, 1));
	assert_false(nrs_elapsed_ms(2 * MS - 1, MS, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut),
		cmocka_unit_test(test_cut_forever),
		cmocka_unit_test(test_sat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
