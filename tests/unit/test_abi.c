/*
 * test_abi.c - the ioctl ABI of include/nereusfs.h, as literal numbers: a
 * change of any size, offset or command number fails here.  (The header's
 * _Static_asserts catch the sizes at compile time too.)  Also the decoding
 * of bad arguments, which needs no mounted stream.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "nereusfs.h"

static void test_layouts(void **state)
{
	(void)state;
	assert_int_equal(NRS_IOC_ABI, 1);
	assert_int_equal(sizeof(struct nrs_ioc_bind), 16);
	assert_int_equal(offsetof(struct nrs_ioc_bind, abi), 0);
	assert_int_equal(offsetof(struct nrs_ioc_bind, flags), 4);
	assert_int_equal(offsetof(struct nrs_ioc_bind, epoch), 8);

	assert_int_equal(sizeof(struct nrs_ioc_expect), 16);
	assert_int_equal(offsetof(struct nrs_ioc_expect, abi), 0);
	assert_int_equal(offsetof(struct nrs_ioc_expect, flags), 4);
	assert_int_equal(offsetof(struct nrs_ioc_expect, offset), 8);
	assert_int_equal(NRS_EXPECT_DISARM, 1);
	assert_int_equal(NRS_EXPECT_FOLLOW, 2);

	assert_int_equal(sizeof(struct nrs_ioc_snapshot), 64);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, abi), 0);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, flags), 4);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, head), 8);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, version), 16);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, start), 24);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, epoch), 32);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, handle_epoch), 40);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, expect), 48);
	assert_int_equal(offsetof(struct nrs_ioc_snapshot, reserved), 56);
	assert_true(NRS_EXPECT_NONE == UINT64_MAX);
	assert_true(NRS_EXPECT_BROKEN == UINT64_MAX - 1);
}

static void test_command_numbers(void **state)
{
	(void)state;
	assert_int_equal(NRS_IOC_BIND, 0x40104ea0u);
	assert_int_equal(NRS_IOC_EXPECT, 0x40104ea1u);
	assert_int_equal(NRS_IOC_SNAPSHOT, 0x80404ea2u);
}

/* Everything here is refused before a handle is looked at. */
static void test_bad_arguments(void **state)
{
	struct nrs_ioc_bind b = { .abi = NRS_IOC_ABI, .epoch = 3 };
	struct nrs_ioc_expect e = { .abi = NRS_IOC_ABI, .offset = 0 };
	unsigned char out[64];

	(void)state;
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_BIND, &b, 8,
					NULL, 0), -EINVAL);
	b.abi = 2;
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_BIND, &b,
					sizeof(b), NULL, 0), -EINVAL);
	b.abi = NRS_IOC_ABI;
	b.flags = 1;
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_BIND, &b,
					sizeof(b), NULL, 0), -EINVAL);
	b.flags = 0;
	/* well formed, but no stream behind it */
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_BIND, &b,
					sizeof(b), NULL, 0), -ENOTTY);
	e.flags = 4;	/* no such flag */
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_EXPECT, &e,
					sizeof(e), NULL, 0), -EINVAL);
	e.abi = 0;
	e.flags = 0;
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_EXPECT, &e,
					sizeof(e), NULL, 0), -EINVAL);
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_SNAPSHOT, NULL, 0,
					out, 32), -EINVAL);
	assert_int_equal(nrs_core_ioctl(NULL, NULL, NRS_IOC_SNAPSHOT, NULL, 0,
					out, sizeof(out)), -ENOTTY);
	assert_int_equal(nrs_core_ioctl(NULL, NULL, 0x5401 /* TCGETS */, NULL,
					0, NULL, 0), -ENOTTY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_command_numbers),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
