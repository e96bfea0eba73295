/*
 * test_wal_local.c - the local segment-file WAL: append and read back,
 * rotation, recovery of torn and corrupt segments, and the append failure
 * protocol (faults injected by interposing pwritev, fdatasync and ftruncate,
 * which the linker binds to the definitions below).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fixture.h"
#include "util/failpoint.h"
#include "wal/wal.h"
#include "wal_append.h"
#include "wal/walrec.h"

/* ---- fault injection --------------------------------------------------- */

static struct {
	int short_writes;	/* pwritev writes at most half an iovec */
	int partial_then_errno;	/* one partial pwritev, then fail with this */
	int fdatasync_fail;	/* fail the next n fdatasync calls (EIO) */
	int ftruncate_fail;	/* fail the next n ftruncate calls (EIO) */
	int pwritev_calls, fdatasync_calls;
	size_t pwritev_bytes;	/* written by the real pwritev */
} fault;

static ssize_t counted(ssize_t n)
{
	if (n > 0)
		fault.pwritev_bytes += (size_t)n;
	return n;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);
	int j = 0;

	if (!real)
		real = (ssize_t (*)(int, const struct iovec *, int, off_t))
			dlsym(RTLD_NEXT, "pwritev");
	if (++fault.pwritev_calls > 100000) {	/* a writer that never ends */
		errno = EIO;
		return -1;
	}
	if (fault.partial_then_errno < 0) {
		errno = -fault.partial_then_errno;
		fault.partial_then_errno = 0;
		return -1;
	}
	if (!fault.short_writes && !fault.partial_then_errno)
		return counted(real(fd, iov, cnt, off));
	while (j < cnt - 1 && iov[j].iov_len == 0)
		j++;
	{
		struct iovec one = iov[j];

		one.iov_len = (one.iov_len + 1) / 2;
		if (fault.partial_then_errno)
			fault.partial_then_errno = -fault.partial_then_errno;
		return counted(real(fd, &one, 1, off));
	}
}

int fdatasync(int fd)
{
	static int (*real)(int);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	fault.fdatasync_calls++;
	if (fault.fdatasync_fail > 0) {
		fault.fdatasync_fail--;
		errno = EIO;
		return -1;
	}
	return real(fd);
}

int ftruncate(int fd, off_t len)
{
	static int (*real)(int, off_t);

	if (!real)
		real = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate");
	if (fault.ftruncate_fail > 0) {
		fault.ftruncate_fail--;
		errno = EIO;
		return -1;
	}
	return real(fd, len);
}

/* ---- helpers ----------------------------------------------------------- */

struct fx {
	char root[64];
	char dir[128];		/* the WAL directory, not created yet */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (nrs_fixture_mkdtemp(f->root, sizeof(f->root), "test_wal_local")) {
		free(f);
		return -1;
	}
	snprintf(f->dir, sizeof(f->dir), "%s/wal", f->root);
	memset(&fault, 0, sizeof(fault));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc = nrs_fixture_rmtree(f->root);

	memset(&fault, 0, sizeof(fault));
	free(f);
	return rc;
}

/* A whole record (header, payload, padding) whose bytes derive from lsn. */
struct rec {
	unsigned char *buf;
	size_t len;
};

static struct rec mkrec(uint64_t lsn, uint32_t plen)
{
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = 5,
		.base = lsn * 1000, .len = plen, .n_appends = plen ? 1 : 0,
		.epoch = 1, .prev_lsn = lsn - 1,
	};
	struct rec x;
	struct iovec iov;
	size_t hl = nrs_walrec_hdr_len(plen);

	x.len = nrs_walrec_total_len(plen);
	x.buf = calloc(1, x.len);
	assert_non_null(x.buf);
	for (uint32_t i = 0; i < plen; i++)
		x.buf[hl + i] = (unsigned char)(lsn * 31 + i * 7 + (i >> 8));
	iov.iov_base = x.buf + hl;
	iov.iov_len = plen;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, x.buf, hl),
			 (ssize_t)hl);
	return x;
}

static struct nrs_wal *wal_open(const char *dir, uint64_t seg_size)
{
	struct nrs_wal_local_opts o = { .segment_size = seg_size };
	struct nrs_wal *w = NULL;

	assert_int_equal(nrs_wal_local_open(dir, &o, &w), 0);
	assert_non_null(w);
	return w;
}

struct seen {
	size_t n;
	struct nrs_wal_rec_info ri[512];
	size_t stop_at;		/* return -ECANCELED at this record, 0: never */
};

static int collect(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct seen *s = ctx;

	if (s->n >= sizeof(s->ri) / sizeof(s->ri[0]))
		return -ENOSPC;
	s->ri[s->n++] = *ri;
	if (s->stop_at && s->n == s->stop_at)
		return -ECANCELED;
	return 0;
}

static struct seen *scan_all(struct nrs_wal *w)
{
	struct seen *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	assert_int_equal(nrs_wal_scan(w, collect, s), 0);
	return s;
}

/* Append one record per batch: lsn first.. with the given payload sizes. */
static void append_recs(struct nrs_wal *w, uint64_t first, const uint32_t *plen,
			size_t n, struct nrs_wal_pos *pos)
{
	for (size_t i = 0; i < n; i++) {
		struct rec x = mkrec(first + i, plen[i]);
		struct iovec iov = { x.buf, x.len };

		assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[i]), 0);
		free(x.buf);
	}
}

static void check_read(struct nrs_wal *w, struct nrs_wal_pos pos,
		       uint64_t lsn, uint32_t plen)
{
	struct rec x = mkrec(lsn, plen);
	unsigned char *buf = malloc(x.len);

	assert_non_null(buf);
	assert_int_equal(nrs_wal_read(w, pos, buf, x.len), (ssize_t)x.len);
	assert_memory_equal(buf, x.buf, x.len);
	free(buf);
	free(x.buf);
}

static void seg_path(char *buf, size_t size, const char *dir, uint64_t no)
{
	snprintf(buf, size, "%s/%016" PRIx64 ".seg", dir, no);
}

static off_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* File bytes [off, end of file) are all zero (WA7's space written ahead). */
static bool zeros_after(const char *path, off_t off)
{
	unsigned char buf[4096];
	int fd = open(path, O_RDONLY);
	bool zero = true;
	ssize_t n;

	assert_true(fd >= 0);
	while (zero && (n = pread(fd, buf, sizeof(buf), off)) > 0) {
		for (ssize_t i = 0; i < n; i++)
			zero = zero && buf[i] == 0;
		off += n;
	}
	close(fd);
	return zero;
}

static void flip_byte(const char *path, off_t off, unsigned char mask)
{
	unsigned char c;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= mask;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static void append_bytes(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static const uint32_t five[] = { 100, 70000, 0, 300, 5000 };

/* Segment 1 holds records 1..5 (payloads five[]); *pos gets positions. */
static void make_five(struct fx *f, struct nrs_wal_pos pos[5])
{
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct seen *s = scan_all(w);

	assert_int_equal(s->n, 0);
	append_recs(w, 1, five, 5, pos);
	for (int i = 0; i < 5; i++)
		assert_int_equal(pos[i].seg, 1);
	nrs_wal_close(w);
	free(s);
}

/* Reopen and scan; expect records with the given lsns, each data_ok as
 * given, at the positions the appends returned. */
static void expect_scan(struct fx *f, const struct nrs_wal_pos *pos,
			const uint64_t *lsns, const bool *ok, size_t n)
{
	struct nrs_wal *w = wal_open(f->dir, 0);

	for (int round = 0; round < 2; round++) {	/* a second scan agrees */
		struct seen *s = scan_all(w);

		assert_int_equal(s->n, n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(s->ri[i].rec.lsn, lsns[i]);
			assert_int_equal(s->ri[i].pos.seg, pos[lsns[i] - 1].seg);
			assert_int_equal(s->ri[i].pos.off, pos[lsns[i] - 1].off);
			assert_int_equal(s->ri[i].data_ok, ok ? ok[i] : true);
			assert_int_equal(s->ri[i].rec.len, five[lsns[i] - 1]);
		}
		free(s);
	}
	nrs_wal_close(w);
}

/* ---- tests ------------------------------------------------------------- */

static void test_append_read(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);	/* creates the dir */
	struct nrs_wal_pos pos[5], bp;
	struct nrs_wal_stats st;
	struct rec a = mkrec(10, 3), b = mkrec(11, 65537);
	struct iovec iov[3] = { { a.buf, a.len }, { b.buf, 20 },
				{ b.buf + 20, b.len - 20 } };
	char path[256];
	unsigned char tmp[16];
	struct seen *s = scan_all(w);

	free(s);
	append_recs(w, 1, five, 5, pos);
	assert_int_equal(pos[0].off, 64);
	assert_int_equal(pos[1].off, 64 + nrs_walrec_total_len(100));
	assert_int_equal(nrs_wal_append(w, iov, 3, &bp), 0);	/* one batch */
	for (int i = 0; i < 5; i++)
		check_read(w, pos[i], (uint64_t)i + 1, five[i]);
	check_read(w, bp, 10, 3);
	check_read(w, (struct nrs_wal_pos){ bp.seg, bp.off + a.len }, 11, 65537);

	seg_path(path, sizeof(path), f->dir, 1);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, 1);
	assert_int_equal(st.cur_seg, 1);
	assert_false(st.broken);
	assert_int_equal(st.bytes, bp.off + a.len + b.len);
	/* WA7: small batches, so zeros were written a MiB ahead */
	assert_true(file_size(path) > (off_t)st.bytes);
	assert_true(zeros_after(path, (off_t)st.bytes));

	/* Short at the end of the segment, 0 past it, -ENOENT elsewhere. */
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 1, st.bytes - 5 },
				      tmp, sizeof(tmp)), 5);
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 1, st.bytes + 9 },
				      tmp, sizeof(tmp)), 0);
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 2, 64 }, tmp, 1),
			 -ENOENT);
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 0, 64 }, tmp, 1),
			 -ENOENT);
	/* A batch must keep records 8-aligned. */
	iov[0].iov_len = 12;
	assert_int_equal(nrs_wal_append(w, iov, 1, &bp), -EINVAL);
	assert_int_equal(nrs_wal_append(w, iov, 0, &bp), -EINVAL);
	nrs_wal_close(w);
	free(a.buf);
	free(b.buf);
}

static void test_rotation(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 4096);
	struct nrs_wal_pos pos[21];
	uint32_t plen[21];
	struct nrs_wal_stats st;
	uint64_t bytes = 0, end = 0;
	char path[256];
	struct seen *s = scan_all(w);

	free(s);
	for (int i = 0; i < 20; i++)
		plen[i] = 900 + (uint32_t)i * 13;
	plen[20] = 10000;		/* larger than a segment: a segment alone */
	append_recs(w, 1, plen, 21, pos);
	for (int i = 1; i < 21; i++) {
		assert_true(pos[i].seg >= pos[i - 1].seg);
		if (pos[i].seg == pos[i - 1].seg)
			assert_int_equal(pos[i].off, pos[i - 1].off +
					 nrs_walrec_total_len(plen[i - 1]));
		else
			assert_int_equal(pos[i].off, 64);
	}
	assert_true(pos[19].seg >= 5);
	assert_int_equal(pos[20].seg, pos[19].seg + 1);
	for (int i = 0; i < 21; i++)
		check_read(w, pos[i], (uint64_t)i + 1, plen[i]);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, pos[20].seg);
	assert_int_equal(st.cur_seg, pos[20].seg);
	for (uint64_t no = 1; no <= pos[20].seg; no++) {
		seg_path(path, sizeof(path), f->dir, no);
		assert_true(no == pos[20].seg || file_size(path) <= 4096);
		if (no < pos[20].seg) {	/* cut back to its records (WA7) */
			bytes += (uint64_t)file_size(path);
			continue;
		}
		end = pos[20].off + nrs_walrec_total_len(plen[20]);
		assert_true(zeros_after(path, (off_t)end));
		assert_true((uint64_t)file_size(path) >= end);
		bytes += end;
	}
	assert_int_equal(st.bytes, bytes);
	nrs_wal_close(w);
	assert_int_equal(file_size(path), end);	/* close cut it back */

	/* Reopen: every record in order at its position; appends go to a new
	 * segment; no scan after an append. */
	w = wal_open(f->dir, 4096);
	s = scan_all(w);
	assert_int_equal(s->n, 21);
	for (int i = 0; i < 21; i++) {
		assert_int_equal(s->ri[i].rec.lsn, i + 1);
		assert_int_equal(s->ri[i].rec.len, plen[i]);
		assert_int_equal(s->ri[i].pos.seg, pos[i].seg);
		assert_int_equal(s->ri[i].pos.off, pos[i].off);
		assert_true(s->ri[i].data_ok);
	}
	free(s);
	append_recs(w, 22, plen, 1, pos);
	assert_int_equal(pos[0].seg, pos[20].seg + 1);
	assert_int_equal(pos[0].off, 64);
	check_read(w, pos[0], 22, plen[0]);
	assert_int_equal(nrs_wal_scan(w, collect, NULL), -EINVAL);
	nrs_wal_close(w);
}

static void test_scan_stop_and_order(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	struct nrs_wal *w;
	struct seen s = { .stop_at = 3 };
	struct rec x = mkrec(9, 8);
	struct iovec iov = { x.buf, x.len };

	w = wal_open(f->dir, 0);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[0]), -EINVAL);
	nrs_wal_close(w);
	make_five(f, pos);
	w = wal_open(f->dir, 0);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[0]), -EINVAL);
	assert_int_equal(nrs_wal_scan(w, collect, &s), -ECANCELED);
	assert_int_equal(s.n, 3);
	/* A stopped scan leaves the WAL unscanned. */
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[0]), -EINVAL);
	nrs_wal_close(w);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 }, NULL, 5);
	free(x.buf);
}

static void test_torn_header(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	char path[256];

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	assert_int_equal(truncate(path, (off_t)pos[4].off + 30), 0);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4 }, NULL, 4);
	assert_int_equal(file_size(path), pos[4].off);
}

static void test_torn_payload(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	char path[256];

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	/* The header is whole, the payload runs past the end of the file. */
	assert_int_equal(truncate(path, (off_t)(pos[4].off +
			 nrs_walrec_hdr_len(five[4]) + 1000)), 0);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4 }, NULL, 4);
	assert_int_equal(file_size(path), pos[4].off);
}

/* A torn record whose payload holds a record image: the image must never
 * come back as a record. */
static void test_torn_embedded(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5], p6;
	struct rec inner = mkrec(100, 40);
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = 6, .stream_id = 5, .base = 1,
		.len = 70000, .n_appends = 1, .epoch = 1, .prev_lsn = 5,
	};
	size_t hl = nrs_walrec_hdr_len(r.len), tl = nrs_walrec_total_len(r.len);
	unsigned char *outer = calloc(1, tl);
	struct iovec iov = { outer + hl, r.len };
	struct nrs_wal *w;
	struct seen *s;
	char path[256];

	assert_non_null(outer);
	memcpy(outer + hl, inner.buf, inner.len);
	assert_int_equal(nrs_walrec_encode_hdr(&r, &iov, 1, outer, hl),
			 (ssize_t)hl);
	iov = (struct iovec){ outer, tl };
	make_five(f, pos);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	free(s);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &p6), 0);
	assert_int_equal(p6.seg, 2);
	assert_int_equal((p6.off + hl) % 8, 0);
	nrs_wal_close(w);
	seg_path(path, sizeof(path), f->dir, 2);
	assert_int_equal(truncate(path, (off_t)(p6.off + hl + inner.len + 100)),
			 0);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 }, NULL, 5);
	assert_int_equal(file_size(path), 64);
	free(outer);
	free(inner.buf);
}

static void test_garbage_tail(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	unsigned char junk[4096];
	char path[256];
	off_t end;

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	end = file_size(path);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 2654435761u >> 13);
	append_bytes(path, junk, 101);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 }, NULL, 5);
	assert_int_equal(file_size(path), end);

	memset(junk, 0, sizeof(junk));	/* an extended, never-written tail */
	append_bytes(path, junk, sizeof(junk));
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 }, NULL, 5);
	assert_int_equal(file_size(path), end);

	/* A copy of a whole header with its payload missing. */
	{
		struct rec x = mkrec(6, 3000);

		append_bytes(path, x.buf, x.len - 8);
		free(x.buf);
	}
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 }, NULL, 5);
	assert_int_equal(file_size(path), end);
}

static void test_payload_flip_middle(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	char path[256];
	off_t end;

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	end = file_size(path);
	/* Record 2's second chunk. */
	flip_byte(path, (off_t)(pos[1].off + nrs_walrec_hdr_len(five[1]) +
				65536 + 17), 0x04);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3, 4, 5 },
		    (bool[]){ true, false, true, true, true }, 5);
	assert_int_equal(file_size(path), end);
}

static void test_payload_flip_last(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	char path[256];

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	/* Records 4 and 5 both fail their chunks and nothing whole follows:
	 * a torn tail, cut from record 4 on. */
	flip_byte(path, (off_t)(pos[3].off + nrs_walrec_hdr_len(five[3]) + 1), 1);
	flip_byte(path, (off_t)(pos[4].off + nrs_walrec_hdr_len(five[4]) + 9), 1);
	expect_scan(f, pos, (uint64_t[]){ 1, 2, 3 }, NULL, 3);
	assert_int_equal(file_size(path), pos[3].off);
}

static void test_corrupt_header_middle(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	char path[256];
	off_t end;

	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	end = file_size(path);
	flip_byte(path, (off_t)pos[1].off + 10, 0x80);	/* record 2's lsn */
	flip_byte(path, (off_t)pos[2].off, 0xff);	/* record 3's magic */
	expect_scan(f, pos, (uint64_t[]){ 1, 4, 5 }, NULL, 3);
	assert_int_equal(file_size(path), end);
}

static void test_bad_segments(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5], p2[3];
	char path[256];
	struct nrs_wal *w;
	struct seen *s;
	uint32_t plen[3] = { 10, 20, 30 };
	unsigned char junk[40];

	make_five(f, pos);				/* segment 1 */
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	free(s);
	append_recs(w, 6, plen, 3, p2);			/* segment 2 */
	assert_int_equal(p2[0].seg, 2);
	nrs_wal_close(w);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	free(s);
	append_recs(w, 9, plen, 1, p2);			/* segment 3 */
	assert_int_equal(p2[0].seg, 3);
	nrs_wal_close(w);

	/* Garbage at the end of segment 1 (not the last): logged, kept; its
	 * last record's payload is damaged: passed on with data_ok false. */
	seg_path(path, sizeof(path), f->dir, 1);
	flip_byte(path, (off_t)(pos[4].off + nrs_walrec_hdr_len(five[4]) + 3),
		  0x40);
	memset(junk, 0x33, sizeof(junk));
	append_bytes(path, junk, sizeof(junk));
	/* Segment 2's header is bad: skipped whole. */
	seg_path(path, sizeof(path), f->dir, 2);
	flip_byte(path, 20, 1);
	/* Segment 4 is a torn creation: removed. */
	seg_path(path, sizeof(path), f->dir, 4);
	{
		int fd = open(path, O_WRONLY | O_CREAT, 0600);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, "NRSWAL", 6), 6);
		close(fd);
	}
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 6);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(s->ri[i].rec.lsn, i + 1);
		assert_int_equal(s->ri[i].data_ok, i != 4);
	}
	assert_int_equal(s->ri[5].rec.lsn, 9);
	assert_true(s->ri[5].data_ok);
	assert_int_equal(s->ri[5].pos.seg, 3);
	free(s);
	assert_int_equal(access(path, F_OK), -1);
	seg_path(path, sizeof(path), f->dir, 1);
	assert_int_equal(file_size(path), pos[4].off +
			 nrs_walrec_total_len(five[4]) + sizeof(junk));
	append_recs(w, 10, plen, 1, p2);
	assert_true(p2[0].seg >= 4);
	check_read(w, p2[0], 10, plen[0]);
	nrs_wal_close(w);
}

static void test_directories(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	struct seen *s;
	char deep[256];

	snprintf(deep, sizeof(deep), "%s/a/b/c/", f->root);
	w = wal_open(deep, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 0);
	free(s);
	nrs_wal_close(w);
	assert_int_equal(mkdir(f->dir, 0700), 0);		/* empty, existing */
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 0);
	free(s);
	nrs_wal_close(w);
	snprintf(deep, sizeof(deep), "%s/file", f->root);
	{
		int fd = open(deep, O_WRONLY | O_CREAT, 0600);

		assert_true(fd >= 0);
		close(fd);
	}
	w = NULL;
	assert_int_equal(nrs_wal_local_open(deep, NULL, &w), -ENOTDIR);
	assert_null(w);
	assert_int_equal(nrs_wal_local_open("", NULL, &w), -EINVAL);
}

/* Close w, open the WAL in f->dir again and scan it: n whole records. */
static void rescan_whole(struct fx *f, struct nrs_wal *w, size_t n)
{
	struct seen *s;

	nrs_wal_close(w);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, n);
	for (size_t i = 0; i < n; i++)
		assert_true(s->ri[i].data_ok);
	free(s);
	nrs_wal_close(w);
}

static void test_many_iovecs(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct rec x = mkrec(1, 30000);
	int n = 3000;
	struct iovec *iov = calloc((size_t)n, sizeof(*iov));
	struct nrs_wal_pos pos;
	size_t off = 0;
	struct seen *s = scan_all(w);

	free(s);
	assert_non_null(iov);
	for (int i = 0; i < n; i++) {
		size_t len = i == n - 1 ? x.len - off : (size_t)(i % 7) * 2;

		iov[i].iov_base = x.buf + off;
		iov[i].iov_len = len;
		off += len;
	}
	assert_int_equal(nrs_wal_append(w, iov, n, &pos), 0);	/* > IOV_MAX */
	assert_int_equal(fault.pwritev_calls, 1 + 3);	/* zeros (WA7), batch */
	check_read(w, pos, 1, 30000);
	fault.short_writes = 1;		/* now every write comes up short */
	assert_int_equal(nrs_wal_append(w, iov, n, &pos), 0);
	fault.short_writes = 0;
	assert_true(fault.pwritev_calls > 3000);
	check_read(w, pos, 1, 30000);
	rescan_whole(f, w, 2);
	free(iov);
	free(x.buf);
}

static void test_big_record(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	uint32_t plen[3] = { 100, 9u << 20, 200 };
	struct nrs_wal_pos pos[3];
	struct seen *s = scan_all(w);

	free(s);
	append_recs(w, 1, plen, 3, pos);
	nrs_wal_close(w);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 3);
	for (int i = 0; i < 3; i++)
		assert_true(s->ri[i].data_ok);
	check_read(w, pos[1], 2, plen[1]);
	free(s);
	nrs_wal_close(w);
}

/* The start of the fault tests: a scanned WAL in f->dir holding one
 * record in segment 1, whose path and size are returned. */
static struct nrs_wal *wal_with_one(struct fx *f, char *path, size_t size,
				    off_t *end)
{
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct nrs_wal_pos pos;

	free(scan_all(w));
	append_recs(w, 1, five, 1, &pos);
	seg_path(path, size, f->dir, 1);
	*end = (off_t)(pos.off + nrs_walrec_total_len(five[0]));
	assert_true(file_size(path) > *end);	/* zeros ahead (WA7) */
	return w;
}

/* ENOSPC after a partial write: undone, the segment keeps being used. */
static void test_fault_enospc(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	struct rec x = mkrec(2, 5000);
	struct iovec iov = { x.buf, x.len };
	char path[256];
	off_t end;
	struct nrs_wal *w = wal_with_one(f, path, sizeof(path), &end);

	fault.partial_then_errno = ENOSPC;
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), -ENOSPC);
	assert_int_equal(file_size(path), end);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), 0);
	assert_int_equal(pos[1].seg, 1);
	assert_int_equal(pos[1].off, end);
	check_read(w, pos[1], 2, 5000);
	nrs_wal_close(w);
	free(x.buf);
}

/*
 * The failpoint wal.write=short (failpoint.c): the first half of the batch,
 * rounded down to 512 bytes, reaches the file -- the window clipped inside
 * an iovec -- then the append fails with the errno asked for, and WA3 cuts
 * the prefix off again.  Only the armed hit fires.
 */
static void test_failpoint_short(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	struct rec x = mkrec(2, 5000);
	struct iovec iov[3] = {
		{ x.buf, 100 }, { x.buf + 100, 2900 },
		{ x.buf + 3000, x.len - 3000 },
	};
	char path[256];
	off_t end;
	struct nrs_wal *w = wal_with_one(f, path, sizeof(path), &end);

	assert_int_equal(nrs_failpoint_parse("wal.write=short:ENOSPC@1"), 0);
	fault.pwritev_bytes = 0;
	assert_int_equal(nrs_wal_append(w, iov, 3, &pos[1]), -ENOSPC);
	assert_int_equal(fault.pwritev_bytes, x.len / 2 / 512 * 512);
	assert_true(fault.pwritev_bytes > 0);
	assert_int_equal(file_size(path), end);
	assert_int_equal(nrs_wal_append(w, iov, 3, &pos[1]), 0);
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
	assert_int_equal(pos[1].seg, 1);
	assert_int_equal(pos[1].off, end);
	check_read(w, pos[1], 2, 5000);
	rescan_whole(f, w, 2);
	free(x.buf);
}

/* A failed fdatasync: undone, and the next append starts a new segment. */
static void test_fault_fdatasync(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_pos pos[5];
	struct rec x = mkrec(2, 5000);
	struct iovec iov = { x.buf, x.len };
	char path[256];
	off_t end;
	struct nrs_wal *w = wal_with_one(f, path, sizeof(path), &end);
	struct seen *s;

	fault.fdatasync_fail = 1;
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), -EIO);
	assert_int_equal(file_size(path), end);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), 0);
	assert_int_equal(pos[1].seg, 2);
	assert_int_equal(pos[1].off, 64);
	check_read(w, pos[1], 2, 5000);
	nrs_wal_close(w);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 2);
	assert_int_equal(s->ri[1].pos.seg, 2);
	free(s);
	nrs_wal_close(w);
	free(x.buf);
}

/* The undo fails too: the WAL refuses every later append. */
static void test_fault_broken(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct nrs_wal_pos pos[5];
	struct nrs_wal_stats st;
	struct rec x = mkrec(2, 5000);
	struct iovec iov = { x.buf, x.len };
	struct seen *s = scan_all(w);

	free(s);
	append_recs(w, 1, five, 1, pos);
	fault.fdatasync_fail = 1;
	fault.ftruncate_fail = 1;
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), -EIO);
	nrs_wal_stats(w, &st);
	assert_true(st.broken);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos[1]), -EIO);
	check_read(w, pos[0], 1, five[0]);	/* reads still work */
	nrs_wal_close(w);
	free(x.buf);
}

/* Write a record without syncing it; *end: the end of its batch. */
static void write_rec(struct nrs_wal *w, uint64_t lsn, uint32_t plen,
		      struct nrs_wal_pos *pos, struct nrs_wal_pos *end)
{
	struct rec x = mkrec(lsn, plen);
	struct iovec iov = { x.buf, x.len };

	assert_int_equal(nrs_wal_write(w, &iov, 1, pos), 0);
	end->seg = pos->seg;
	end->off = pos->off + x.len;
	free(x.buf);
}

/*
 * WA8: sync_all() fdatasyncs every segment a scan found -- records written
 * and never synced by the process before are among them -- except one
 * whose sync failed (WA4), and fails on a broken WAL or a read-only one.
 */
static void test_sync_all(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 100000);
	struct nrs_wal_pos pos, end;
	struct rec x = mkrec(9, 5000);
	struct iovec iov = { x.buf, x.len };
	struct nrs_wal_local_opts ro = { .read_only = true };
	struct seen *s = scan_all(w);

	free(s);
	for (uint64_t l = 1; l <= 30; l++)	/* never synced: 2 segments */
		write_rec(w, l, 5000, &pos, &end);
	assert_int_equal(pos.seg, 2);
	nrs_wal_close(w);
	w = wal_open(f->dir, 100000);
	s = scan_all(w);
	assert_int_equal(s->n, 30);
	free(s);
	fault.fdatasync_calls = 0;
	assert_int_equal(nrs_wal_sync_all(w), 0);
	assert_int_equal(fault.fdatasync_calls, 2);
	/* a segment whose fdatasync failed is not synced again */
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos), 0);
	assert_int_equal(pos.seg, 3);
	fault.fdatasync_fail = 1;
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos), -EIO);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos), 0);
	assert_int_equal(pos.seg, 4);
	fault.fdatasync_calls = 0;
	assert_int_equal(nrs_wal_sync_all(w), 0);
	assert_int_equal(fault.fdatasync_calls, 3);	/* 1, 2, 4 */
	/* broken: the undo of a failed append failed */
	fault.fdatasync_fail = 1;
	fault.ftruncate_fail = 1;
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos), -EIO);
	assert_int_equal(nrs_wal_sync_all(w), -EIO);
	nrs_wal_close(w);
	w = NULL;
	assert_int_equal(nrs_wal_local_open(f->dir, &ro, &w), 0);
	assert_int_equal(nrs_wal_sync_all(w), -EROFS);
	nrs_wal_close(w);
	free(x.buf);
}

/*
 * Batches written one after another and synced together (the pipeline's
 * group sync, one sync per segment); then a cut after a failed sync drops
 * every batch not made durable, across a rotation, and the next write
 * starts afresh.
 */
static void test_group_sync_cut(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 100000);
	struct nrs_wal_pos pos[6], end[6];
	char path[256];
	struct seen *s = scan_all(w);

	free(s);
	write_rec(w, 1, 30000, &pos[0], &end[0]);
	write_rec(w, 2, 30000, &pos[1], &end[1]);
	assert_int_equal(nrs_wal_sync(w, end[1]), 0);	/* both */
	write_rec(w, 3, 30000, &pos[2], &end[2]);
	write_rec(w, 4, 30000, &pos[3], &end[3]);	/* rotates */
	assert_int_equal(pos[2].seg, 1);
	assert_int_equal(pos[3].seg, 2);
	/* the sync of segment 1 fails: 3 and 4 are given up */
	fault.fdatasync_fail = 1;
	assert_int_equal(nrs_wal_sync(w, end[2]), -EIO);
	assert_int_equal(nrs_wal_cut(w, pos[2], -EIO), 0);
	seg_path(path, sizeof(path), f->dir, 1);
	assert_int_equal(file_size(path), (off_t)pos[2].off);
	seg_path(path, sizeof(path), f->dir, 2);
	assert_int_equal(file_size(path), 64);
	/* WA4: segment 1 stays failed, even once fdatasync works again */
	assert_int_equal(nrs_wal_sync(w, end[1]), -EIO);
	write_rec(w, 3, 300, &pos[4], &end[4]);
	assert_int_equal(pos[4].seg, 2);	/* the current one, cut back */
	assert_int_equal(pos[4].off, 64);
	assert_int_equal(nrs_wal_sync(w, end[4]), 0);
	check_read(w, pos[1], 2, 30000);
	check_read(w, pos[4], 3, 300);
	nrs_wal_close(w);
	w = wal_open(f->dir, 100000);
	s = scan_all(w);
	assert_int_equal(s->n, 3);
	assert_int_equal(s->ri[2].rec.lsn, 3);
	assert_int_equal(s->ri[2].rec.len, 300);
	assert_int_equal(s->ri[2].pos.seg, 2);
	free(s);
	nrs_wal_close(w);
}

/* A sync of the current segment that fails: the next write rotates. */
static void test_sync_fail_rotates(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct nrs_wal_pos pos[3], end[3];
	struct seen *s = scan_all(w);

	free(s);
	write_rec(w, 1, 500, &pos[0], &end[0]);
	write_rec(w, 2, 500, &pos[1], &end[1]);	/* written meanwhile */
	fault.fdatasync_fail = 1;
	assert_int_equal(nrs_wal_sync(w, end[0]), -EIO);
	assert_int_equal(nrs_wal_cut(w, pos[0], -EIO), 0);
	write_rec(w, 1, 500, &pos[2], &end[2]);
	assert_int_equal(pos[2].seg, 2);
	assert_int_equal(nrs_wal_sync(w, end[2]), 0);
	nrs_wal_close(w);
	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 1);
	assert_int_equal(s->ri[0].pos.seg, 2);
	free(s);
	nrs_wal_close(w);
}

/* Readers race the appender across rotations. */
struct race {
	struct nrs_wal *w;
	struct nrs_wal_pos pos[300];
	uint32_t plen[300];
	atomic_int published;
	atomic_int done;
	atomic_int bad;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	unsigned seed = (unsigned)(uintptr_t)&seed;
	unsigned char buf[4096];

	while (!atomic_load(&r->done)) {
		int n = atomic_load(&r->published);
		int i;
		struct rec x;

		seed = seed * 1103515245 + 12345;
		if (n == 0)
			continue;
		i = (int)(seed >> 8) % n;
		x = mkrec((uint64_t)i + 1, r->plen[i]);
		if (nrs_wal_read(r->w, r->pos[i], buf, x.len) != (ssize_t)x.len ||
		    memcmp(buf, x.buf, x.len) != 0)
			atomic_fetch_add(&r->bad, 1);
		free(x.buf);
	}
	return NULL;
}

static void test_concurrent_reads(void **state)
{
	struct fx *f = *state;
	struct race *r = calloc(1, sizeof(*r));
	pthread_t th[4];
	struct seen *s;

	assert_non_null(r);
	r->w = wal_open(f->dir, 16384);
	s = scan_all(r->w);
	free(s);
	for (int t = 0; t < 4; t++)
		assert_int_equal(pthread_create(&th[t], NULL, reader, r), 0);
	for (int i = 0; i < 300; i++) {
		r->plen[i] = 100 + (uint32_t)(i * 37) % 3000;
		append_recs(r->w, (uint64_t)i + 1, &r->plen[i], 1, &r->pos[i]);
		atomic_store(&r->published, i + 1);
	}
	atomic_store(&r->done, 1);
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(atomic_load(&r->bad), 0);
	assert_true(r->pos[299].seg > 10);
	nrs_wal_close(r->w);
	free(r);
}

struct damages {
	size_t n;
	struct nrs_wal_damage d[8];
};

static void collect_damage(void *ctx, const struct nrs_wal_damage *d)
{
	struct damages *ds = ctx;

	if (ds->n < sizeof(ds->d) / sizeof(ds->d[0]))
		ds->d[ds->n++] = *d;
}

/* Open the WAL in f->dir with o and scan it: n records; close it. */
static void scan_expect(struct fx *f, const struct nrs_wal_local_opts *o,
			size_t n)
{
	struct nrs_wal *w = NULL;
	struct seen *s;

	assert_int_equal(nrs_wal_local_open(f->dir, o, &w), 0);
	s = scan_all(w);
	assert_int_equal(s->n, n);
	free(s);
	nrs_wal_close(w);
}

/* WS8: a read-only WAL reports a torn tail, a torn creation and a bad chunk
 * without changing a byte, and refuses appends. */
static void test_read_only(void **state)
{
	struct fx *f = *state;
	struct damages ds = { 0 };
	struct nrs_wal_local_opts o = {
		.read_only = true, .damage = collect_damage, .damage_ctx = &ds,
	};
	struct nrs_wal_pos pos[5], p;
	struct rec x = mkrec(9, 8);
	struct iovec iov = { x.buf, x.len };
	unsigned char junk[101];
	char path[256], path2[256];
	struct nrs_wal *w = NULL;
	struct seen *s;
	off_t end;

	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), -ENOENT);
	make_five(f, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	end = file_size(path);
	flip_byte(path, (off_t)(pos[1].off + nrs_walrec_hdr_len(five[1]) + 3), 2);
	memset(junk, 0x5a, sizeof(junk));
	append_bytes(path, junk, sizeof(junk));
	seg_path(path2, sizeof(path2), f->dir, 2);
	{
		int fd = open(path2, O_WRONLY | O_CREAT | O_EXCL, 0600);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, junk, 30), 30);
		close(fd);
	}
	for (int round = 0; round < 2; round++) {
		ds.n = 0;
		assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
		s = scan_all(w);
		assert_int_equal(s->n, 5);
		assert_false(s->ri[1].data_ok);
		free(s);
		assert_int_equal(nrs_wal_append(w, &iov, 1, &p), -EROFS);
		nrs_wal_close(w);
		/* Segment 1 is not the last: its junk is corruption (WS6). */
		assert_int_equal(ds.n, 3);
		assert_int_equal(ds.d[0].kind, NRS_WAL_BAD_CHUNK);
		assert_int_equal(ds.d[0].seg, 1);
		assert_int_equal(ds.d[0].lsn, 2);
		assert_int_equal(ds.d[0].start, pos[1].off);
		assert_int_equal(ds.d[0].chunk, 0);
		assert_int_equal(ds.d[1].kind, NRS_WAL_CORRUPT);
		assert_int_equal(ds.d[1].start, (uint64_t)end);
		assert_int_equal(ds.d[1].end, (uint64_t)end + sizeof(junk));
		assert_int_equal(ds.d[2].kind, NRS_WAL_TORN_SEGMENT);
		assert_int_equal(ds.d[2].seg, 2);
		assert_int_equal(file_size(path), end + (off_t)sizeof(junk));
		assert_int_equal(file_size(path2), 30);
	}

	/* Without segment 2, the junk is a torn tail: reported, not cut. */
	assert_int_equal(unlink(path2), 0);
	ds.n = 0;
	scan_expect(f, &o, 5);
	assert_int_equal(ds.n, 2);
	assert_int_equal(ds.d[1].kind, NRS_WAL_TORN_TAIL);
	assert_int_equal(ds.d[1].seg, 1);
	assert_int_equal(ds.d[1].start, (uint64_t)end);
	assert_int_equal(ds.d[1].end, (uint64_t)end + sizeof(junk));
	assert_int_equal(file_size(path), end + (off_t)sizeof(junk));

	/* A writable open cuts the same tail, and reports it too. */
	ds.n = 0;
	o.read_only = false;
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	s = scan_all(w);
	free(s);
	nrs_wal_close(w);
	assert_int_equal(ds.n, 2);
	assert_int_equal(ds.d[1].kind, NRS_WAL_TORN_TAIL);
	assert_int_equal(file_size(path), end);
	free(x.buf);
}

/* WA5: an append that would eat into the reserve fails before writing. */
static void test_reserve(void **state)
{
	struct fx *f = *state;
	struct statvfs sv;
	struct nrs_wal_local_opts o = { 0 };
	struct nrs_wal_pos p;
	struct rec x = mkrec(7, 100);
	struct iovec iov = { x.buf, x.len };
	struct nrs_wal_stats st, st2;
	struct nrs_wal *w = NULL;
	uint64_t avail;

	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	free(scan_all(w));
	assert_int_equal(nrs_wal_append(w, &iov, 1, &p), 0);	/* no reserve */
	nrs_wal_close(w);
	assert_int_equal(statvfs(f->dir, &sv), 0);
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	/* a reserve above what is free (others may free space meanwhile):
	 * refused, and nothing written */
	o.reserve = avail * 2 + (1ull << 30);
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	free(scan_all(w));
	nrs_wal_stats(w, &st);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &p), -ENOSPC);
	nrs_wal_stats(w, &st2);
	assert_int_equal(st2.bytes, st.bytes);
	assert_false(st2.broken);
	nrs_wal_close(w);
	/* a reserve well below what is free: accepted */
	o.reserve = avail / 4;
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	free(scan_all(w));
	assert_int_equal(nrs_wal_append(w, &iov, 1, &p), 0);
	check_read(w, p, 7, 100);
	nrs_wal_close(w);
	free(x.buf);
}

/* WA6: the budget counts the bytes in segments; reclaiming frees it. */
static void test_budget_reclaim(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_local_opts o = { .segment_size = 4096 };
	struct nrs_wal_pos pos[12];
	uint32_t plen[12];
	struct nrs_wal_stats st, st2;
	struct nrs_wal *w = NULL;
	uint64_t bytes = 0;
	char path[256];
	struct seen *s;
	int n;

	for (int i = 0; i < 12; i++)
		plen[i] = 1500;
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	free(scan_all(w));
	append_recs(w, 1, plen, 12, pos);	/* two records per segment */
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, pos[11].seg);
	/* the current segment is never reclaimed, whatever `below` says */
	n = nrs_wal_reclaim(w, UINT64_MAX, &bytes);
	assert_int_equal(n, (int)st.segments - 1);
	nrs_wal_stats(w, &st2);
	assert_int_equal(st2.segments, 1);
	assert_int_equal(st.bytes - st2.bytes, bytes);
	seg_path(path, sizeof(path), f->dir, pos[0].seg);
	assert_int_equal(access(path, F_OK), -1);
	check_read(w, pos[11], 12, plen[11]);
	{
		unsigned char b[8];

		assert_int_equal(nrs_wal_read(w, pos[0], b, sizeof(b)), -ENOENT);
	}
	assert_int_equal(nrs_wal_reclaim(w, UINT64_MAX, &bytes), 0);
	nrs_wal_close(w);

	/* reopen: only what is left is scanned */
	o.budget = st2.bytes + nrs_walrec_total_len(1500) + 100;
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	s = scan_all(w);
	assert_int_equal(s->n, 2);
	assert_int_equal(s->ri[0].rec.lsn, 11);
	free(s);
	{
		struct rec x = mkrec(13, 1500);
		struct iovec iov = { x.buf, x.len };
		struct nrs_wal_pos p;

		/* 64-byte header of the new segment + the record: over it */
		assert_int_equal(nrs_wal_append(w, &iov, 1, &p), 0);
		assert_int_equal(nrs_wal_append(w, &iov, 1, &p), -ENOSPC);
		nrs_wal_stats(w, &st2);
		assert_false(st2.broken);
		/* reclaiming the older segments makes room again */
		assert_true(nrs_wal_reclaim(w, p.seg, &bytes) >= 1);
		assert_int_equal(nrs_wal_append(w, &iov, 1, &p), 0);
		check_read(w, p, 13, 1500);
		free(x.buf);
	}
	nrs_wal_close(w);
}

/*
 * WD2: seal() moves the next write to a new, empty segment only when seg is
 * the current one and holds a record; reclaim then removes the sealed one
 * (and only it); the records left read back, also after a reopen.
 */
static void test_seal(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	struct nrs_wal_pos pos[3];
	static const uint32_t plen[3] = { 100, 2000, 300 };
	struct nrs_wal_stats st;
	uint64_t bytes = 0;
	char path[256];
	struct seen *s;

	assert_int_equal(nrs_wal_seal(w, 1), -EINVAL);	/* before scan */
	free(scan_all(w));
	assert_int_equal(nrs_wal_seal(w, 1), 0);	/* no current segment */
	append_recs(w, 1, plen, 2, pos);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, 1);
	assert_int_equal(st.cur_bytes, nrs_walrec_total_len(100) +
			 nrs_walrec_total_len(2000));
	assert_int_equal(nrs_wal_seal(w, 2), 0);	/* not the current one */
	assert_int_equal(nrs_wal_seal(w, 0), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, 1);
	assert_int_equal(st.segments, 1);
	assert_int_equal(nrs_wal_seal(w, 1), 1);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, 2);
	assert_int_equal(st.cur_bytes, 0);
	assert_int_equal(st.segments, 2);
	seg_path(path, sizeof(path), f->dir, 1);	/* cut back: WA7 */
	assert_int_equal(file_size(path), pos[1].off + nrs_walrec_total_len(2000));
	seg_path(path, sizeof(path), f->dir, 2);
	assert_int_equal(file_size(path), 64);
	/* an empty current segment is never sealed: an idle WAL stays put */
	assert_int_equal(nrs_wal_seal(w, 2), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, 2);
	check_read(w, pos[0], 1, plen[0]);
	/* the sealed segment is an older one now: reclaim removes it */
	assert_int_equal(nrs_wal_reclaim(w, st.cur_seg, &bytes), 1);
	assert_int_equal(bytes, pos[1].off + nrs_walrec_total_len(2000));
	seg_path(path, sizeof(path), f->dir, 1);
	assert_int_equal(access(path, F_OK), -1);
	append_recs(w, 3, plen + 2, 1, pos + 2);
	assert_int_equal(pos[2].seg, 2);		/* the sealed one's successor */
	assert_int_equal(pos[2].off, 64);
	nrs_wal_close(w);

	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 1);
	assert_int_equal(s->ri[0].rec.lsn, 3);
	free(s);
	nrs_wal_close(w);
}

/* Files a and b hold the same bytes. */
static bool same_bytes(const char *a, const char *b)
{
	static unsigned char ba[1 << 16], bb[1 << 16];
	int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
	bool same = true;
	ssize_t na, nb;

	assert_true(fa >= 0 && fb >= 0);
	do {
		na = read(fa, ba, sizeof(ba));
		nb = read(fb, bb, sizeof(bb));
		same = na == nb && na >= 0 && memcmp(ba, bb, (size_t)na) == 0;
	} while (same && na > 0);
	close(fa);
	close(fb);
	return same;
}

static void copy_file(const char *from, const char *to);

/*
 * WD3: a sealed segment adopted by link(2) keeps its bytes through
 * rotation, reopen, appends and reclaim; a rotation that finds its next
 * name taken (here by another link of the adopted inode) never opens it.
 */
static void test_adopted_inode(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	static const uint32_t plen[4] = { 3000, 70000, 500, 900 };
	struct nrs_wal_pos pos[4];
	char seg1[256], seg3[256], adopted[256], snap[256];
	struct nrs_wal_stats st;
	uint64_t bytes = 0;
	struct stat sb;
	struct seen *s;

	snprintf(adopted, sizeof(adopted), "%s/adopted", f->root);
	snprintf(snap, sizeof(snap), "%s/snap", f->root);
	seg_path(seg1, sizeof(seg1), f->dir, 1);
	seg_path(seg3, sizeof(seg3), f->dir, 3);
	free(scan_all(w));
	append_recs(w, 1, plen, 2, pos);
	assert_int_equal(nrs_wal_seal(w, 1), 1);
	assert_int_equal(link(seg1, adopted), 0);	/* OD6's adoption */
	copy_file(adopted, snap);
	assert_int_equal(link(adopted, seg3), 0);	/* the next name, taken */
	append_recs(w, 3, plen + 2, 1, pos + 2);
	assert_int_equal(pos[2].seg, 2);
	assert_int_equal(nrs_wal_seal(w, 2), -EEXIST);
	assert_true(same_bytes(adopted, snap));
	assert_int_equal(nrs_wal_seal(w, 2), 1);	/* skips to 4 */
	nrs_wal_stats(w, &st);
	assert_int_equal(st.cur_seg, 4);
	append_recs(w, 4, plen + 3, 1, pos + 3);
	assert_int_equal(pos[3].seg, 4);
	assert_true(same_bytes(adopted, snap));
	assert_int_equal(unlink(seg3), 0);
	nrs_wal_close(w);

	w = wal_open(f->dir, 0);
	s = scan_all(w);
	assert_int_equal(s->n, 4);
	free(s);
	append_recs(w, 5, plen, 2, pos);
	nrs_wal_stats(w, &st);
	assert_true(nrs_wal_reclaim(w, st.cur_seg, &bytes) >= 2);
	assert_int_equal(access(seg1, F_OK), -1);	/* the WAL's name gone */
	assert_int_equal(stat(adopted, &sb), 0);
	assert_int_equal(sb.st_nlink, 1);
	assert_true(same_bytes(adopted, snap));
	nrs_wal_close(w);
	assert_true(same_bytes(adopted, snap));
}

/* Copy file from to file to (the test's stand-in for a crash: what the
 * disk held before close cut the zeros off). */
static void copy_file(const char *from, const char *to)
{
	static unsigned char buf[1 << 16];
	int in = open(from, O_RDONLY);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	assert_true(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	close(out);
}

/*
 * WA7 and WS9: small batches write zeros ahead, large ones do not; reads stop
 * at the last record; rotation and close cut the zeros off; a zero tail
 * left by a crash is no damage, in the last segment (cut) or another (not
 * cut), while zeros followed by junk are.
 */
static void test_zero_ahead(void **state)
{
	struct fx *f = *state;
	struct damages ds = { 0 };
	struct nrs_wal_local_opts o = {
		.segment_size = 4u << 20, .damage = collect_damage,
		.damage_ctx = &ds,
	};
	static const uint32_t big[] = { 300u << 10 };
	struct nrs_wal_pos pos[5], bp, p;
	char path[256], path2[256], saved[256], saved2[256];
	unsigned char junk[40], tmp[16];
	struct nrs_wal *w = NULL;
	struct seen *s;
	off_t end, end2;

	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	free(scan_all(w));
	append_recs(w, 1, five, 1, pos);
	seg_path(path, sizeof(path), f->dir, 1);
	end = (off_t)(pos[0].off + nrs_walrec_total_len(five[0]));
	assert_int_equal(file_size(path), end + (1 << 20));
	assert_true(zeros_after(path, end));
	assert_int_equal(nrs_wal_read(w, pos[0], tmp, 0), 0);
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 1, (uint64_t)end - 4 },
				      tmp, sizeof(tmp)), 4);
	assert_int_equal(nrs_wal_read(w, (struct nrs_wal_pos){ 1, (uint64_t)end },
				      tmp, sizeof(tmp)), 0);
	/* 300 KiB: past the zeros it extends the file, and writes none */
	for (uint64_t lsn = 2; lsn <= 5; lsn++)
		append_recs(w, lsn, big, 1, &bp);
	end = (off_t)(bp.off + nrs_walrec_total_len(big[0]));
	assert_int_equal(file_size(path), end);
	append_recs(w, 6, five + 4, 1, &p);	/* small again: zeros */
	end = (off_t)(p.off + nrs_walrec_total_len(five[4]));
	assert_int_equal(file_size(path), end + (1 << 20));
	snprintf(saved, sizeof(saved), "%s/../seg1.crash", f->dir);
	copy_file(path, saved);
	/* a batch that does not fit rotates; segment 1 loses its zeros */
	append_recs(w, 7, (const uint32_t[]){ 3u << 20 }, 1, &p);
	assert_int_equal(p.seg, 2);
	assert_int_equal(file_size(path), end);
	/* the big batch still weighs in the average: no zeros yet ... */
	append_recs(w, 8, five, 1, &p);
	seg_path(path2, sizeof(path2), f->dir, 2);
	end2 = (off_t)(p.off + nrs_walrec_total_len(five[0]));
	assert_int_equal(file_size(path2), end2);
	/* ... until it has faded (7/8 per batch: 6 more) */
	for (uint64_t lsn = 9; lsn <= 14; lsn++)
		append_recs(w, lsn, five, 1, &p);
	end2 = (off_t)(p.off + nrs_walrec_total_len(five[0]));
	assert_int_equal(file_size(path2), 4 << 20);	/* segment_size */
	assert_true(zeros_after(path2, end2));
	snprintf(saved2, sizeof(saved2), "%s/../seg2.crash", f->dir);
	copy_file(path2, saved2);
	nrs_wal_close(w);
	assert_int_equal(file_size(path2), end2);	/* close cut it */

	/* Both segments as a crash left them: 14 records, no damage; the zeros
	 * of the last are cut, those of the other stay. */
	copy_file(saved, path);
	copy_file(saved2, path2);
	ds.n = 0;
	assert_int_equal(nrs_wal_local_open(f->dir, &o, &w), 0);
	s = scan_all(w);
	assert_int_equal(s->n, 14);
	for (size_t i = 0; i < 14; i++)
		assert_true(s->ri[i].data_ok);
	free(s);
	assert_int_equal(ds.n, 0);
	assert_int_equal(file_size(path), end + (1 << 20));
	assert_int_equal(file_size(path2), end2);
	{
		struct nrs_wal_stats st;

		nrs_wal_stats(w, &st);
		assert_int_equal(st.bytes, (uint64_t)(end + end2));
	}
	nrs_wal_close(w);

	/* Zeros, then junk: the zeros are no longer unused space but damage
	 * (WS4), in a segment that is not the last (WS6, not cut). */
	memset(junk, 0x5a, sizeof(junk));
	append_bytes(path, junk, sizeof(junk));
	ds.n = 0;
	scan_expect(f, &o, 14);
	assert_int_equal(ds.n, 1);
	assert_int_equal(ds.d[0].kind, NRS_WAL_CORRUPT);
	assert_int_equal(ds.d[0].seg, 1);
	assert_int_equal(ds.d[0].start, (uint64_t)end);
	assert_int_equal(ds.d[0].end, (uint64_t)end + (1 << 20) + sizeof(junk));
	unlink(saved);
	unlink(saved2);
}

/*
 * WA7's average: a large write() the kernel split into a large and a small
 * request makes alternating batches; their small ones must not write a
 * megabyte of zeros each.  A run of small batches then does.
 */
static void test_zero_ahead_split(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wal_open(f->dir, 0);
	const uint32_t split[] = { (1u << 20) - 4096, 4096 };
	struct nrs_wal_pos p;
	char path[256];
	uint64_t lsn = 1, end = 0;

	free(scan_all(w));
	seg_path(path, sizeof(path), f->dir, 1);
	for (int i = 0; i < 16; i++, lsn++) {
		append_recs(w, lsn, &split[i % 2], 1, &p);
		end = p.off + nrs_walrec_total_len(split[i % 2]);
		assert_int_equal(file_size(path), (off_t)end);
	}
	for (int i = 0; i < 32; i++, lsn++) {
		append_recs(w, lsn, five, 1, &p);
		end = p.off + nrs_walrec_total_len(five[0]);
	}
	assert_true(file_size(path) > (off_t)end);
	assert_true(zeros_after(path, (off_t)end));
	nrs_wal_close(w);
}

/* WA5: the default reserve is 5% of the file system, 4 MiB at least, the
 * configured default at most. */
static void test_reserve_scaled(void **state)
{
	const uint64_t mib = 1ull << 20, max = 64 * mib;

	(void)state;
	assert_true(nrs_wal_reserve_scaled(max, 0) == 4 * mib);
	assert_true(nrs_wal_reserve_scaled(max, 16 * mib) == 4 * mib);
	assert_true(nrs_wal_reserve_scaled(max, 80 * mib) == 4 * mib);
	assert_true(nrs_wal_reserve_scaled(max, 200 * mib) == 10 * mib);
	assert_true(nrs_wal_reserve_scaled(max, 1280 * mib) == max);
	assert_true(nrs_wal_reserve_scaled(max, 1ull << 40) == max);
	assert_true(nrs_wal_reserve_scaled(max, UINT64_MAX) == max);
	assert_true(nrs_wal_reserve_scaled(2 * mib, 16 * mib) == 2 * mib);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reserve_scaled),
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_append_read),
		T(test_rotation),
		T(test_scan_stop_and_order),
		T(test_torn_header),
		T(test_torn_payload),
		T(test_torn_embedded),
		T(test_garbage_tail),
		T(test_payload_flip_middle),
		T(test_payload_flip_last),
		T(test_corrupt_header_middle),
		T(test_bad_segments),
		T(test_directories),
		T(test_many_iovecs),
		T(test_big_record),
		T(test_fault_enospc),
		T(test_fault_fdatasync),
		T(test_failpoint_short),
		T(test_fault_broken),
		T(test_sync_all),
		T(test_group_sync_cut),
		T(test_sync_fail_rotates),
		T(test_concurrent_reads),
		T(test_read_only),
		T(test_reserve),
		T(test_budget_reclaim),
		T(test_seal),
		T(test_adopted_inode),
		T(test_zero_ahead),
		T(test_zero_ahead_split),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
