/*
 * nrs-adapter - drives the adapter ioctls (nereusfs.h) the way brokers
 * would, and checks the stream afterwards.  Exit 0 if every check held.
 *
 *   nrs-adapter race STREAM ROUNDS SEED
 *	Leader changes under load.  Each round a new leader thread takes
 *	epoch + 1 (odd rounds with NRS_IOC_BIND; even rounds by setting
 *	user.nereus.epoch and then opening, so the handle takes the epoch at
 *	open) while the previous leader keeps appending conditional batches
 *	(NRS_IOC_EXPECT) with a random pause (0-2 ms) between them.  The old
 *	leader must end with ESTALE and nothing else; the head right after
 *	the fence must be exactly where the old leader's acknowledged appends
 *	end (none published after the fence); and at the end the stream must
 *	be every acknowledged append, in acknowledgement order, tiling
 *	[start, head) with nothing else.
 *
 *   nrs-adapter cas STREAM WRITERS APPENDS SEED
 *	WRITERS threads, each with its own handle (no O_APPEND), append
 *	APPENDS records each by snapshot + NRS_IOC_EXPECT + write(), retrying
 *	on ESPIPE.  Exactly one writer must win each offset: the wins tile
 *	the stream exactly and each holds its writer's bytes; any error other
 *	than ESPIPE fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/parse.h"
#include "nereusfs.h"

#define MAX_RECS	100000
#define MAX_LEN		4096

/* One acknowledged append. */
struct rec {
	uint64_t off;
	uint32_t len;
	uint32_t who, seq;
};

static const char *path;
static struct rec recs[MAX_RECS];
static atomic_size_t nrecs;
static atomic_int failed;

static void fill(unsigned char *buf, size_t len, uint32_t who, uint32_t seq)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(who * 131 + seq * 7 + i);
}

static void ack(uint64_t off, size_t len, uint32_t who, uint32_t seq)
{
	size_t i = atomic_fetch_add(&nrecs, 1);

	if (i >= MAX_RECS) {
		fprintf(stderr, "too many records\n");
		exit(1);
	}
	recs[i] = (struct rec){ off, (uint32_t)len, who, seq };
}

static int snapshot(int fd, struct nrs_ioc_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	return ioctl(fd, NRS_IOC_SNAPSHOT, s) < 0 ? -errno : 0;
}

/* Conditional append at off; 0 or -errno. */
static int append_at(int fd, uint64_t off, const void *buf, size_t len)
{
	struct nrs_ioc_expect e = { .abi = NRS_IOC_ABI, .offset = off };
	ssize_t n;

	if (ioctl(fd, NRS_IOC_EXPECT, &e) < 0)
		return -errno;
	n = write(fd, buf, len);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static void pause_random(unsigned int *seed, unsigned int max_us)
{
	struct timespec ts = { 0, (long)(rand_r(seed) % (max_us + 1)) * 1000 };

	nanosleep(&ts, NULL);
}

static int by_offset(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The acknowledged records tile [start, head) and hold their bytes. */
static int check_tiling(uint64_t start)
{
	size_t n = atomic_load(&nrecs);
	unsigned char want[MAX_LEN], got[MAX_LEN];
	struct nrs_ioc_snapshot s;
	uint64_t off = start;
	int fd = open(path, O_RDONLY), err;

	if (fd < 0 || (err = snapshot(fd, &s)) != 0) {
		fprintf(stderr, "check: %s: %s\n", path, nrs_errname(errno));
		return 1;
	}
	if (n)
		qsort(recs, n, sizeof(recs[0]), by_offset);
	for (size_t i = 0; i < n; i++) {
		const struct rec *r = &recs[i];

		if (r->off != off) {
			fprintf(stderr, "check: record %zu (writer %u seq %u) "
				"at %" PRIu64 ", expected %" PRIu64 " (%s)\n",
				i, r->who, r->seq, r->off, off,
				r->off < off ? "two wins at one offset" : "a gap");
			close(fd);
			return 1;
		}
		fill(want, r->len, r->who, r->seq);
		if (pread(fd, got, r->len, (off_t)r->off) != (ssize_t)r->len ||
		    memcmp(want, got, r->len) != 0) {
			fprintf(stderr, "check: record at %" PRIu64 " (writer "
				"%u seq %u) does not hold its bytes\n", r->off,
				r->who, r->seq);
			close(fd);
			return 1;
		}
		off += r->len;
	}
	close(fd);
	if (off != s.head) {
		fprintf(stderr, "check: records end at %" PRIu64 ", head is %"
			PRIu64 " (bytes nobody acknowledged)\n", off, s.head);
		return 1;
	}
	printf("check: %zu records tile [%" PRIu64 ", %" PRIu64 "), version %"
	       PRIu64 "\n", n, start, s.head, s.version);
	return 0;
}

/* ---- race -------------------------------------------------------- */

struct leader {
	pthread_t tid;
	uint32_t id;
	int fd;
	uint64_t next;		/* where its next append must land */
	unsigned int seed;
	atomic_bool stop;	/* the test is over (last leader only) */
	int result;		/* the error it stopped with */
	uint32_t acked;
};

static void *leader_run(void *arg)
{
	struct leader *l = arg;
	unsigned char buf[MAX_LEN];

	for (uint32_t seq = 0; !atomic_load(&l->stop); seq++) {
		size_t len = 1 + (size_t)rand_r(&l->seed) % MAX_LEN;
		int err;

		fill(buf, len, l->id, seq);
		err = append_at(l->fd, l->next, buf, len);
		if (err) {
			l->result = err;
			return NULL;
		}
		ack(l->next, len, l->id, seq);
		l->next += len;
		l->acked++;
		pause_random(&l->seed, 2000);
	}
	return NULL;
}

/* Take over from whoever leads: epoch e, returns the head at the fence. */
static int take_over(struct leader *l, uint32_t round, uint64_t e)
{
	struct nrs_ioc_snapshot s;
	char val[32];
	int err;

	if (round % 2) {
		struct nrs_ioc_bind b = { .abi = NRS_IOC_ABI, .epoch = e };

		l->fd = open(path, O_WRONLY);
		if (l->fd < 0 || ioctl(l->fd, NRS_IOC_BIND, &b) < 0)
			return -errno;
	} else {
		snprintf(val, sizeof(val), "%" PRIu64, e);
		if (setxattr(path, "user.nereus.epoch", val, strlen(val), 0) < 0)
			return -errno;
		l->fd = open(path, O_WRONLY | O_APPEND);
		if (l->fd < 0)
			return -errno;
	}
	err = snapshot(l->fd, &s);
	if (err)
		return err;
	if (s.handle_epoch != e || s.epoch != e) {
		fprintf(stderr, "round %u: handle epoch %" PRIu64 ", stream %"
			PRIu64 ", wanted %" PRIu64 "\n", round, s.handle_epoch,
			s.epoch, e);
		return -EPROTO;
	}
	l->next = s.head;
	return 0;
}

static int race(int rounds, unsigned int seed)
{
	struct leader *ls = calloc((size_t)rounds + 1, sizeof(*ls));
	struct nrs_ioc_snapshot s;
	uint64_t start;
	int fd = open(path, O_RDONLY), rc = 0;

	if (!ls || fd < 0 || snapshot(fd, &s) != 0) {
		fprintf(stderr, "race: %s: %s\n", path, nrs_errname(errno));
		return 1;
	}
	close(fd);
	start = s.head;
	for (int r = 0; r <= rounds && !rc; r++) {
		struct leader *l = &ls[r];
		int err;

		l->id = (uint32_t)r;
		l->seed = seed + (unsigned int)r;
		if (r > 0)	/* let the old leader run a little */
			pause_random(&l->seed, 20000);
		err = take_over(l, (uint32_t)r, s.epoch + 1 + (uint64_t)r);
		if (err) {
			fprintf(stderr, "round %d: take over: %s\n", r,
				nrs_errname(-err));
			return 1;
		}
		if (r > 0) {
			struct leader *old = &ls[r - 1];

			pthread_join(old->tid, NULL);
			if (old->result != -ESTALE) {
				fprintf(stderr, "round %d: the old leader "
					"stopped with %s, not ESTALE\n", r,
					nrs_errname(-old->result));
				rc = 1;
			} else if (old->next != l->next) {
				fprintf(stderr, "round %d: the old leader's acks "
					"end at %" PRIu64 ", the head at the "
					"fence is %" PRIu64 "\n", r, old->next,
					l->next);
				rc = 1;
			}
			close(old->fd);
		}
		if (pthread_create(&l->tid, NULL, leader_run, l)) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	atomic_store(&ls[rounds].stop, true);
	pthread_join(ls[rounds].tid, NULL);
	if (ls[rounds].result) {
		fprintf(stderr, "the last leader failed: %s\n",
			nrs_errname(-ls[rounds].result));
		rc = 1;
	}
	close(ls[rounds].fd);
	printf("race: %d leader changes, %zu appends acknowledged\n", rounds,
	       atomic_load(&nrecs));
	free(ls);
	return rc || check_tiling(start);
}

/* ---- cas --------------------------------------------------------- */

struct writer {
	pthread_t tid;
	uint32_t id;
	int appends;
	unsigned int seed;
	uint64_t lost;		/* ESPIPE answers */
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	unsigned char buf[MAX_LEN];
	int fd = open(path, O_WRONLY);

	if (fd < 0) {
		fprintf(stderr, "writer %u: open: %s\n", w->id, nrs_errname(errno));
		atomic_store(&failed, 1);
		return NULL;
	}
	for (int seq = 0; seq < w->appends && !atomic_load(&failed); ) {
		size_t len = 1 + (size_t)rand_r(&w->seed) % 512;
		struct nrs_ioc_snapshot s;
		int err = snapshot(fd, &s);

		fill(buf, len, w->id, (uint32_t)seq);
		if (!err)
			err = append_at(fd, s.head, buf, len);
		if (err == -ESPIPE) {
			w->lost++;
			continue;
		}
		if (err) {
			fprintf(stderr, "writer %u: %s\n", w->id,
				nrs_errname(-err));
			atomic_store(&failed, 1);
			break;
		}
		ack(s.head, len, w->id, (uint32_t)seq);
		seq++;
	}
	close(fd);
	return NULL;
}

static int cas(int writers, int appends, unsigned int seed)
{
	struct writer *ws = calloc((size_t)writers, sizeof(*ws));
	struct nrs_ioc_snapshot s;
	uint64_t lost = 0;
	int fd = open(path, O_RDONLY);

	if (!ws || fd < 0 || snapshot(fd, &s) != 0) {
		fprintf(stderr, "cas: %s: %s\n", path, nrs_errname(errno));
		return 1;
	}
	close(fd);
	for (int i = 0; i < writers; i++) {
		ws[i] = (struct writer){ .id = (uint32_t)i, .appends = appends,
					 .seed = seed + (unsigned int)i };
		if (pthread_create(&ws[i].tid, NULL, writer_run, &ws[i]))
			return 1;
	}
	for (int i = 0; i < writers; i++) {
		pthread_join(ws[i].tid, NULL);
		lost += ws[i].lost;
	}
	free(ws);
	printf("cas: %zu wins, %" PRIu64 " ESPIPE\n", atomic_load(&nrecs), lost);
	if (atomic_load(&failed))
		return 1;
	if (atomic_load(&nrecs) != (size_t)writers * (size_t)appends) {
		fprintf(stderr, "cas: %zu wins, wanted %d\n",
			atomic_load(&nrecs), writers * appends);
		return 1;
	}
	return check_tiling(s.head);
}

/* A decimal argument in [0, max] (parse.h N1); exit 2 otherwise. */
static int64_t arg(const char *s, uint64_t max)
{
	uint64_t v;

	if (nrs_parse_u64_range(s, 0, max, &v)) {
		fprintf(stderr, "nrs-adapter: not a number up to %" PRIu64
			": '%s'\n", max, s);
		exit(2);
	}
	return (int64_t)v;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "race") == 0) {
		path = argv[2];
		return race(arg(argv[3], INT_MAX), (unsigned int)arg(argv[4],
								      UINT_MAX));
	}
	if (argc == 6 && strcmp(argv[1], "cas") == 0) {
		path = argv[2];
		return cas(arg(argv[3], INT_MAX), arg(argv[4], INT_MAX),
			   (unsigned int)arg(argv[5], UINT_MAX));
	}
	fprintf(stderr, "usage: nrs-adapter race STREAM ROUNDS SEED\n"
		"       nrs-adapter cas STREAM WRITERS APPENDS SEED\n");
	return 2;
}
