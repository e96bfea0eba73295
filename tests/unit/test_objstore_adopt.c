/*
 * test_objstore_adopt.c - files the embedded store adopts in place and the
 * holes punched in them (objstore_dir_adopt.c OD6, OD7), on the scratch
 * directory's file system, and across file systems (/dev/shm, a tmpfs on
 * Linux: the EXDEV case); and the reads of a slice of one (OD10), watched
 * through the page cache (mincore) of a file whose pages were dropped.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objstore.h"

#define FILE_LEN	(1u << 20)	/* a small "segment": 64 + payload */
#define KEY		"w/0000000000000007"
#define BIG_KEY		"w/0000000000000008"
#define BIG_LEN		(16u << 20)	/* OD10's file */
#define SLICE		(2u << 20)	/* the reader's wants in it */
#define PIECE		(128u << 10)	/* one read of the reader */
#define PAGE		4096u

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

static void write_len(const char *path, size_t len)
{
	unsigned char *buf = malloc(len);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	assert_non_null(buf);
	assert_true(fd >= 0);
	for (size_t i = 0; i < len; i++)
		buf[i] = byte_at(i);
	assert_int_equal(write(fd, buf, len), len);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	free(buf);
}

static void write_file(const char *path)
{
	write_len(path, FILE_LEN);
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

/* OD10's file: BIG_LEN bytes adopted as BIG_KEY, its pages dropped from
 * the page cache; mapped into *map (BIG_LEN bytes) for mincore.  False if
 * the file system keeps them (tmpfs: nothing to watch). */
static bool big_file(struct fx *f, void **map)
{
	char path[PATH_MAX + 32];
	unsigned char vec[BIG_LEN / PAGE];
	int fd;

	snprintf(path, sizeof(path), "%s/big", f->root);
	write_len(path, BIG_LEN);
	assert_int_equal(nrs_objstore_dir_adopt(f->st, BIG_KEY, path), 0);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	*map = mmap(NULL, BIG_LEN, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(*map != MAP_FAILED);
	assert_int_equal(mincore(*map, BIG_LEN, vec), 0);
	for (size_t i = 0; i < sizeof(vec); i++)
		if (vec[i] & 1)
			return false;
	return true;
}

/* How many of the file's pages [p0, p1) are in the page cache. */
static size_t resident(void *map, size_t p0, size_t p1)
{
	unsigned char vec[BIG_LEN / PAGE];
	size_t n = 0;

	assert_int_equal(mincore(map, BIG_LEN, vec), 0);
	for (size_t i = p0; i < p1; i++)
		n += vec[i] & 1;
	return n;
}

static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* OD10: a sequential reader of [0, SLICE) of an adopted file, in pieces
 * each of which it wants alone (a record each: nothing asked for ahead),
 * gets its bytes, and the kernel reads none past them (its readahead would,
 * up to the disk's read_ahead_kb: 128 KiB by default, 8 MiB on some).  Pages
 * past it are watched for a while: a readahead's arrive within it. */
static void test_slice_no_readahead(void **state)
{
	struct fx *f = *state;
	unsigned char *got = malloc(PIECE);
	size_t past = (64 + SLICE) / PAGE + 1;	/* the first page wholly past */
	void *map;

	assert_non_null(got);
	if (!big_file(f, &map)) {
		free(got);
		skip();		/* a file system that keeps every page */
	}
	for (uint64_t off = 0; off < SLICE; off += PIECE) {
		assert_int_equal(nrs_objstore_dir_get_slice(f->st, BIG_KEY, off,
							    got, PIECE,
							    off + PIECE),
				 PIECE);
		for (size_t i = 0; i < PIECE; i += 4093)
			assert_int_equal(got[i], byte_at(64 + off + i));
	}
	assert_int_equal(resident(map, 1, SLICE / PAGE), SLICE / PAGE - 1);
	for (int i = 0; i < 50; i++) {
		assert_int_equal(resident(map, past, BIG_LEN / PAGE), 0);
		pause_ms(10);
	}
	/* the end of the object: 0 bytes, a short read, until past it */
	assert_int_equal(nrs_objstore_dir_get_slice(f->st, BIG_KEY,
						    BIG_LEN - 64, got, 1,
						    BIG_LEN), 0);
	assert_int_equal(nrs_objstore_dir_get_slice(f->st, BIG_KEY,
						    BIG_LEN - 65, got, 8,
						    BIG_LEN + 1), 1);
	assert_int_equal(got[0], byte_at(BIG_LEN - 1));
	assert_int_equal(nrs_objstore_dir_get_slice(f->st, "w/none", 0, got, 1,
						    1), -ENOENT);
	munmap(map, BIG_LEN);
	free(got);
}

/* OD10: what the reader wants past its read is asked for at once: one
 * small read with until = SLICE brings [0, SLICE) in (waited for, up to
 * 20 s: the advice starts the reads, it does not wait for them). */
static void test_slice_willneed(void **state)
{
	struct fx *f = *state;
	unsigned char got[16];
	size_t want = SLICE / PAGE - 1;	/* pages 1 .. wholly in the slice */
	void *map;
	int i;

	if (!big_file(f, &map))
		skip();
	assert_int_equal(nrs_objstore_dir_get_slice(f->st, BIG_KEY, 0, got,
						    sizeof(got), SLICE),
			 sizeof(got));
	assert_int_equal(got[0], byte_at(64));
	for (i = 0; i < 2000 && resident(map, 1, SLICE / PAGE) < want; i++)
		pause_ms(10);
	assert_int_equal(resident(map, 1, SLICE / PAGE), want);
	assert_int_equal(resident(map, (64 + SLICE) / PAGE + 1,
				  BIG_LEN / PAGE), 0);
	munmap(map, BIG_LEN);
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
		cmocka_unit_test_setup_teardown(test_slice_no_readahead, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_slice_willneed, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
