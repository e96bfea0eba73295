/* test_materializer.c - the uncertain PUT rule (DESIGN.md 6): what a HEAD
 * after a PUT proves, whatever the PUT answered. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "bg/materializer.h"
#include "wal/wal.h"

/* M5: a reclaim never reaches a segment made after it looked. */
static void test_reclaim_bound(void **state)
{
	struct nrs_wal_stats ws = { .segments = 3, .cur_seg = 7, .last_seg = 7 };

	(void)state;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 7);
	/* after start-up nothing is current: segments 5..7 are old, the next
	 * one made (8) holds records no index walk may have seen yet */
	ws.cur_seg = 0;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 8);
	ws.segments = 0;
	ws.last_seg = 0;
	assert_int_equal(nrs_mat_reclaim_bound(&ws), 1);
	ws.last_seg = UINT64_MAX;
	assert_true(nrs_mat_reclaim_bound(&ws) == UINT64_MAX);
}

static void test_put_decide(void **state)
{
	unsigned char sha[NRS_SHA256_LEN];
	struct nrs_obj_meta got = { .length = 1000, .has_sha256 = true };

	(void)state;
	memset(sha, 0x5a, sizeof(sha));
	memcpy(got.sha256, sha, sizeof(sha));
	/* exact length and SHA-256: proven, even after a failed PUT */
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha), NRS_PUT_PROVEN);
	/* nothing under the key: the same bytes go again */
	assert_int_equal(nrs_put_decide(-ENOENT, NULL, 1000, sha),
			 NRS_PUT_AGAIN);
	/* no answer: later, never a guess */
	assert_int_equal(nrs_put_decide(-ETIMEDOUT, NULL, 1000, sha),
			 NRS_PUT_LATER);
	assert_int_equal(nrs_put_decide(-ECONNREFUSED, NULL, 1000, sha),
			 NRS_PUT_LATER);
	assert_int_equal(nrs_put_decide(-EIO, NULL, 1000, sha), NRS_PUT_LATER);
	/* other bytes under the key: quarantine, never overwrite */
	assert_int_equal(nrs_put_decide(0, &got, 999, sha),
			 NRS_PUT_QUARANTINE);
	got.sha256[31] ^= 1;
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha),
			 NRS_PUT_QUARANTINE);
	/* no SHA-256 stored with it: nothing proves it is ours */
	memcpy(got.sha256, sha, sizeof(sha));
	got.has_sha256 = false;
	assert_int_equal(nrs_put_decide(0, &got, 1000, sha),
			 NRS_PUT_QUARANTINE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_decide),
		cmocka_unit_test(test_reclaim_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
