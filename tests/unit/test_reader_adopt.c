/*
 * test_reader_adopt.c - the reader on records of a WAL segment the
 * embedded store adopted in place (index.h NRS_TARGET_ADOPT, reader.c):
 * the bytes come from the store's file, verified as WAL records are (I6:
 * header, then the CRC32C of every chunk touched), with a real WAL, a
 * real directory store and real SQLite (bgfake.h).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bgfake.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "stream/index.h"
#include "stream/reader.h"
#include "wal/walrec.h"

#define BIG	(300u << 10)	/* five 64 KiB chunks and a bit */
#define SMALL	1000u

struct fx {
	struct bgfake f;
	struct nrs_stream *st;
	char seg_path[4200];	/* the WAL's segment file */
};

static int setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	uint64_t ino, seg;

	if (!x)
		return -1;
	bg_open(&x->f, "test_reader_adopt", true);
	x->st = bg_stream(&x->f, "s", &ino);
	seg = bg_write(&x->f, x->st, BIG, 'a');
	assert_int_equal(bg_write(&x->f, x->st, SMALL, 'b'), seg);
	snprintf(x->seg_path, sizeof(x->seg_path), "%s/wal/%016" PRIx64 ".seg",
		 x->f.dir, seg);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fx *x = *state;

	bg_close(&x->f);
	free(x);
	return 0;
}

/* Adopt the segment and turn every entry of the stream into an adopted
 * one of generation 1, as a publication would. */
static void adopt_all(struct fx *x)
{
	char key[NRS_OBJKEY_MAX];

	pthread_mutex_lock(&x->st->lock);
	nrs_objfmt_adopt_key(key, x->st->index.v[0].seg);
	for (size_t i = 0; i < x->st->index.n; i++) {
		x->st->index.v[i].kind = NRS_TARGET_ADOPT;
		x->st->index.v[i].gen = 1;
	}
	pthread_mutex_unlock(&x->st->lock);
	assert_int_equal(nrs_objstore_dir_adopt(x->f.store.real, key,
						x->seg_path), 0);
}

static ssize_t rd(struct fx *x, struct nrs_objstore *store, void *buf,
		  size_t size, uint64_t off)
{
	struct nrs_reader r = x->f.reader;

	r.store = store;
	return nrs_reader_read(&r, x->st, buf, size, off, false);
}

static void test_read_adopted(void **state)
{
	struct fx *x = *state;
	char *buf = malloc(BIG + SMALL);
	char text[512];

	assert_non_null(buf);
	adopt_all(x);
	assert_int_equal(rd(x, x->f.store.real, buf, BIG + SMALL, 0),
			 BIG + SMALL);
	for (size_t i = 0; i < BIG + SMALL; i++)
		assert_int_equal(buf[i], i < BIG ? 'a' : 'b');
	/* a range across chunks, and one in the small record */
	assert_int_equal(rd(x, x->f.store.real, buf, 100000, 60000), 100000);
	assert_int_equal(buf[0], 'a');
	assert_int_equal(rd(x, x->f.store.real, buf, 10, BIG + 5), 10);
	assert_int_equal(buf[9], 'b');
	/* no store to read adopted records from: EIO, never zeros */
	assert_int_equal(rd(x, NULL, buf, 10, 0), -EIO);
	/* the WAL's own name may go: the store's name keeps the file */
	assert_int_equal(unlink(x->seg_path), 0);
	assert_int_equal(rd(x, x->f.store.real, buf, 10, BIG - 5), 10);
	pthread_mutex_lock(&x->st->lock);
	assert_true(nrs_index_format(&x->st->index, x->st->id, false, 0, text,
				     sizeof(text)) > 0);
	pthread_mutex_unlock(&x->st->lock);
	assert_non_null(strstr(text, " 1 adopt:w/"));
	free(buf);
}

/* I6: a damaged chunk of an adopted record is EIO; the chunks around it
 * still read, and a record at the wrong offset is never taken. */
static void test_adopted_verified(void **state)
{
	struct fx *x = *state;
	char buf[64];
	uint64_t off;
	size_t hl = nrs_walrec_hdr_len(BIG);
	int fd;

	adopt_all(x);
	off = x->st->index.v[0].off;
	fd = open(x->seg_path, O_WRONLY);
	assert_true(fd >= 0);
	/* a byte of the second chunk */
	assert_int_equal(pwrite(fd, "z", 1, (off_t)(off + hl + 70000)), 1);
	close(fd);
	assert_int_equal(rd(x, x->f.store.real, buf, sizeof(buf), 70000 - 10),
			 -EIO);
	assert_int_equal(rd(x, x->f.store.real, buf, sizeof(buf), 0),
			 sizeof(buf));
	assert_int_equal(rd(x, x->f.store.real, buf, sizeof(buf), 140000),
			 sizeof(buf));
	pthread_mutex_lock(&x->st->lock);
	x->st->index.v[1].off += 8;
	pthread_mutex_unlock(&x->st->lock);
	assert_int_equal(rd(x, x->f.store.real, buf, 10, BIG), -EIO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_read_adopted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_adopted_verified, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
