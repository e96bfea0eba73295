/*
 * test_fsck_adopt.c - fsck's checks of adopted generations (fsck_adopt.c
 * F20, F21, F25, F26 for objects/w/; F25, F32 for a WAL object adopted
 * for an object-wal stream), on fsckdir.h's data directory.
 *
 * Stream 1 ("/k/s"), head 300000: [0, 100000) and [100000, 200000) are two
 * WAL records of segment 1 that the embedded store adopted in place, the
 * file objects/w/0000000000000001 (the WAL's own name of it is gone), each
 * named by a committed row (seg 1, off the record's byte); the WAL still
 * holds LSN 3, [200000, 300000), in segment 2.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "fsckdir.h"
#include "wal/walrec.h"

#define REC	100000		/* payload bytes of each adopted record */

/* The byte at stream offset x. */
static unsigned char byte_at(uint64_t x)
{
	return (unsigned char)(x * 7 + 1);
}

/*
 * Write segment seg's file (64 header bytes, then records [k * REC, k *
 * REC + REC) for k < n, LSN k + 1) at DIR/seg, link it into the store
 * (OD6) and remove the WAL's name; each record's byte offset in off[].
 */
static void segment(struct objdir *d, uint64_t seg, unsigned int n,
		    uint64_t off[])
{
	static unsigned char payload[REC], hdr[NRS_WALREC_FIXED + 4 * 64];
	static const unsigned char zero[NRS_WALREC_FIXED + 8];
	char key[NRS_OBJKEY_MAX], path[600];
	int fd;
	uint64_t pos = 64;

	snprintf(path, sizeof(path), "%s/seg", d->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, zero, 64), 64);
	for (unsigned int k = 0; k < n; k++) {
		struct nrs_walrec r = {
			.kind = NRS_WALREC_DATA, .lsn = k + 1,
			.stream_id = d->sid, .base = (uint64_t)k * REC,
			.len = REC, .n_appends = 1, .epoch = 2, .prev_lsn = k,
		};
		struct iovec iov = { payload, REC };
		size_t total = nrs_walrec_total_len(REC);
		ssize_t hl;

		for (uint64_t i = 0; i < REC; i++)
			payload[i] = byte_at(r.base + i);
		hl = nrs_walrec_encode_hdr(&r, &iov, 1, hdr, sizeof(hdr));
		assert_true(hl > 0);
		assert_int_equal(write(fd, hdr, (size_t)hl), hl);
		assert_int_equal(write(fd, payload, REC), REC);
		assert_int_equal(write(fd, zero, total - (size_t)hl - REC),
				 (ssize_t)(total - (size_t)hl - REC));
		off[k] = pos;
		pos += total;
	}
	assert_int_equal(close(fd), 0);
	nrs_objfmt_adopt_key(key, seg);
	assert_int_equal(nrs_objstore_dir_adopt(d->store, key, path), 0);
	assert_int_equal(unlink(path), 0);
}

/* A committed row naming record [start, start + REC) at off of seg. */
static uint64_t adopted_row(struct objdir *d, uint64_t seg, uint64_t start,
			    uint64_t off, uint64_t length)
{
	static const unsigned char sha[NRS_SHA256_LEN];
	struct nrs_obj_row o = {
		.stream_id = d->sid, .start = start, .end = start + REC,
		.length = length, .seg = seg, .off = off,
	};

	assert_int_equal(nrs_meta_obj_prepare(d->m, &o), 0);
	assert_int_equal(nrs_meta_obj_publish(d->m, o.gen, sha), 0);
	return o.gen;
}

/* After a check (load() closed them): meta.db and the store writable. */
static void reopen(struct objdir *d)
{
	assert_int_equal(nrs_meta_open(at(d, "meta.db"), &d->m), 0);
	nrs_obj_close(d->store);
	d->f.store = NULL;
	assert_int_equal(nrs_objstore_dir_open(at(d, "objects"), &d->store), 0);
}

/* The base picture; the generations in g[]. */
static void base(struct objdir *d, uint64_t g[2])
{
	uint64_t off[2];
	size_t len = nrs_walrec_hdr_len(REC) + REC;

	segment(d, 1, 2, off);
	g[0] = adopted_row(d, 1, 0, off[0], len);
	g[1] = adopted_row(d, 1, REC, off[1], len);
}

static const char *file(struct objdir *d, uint64_t seg)
{
	char key[NRS_OBJKEY_MAX], rel[NRS_OBJKEY_MAX + 16];

	nrs_objfmt_adopt_key(key, seg);
	snprintf(rel, sizeof(rel), "objects/%s", key);
	return at(d, rel);
}

/* The check's clock an hour on: every file is past its grace. */
static void later(struct objdir *d)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	d->now_ns = (ts.tv_sec + 3600) * 1000000000LL + ts.tv_nsec;
}

/* F20, F21: both records are found, whole and intact, and the file is
 * named (F26). */
static void test_adopted_clean(void **state)
{
	struct objdir *d = *state;
	uint64_t g[2];

	base(d, g);
	later(d);
	check_objdir(d, true, 0, NULL, NULL);
	assert_int_equal(d->f.objects_verified, 2);
	assert_true(d->f.chains_intact);
}

/* F21: the file gone; then cut short inside the second record. */
static void test_adopted_missing_short(void **state)
{
	struct objdir *d = *state;
	uint64_t g[2];

	base(d, g);
	assert_int_equal(truncate(file(d, 1), 64 + 5000), 0);
	check_objdir(d, true, 2, "F21 object w/0000000000000001 at byte 64 "
		     "(stream 1 (/k/s), bytes [0, 100000), committed): the file"
		     " ends 5000 bytes into the record's 100072",
		     "the file ends inside the record's header");
	assert_false(d->f.chains_intact);
	assert_int_equal(unlink(file(d, 1)), 0);
	check_objdir(d, true, 2, "F21 object w/0000000000000001 at byte 64 "
		     "(stream 1 (/k/s), bytes [0, 100000), committed): its file"
		     " is missing from the object store", NULL);
}

/* F21: a payload byte flipped; a row whose offset names the other record;
 * one whose offset is no record's start. */
static void test_adopted_damaged(void **state)
{
	struct objdir *d = *state;
	uint64_t g[2], off[2];
	size_t hl = nrs_walrec_hdr_len(REC);
	unsigned char b;
	int fd;

	base(d, g);
	off[1] = 64 + nrs_walrec_total_len(REC);
	fd = open(file(d, 1), O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)(off[1] + hl + 70000)), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)(off[1] + hl + 70000)), 1);
	close(fd);
	check_objdir(d, true, 1, "bytes [100000, 200000), committed): its "
		     "payload chunk 1 (bytes [165536, ...)) fails its CRC32C",
		     NULL);
	reopen(d);
	assert_int_equal(nrs_meta_obj_set_state(d->m, g[1], NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 1), 0);
	adopted_row(d, 1, REC, 64, hl + REC);	/* the first record's place */
	check_objdir(d, true, 1, "committed): the record there is stream 1 "
		     "[0, 100000): reads of it fail", NULL);
	reopen(d);
	adopted_row(d, 1, 2 * REC, 72, hl + REC);
	check_objdir(d, true, 2, "bytes [200000, 300000), committed): no WAL "
		     "record header there", NULL);
}

/* F20: a row no writer makes (its length is not its record's). */
static void test_adopted_impossible(void **state)
{
	struct objdir *d = *state;
	uint64_t off[1];

	segment(d, 1, 1, off);
	adopted_row(d, 1, 0, off[0], REC);
	adopted_row(d, 1, REC, off[0], nrs_walrec_total_len(REC) + 8);
	check_objdir(d, true, 3, "F20 object w/0000000000000001 at byte 64 "
		     "(stream 1 (/k/s), bytes [0, 100000), committed): an "
		     "impossible row", "F9");
}

/* F25: retired rows whose file still has a committed row are fine; once
 * every row of the file is retired, a file still stored is a GC bug (said
 * once); gone, it is fine. */
static void test_adopted_retired(void **state)
{
	struct objdir *d = *state;
	uint64_t g[2];
	const char *text;

	base(d, g);
	assert_int_equal(nrs_meta_set_start(d->m, d->sid, 2 * REC), 0);
	for (int k = 0; k < 1; k++) {
		assert_int_equal(nrs_meta_obj_set_state(d->m, g[k],
							NRS_OBJ_COMMITTED,
							NRS_OBJ_DRAINING, 1), 0);
		assert_int_equal(nrs_meta_obj_set_state(d->m, g[k],
							NRS_OBJ_DRAINING,
							NRS_OBJ_RETIRED, 1), 0);
	}
	later(d);
	check_objdir(d, true, 0, "F23 object w/0000000000000001 at byte 100136",
		     "F25 object w/0000000000000001 at byte 64 (stream 1 (/k/s),"
		     " bytes [0, 100000), retired): punched out of its file");
	reopen(d);
	assert_int_equal(nrs_meta_obj_set_state(d->m, g[1], NRS_OBJ_COMMITTED,
						NRS_OBJ_DRAINING, 1), 0);
	assert_int_equal(nrs_meta_obj_set_state(d->m, g[1], NRS_OBJ_DRAINING,
						NRS_OBJ_RETIRED, 1), 0);
	text = check_objdir(d, true, 1, "F25 object w/0000000000000001 at byte"
			    " 100136 (stream 1 (/k/s), bytes [100000, 200000), "
			    "retired): every row naming objects/w/"
			    "0000000000000001 is retired, but the file is still"
			    " stored", NULL);
	assert_int_equal(d->f.strays, 1);
	assert_int_equal(unlink(file(d, 1)), 0);
	text = check_objdir(d, true, 0, "F25 object w/0000000000000001 at byte"
			    " 100136 (stream 1 (/k/s), bytes [100000, 200000), "
			    "retired): its file deleted by GC", NULL);
	assert_null(strstr(text, "F26"));
}

/* F26: a file w/<seg> no row names: pending while the WAL still holds
 * records of segment seg (2, LSN 3's), an unreferenced object once not
 * (9). */
static void test_adopted_orphans(void **state)
{
	struct objdir *d = *state;
	uint64_t g[2], off[2];

	base(d, g);
	segment(d, 2, 1, off);
	later(d);
	check_objdir(d, true, 0, "F26 objects/w/0000000000000002: no row names"
		     " it, but the WAL still holds segment 2", NULL);
	reopen(d);
	segment(d, 9, 1, off);
	check_objdir(d, true, 1, "F26 objects/w/0000000000000009: an "
		     "unreferenced object", NULL);
	assert_int_equal(d->f.strays, 1);
}

/* F32, F25 for a WAL object adopted for an object-wal stream (mat_adopt.c
 * MZ13): below the floor a live row names it, which is no leftover; once
 * its rows are retired it is still the object WAL's at or above the floor
 * (lifecycle.c G9), a stray below it. */
static void test_adopted_owal(void **state)
{
	static const uint64_t ow = (uint64_t)1 << 40 | 2;  /* run 1, seq 2 */
	struct objdir *d = *state;
	const uint64_t seg = NRS_ADOPT_OWAL | ow;
	size_t len = nrs_walrec_hdr_len(REC) + REC;
	uint64_t off[2], g[2];
	const char *text;

	segment(d, seg, 2, off);
	g[0] = adopted_row(d, seg, 0, off[0], len);
	g[1] = adopted_row(d, seg, REC, off[1], len);
	later(d);
	load(d, true);
	d->f.have_owal_floor = true;
	d->f.owal_floor = ow + 1;
	text = run(&d->f);
	assert_int_equal(d->f.errors, 0);
	assert_int_equal(d->f.warnings, 0);
	assert_int_equal(d->f.objects_verified, 2);	/* F21 read them */
	assert_null(strstr(text, "F32"));
	assert_null(strstr(text, "F26"));
	reopen(d);
	assert_int_equal(nrs_meta_set_start(d->m, d->sid, 2 * REC), 0);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(nrs_meta_obj_set_state(d->m, g[k],
				 NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING, 1), 0);
		assert_int_equal(nrs_meta_obj_set_state(d->m, g[k],
				 NRS_OBJ_DRAINING, NRS_OBJ_RETIRED, 1), 0);
	}
	load(d, true);
	d->f.have_owal_floor = true;
	d->f.owal_floor = ow;		/* the WAL still scans it */
	text = run(&d->f);
	assert_int_equal(d->f.errors, 0);
	assert_non_null(strstr(text, "its WAL object is still the object "
			       "WAL's"));
	reopen(d);
	load(d, true);
	d->f.have_owal_floor = true;
	d->f.owal_floor = ow + 1;		/* G7 should have deleted it */
	text = run(&d->f);
	assert_int_equal(d->f.strays, 1);
	assert_non_null(strstr(text, "every row naming objects/owal/000001/"
			       "0000000002 is retired"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(t) cmocka_unit_test_setup_teardown(t, setup_objdir, teardown_objdir)
		T(test_adopted_clean),
		T(test_adopted_missing_short),
		T(test_adopted_damaged),
		T(test_adopted_impossible),
		T(test_adopted_retired),
		T(test_adopted_orphans),
		T(test_adopted_owal),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
