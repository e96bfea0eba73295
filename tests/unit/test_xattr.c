/* test_xattr.c - user.nereus.* names and value parsing. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "core/xattr.h"
#include "meta/meta.h"

static int parse(const char *s, uint64_t *v)
{
	return nrs_xattr_parse_u64(s, strlen(s), v);
}

static void test_parse_u64(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(parse("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse("42", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(parse("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	assert_int_equal(parse("18446744073709551616", &v), -EINVAL);
	assert_int_equal(parse("99999999999999999999", &v), -EINVAL);
	assert_int_equal(parse("000000000000000000001", &v), -EINVAL);
	assert_int_equal(parse("", &v), -EINVAL);
	assert_int_equal(parse("-1", &v), -EINVAL);
	assert_int_equal(parse("+1", &v), -EINVAL);
	assert_int_equal(parse(" 1", &v), -EINVAL);
	assert_int_equal(parse("1\n", &v), -EINVAL);
	assert_int_equal(parse("0x10", &v), -EINVAL);
	assert_int_equal(parse("abc", &v), -EINVAL);
	assert_int_equal(v, 7);		/* untouched on error */
	assert_int_equal(nrs_xattr_parse_u64("12\0" "3", 4, &v), -EINVAL);
}

static void test_names(void **state)
{
	(void)state;
	assert_int_equal(nrs_xattr_lookup("user.nereus.head"), NRS_XA_HEAD);
	assert_int_equal(nrs_xattr_lookup("user.nereus.retention.ms"),
			 NRS_XA_RET_MS);
	assert_int_equal(nrs_xattr_lookup("user.nereus.nope"), NRS_XA_UNKNOWN);
	assert_int_equal(nrs_xattr_lookup("user.nereus."), NRS_XA_UNKNOWN);
	assert_int_equal(nrs_xattr_lookup("user.checkpoint"), NRS_XA_NONE);
	assert_int_equal(nrs_xattr_lookup("user.nereushead"), NRS_XA_NONE);
	assert_true(nrs_xattr_applies(NRS_XA_PROFILE, true));
	assert_true(nrs_xattr_applies(NRS_XA_PROFILE, false));
	assert_false(nrs_xattr_applies(NRS_XA_HEAD, true));
	assert_true(nrs_xattr_applies(NRS_XA_RET_BYTES, true));
	assert_false(nrs_xattr_desc(NRS_XA_TRIM)->flags & NRS_XA_READ);
	assert_true(nrs_xattr_desc(NRS_XA_TRIM)->flags & NRS_XA_WRITE);
	assert_false(nrs_xattr_desc(NRS_XA_HEAD)->flags & NRS_XA_WRITE);
	assert_null(nrs_xattr_desc(NRS_XA_COUNT));
	assert_null(nrs_xattr_desc(NRS_XA_UNKNOWN));
}

static void test_profiles(void **state)
{
	int p = -1;

	(void)state;
	assert_int_equal(nrs_xattr_parse_profile("local-wal", 9, &p), 0);
	assert_int_equal(p, NRS_PROFILE_LOCAL_WAL);
	assert_int_equal(nrs_xattr_parse_profile("object-wal", 10, &p), 0);
	assert_int_equal(p, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_xattr_parse_profile("local-wal\n", 10, &p), -EINVAL);
	assert_int_equal(nrs_xattr_parse_profile("local", 5, &p), -EINVAL);
	assert_int_equal(nrs_xattr_parse_profile("", 0, &p), -EINVAL);
	assert_string_equal(nrs_profile_name(NRS_PROFILE_LOCAL_WAL), "local-wal");
	assert_null(nrs_profile_name(NRS_PROFILE_UNSET));
	assert_null(nrs_profile_name(42));
}

/* user.nereus.index.OFF: the index from offset OFF (core_xattr.c) */
static void test_index_page(void **state)
{
	uint64_t v = 1;

	(void)state;
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index.0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(nrs_xattr_parse_index_page(
			"user.nereus.index.18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index.12", NULL),
			 0);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index", &v),
			 -EINVAL);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index.", &v),
			 -EINVAL);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index.-1", &v),
			 -EINVAL);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.index.1x", &v),
			 -EINVAL);
	assert_int_equal(nrs_xattr_parse_index_page(
			"user.nereus.index.18446744073709551616", &v), -EINVAL);
	assert_int_equal(nrs_xattr_parse_index_page("user.nereus.head.1", &v),
			 -EINVAL);
	/* not a name of the table: lookup leaves it to the caller */
	assert_int_equal(nrs_xattr_lookup("user.nereus.index.5"), NRS_XA_UNKNOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_u64),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_profiles),
		cmocka_unit_test(test_index_page),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
