/*
 * test_objstore_adopt.c - files the embedded store adopts in place and the
 * holes punched in them (objstore_dir_adopt.c OD6, OD7), on the scratch
 * directory's file system, and across file systems (/dev/shm, a tmpfs on
 * Linux: the EXDEV case).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objstore.h"

#define FILE_LEN	(1u << 20)	/* a small "segment": 64 + payload */
#define KEY		"w/0000000000000007"

struct fx {
	char root[PATH_MAX];
	char dir[PATH_MAX + 16];	/* the store, root/objects */
	char seg[PATH_MAX + 16];	/* the file to adopt, root/seg */
	struct nrs_objstore *st;
};

/* Byte i of the test file. */
static unsigned char byte_at(size_t i)
{
	return (unsigned char)(i * 7 + i / 4096);
}

static void write_file(const char *path)
{
	unsigned char *buf = malloc(FILE_LEN);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	assert_non_null(buf);
	assert_true(fd >= 0);
	for (size_t i = 0; i < FILE_LEN; i++)
		buf[i] = byte_at(i);
	assert_int_equal(write(fd, buf, FILE_LEN), FILE_LEN);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	free(buf);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	assert_int_equal(nrs_fixture_mkdtemp(f->root, sizeof(f->root),
					     "test_objstore_adopt"), 0);
	snprintf(f->dir, sizeof(f->dir), "%s/objects", f->root);
	snprintf(f->seg, sizeof(f->seg), "%s/seg", f->root);
	assert_int_equal(nrs_objstore_dir_open(f->dir, &f->st), 0);
	write_file(f->seg);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	nrs_obj_close(f->st);
	nrs_fixture_rmtree(f->root);
	free(f);
	return 0;
}

static uint64_t blocks_of(const struct fx *f, const char *key)
{
	char path[PATH_MAX * 2];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", f->dir, key);
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks;
}

/* OD6: the file is the object, byte for byte from 64 on, no copy. */
static void test_adopt_in_place(void **state)
{
	struct fx *f = *state;
	unsigned char got[100];
	struct stat a, b;
	char path[PATH_MAX * 2];

	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, f->seg), 0);
	snprintf(path, sizeof(path), "%s/%s", f->dir, KEY);
	assert_int_equal(stat(f->seg, &a), 0);
	assert_int_equal(stat(path, &b), 0);
	assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	assert_int_equal(a.st_nlink, 2);
	/* get(X - 64) is the file's byte X */
	assert_int_equal(nrs_obj_get(f->st, KEY, 4096 - 64, got, sizeof(got)),
			 sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], byte_at(4096 + i));
	/* again (a crash after the link): the same file is accepted */
	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, f->seg), 0);
}

/* OD6: a key naming another file is never replaced. */
static void test_adopt_other_file(void **state)
{
	struct fx *f = *state;
	char other[PATH_MAX + 32];
	unsigned char got[8];

	snprintf(other, sizeof(other), "%s/other", f->root);
	write_file(other);
	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, other), 0);
	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, f->seg), -EEXIST);
	assert_int_equal(nrs_objstore_dir_adopt(f->st, "w/.x", f->seg), -EINVAL);
	assert_int_equal(nrs_obj_get(f->st, KEY, 0, got, sizeof(got)),
			 sizeof(got));
	assert_int_equal(nrs_objstore_dir_adopt(f->st, "w/1", f->root), -EINVAL);
}

/* OD6: across file systems, -EXDEV: the caller copies. */
static void test_adopt_other_fs(void **state)
{
	struct fx *f = *state;
	char shm[64];
	struct stat a, b;

	snprintf(shm, sizeof(shm), "/dev/shm/test_objstore_adopt.%d",
		 (int)getpid());
	unlink(shm);
	write_file(shm);
	assert_int_equal(stat(shm, &a), 0);
	assert_int_equal(stat(f->dir, &b), 0);
	assert_true(a.st_dev != b.st_dev);
	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, shm), -EXDEV);
	unlink(shm);
}

/* OD7: no hole while the WAL's name is there; then the bytes go, the
 * size and every other byte stay. */
static void test_punch(void **state)
{
	struct fx *f = *state;
	unsigned char got[64];
	uint64_t before, after;
	struct stat st;
	char path[PATH_MAX * 2];

	assert_int_equal(nrs_objstore_dir_adopt(f->st, KEY, f->seg), 0);
	assert_int_equal(nrs_objstore_dir_punch(f->st, KEY, 0, 256u << 10),
			 -EBUSY);
	before = blocks_of(f, KEY);
	assert_int_equal(unlink(f->seg), 0);
	assert_int_equal(blocks_of(f, KEY), before);	/* nothing was freed */
	assert_int_equal(nrs_objstore_dir_punch(f->st, KEY, FILE_LEN - 64, 1),
			 -EINVAL);
	assert_int_equal(nrs_objstore_dir_punch(f->st, KEY, UINT64_MAX, 2),
			 -EINVAL);
	assert_int_equal(nrs_objstore_dir_punch(f->st, KEY, 0, 256u << 10), 0);
	after = blocks_of(f, KEY);
	assert_true(after + (200u << 10) / 512 <= before);
	snprintf(path, sizeof(path), "%s/%s", f->dir, KEY);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, FILE_LEN);
	assert_int_equal(nrs_obj_get(f->st, KEY, 0, got, sizeof(got)),
			 sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], 0);
	assert_int_equal(nrs_obj_get(f->st, KEY, 256u << 10, got, sizeof(got)),
			 sizeof(got));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], byte_at(64 + (256u << 10) + i));
	assert_int_equal(nrs_objstore_dir_punch(f->st, "w/none", 0, 1), -ENOENT);
}

/* Read only, and a store that is not the embedded one. */
static void test_refusals(void **state)
{
	struct fx *f = *state;
	struct nrs_objstore *ro;

	assert_int_equal(nrs_objstore_dir_open_readonly(f->dir, &ro), 0);
	assert_int_equal(nrs_objstore_dir_adopt(ro, KEY, f->seg), -EROFS);
	assert_int_equal(nrs_objstore_dir_punch(ro, KEY, 0, 1), -EROFS);
	nrs_obj_close(ro);
	assert_int_equal(nrs_objstore_dir_adopt(NULL, KEY, f->seg), -EOPNOTSUPP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_adopt_in_place, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_adopt_other_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_adopt_other_fs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_punch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
