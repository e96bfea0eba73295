/*
 * test_fsck.c - the checks of fsck.c on hand-made rows: a consistent data
 * directory is clean, and each kind of damage gives its own finding.
 *
 * The base picture: root (1) holds directory "k" (16), which holds stream
 * "s" (17, stream 1), committed by three records LSN 1..3 of 100 bytes
 * each, one append each, epoch 2.
 *
 * The object side (F20-F22) runs on a data directory built with the real
 * modules: meta.db by src/meta/sqlite*.c, objects by objfmt.c in the embedded
 * store (objstore_dir.c).  Stream 1 ("/k/s") has head 300000: generation 1
 * holds [0, 200000) (4 payload blocks), and the WAL still holds only LSN 3,
 * [200000, 300000): LSN 1 and 2 were reclaimed after materialization.
 *
 * The lifecycle checks (F23-F26) use the same directory, with generations
 * trimmed away, replaced by a compaction (nrs_meta_obj_replace, as the
 * materializer does), retired, and files no row names.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "fsckdir.h"
#include "fsck/fsck.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "stream/recovery.h"

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

/* F13, recovery RC9: a fence (no bytes) of a new epoch that continues
 * the head is pending; one of the stream's own epoch is not. */
static void test_pending_fence(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_wal_rec_info ri = {
		.rec = { .kind = NRS_WALREC_DATA, .lsn = 4, .stream_id = 1,
			 .base = 300, .epoch = 2, .prev_lsn = 3 },
		.pos = { 1, 64 + 200 * 3 }, .data_ok = true,
	};

	assert_int_equal(nrs_fsck_add_rec(f, &ri), 0);	/* epoch 2: none */
	expect(f, 0, NULL, NULL);
	assert_int_equal(f->pending, 0);
	ri.rec.lsn = 5;
	ri.rec.epoch = 3;
	ri.pos.off += 200;
	assert_int_equal(nrs_fsck_add_rec(f, &ri), 0);
	expect(f, 0, "F13 stream 1 (/k/s): pending: 1 WAL records past the "
	       "head continue it (1 of them fences)",
	       "head 300 -> 300, version 3 -> 3, epoch 2 -> 3");
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

/* F27: a row that fails its checksum is reported alone, by the path of
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
	expect(f, 1, "F27 stream 1 (/k/s): its row in meta.db fails its "
	       "checksum", "the daemon keeps it offline (EIO)");
	assert_int_equal(f->pending, 0);
	assert_false(f->chains_intact);
}

/* F28: a row whose checksum holds but whose id, head or last LSN is out
 * of range is damage (recovery.h RD1), reported alone: no chain walk. */
static void test_row_range(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].head = 1ULL << 63;
	expect(f, 1, "F28 stream 1 (/k/s): its head is out of range",
	       "the daemon keeps it offline (EIO)");
	assert_int_equal(f->pending, 0);
	assert_false(f->chains_intact);
	f->streams[0].head = 300;
	f->streams[0].last_lsn = UINT64_MAX;
	expect(f, 1, "F28 stream 1 (/k/s): its last LSN is out of range", NULL);
	f->streams[0].last_lsn = 3;
	f->streams[0].id = 1ULL << 63;
	expect(f, 3, "F28 stream 9223372036854775808 (/k/s): its id is out of "
	       "range", NULL);			/* and F18 twice */
}

/* RD1: a row F7 or F8 rejects is offline for the daemon: nothing pending
 * (start above head; version 0, or above the head, at a head > 0) */
static void test_impossible_row_not_pending(void **state)
{
	struct nrs_fsck *f = *state;

	f->streams[0].start = 400;
	add_rec(f, 4, 1, 300, 50, 3, true);		/* continues the head */
	expect(f, 1, "F7 stream 1 (/k/s): start 400 is above the head 300",
	       NULL);
	assert_int_equal(f->pending, 0);
	f->streams[0].start = 0;
	f->streams[0].version = 0;
	expect(f, 1, "F8 stream 1 (/k/s): version 0 is impossible", NULL);
	assert_int_equal(f->pending, 0);
	f->streams[0].version = 301;
	expect(f, 1, "F8 stream 1 (/k/s): version 301 is impossible", NULL);
	assert_int_equal(f->pending, 0);
}

/* F29: a record whose LSN is above NRS_WALREC_LSN_MAX (its +1 would wrap
 * RC6), or which ends past NRS_HEAD_MAX, is damage and an orphan:
 * reported, never pending. */
static void test_record_lsn_range(void **state)
{
	struct nrs_fsck *f = *state;

	add_rec(f, UINT64_MAX - 1, 1, 300, 50, 3, true);	/* continues */
	add_rec(f, (1ULL << 63), 1, 300, 50, 3, true);
	expect(f, 2, "F29 wal/0000000000000001.seg at ",
	       "record LSN 18446744073709551614 of stream 1, bytes [300, +50): "
	       "its LSN is above the largest possible");
	assert_int_equal(f->pending, 0);
	assert_true(f->chains_intact);
	expect(f, 2, "F29", NULL);			/* checked again */
	f->recs[f->nrecs - 1].rec.lsn = 4;	/* possible, but past off_t */
	f->recs[f->nrecs - 1].rec.base = NRS_HEAD_MAX - 10;
	expect(f, 2, "F29", "bytes [9223372036854775797, +50): it ends past "
	       "the largest head");
	f->recs[f->nrecs - 1].rec.lsn = 1ULL << 63;
	add_rec(f, NRS_WALREC_LSN_MAX, 1, 300, 50, 3, true);	/* possible */
	expect(f, 2, "F13 stream 1 (/k/s): pending: 1 WAL records", NULL);
	assert_int_equal(f->pending, 1);
}

/* F30: sqlite_sequence, as the tool reads it: an integer below INT64_MAX,
 * never below an id its table (or, for streams, an objects row) holds. */
static void test_sequences(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_obj_row o = {
		.gen = 1, .stream_id = 5, .start = 0, .end = 100,
		.state = NRS_OBJ_RETIRED,
	};

	f->have_seqs = true;
	f->seq_inodes = (struct nrs_meta_seq){ 17, true };
	f->seq_streams = (struct nrs_meta_seq){ 1, true };
	expect(f, 0, NULL, NULL);
	f->seq_streams.v = 0;
	expect(f, 1, "F30 sqlite_sequence streams: at 0, below id 1 that a "
	       "streams row holds", NULL);
	f->seq_streams.v = 4;
	assert_int_equal(nrs_fsck_add_obj(f, &o), 0);	/* a stream long gone */
	expect(f, 1, "F30 sqlite_sequence streams: at 4, below id 5 that an "
	       "objects row holds", NULL);
	f->seq_streams.v = INT64_MAX;
	expect(f, 1, "F30 sqlite_sequence streams: at 9223372036854775807, the "
	       "largest rowid", NULL);
	f->seq_streams.v = 5;
	f->seq_inodes = (struct nrs_meta_seq){ 1000, false };
	expect(f, 2, "F30 sqlite_sequence inodes: not an integer",
	       "F30 sqlite_sequence inodes: at 0, below id 17 that an inodes "
	       "row holds");
}

/* F31: a META record's change number is at most the store's change log,
 * and its payload passes its CRCs. */
static void add_meta(struct nrs_fsck *f, uint64_t lsn, uint64_t seq,
		     uint64_t obj_seq, bool ok)
{
	struct nrs_wal_rec_info ri = {
		.rec = { .kind = NRS_WALREC_META, .lsn = lsn, .base = seq,
			 .len = 32 },
		.pos = { .seg = 1ull << 40 | obj_seq, .off = 64 },
		.data_ok = ok,
		.object = true,
	};

	assert_int_equal(nrs_fsck_add_rec(f, &ri), 0);
}

static void test_change_log(void **state)
{
	struct nrs_fsck *f = *state;

	add_meta(f, 10, 4, 2, true);
	add_meta(f, 11, 5, 3, true);
	add_meta(f, 12, 5, 3, true);		/* NS2: sent again */
	f->have_log_seq = true;
	f->log_seq = 5;
	expect(f, 0, NULL, NULL);
	f->log_seq = 4;
	expect(f, 1, "F31 owal/000001/0000000003:64: the META record of "
	       "change 5, but the database's change log ends at 4", NULL);
	f->log_seq = 5;
	add_meta(f, 13, 6, 4, false);		/* damaged: its seq not taken */
	expect(f, 1, "F31 owal/000001/0000000004:64: a META record's payload "
	       "fails its CRCs (1 such record)", NULL);
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

/* RC5b: the newest record of the chain is lost (a torn tail): only its
 * range has no copy; the records below it are still the chain. */
static void test_chain_newest_lost(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_chain ch;

	f->streams[0].head = 400;
	f->streams[0].version = 4;
	f->streams[0].last_lsn = 4;		/* LSN 4 is not in the WAL */
	expect(f, 1, "F9 stream 1 (/k/s): commit chain broken: LSN 4 is not "
	       "in the WAL: committed bytes [300, 400) cannot be reached", NULL);
	assert_false(f->chains_intact);
	assert_int_equal(nrs_recover_chain(f->recs, f->nrecs, 1, 400, 4, 0,
					   &ch), 0);
	assert_int_equal(ch.n, 3);
	for (size_t i = 0; i < ch.n; i++)
		assert_int_equal(f->recs[ch.idx[i]].rec.base, 100 * i);
	assert_int_equal(ch.miss_start, 300);
	assert_int_equal(ch.miss_end, 400);
	assert_int_equal(ch.broken_lsn, 4);
	assert_int_equal(ch.twin[0], 0);
	nrs_chain_free(&ch);
}

/* RC5b, I2: two records continue the chain at the same base (a failed
 * writer's orphan beside the committed one): that range is not guessed. */
static void test_chain_twins(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_chain ch;

	add_rec(f, 4, 1, 300, 50, 3, true);
	add_rec(f, 5, 1, 300, 80, 3, true);
	f->streams[0].head = 400;
	f->streams[0].version = 5;
	f->streams[0].last_lsn = 6;		/* lost */
	expect(f, 1, "F9 stream 1 (/k/s): commit chain broken: LSN 4 and LSN 5"
	       " both continue it at offset 300: committed bytes [300, 400) "
	       "cannot be told", NULL);
	assert_int_equal(nrs_recover_chain(f->recs, f->nrecs, 1, 400, 6, 0,
					   &ch), 0);
	assert_int_equal(ch.n, 3);
	assert_int_equal(ch.miss_start, 300);
	assert_int_equal(ch.miss_end, 400);
	assert_int_equal(ch.twin[0], 4);
	assert_int_equal(ch.twin[1], 5);
	nrs_chain_free(&ch);
}

/* RC5b: where the walk up meets the walk back, the record below must be
 * the one the walk back named; an orphan in the lost record's place is
 * not served. */
static void test_chain_orphan_in_place(void **state)
{
	struct nrs_fsck *f = *state;
	struct nrs_chain ch;

	f->nrecs = 0;
	add_rec(f, 1, 1, 0, 100, 0, true);
	add_rec(f, 2, 1, 100, 100, 1, true);	/* an orphan */
	add_rec(f, 4, 1, 200, 100, 3, true);	/* LSN 3 [100, 200) lost */
	f->streams[0].last_lsn = 4;
	expect(f, 1, "F9 stream 1 (/k/s): commit chain broken: LSN 3 is not "
	       "in the WAL: committed bytes [100, 200) cannot be reached", NULL);
	assert_int_equal(nrs_recover_chain(f->recs, f->nrecs, 1, 300, 4, 0,
					   &ch), 0);
	assert_int_equal(ch.n, 2);
	assert_int_equal(f->recs[ch.idx[0]].rec.lsn, 1);
	assert_int_equal(f->recs[ch.idx[1]].rec.lsn, 4);
	assert_int_equal(ch.miss_start, 100);
	assert_int_equal(ch.miss_end, 200);
	nrs_chain_free(&ch);
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

/* ---- F20-F22 on a data directory built with the real modules ----------- */

/* Invert the byte at payload offset off of the object stored under key
 * (the dir store's own header is 64 bytes, objstore_dir.c). */
static void flip_payload(struct objdir *d, const char *key, uint64_t len,
			 uint64_t off)
{
	unsigned char b;
	int fd;

	snprintf(d->path, sizeof(d->path), "%s/objects/%s", d->dir, key);
	fd = open(d->path, O_RDWR);
	assert_true(fd >= 0);
	off += 64 + nrs_objfmt_hdr_len(len);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static void test_objects_clean(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];
	struct stat st;

	put_object(d, 0, OBJ_WAL_BASE, key);
	check_objdir(d, true, 0, NULL, NULL);
	assert_int_equal(d->f.objects_verified, 1);
	assert_true(d->f.chains_intact);
	/* Nothing of the store was created or removed. */
	assert_int_equal(stat(at(d, "objects/.tmp"), &st), 0);
	assert_int_equal(d->f.store->ops->del(d->f.store, key), -EROFS);
	assert_int_equal(stat(at(d, "objects"), &st), 0);
}

static void test_objects_flipped_byte(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX], want[512];

	put_object(d, 0, OBJ_WAL_BASE, key);
	flip_payload(d, key, OBJ_WAL_BASE, 70000);
	snprintf(want, sizeof(want), "F21 object %s (stream 1 (/k/s), bytes "
		 "[0, 200000), committed): 1 of its 4 payload blocks fail their"
		 " CRC32C, the first holding bytes [65536, 131072)", key);
	check_objdir(d, true, 1, want, NULL);
	assert_false(d->f.chains_intact);
	assert_int_equal(d->f.objects_verified, 0);
	/* --no-objects: the rows still add up, the bytes are not read. */
	check_objdir(d, false, 0, NULL, NULL);
}

static void test_objects_missing(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX], want[512];

	put_object(d, 0, OBJ_WAL_BASE, key);
	snprintf(want, sizeof(want), "F21 object %s (stream 1 (/k/s), bytes "
		 "[0, 200000), committed): missing from the object store", key);
	assert_int_equal(unlink(at(d, "objects/s/0000000000000001/"
				   "0000000000000000-0000000000030d40-g"
				   "0000000000000001")), 0);
	check_objdir(d, true, 1, want, NULL);
	assert_false(d->f.chains_intact);
	/* No object directory at all: every committed object is missing. */
	assert_int_equal(nrs_fixture_rmtree(at(d, "objects")), 0);
	check_objdir(d, true, 1, want, NULL);
	assert_true(d->f.store_absent);
}

static void test_objects_overlap(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, OBJ_WAL_BASE, key);
	put_object(d, 100000, 250000, key);
	check_objdir(d, true, 1, "F20 stream 1 (/k/s): object generation 2 "
		     "[100000, 250000) overlaps generation 1 [0, 200000): the "
		     "next mount does not read it", NULL);
	assert_int_equal(d->f.objects_verified, 2);
}

static void test_objects_gap_to_wal(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, 150000, key);
	check_objdir(d, true, 1, "F9 stream 1 (/k/s): commit chain broken: "
		     "LSN 2 is not in the WAL: committed bytes [150000, 200000)"
		     " cannot be reached (its objects end at 150000)", NULL);
	assert_false(d->f.chains_intact);
}

static void test_objects_gap_between(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 50000, 120000, key);
	put_object(d, 130000, OBJ_WAL_BASE, key);
	check_objdir(d, true, 2, "F20 stream 1 (/k/s): committed bytes [0, "
		     "50000) are in no object (a gap below generation 1)",
		     "F20 stream 1 (/k/s): committed bytes [120000, 130000) are"
		     " in no object (a gap below generation 2)");
	assert_false(d->f.chains_intact);
}

static void test_objects_past_head_and_trimmed(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, OBJ_WAL_BASE, key);
	put_object(d, OBJ_WAL_BASE, OBJ_HEAD + 10, key);
	check_objdir(d, true, 1, "F20 stream 1 (/k/s): object generation 2 "
		     "[200000, 300010) reaches past the head 300000", NULL);
	/* Trimmed to 250000: generation 1 holds no readable byte, and the
	 * chain still reaches down to the start. */
	d->m = NULL;
	assert_int_equal(nrs_meta_open(at(d, "meta.db"), &d->m), 0);
	assert_int_equal(nrs_meta_set_start(d->m, d->sid, 250000), 0);
	check_objdir(d, true, 1, "reaches past the head", NULL);
}

static void test_objects_intents(void **state)
{
	struct objdir *d = *state;
	struct nrs_obj_row o = {
		.stream_id = d->sid, .start = OBJ_WAL_BASE, .end = OBJ_HEAD,
		.length = 1,
	};
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, OBJ_WAL_BASE, key);
	assert_int_equal(nrs_meta_obj_prepare(d->m, &o), 0);	/* gen 2 */
	assert_int_equal(nrs_meta_obj_prepare(d->m, &o), 0);	/* gen 3 */
	assert_int_equal(nrs_meta_obj_set_state(d->m, o.gen, NRS_OBJ_PREPARED,
						NRS_OBJ_QUARANTINED, 1), 0);
	check_objdir(d, true, 0, "F22 object s/0000000000000001/"
			    "0000000000030d40-00000000000493e0-g0000000000000002"
			    " (stream 1 (/k/s), bytes [200000, 300000), prepared):"
			    " an upload intent", "-g0000000000000003 (stream 1 "
			    "(/k/s), bytes [200000, 300000), quarantined): its "
			    "key held other bytes");
	assert_int_equal(d->f.pending, 1);
	assert_int_equal(d->f.objects_verified, 1);
}

/* ---- F23-F26: the lifecycle -------------------------------------------- */

#define SEC	1000000000ll
#define T0	(1700000000 * SEC)	/* when the rows changed state */

/* Reopen meta.db for writing (check_objdir closed it). */
static struct nrs_meta *reopen(struct objdir *d)
{
	if (!d->m)
		assert_int_equal(nrs_meta_open(at(d, "meta.db"), &d->m), 0);
	return d->m;
}

/* "objects/KEY" of the data directory, for stat and unlink. */
static const char *obj_file(struct objdir *d, const char *key)
{
	snprintf(d->path, sizeof(d->path), "%s/objects/%s", d->dir, key);
	return d->path;
}

/* A new stream "/k/<name>" with one committed object [0, len) (its key in
 * key), then unlinked; returns its inode. */
static uint64_t unlinked_stream(struct objdir *d, const char *name,
				uint64_t len, char key[NRS_OBJKEY_MAX])
{
	struct nrs_stream_row srow;
	struct nrs_attr k, t;
	uint64_t sid = d->sid;

	assert_int_equal(nrs_meta_lookup(d->m, NRS_ROOT_INO, "k", &k), 0);
	assert_int_equal(nrs_meta_create(d->m, k.ino, name, 0644, 0, 0, 1, &t,
					 &srow), 0);
	d->sid = srow.id;
	put_object(d, 0, len, key);
	d->sid = sid;
	assert_int_equal(nrs_meta_unlink(d->m, k.ino, name, 2, &t), 0);
	return t.ino;
}

/* Generations trimmed away, or whose stream was forgotten or unlinked:
 * awaiting GC, not read, and a missing object is no loss. */
static void test_lifecycle_unneeded(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX], tkey[NRS_OBJKEY_MAX], want[1024];
	uint64_t ino;

	put_object(d, 0, OBJ_WAL_BASE, key);
	assert_int_equal(nrs_meta_set_start(d->m, d->sid, OBJ_WAL_BASE), 0);
	/* Stream 2, "/k/t": one object, then unlinked and forgotten. */
	ino = unlinked_stream(d, "t", 5000, tkey);
	assert_int_equal(nrs_meta_forget_inode(d->m, ino), 0);
	/* Stream 3, "/k/u": unlinked while open, then a crash (F19). */
	unlinked_stream(d, "u", 7000, tkey);

	snprintf(want, sizeof(want), "F23 object %s (stream 1 (/k/s), bytes "
		 "[0, 200000), committed): no published state needs it (it "
		 "lies wholly below the stream's start 200000): awaiting GC, "
		 "which moves it to draining and deletes it gc_grace_ms later; "
		 "its object is still stored", key);
	check_objdir(d, true, 1, want, "F23 object s/0000000000000002/"
		     "0000000000000000-0000000000001388-g0000000000000002 "
		     "(stream 2 (gone), bytes [0, 5000), committed): no "
		     "published state needs it (its stream is gone)");
	assert_non_null(strstr(d->out.text, "-g0000000000000003 (stream 3 "
			       "(unlinked), bytes [0, 7000), committed): no "
			       "published state needs it (its stream is "
			       "unlinked: once the next mount (or --repair) "
			       "forgets it (F19), GC drains it): awaiting GC"));
	assert_int_equal(d->f.unlinked, 1);		/* the one error */
	assert_int_equal(d->f.pending, 3);
	assert_int_equal(d->f.objects_verified, 0);	/* not read */
	assert_true(d->f.chains_intact);

	/* Damaged or gone, they still hold no readable byte. */
	flip_payload(d, key, OBJ_WAL_BASE, 70000);
	assert_int_equal(unlink(obj_file(d, tkey)), 0);
	check_objdir(d, true, 1, "(its stream is unlinked: once the next mount"
		     " (or --repair) forgets it (F19), GC drains it): awaiting "
		     "GC, which moves it to draining and deletes it gc_grace_ms "
		     "later; its object is already gone from the store", NULL);
	assert_int_equal(d->f.pending, 3);
	assert_true(d->f.chains_intact);
}

/* A compaction (compaction.c CP2) replaced generations 1 and 2 by 3, at
 * T0: 1 and 2 are draining.  Their files are those of committed rows. */
static void compact(struct objdir *d, char k1[NRS_OBJKEY_MAX],
		    char k2[NRS_OBJKEY_MAX], char k3[NRS_OBJKEY_MAX])
{
	unsigned char sha[NRS_SHA256_LEN];
	uint64_t olds[2];
	uint64_t gen;

	olds[0] = put_object(d, 0, 100000, k1);
	olds[1] = put_object(d, 100000, OBJ_WAL_BASE, k2);
	gen = store_object(d, 0, OBJ_WAL_BASE, k3, sha);
	assert_int_equal(nrs_meta_obj_replace(d->m, gen, sha, olds, 2, T0), 0);
}

static void test_lifecycle_draining(void **state)
{
	struct objdir *d = *state;
	char k1[NRS_OBJKEY_MAX], k2[NRS_OBJKEY_MAX], k3[NRS_OBJKEY_MAX];
	char want[1024];

	compact(d, k1, k2, k3);
	d->now_ns = T0 + 5 * SEC + SEC / 2;
	snprintf(want, sizeof(want), "F24 object %s (stream 1 (/k/s), bytes "
		 "[0, 100000), draining): awaiting GC since 5.5 s ago: deleted "
		 "when its grace period (60000 ms) is over, in 54.5 s; its "
		 "object is still stored", k1);
	check_objdir(d, true, 0, want, "-g0000000000000002 (stream 1 (/k/s), "
		     "bytes [100000, 200000), draining): awaiting GC since 5.5 s"
		     " ago");
	assert_int_equal(d->f.pending, 2);
	assert_int_equal(d->f.objects_verified, 1);	/* generation 3 */

	/* Longer than the grace period: still only pending. */
	d->now_ns = T0 + 4000 * SEC;
	d->grace_ms = 1000;
	assert_int_equal(unlink(obj_file(d, k2)), 0);
	snprintf(want, sizeof(want), "F24 object %s (stream 1 (/k/s), bytes "
		 "[100000, 200000), draining): awaiting GC since 1 h 6 min ago,"
		 " longer than the grace period (1000 ms), only because no "
		 "daemon runs: the first GC pass after the next mount deletes "
		 "it; its object is already gone from the store", k2);
	check_objdir(d, true, 0, want, "[0, 100000), draining): awaiting GC "
		     "since 1 h 6 min ago, longer than the grace period");
	assert_int_equal(d->f.pending, 2);
	/* --no-objects: not looked up. */
	check_objdir(d, false, 0, "[0, 100000), draining): awaiting GC since "
		     "1 h 6 min ago, longer than the grace period (1000 ms), only"
		     " because no daemon runs: the first GC pass after the next "
		     "mount deletes it\n", NULL);
}

static void test_lifecycle_retired(void **state)
{
	struct objdir *d = *state;
	char k1[NRS_OBJKEY_MAX], k2[NRS_OBJKEY_MAX], k3[NRS_OBJKEY_MAX];
	char want[1024];

	compact(d, k1, k2, k3);
	/* Generation 1 retired without its delete: a GC bug. */
	assert_int_equal(nrs_meta_obj_set_state(d->m, 1, NRS_OBJ_DRAINING,
						NRS_OBJ_RETIRED, T0), 0);
	snprintf(want, sizeof(want), "F25 object %s (stream 1 (/k/s), bytes "
		 "[0, 100000), retired): retired but still stored (%zu bytes):"
		 " a GC bug", k1, nrs_objfmt_hdr_len(100000) + 100000);
	check_objdir(d, true, 1, want, "nothing will delete it now: delete it"
		     " by hand (--repair deletes no object)");
	assert_int_equal(d->f.strays, 1);
	assert_null(strstr(d->out.text, "F26"));	/* said once */
	/* --no-objects does not look. */
	check_objdir(d, false, 0, NULL, NULL);
	/* Deleted, as G2 does before retiring: clean. */
	assert_int_equal(unlink(obj_file(d, k1)), 0);
	check_objdir(d, true, 0, NULL, NULL);
	assert_int_equal(d->f.strays, 0);
	assert_int_equal(d->f.pending, 1);		/* generation 2 */
	/* Both retired, the second gone too: nothing pending. */
	reopen(d);
	assert_int_equal(nrs_meta_obj_set_state(d->m, 2, NRS_OBJ_DRAINING,
						NRS_OBJ_RETIRED, T0), 0);
	assert_int_equal(unlink(obj_file(d, k2)), 0);
	check_objdir(d, true, 0, NULL, NULL);
	assert_int_equal(d->f.pending, 0);
}

/* Set the times of file rel (under the data directory, a symlink's own)
 * to now - age_s. */
static void plant_age(struct objdir *d, const char *rel, int64_t age_s)
{
	struct timespec ts[2];

	clock_gettime(CLOCK_REALTIME, &ts[1]);
	ts[1].tv_sec -= age_s;
	ts[0] = ts[1];
	assert_int_equal(utimensat(AT_FDCWD, at(d, rel), ts,
				   AT_SYMLINK_NOFOLLOW), 0);
}

/* Make file rel (under the data directory), written age_s ago. */
static void plant(struct objdir *d, const char *rel, int64_t age_s)
{
	int fd = open(at(d, rel), O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "stray", 5), 5);
	close(fd);
	plant_age(d, rel, age_s);
}

static void test_lifecycle_unreferenced(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX], copy[NRS_OBJKEY_MAX + 32], from[512];

	put_object(d, 0, OBJ_WAL_BASE, key);
	plant(d, "objects/s/0000000000000001/stray", 120);	/* old */
	plant(d, "objects/young", 0);
	plant(d, "objects/.hidden", 1000);	/* no key is a dot-name */
	plant(d, "objects/.tmp/1-1", 1000);	/* the store's own */
	/* A copy of the object under the key of a generation no row has. */
	snprintf(copy, sizeof(copy), "objects/%s", key);
	memcpy(copy + strlen(copy) - 1, "9", 2);
	snprintf(from, sizeof(from), "%s", obj_file(d, key));
	assert_int_equal(link(from, at(d, copy)), 0);
	plant_age(d, copy, 3600);
	assert_int_equal(symlink("young", at(d, "objects/link")), 0);
	plant_age(d, "objects/link", 600);
	check_objdir(d, true, 3, "F26 objects/s/0000000000000001/stray: an "
		     "unreferenced object: no row of the objects table names "
		     "it, and it was written 2 min ", "F26 objects/young: no row"
		     " of the objects table names it, but it was written only ");
	assert_non_null(strstr(d->out.text, " ago (a file of 5 bytes): nothing"
			       " will delete it: look, then delete it by hand "
			       "(--repair deletes no object)"));
	assert_non_null(strstr(d->out.text, "F26 objects/link: an unreferenced"
			       " object: no row of the objects table names it "
			       "(and it is not even a regular file)"));
	assert_non_null(strstr(d->out.text, " ago, within the grace period "
			       "(60000 ms)"));
	assert_non_null(strstr(d->out.text, copy));
	assert_null(strstr(d->out.text, "hidden"));
	assert_null(strstr(d->out.text, "1-1"));
	assert_int_equal(d->f.strays, 3);
	assert_int_equal(d->f.pending, 1);
	assert_int_equal(d->f.objects_verified, 1);
	/* A longer grace period: only pending. */
	d->grace_ms = 7200000;
	check_objdir(d, true, 0, "F26 objects/s/0000000000000001/stray: no row"
		     " of the objects table names it, but it was written only "
		     "2 min ", "ago, within the grace period (7200000 ms)");
	assert_int_equal(d->f.pending, 4);
	assert_int_equal(unlink(at(d, "objects/link")), 0);
	/* --no-objects does not list. */
	check_objdir(d, false, 0, NULL, NULL);
	assert_int_equal(d->f.pending, 0);
}

/* F32: WAL objects of the object WAL below its floor are one warning,
 * with their count and keys; those at or above it, markers and seals are
 * no finding (nor F26's); a file under owal/ that is no key is F26's. */
static void test_owal_below_floor(void **state)
{
	static const char *const files[] = {
		"objects/owal/000001/0000000000",	/* marker */
		"objects/owal/000001/seal",
		"objects/owal/000001/0000000001",	/* below */
		"objects/owal/000001/0000000002",	/* below */
		"objects/owal/000002/0000000000",
		"objects/owal/000002/0000000001",	/* the floor */
		"objects/owal/000002/0000000002",
		"objects/owal/000002/junk",
	};
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];
	const char *text;

	put_object(d, 0, OBJ_WAL_BASE, key);
	assert_int_equal(mkdir(at(d, "objects/owal"), 0700), 0);
	assert_int_equal(mkdir(at(d, "objects/owal/000001"), 0700), 0);
	assert_int_equal(mkdir(at(d, "objects/owal/000002"), 0700), 0);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		plant(d, files[i], 3600);
	load(d, true);
	d->f.have_owal_floor = true;
	d->f.owal_floor = 2ull << 40 | 1;
	text = run(&d->f);
	assert_int_equal(d->f.errors, 1);		/* junk */
	assert_non_null(strstr(text, "F26 objects/owal/000002/junk: an "
			       "unreferenced object"));
	assert_int_equal(d->f.warnings, 1);
	assert_int_equal(d->f.owal_leftovers, 2);
	assert_non_null(strstr(text, "F32 2 WAL objects of the object WAL below"
			       " its floor 0000020000000001 still stored"));
	assert_non_null(strstr(text, "owal/000001/0000000001"));
	assert_non_null(strstr(text, "owal/000001/0000000002"));
	assert_null(strstr(text, "seal"));
	assert_null(strstr(text, "owal/000002/0000000001"));
	assert_null(strstr(text, "/0000000000"));
	/* without a floor (no object WAL state): F26 judges them all */
	load(d, true);
	text = run(&d->f);
	assert_int_equal(d->f.warnings, 0);
	assert_int_equal(d->f.errors, 8);
	assert_null(strstr(text, "F32"));
}

/* A generation wholly covered by a newer committed one is not "awaiting
 * GC": the daemon leaves no such pair, GC would not drain either, and the
 * next mount reads only one of them (F20). */
static void test_lifecycle_covered(void **state)
{
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, 100000, key);
	put_object(d, 100000, OBJ_WAL_BASE, key);
	put_object(d, 0, OBJ_WAL_BASE, key);
	check_objdir(d, true, 1, "F20 stream 1 (/k/s): object generation 3 "
		     "[0, 200000) overlaps generation 1 [0, 100000): the next "
		     "mount does not read it", NULL);
	assert_int_equal(d->f.pending, 0);
}

/* A store that does not answer. */
static int down_head(struct nrs_objstore *s, const char *key,
		     struct nrs_obj_meta *out)
{
	(void)s;
	(void)key;
	(void)out;
	return -ECONNREFUSED;
}

static void test_objects_store_down(void **state)
{
	static const struct nrs_objstore_ops down_ops = {
		.name = "down", .head = down_head,
	};
	struct nrs_objstore down = { .ops = &down_ops };
	struct objdir *d = *state;
	char key[NRS_OBJKEY_MAX];

	put_object(d, 0, OBJ_WAL_BASE, key);
	load(d, false);
	d->f.store = &down;
	assert_int_equal(nrs_fsck_check(&d->f), -ECONNREFUSED);
	d->f.store = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_clean),
		T(test_pending),
		T(test_pending_fence),
		T(test_head_moved),
		T(test_row_checksum),
		T(test_row_range),
		T(test_impossible_row_not_pending),
		T(test_record_lsn_range),
		T(test_sequences),
		T(test_change_log),
		T(test_stale_version),
		T(test_missing_and_damaged_records),
		T(test_chain_newest_lost),
		T(test_chain_twins),
		T(test_chain_orphan_in_place),
		T(test_epochs),
		T(test_trimmed_start),
		T(test_wal_damage),
		T(test_namespace),
		T(test_unlinked_and_nlink),
		T(test_links_disagree),
		T(test_loop),
#undef T
#define T(name) cmocka_unit_test_setup_teardown(name, setup_objdir, \
						teardown_objdir)
		T(test_objects_clean),
		T(test_objects_flipped_byte),
		T(test_objects_missing),
		T(test_objects_overlap),
		T(test_objects_gap_to_wal),
		T(test_objects_gap_between),
		T(test_objects_past_head_and_trimmed),
		T(test_objects_intents),
		T(test_objects_store_down),
		T(test_lifecycle_unneeded),
		T(test_lifecycle_draining),
		T(test_lifecycle_retired),
		T(test_lifecycle_unreferenced),
		T(test_owal_below_floor),
		T(test_lifecycle_covered),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
