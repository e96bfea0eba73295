/* test_failpoint.c - the NRS_FAILPOINTS parser and hit counting. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/failpoint.h"

static void test_off(void **state)
{
	(void)state;
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
	assert_false(atomic_load(&nrs_failpoints_armed));
	assert_int_equal(nrs_failpoint_parse(""), 0);
	assert_false(atomic_load(&nrs_failpoints_armed));
	for (int i = 0; i < NRS_FP_COUNT; i++)
		assert_int_equal(nrs_failpoint(i), 0);
	assert_null(nrs_failpoint_name(NRS_FP_COUNT));
	assert_string_equal(nrs_failpoint_name(NRS_FP_WAL_AFTER_WRITE),
			    "wal.after_write");
}

static void test_every_hit(void **state)
{
	(void)state;
	assert_int_equal(nrs_failpoint_parse("wal.before_write=error:ENOSPC"), 0);
	assert_true(atomic_load(&nrs_failpoints_armed));
	for (int i = 0; i < 5; i++) {
		assert_int_equal(nrs_failpoint(NRS_FP_WAL_BEFORE_WRITE), -ENOSPC);
		assert_int_equal(nrs_failpoint(NRS_FP_WAL_AFTER_WRITE), 0);
	}
}

static void test_nth(void **state)
{
	(void)state;
	assert_int_equal(nrs_failpoint_parse(
		"meta.before_commit=error:EIO@3,wal.after_sync=error:EDQUOT@2+,"
		"pipeline.before_reply=error:EBUSY@2-3"), 0);
	for (int i = 1; i <= 6; i++) {
		assert_int_equal(nrs_failpoint(NRS_FP_META_BEFORE_COMMIT),
				 i == 3 ? -EIO : 0);
		assert_int_equal(nrs_failpoint(NRS_FP_WAL_AFTER_SYNC),
				 i >= 2 ? -EDQUOT : 0);
		assert_int_equal(nrs_failpoint(NRS_FP_PIPELINE_BEFORE_REPLY),
				 i == 2 || i == 3 ? -EBUSY : 0);
	}
	/* a new spec resets the counts */
	assert_int_equal(nrs_failpoint_parse("meta.before_commit=error:EIO@1"), 0);
	assert_int_equal(nrs_failpoint(NRS_FP_META_BEFORE_COMMIT), -EIO);
	assert_int_equal(nrs_failpoint(NRS_FP_META_BEFORE_COMMIT), 0);
	assert_int_equal(nrs_failpoint(NRS_FP_WAL_AFTER_SYNC), 0);
}

static void test_every_name(void **state)
{
	(void)state;
	for (int i = 0; i < NRS_FP_COUNT; i++) {
		char spec[80];

		snprintf(spec, sizeof(spec), "%s=error:EROFS@1",
			 nrs_failpoint_name(i));
		assert_int_equal(nrs_failpoint_parse(spec), 0);
		assert_int_equal(nrs_failpoint(i), -EROFS);
	}
	assert_int_equal(nrs_failpoint_parse("recovery.before_publish=crash@7"), 0);
	assert_int_equal(nrs_failpoint_parse("wal.after_write=crash@40+"), 0);
}

/* short: at a write point, a prefix (half, rounded down to 512 bytes, or
 * to 8 below that) and then the errno; elsewhere it does not parse. */
static void test_short(void **state)
{
	size_t len;

	(void)state;
	assert_int_equal(nrs_failpoint_parse("wal.write=short@2,"
					     "wal.after_write=error:EIO@1"), 0);
	len = 10000;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), 0);
	assert_int_equal(len, 10000);			/* hit 1: no */
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), -EIO);
	assert_int_equal(len, 4608);
	len = 10000;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), 0);
	assert_int_equal(len, 10000);			/* hit 3: no */
	assert_int_equal(nrs_failpoint_parse("wal.write=short:ENOSPC"), 0);
	len = 600;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), -ENOSPC);
	assert_int_equal(len, 296);
	len = 7;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), -ENOSPC);
	assert_int_equal(len, 0);
	/* error: and crash parse there too; error: writes nothing */
	assert_int_equal(nrs_failpoint_parse("wal.write=error:EDQUOT"), 0);
	len = 10000;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), -EDQUOT);
	assert_int_equal(len, 0);
	assert_int_equal(nrs_failpoint_parse("wal.write=crash@9"), 0);
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
	len = 10000;
	assert_int_equal(nrs_failpoint_write(NRS_FP_WAL_WRITE, &len), 0);
	assert_int_equal(len, 10000);
}

static void test_invalid(void **state)
{
	static const char *const bad[] = {
		"wal.after_write", "wal.after_write=", "=crash", "nope=crash",
		"wal.after_write=crsh", "wal.after_write=error:", "wal.after_write=error:EFOO",
		"wal.after_write=error:eio", "wal.after_write=crash@", "wal.after_write=crash@0",
		"wal.after_write=crash@x", "wal.after_write=crash@3-2", "wal.after_write=crash@3-",
		"wal.after_write=crash@3+4", "wal.after_write=crash@99999999999999999999",
		"wal.after_write=crash,", ",wal.after_write=crash",
		"wal.after_write=crash,wal.after_write=crash", " wal.after_write=crash",
		"wal.after_write=crash ", "wal.after_write=crash@1,,meta.after_commit=crash",
		"wal.after_write=short", "wal.before_write=short:EIO",
		"meta.before_commit=short", "wal.write=short:", "wal.write=shortx",
		"wal.write=short:EFOO", "wal.write=short:EIO:EIO", "wal.write=shor",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* an invalid spec arms nothing, even after a valid one */
		assert_int_equal(nrs_failpoint_parse("wal.after_write=error:EIO"), 0);
		assert_int_equal(nrs_failpoint_parse(bad[i]), -EINVAL);
		assert_false(atomic_load(&nrs_failpoints_armed));
		assert_int_equal(nrs_failpoint(NRS_FP_WAL_AFTER_WRITE), 0);
	}
}

static void test_env(void **state)
{
	(void)state;
	setenv("NRS_FAILPOINTS", "wal.before_sync=error:EIO@2", 1);
	assert_int_equal(nrs_failpoint_init(), 0);
	assert_int_equal(nrs_failpoint(NRS_FP_WAL_BEFORE_SYNC), 0);
	assert_int_equal(nrs_failpoint(NRS_FP_WAL_BEFORE_SYNC), -EIO);
	setenv("NRS_FAILPOINTS", "wal.before_sync=bang", 1);
	assert_int_equal(nrs_failpoint_init(), -EINVAL);
	unsetenv("NRS_FAILPOINTS");
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_off),
		cmocka_unit_test(test_every_hit),
		cmocka_unit_test(test_nth),
		cmocka_unit_test(test_short),
		cmocka_unit_test(test_every_name),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_env),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
