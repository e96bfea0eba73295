/*
 * test_fsck.c - the checks of fsck.c on hand-made rows: a consistent data
 * directory is clean, and each kind of damage gives its own finding.
 *
 * The base picture: root (1) holds directory "k" (16), which holds stream
 * "s" (17, stream 1), committed by three records LSN 1..3 of 100 bytes
 * each, one append each, epoch 2.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsck.h"

struct out {
	char text[8192];
	size_t len;
};

static void record(void *ctx, enum nrs_fsck_sev sev, const char *line)
{
	struct nrs_fsck *f = ctx;
	struct out *o = (struct out *)(f + 1);

	(void)sev;
	o->len += (size_t)snprintf(o->text + o->len, sizeof(o->text) - o->len,
				   "%s\n", line);
	if (o->len >= sizeof(o->text))
		o->len = sizeof(o->text) - 1;
}

static void add_inode(struct nrs_fsck *f, uint64_t ino, uint64_t parent,
		      bool dir, uint32_t nlink, uint64_t sid)
{
	struct nrs_attr a = {
		.ino = ino, .parent = parent, .nlink = nlink, .stream_id = sid,
		.mode = (dir ? S_IFDIR : S_IFREG) | 0755,
	};

	assert_int_equal(nrs_fsck_add_inode(f, &a), 0);
}

static void add_rec(struct nrs_fsck *f, uint64_t lsn, uint64_t sid,
		    uint64_t base, uint32_t len, uint64_t prev, bool ok)
{
	struct nrs_wal_rec_info ri = {
		.rec = { .kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = sid,
			 .base = base, .len = len, .n_appends = 1, .epoch = 2,
			 .prev_lsn = prev },
		.pos = { 1, 64 + 200 * (lsn - 1) },
		.data_ok = ok,
	};

	assert_int_equal(nrs_fsck_add_rec(f, &ri), 0);
}

/* An nrs_fsck followed by its output buffer. */
static int setup(void **state)
{
	struct nrs_fsck *f = calloc(1, sizeof(*f) + sizeof(struct out));
	struct nrs_stream_row s = {
		.id = 1, .ino = 17, .head = 300, .version = 3, .epoch = 2,
		.last_lsn = 3, .profile = 1,
	};

	if (!f)
		return -1;
	nrs_fsck_init(f, record, f);
	add_inode(f, 1, 1, true, 3, 0);
	add_inode(f, 16, 1, true, 2, 0);
	add_inode(f, 17, 16, false, 1, 1);
	assert_int_equal(nrs_fsck_add_dirent(f, 1, "k", 1, 16), 0);
	assert_int_equal(nrs_fsck_add_dirent(f, 16, "s", 1, 17), 0);
	assert_int_equal(nrs_fsck_add_stream(f, &s), 0);
	for (uint64_t l = 3; l >= 1; l--)	/* any order */
		add_rec(f, l, 1, (l - 1) * 100, 100, l - 1, true);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	nrs_fsck_free(*state);
	free(*state);
	return 0;
}

static const char *run(struct nrs_fsck *f)
{
	struct out *o = (struct out *)(f + 1);

	o->len = 0;
	o->text[0] = '\0';
	f->errors = f->pending = f->torn = f->unlinked = 0;
	assert_int_equal(nrs_fsck_check(f), 0);
	print_message("%s", o->text);
	return o->text;
}

/* The check finds that many errors, and says each wanted string. */
static void expect(struct nrs_fsck *f, uint64_t errors, const char *want1,
		   const char *want2)
{
	const char *text = run(f);

	assert_int_equal(f->errors, errors);
	if (want1)
		assert_non_null(strstr(text, want1));
	if (want2)
		assert_non_null(strstr(text, want2));
}

static void test_clean(void **state)
{
	struct nrs_fsck *f = *state;

	expect(f, 0, NULL, NULL);
	assert_int_equal(f->pending, 0);
	assert_true(f->chains_intact);
}

static void test_pending(void **state)
{
	struct nrs_fsck *f = *state;

	add_rec(f, 4, 1, 300, 50, 3, true);	/* continues the head */
	add_rec(f, 5, 1, 300, 70, 3, true);	/* an orphan: same base */
	expect(f, 0, "F13 stream 1 (/k/s): pending: 1 WAL records",
	       "head 300 -> 350, version 3 -> 4");
	assert_int_equal(f->pending, 1);
}

static void test_head_moved(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].head += 10;
	expect(f, 1, "F9 stream 1 (/k/s): commit chain broken: LSN 3",
	       "but the head is at 310");
	assert_false(f->chains_intact);
}

/* F20: a row that fails its checksum is reported alone, by the path of
 * its inode: its own fields (here a moved head, a wrong inode and an
 * unlinked flag) are not trusted for F7-F13 or F18. */
static void test_row_checksum(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].corrupt = true;
	f->streams[0].head = 310;
	f->streams[0].ino = 99;
	f->streams[0].unlinked = true;
	add_rec(f, 4, 1, 300, 50, 3, true);	/* would be pending */
	expect(f, 1, "F20 stream 1 (/k/s): its row in meta.db fails its "
	       "checksum", "the daemon keeps it offline (EIO)");
	assert_int_equal(f->pending, 0);
	assert_false(f->chains_intact);
}

static void test_stale_version(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].version = 2;
	expect(f, 1, "F12 stream 1 (/k/s): version 2, but the commit chain "
	       "holds 3 appends", NULL);
}

static void test_missing_and_damaged_records(void **state)
{
	struct nrs_fsck *f = *state;

	f->recs[1].data_ok = false;		/* LSN 2 */
	f->recs[2] = f->recs[1];		/* LSN 1 gone, LSN 2 twice */
	expect(f, 2, "F10 stream 1 (/k/s): committed bytes [100, 200) fail",
	       "F9 stream 1 (/k/s): commit chain broken: LSN 1 is not in the "
	       "WAL: committed bytes [0, 100) cannot be reached");
}

static void test_epochs(void **state)
{
	struct nrs_fsck *f = *state;

	f->recs[0].rec.epoch = 3;		/* LSN 3: above the stream's */
	f->recs[2].rec.epoch = 1;		/* LSN 1: fine, lower */
	expect(f, 1, "F11 stream 1 (/k/s): LSN 3 was written under epoch 3",
	       NULL);
}

static void test_trimmed_start(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].start = 150;		/* LSN 1 no longer needed */
	f->nrecs--;				/* (it is recs[2]) */
	expect(f, 0, NULL, NULL);
	f->streams[0].start = 400;
	expect(f, 1, "F7 stream 1 (/k/s): start 400 is above the head 300",
	       NULL);
}

static void test_wal_damage(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_wal_damage d[] = {
		{ .kind = NRS_WAL_CORRUPT, .seg = 1, .start = 64, .end = 264 },
		{ .kind = NRS_WAL_BAD_CHUNK, .seg = 2, .start = 64, .end = 200,
		  .lsn = 9, .chunk = 0 },
		{ .kind = NRS_WAL_BAD_CHUNK, .seg = 3, .start = 64, .end = 200,
		  .lsn = 10 },
		{ .kind = NRS_WAL_TORN_TAIL, .seg = 3, .start = 64, .end = 300 },
	};

	for (size_t i = 0; i < 4; i++)
		nrs_fsck_add_damage(f, &d[i]);
	expect(f, 3, "F4 wal/0000000000000001.seg bytes [64, 264): corrupt",
	       "F5 wal/0000000000000003.seg bytes [64, 300): torn tail "
	       "(236 bytes)");
	assert_non_null(strstr(run(f), "F4 wal/0000000000000002.seg bytes [64,"
			       " 200): record LSN 9: payload chunk 0 fails"));
	assert_null(strstr(run(f), "LSN 10"));	/* inside the torn tail */
	assert_int_equal(f->torn, 1);
}

static void test_namespace(void **state)
{
	struct nrs_fsck *f = *state;

	assert_int_equal(nrs_fsck_add_dirent(f, 16, "ghost", 5, 99), 0);
	expect(f, 1, "F15 dirent 16/\"ghost\": points at inode 99, which does "
	       "not exist", NULL);
}

static void test_unlinked_and_nlink(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_stream_row s = { .id = 2, .ino = 18, .unlinked = true };

	add_inode(f, 18, 0, false, 0, 2);
	assert_int_equal(nrs_fsck_add_stream(f, &s), 0);
	f->inodes[1].nlink = 3;			/* "k" has no subdirectory */
	expect(f, 2, "F19 inode 18 (stream 2): unlinked (nlink 0)",
	       "F17 inode 16 (/k): nlink 3, expected 2");
	assert_int_equal(f->unlinked, 1);
}

static void test_links_disagree(void **state)
{
	struct nrs_fsck *f = *state;

	f->inodes[2].parent = 1;		/* "s" says it is in the root */
	f->streams[0].ino = 16;			/* and its stream says "k" */
	expect(f, 3, "F15 dirent 16/\"s\": inode 17 has nlink 1 and parent 1",
	       "F18 stream 1: its inode 16 names another stream");
	assert_non_null(strstr(run(f), "F18 inode 17 (/k/s): stream 1 belongs "
			       "to another inode"));
}

static void test_loop(void **state)
{
	struct nrs_fsck *f = *state;

	/* "k" moved into itself: its name now lives in its own directory. */
	f->dirents[0].parent = 16;
	f->inodes[1].parent = 16;
	f->inodes[0].nlink = 2;
	f->inodes[1].nlink = 3;
	expect(f, 2, "F16 inode 16", "does not reach the root");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_clean),
		T(test_pending),
		T(test_head_moved),
		T(test_row_checksum),
		T(test_stale_version),
		T(test_missing_and_damaged_records),
		T(test_epochs),
		T(test_trimmed_start),
		T(test_wal_damage),
		T(test_namespace),
		T(test_unlinked_and_nlink),
		T(test_links_disagree),
		T(test_loop),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
