/* test_parse.c - the strict decimal and hex parsers (parse.h, N1, N2). */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "util/parse.h"

/* Each bad string fails and leaves *out alone. */
static void refused(const char *s, int err)
{
	uint64_t v = 7;

	assert_int_equal(nrs_parse_u64_str(s, &v), err);
	assert_int_equal(v, 7);
}

static void test_accepts_digits(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(nrs_parse_u64_str("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_parse_u64_str("5", &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(nrs_parse_u64_str("007", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(nrs_parse_u64_str("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(nrs_parse_u64("123", 2, &v), 0);	/* len bounds it */
	assert_int_equal(v, 12);
}

/* N1: no sign, no space, no base prefix, no suffix, nothing empty. */
static void test_refuses_non_digits(void **state)
{
	static const char *const bad[] = {
		"", "-1", "+5", "-0", " 5", "5 ", "\t5", "5\n", "0x10", "0X10",
		"1e3", "64M", "1.5", "abc", "- 1", "1,000",
	};
	uint64_t v = 7;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refused(bad[i], -EINVAL);
	assert_int_equal(nrs_parse_u64("12\0" "3", 4, &v), -EINVAL);
	assert_int_equal(nrs_parse_u64("1", 0, &v), -EINVAL);
	assert_int_equal(v, 7);
}

/* N1: too large is refused, never wrapped (-1 as UINT64_MAX) or clamped. */
static void test_refuses_overflow(void **state)
{
	uint64_t v = 7;

	(void)state;
	refused("18446744073709551616", -ERANGE);	/* UINT64_MAX + 1 */
	refused("18446744073709551620", -ERANGE);
	refused("99999999999999999999", -ERANGE);
	refused("184467440737095516150", -ERANGE);	/* MAX * 10 wraps */
	refused("000000000000000000001", -ERANGE);	/* 21 digits */
	refused("36893488147419103232", -ERANGE);	/* 2^65 */
	assert_int_equal(nrs_parse_u64_range("5", 1, 4, &v), -ERANGE);
	assert_int_equal(nrs_parse_u64_range("0", 1, 4, &v), -ERANGE);
	assert_int_equal(nrs_parse_u64_range("-1", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(v, 7);
	assert_int_equal(nrs_parse_u64_range("4", 1, 4, &v), 0);
	assert_int_equal(v, 4);
}

/* N2: lowercase hex digits only, at most 16, *out untouched on error. */
static void test_hex(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(nrs_parse_x64("0", 1, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_parse_x64("00000000000000ff", 16, &v), 0);
	assert_int_equal(v, 255);
	assert_int_equal(nrs_parse_x64("ffffffffffffffff", 16, &v), 0);
	assert_int_equal(v, UINT64_MAX);
	v = 7;
	assert_int_equal(nrs_parse_x64("", 0, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("FF", 2, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("0x1", 3, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("-1", 2, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64(" 1", 2, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("1g", 2, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("1\0", 2, &v), -EINVAL);
	assert_int_equal(nrs_parse_x64("10000000000000000", 17, &v), -ERANGE);
	assert_int_equal(nrs_parse_x64("00000000000000001", 17, &v), -ERANGE);
	assert_int_equal(v, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepts_digits),
		cmocka_unit_test(test_refuses_non_digits),
		cmocka_unit_test(test_refuses_overflow),
		cmocka_unit_test(test_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
