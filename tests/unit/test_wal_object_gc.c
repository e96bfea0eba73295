/*
 * test_wal_object_gc.c - the DELETEs the object WAL's reclaim owes
 * (wal_object_gc.c OWG3, OWG4; the gc record of wal_object_gcrec.c), over
 * the real embedded directory store.  A crash is a child process that
 * the failpoint kills (SIGKILL, as the daemon dies) in its reclaim; the
 * parent then opens the WAL again, as the next mount does.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture_owal.h"
#include "obj/objstore.h"
#include "util/failpoint.h"
#include "wal/wal.h"
#include "wal/walrec.h"
#include "wal_append.h"

#define N_OBJ	4
/* The first open that writes is run 1; its objects are seqs 1, 2, ... */
#define SEG(i)	((1ull << 40) | (uint64_t)((i) + 1))

struct fx {
	struct nrs_fixture_owal d;
	bool gate_open;
	char gc[4300];
};

static uint64_t named_seg;	/* OW18: the object a generation names */

static int named(void *ctx, uint64_t seg)
{
	(void)ctx;
	return seg == named_seg;
}

static bool gate(void *ctx)
{
	return ((struct fx *)ctx)->gate_open;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || nrs_fixture_owal_open(&f->d, "test_wal_object_gc") != 0) {
		free(f);
		return -1;
	}
	snprintf(f->gc, sizeof(f->gc), "%s/gc", f->d.state);
	f->gate_open = true;
	named_seg = 0;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	(void)nrs_failpoint_parse(NULL);
	rc = nrs_fixture_owal_close(&f->d);
	free(f);
	return rc;
}

static int try_open(struct fx *f, struct nrs_wal **w)
{
	struct nrs_wal_object_opts o = {
		.store = f->d.store, .dir = f->d.state,
		.inflight_max = 4, .timeout_ms = 5000, .linger_ms = 5,
		.may_ack = gate, .may_ack_ctx = f,
		.named = named,
	};

	return nrs_wal_object_open(&o, w);
}

static struct nrs_wal *wopen(struct fx *f)
{
	struct nrs_wal *w = NULL;

	assert_int_equal(try_open(f, &w), 0);
	return w;
}

/* Append record lsn (3000 bytes): an object of its own. */
static int append(struct nrs_wal *w, uint64_t lsn, struct nrs_wal_pos *pos)
{
	uint32_t plen = 3000;
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = 9,
		.base = (lsn - 1) * plen, .len = plen, .n_appends = 1,
		.epoch = 1, .prev_lsn = lsn - 1,
	};
	size_t hl = nrs_walrec_hdr_len(plen), len = nrs_walrec_total_len(plen);
	unsigned char *buf = calloc(1, len);
	struct iovec iov;
	int err = -ENOMEM;

	if (buf) {
		memset(buf + hl, (int)lsn, plen);
		iov.iov_base = buf + hl;
		iov.iov_len = plen;
		err = (int)nrs_walrec_encode_hdr(&r, &iov, 1, buf, hl);
		iov.iov_base = buf;
		iov.iov_len = len;
		err = err == (int)hl ? nrs_wal_append(w, &iov, 1, pos) : -EIO;
	}
	free(buf);
	return err;
}

/* Append N_OBJ records, one object each, at SEG(0) ... SEG(N_OBJ - 1). */
static void fill(struct nrs_wal *w)
{
	struct nrs_wal_pos pos;

	for (int i = 0; i < N_OBJ; i++) {
		assert_int_equal(append(w, (uint64_t)i + 1, &pos), 0);
		assert_int_equal(pos.seg, SEG(i));
	}
}

static bool stored(struct fx *f, uint64_t seg)
{
	char key[NRS_OBJKEY_MAX];
	struct nrs_obj_meta m;

	nrs_wal_object_key(key, seg);
	return nrs_obj_head(f->d.store, key, &m) == 0;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/*
 * The crash: a child opens the WAL with spec armed, appends N_OBJ
 * records and reclaims below the last; the failpoint must kill it.
 */
static void crash_in_reclaim(struct fx *f, const char *spec)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct nrs_wal *w = NULL;
		struct nrs_wal_pos pos;
		uint64_t bytes;

		if (try_open(f, &w) != 0)
			_exit(3);
		for (int i = 0; i < N_OBJ; i++)
			if (append(w, (uint64_t)i + 1, &pos) != 0 ||
			    pos.seg != SEG(i))
				_exit(4);
		if (nrs_failpoint_parse(spec) != 0)
			_exit(5);
		(void)nrs_wal_reclaim(w, SEG(N_OBJ - 1), &bytes);
		_exit(6);			/* the point did not fire */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
}

struct seen {
	size_t n;
	uint64_t lsn[16];
};

static int collect(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct seen *s = ctx;

	if (s->n == 16)
		return -ENOSPC;
	s->lsn[s->n++] = ri->rec.lsn;
	return 0;
}

/* The lsns a scan of a new open returns, from first to N_OBJ. */
static void expect_scan(struct fx *f, uint64_t first)
{
	struct nrs_wal *w = wopen(f);
	struct seen s = { 0 };

	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	nrs_wal_close(w);
	assert_int_equal(s.n, N_OBJ + 1 - first);
	for (size_t i = 0; i < s.n; i++)
		assert_int_equal(s.lsn[i], first + i);
}

/* OWG3: a crash between the floor and the DELETEs (the first sent, the
 * second not): the next run's first reclaim deletes the rest, and drops
 * the record; what a scan needs stays. */
static void test_crash_before_delete(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_stats st;
	struct nrs_wal *w;
	uint64_t bytes;

	crash_in_reclaim(f, "owal.before_delete=crash@2");
	assert_false(stored(f, SEG(2)));	/* highest first: it went */
	assert_true(stored(f, SEG(0)) && stored(f, SEG(1)));
	assert_true(exists(f->gc));
	w = wopen(f);
	nrs_wal_stats(w, &st);
	assert_true(st.reclaim_due_ns > 0);	/* owed: a reclaim is due */
	assert_int_equal(nrs_wal_reclaim(w, SEG(0), &bytes), 3);
	assert_false(stored(f, SEG(0)) || stored(f, SEG(1)));
	assert_true(stored(f, SEG(3)));
	assert_false(exists(f->gc));
	nrs_wal_stats(w, &st);
	assert_int_equal(st.reclaim_due_ns, 0);
	nrs_wal_close(w);
	expect_scan(f, N_OBJ);
}

/* OWG3, OW18: an object a generation names is not owed, neither when the
 * floor moves nor when the owed are sent again; OWG2: nothing is sent
 * again while the owner gate is closed. */
static void test_crash_named_fenced(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	uint64_t bytes;

	named_seg = SEG(1);
	crash_in_reclaim(f, "owal.before_delete=crash@1");
	assert_true(stored(f, SEG(0)) && stored(f, SEG(1)) &&
		    stored(f, SEG(2)));
	w = wopen(f);
	f->gate_open = false;
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 0);
	assert_true(stored(f, SEG(0)) && stored(f, SEG(2)));
	assert_true(exists(f->gc));
	f->gate_open = true;
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 2);
	assert_false(stored(f, SEG(0)) || stored(f, SEG(2)));
	assert_true(stored(f, SEG(1)));		/* G9's, not ours */
	assert_false(exists(f->gc));
	nrs_wal_close(w);
	expect_scan(f, N_OBJ);
}

/* OWG4: a crash after the record, before the floor: the objects are held
 * and scanned again, and the owed entries above the floor are dropped,
 * never sent. */
static void test_crash_before_floor(void **state)
{
	struct fx *f = *state;
	struct nrs_wal_stats st;
	struct nrs_wal *w;
	uint64_t bytes;

	crash_in_reclaim(f, "owal.before_floor=crash");
	assert_true(exists(f->gc));
	w = wopen(f);
	assert_int_equal(nrs_wal_scan(w, collect, &(struct seen){ 0 }), 0);
	nrs_wal_stats(w, &st);
	assert_int_equal(st.segments, N_OBJ);
	assert_int_equal(nrs_wal_reclaim(w, SEG(0), &bytes), 0);
	for (int i = 0; i < N_OBJ; i++)
		assert_true(stored(f, SEG(i)));
	assert_false(exists(f->gc));
	nrs_wal_close(w);
	expect_scan(f, 1);
}

/* OWG3: a DELETE that fails stays owed and is sent again by a later
 * reclaim of the same run, once due. */
static void test_failed_delete(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f);
	struct nrs_wal_stats st;
	uint64_t bytes;

	fill(w);
	assert_int_equal(nrs_failpoint_parse("owal.before_delete=error:EIO"),
			 0);
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 0);
	assert_int_equal(nrs_failpoint_parse(NULL), 0);
	assert_true(stored(f, SEG(0)) && stored(f, SEG(2)));
	assert_true(exists(f->gc));
	nrs_wal_stats(w, &st);
	assert_true(st.reclaim_due_ns > 0);
	assert_int_equal(st.segments, 1);
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 3);
	assert_false(stored(f, SEG(0)) || stored(f, SEG(1)) ||
		     stored(f, SEG(2)));
	assert_false(exists(f->gc));
	nrs_wal_close(w);
}

/* Flip one bit of byte at of the file path. */
static void flip(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char c;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, at), 1);
	c ^= 0x01;
	assert_int_equal(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

/* OWG3: a damaged gc record (its floor field, a bit the CRC alone
 * catches) is reported and ignored: its objects leak, nothing is deleted
 * on its word, and it is removed. */
static void test_damaged_record(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	uint64_t bytes;

	crash_in_reclaim(f, "owal.before_delete=crash@2");
	flip(f->gc, 23);	/* the top byte of the record's floor */
	w = wopen(f);
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 0);
	assert_true(stored(f, SEG(0)) && stored(f, SEG(1)));
	assert_true(stored(f, SEG(3)));
	assert_false(exists(f->gc));
	nrs_wal_close(w);
	expect_scan(f, N_OBJ);
}

/* OWG3: a record cut short or grown is damage too, as is one of no run
 * the state file names. */
static void test_damaged_lengths(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w;
	uint64_t bytes;
	int fd;

	crash_in_reclaim(f, "owal.before_delete=crash@1");
	assert_int_equal(truncate(f->gc, 40), 0);
	w = wopen(f);
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 0);
	assert_true(stored(f, SEG(0)) && stored(f, SEG(2)));
	nrs_wal_close(w);
	fd = open(f->gc, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "NRSOWGC1", 8), 8);
	close(fd);
	w = wopen(f);
	assert_int_equal(nrs_wal_reclaim(w, SEG(3), &bytes), 0);
	assert_true(stored(f, SEG(0)) && stored(f, SEG(2)));
	assert_false(exists(f->gc));
	nrs_wal_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_crash_before_delete,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_named_fenced,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_before_floor,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_delete, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_damaged_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_damaged_lengths, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
