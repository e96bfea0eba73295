/* test_lifecycle.c - the retention cut (lifecycle.c L2): the larger of the
 * size and time cuts, at object boundaries, committed objects only. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lifecycle.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
