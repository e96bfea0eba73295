/* test_crc32c.c - CRC32C vectors (RFC 3720 appendix B.4) and extension. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "util/crc32c.h"

static void test_vectors(void **state)
{
	unsigned char buf[32];

	(void)state;
	assert_int_equal(nrs_crc32c(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(nrs_crc32c(0, "", 0), 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(nrs_crc32c(0, buf, 32), 0x8a9136aau);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(nrs_crc32c(0, buf, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(nrs_crc32c(0, buf, 32), 0x46dd794eu);
}

static void test_extend(void **state)
{
	static unsigned char big[300000];
	uint32_t whole, part;

	(void)state;
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 7 + 3);
	whole = nrs_crc32c(0, big, sizeof(big));
	for (size_t cut = 0; cut < sizeof(big); cut += 49999) {
		part = nrs_crc32c(0, big, cut);
		assert_int_equal(nrs_crc32c(part, big + cut, sizeof(big) - cut),
				 whole);
	}
	big[12345] ^= 0x10;
	assert_int_not_equal(nrs_crc32c(0, big, sizeof(big)), whole);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_extend),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
