/*
 * nrs-bench: append load generator for `make bench`.
 *
 *   nrs-bench --dir DIR --writers N --size BYTES --seconds S
 *             [--same-stream] [--sync] [--expect | --follow | --pwrite]
 *             [--name PREFIX]
 *             [--rate BYTES_PER_SECOND] [--ops N] [--sync-end]
 *
 * N threads each append records of exactly BYTES bytes with O_APPEND, as
 * fast as they can, for S seconds, all from one page-aligned buffer (so a
 * write of up to 1 MiB is one append on nereusfs: nereusfs(8)).  With --rate each writer instead appends
 * its k-th record at k * BYTES / RATE seconds after the start (a fixed
 * schedule: a writer that fell behind catches up at full speed, so it
 * offers RATE * S bytes in all); latency is still write() alone.  Each writer opens its own file
 * DIR/PREFIX-wNNN, or with --same-stream its own handle on one shared file
 * DIR/PREFIX-shared (one open file description per writer, as separate
 * producers would have; a single shared description would add the kernel's
 * f_pos lock to what is measured).  --sync adds fdatasync() after every
 * write(): that is the plain-file baseline, where durability costs one flush
 * per append.  Without --sync the write() alone is timed, which on nereusfs
 * is the whole durable append (the daemon replies after its group commit).
 * --expect (nereusfs only) makes every write a conditional append: each
 * writer arms NRS_IOC_EXPECT with the offset it expects, then writes; the
 * timed operation is the ioctl plus the write.  --follow arms it once,
 * before the first write, with NRS_EXPECT_FOLLOW: every write is then a
 * conditional append without an ioctl of its own.  --pwrite (nereusfs only)
 * makes every write the one-call conditional append of DESIGN.md section
 * 3: each writer opens its stream without O_APPEND and pwrite()s at the
 * offset it expects (ESPIPE from nereusfs if that is not the head).  --ops N stops each writer
 * after N appends (or at S seconds, whichever comes first); --sync-end has
 * each writer fdatasync() its file once after its last append, inside the
 * elapsed time (not in any latency).  run.sh probes the disk with them: 1000
 * fdatasync'd 4 KiB appends to a plain file, and 256 appends of 1 MiB with
 * one fdatasync at the end (the sequential write rate, with the payload
 * every run writes).
 *
 * Latency is write() (+ fdatasync()) on CLOCK_MONOTONIC, per operation, into
 * a per-thread log-linear histogram: exact below 128 ns, then 64 buckets per
 * power of two (relative error under 1.6%), fixed size, no allocation in the
 * timed loop.  The histograms are merged after the run.
 *
 * Output is one line of key=value pairs on stdout, for scripts:
 *
 *   ops_s=4412.3 mbps=4.31 p50_us=212.4 p99_us=402.0 p999_us=801.2
 *   max_us=1203.5 ops=22061 errors=0 writers=1 size=1024 seconds=5.00
 *
 * mbps is 10^6 bytes per second.  Exit status: 0 when every append
 * succeeded, 1 when any failed (the first failure per writer is reported on
 * stderr, "writer 3: ENOSPC (No space left on device)", and that writer
 * stops; the line on stdout is still printed), 2 on bad usage or a setup
 * failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "nereusfs.h"
#include "util/errname.h"
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NB_MAX_WRITERS 4096
#define NB_MAX_SIZE (64u << 20)		/* one record, bytes */

/* Histogram: values in ns.  v < SUB is its own bucket; above, keep the top
 * SUB_BITS bits: e = msb - SUB_BITS + 1, index = e * SUB / 2 + (v >> e). */
#define SUB_BITS 7
#define SUB (1u << SUB_BITS)
#define NBUCKETS ((64 - SUB_BITS + 1) * (SUB / 2) + SUB)

struct writer {
	pthread_t thread;
	int id;
	int fd;
	uint64_t ops;			/* appends that completed */
	uint64_t max_ns;
	int err;			/* first errno, 0 if none */
	uint64_t hist[NBUCKETS];
};

struct bench {
	const char *dir;
	const char *name;
	unsigned writers;
	size_t size;
	double seconds;
	bool same_stream;
	bool sync;
	bool sync_end;			/* one fdatasync() after the last append */
	bool expect;			/* arm NRS_IOC_EXPECT before each write */
	bool follow;			/* one NRS_IOC_EXPECT, NRS_EXPECT_FOLLOW */
	bool pwrite;			/* pwrite() at the head, no O_APPEND */
	uint64_t rate;			/* bytes/s per writer; 0: flat out */
	uint64_t max_ops;		/* appends per writer; 0: no limit */
	char *buf;			/* record payload, shared, read-only */
	/* The start line: writers wait for go, then read deadline. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool go;			/* protected by lock */
	uint64_t start_ns, deadline_ns;	/* written before go is set */
};

static struct bench B = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

static unsigned bucket_of(uint64_t v)
{
	if (v < SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned e = msb - SUB_BITS + 1;
	return e * (SUB / 2) + (unsigned)(v >> e);
}

/* Midpoint of a bucket's range, in ns. */
static double bucket_mid(unsigned i)
{
	if (i < SUB)
		return i;
	unsigned e = i / (SUB / 2) - 1;
	uint64_t sub = i - e * (SUB / 2);
	double lo = (double)(sub << e);
	double width = (double)(UINT64_C(1) << e);
	return lo + width / 2;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Let the writers go at start; they stop at deadline (ns, CLOCK_MONOTONIC). */
static void start_writers(uint64_t start, uint64_t deadline)
{
	pthread_mutex_lock(&B.lock);
	B.start_ns = start;
	B.deadline_ns = deadline;
	B.go = true;
	pthread_cond_broadcast(&B.cond);
	pthread_mutex_unlock(&B.lock);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	pthread_mutex_lock(&B.lock);
	while (!B.go)
		pthread_cond_wait(&B.cond, &B.lock);
	uint64_t start = B.start_ns, deadline = B.deadline_ns;
	pthread_mutex_unlock(&B.lock);

	/* --expect, --pwrite: each writer owns its stream: it knows the head */
	struct stat st;
	uint64_t head = 0;
	if (B.expect || B.follow || B.pwrite) {
		if (fstat(w->fd, &st) != 0) {
			w->err = errno;
			return NULL;
		}
		head = (uint64_t)st.st_size;
	}
	if (B.follow) {
		struct nrs_ioc_expect ex = { .abi = NRS_IOC_ABI,
					     .flags = NRS_EXPECT_FOLLOW,
					     .offset = head };
		if (ioctl(w->fd, NRS_IOC_EXPECT, &ex) != 0) {
			w->err = errno;
			return NULL;
		}
	}

	for (;;) {
		if (B.rate) {
			uint64_t due = start + (uint64_t)((double)w->ops * (double)B.size *
							  1e9 / (double)B.rate);
			if (due > deadline)
				due = deadline;	/* the run lasts S seconds */
			struct timespec ts = { .tv_sec = (time_t)(due / 1000000000u),
					       .tv_nsec = (long)(due % 1000000000u) };
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		uint64_t t0 = now_ns();
		if (t0 >= deadline || (B.max_ops && w->ops >= B.max_ops))
			break;
		if (B.expect) {
			struct nrs_ioc_expect ex = { .abi = NRS_IOC_ABI,
						     .offset = head };
			if (ioctl(w->fd, NRS_IOC_EXPECT, &ex) != 0) {
				w->err = errno;
				break;
			}
		}
		ssize_t n = B.pwrite ? pwrite(w->fd, B.buf, B.size, (off_t)head)
				     : write(w->fd, B.buf, B.size);
		if (n < 0) {
			w->err = errno;
			break;
		}
		if ((size_t)n != B.size) {
			/* A short append would split a record: an error here. */
			w->err = EIO;
			fprintf(stderr, "nrs-bench: writer %d: short write %zd of %zu\n",
				w->id, n, B.size);
			break;
		}
		if (B.sync && fdatasync(w->fd) != 0) {
			w->err = errno;
			break;
		}
		head += (uint64_t)n;
		uint64_t lat = now_ns() - t0;
		w->hist[bucket_of(lat)]++;
		if (lat > w->max_ns)
			w->max_ns = lat;
		w->ops++;
	}
	if (B.sync_end && !w->err && fdatasync(w->fd) != 0)
		w->err = errno;
	if (w->err && w->err != EIO)
		fprintf(stderr, "nrs-bench: writer %d: %s (%s)\n", w->id,
			nrs_errname(w->err), strerror(w->err));
	return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double p)
{
	if (total == 0)
		return 0;
	uint64_t rank = (uint64_t)(p * (double)total);
	if (rank >= total)
		rank = total - 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < NBUCKETS; i++) {
		seen += hist[i];
		if (seen > rank)
			return bucket_mid(i);
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nrs-bench --dir DIR --writers N --size BYTES --seconds S\n"
		"                 [--same-stream] [--sync] [--expect | --follow | --pwrite]\n"
		"                 [--name PREFIX]\n"
		"                 [--rate BYTES_PER_SECOND] [--ops N] [--sync-end]\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "writers", required_argument, NULL, 'w' },
		{ "size", required_argument, NULL, 's' },
		{ "seconds", required_argument, NULL, 't' },
		{ "same-stream", no_argument, NULL, 'S' },
		{ "sync", no_argument, NULL, 'y' },
		{ "expect", no_argument, NULL, 'e' },
		{ "pwrite", no_argument, NULL, 'p' },
		{ "follow", no_argument, NULL, 'f' },
		{ "name", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "ops", required_argument, NULL, 'o' },
		{ "sync-end", no_argument, NULL, 'Y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end;

	B.name = "bench";
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		errno = 0;
		switch (c) {
		case 'd':
			B.dir = optarg;
			break;
		case 'w': {
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || v == 0 || v > NB_MAX_WRITERS)
				goto bad;
			B.writers = (unsigned)v;
			break;
		}
		case 's': {
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || v == 0 || v > NB_MAX_SIZE)
				goto bad;
			B.size = v;
			break;
		}
		case 't':
			B.seconds = strtod(optarg, &end);
			if (errno || *end || !(B.seconds > 0) || B.seconds > 86400)
				goto bad;
			break;
		case 'S':
			B.same_stream = true;
			break;
		case 'y':
			B.sync = true;
			break;
		case 'Y':
			B.sync_end = true;
			break;
		case 'e':
			B.expect = true;
			break;
		case 'p':
			B.pwrite = true;
			break;
		case 'f':
			B.follow = true;
			break;
		case 'n':
			if (!*optarg || strchr(optarg, '/'))
				goto bad;
			B.name = optarg;
			break;
		case 'r': {
			unsigned long long v = strtoull(optarg, &end, 10);
			if (errno || *end || v == 0 || v > (1ull << 40))
				goto bad;
			B.rate = v;
			break;
		}
		case 'o': {
			unsigned long long v = strtoull(optarg, &end, 10);
			if (errno || *end || v == 0)
				goto bad;
			B.max_ops = v;
			break;
		}
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if ((B.expect || B.follow || B.pwrite) && B.same_stream) {
		fprintf(stderr, "nrs-bench: --expect, --follow and --pwrite need a stream per writer\n");
		return -EINVAL;
	}
	if (B.expect + B.follow + B.pwrite > 1) {
		fprintf(stderr, "nrs-bench: one of --expect, --follow, --pwrite\n");
		return -EINVAL;
	}
	if (optind != argc || !B.dir || !B.writers || !B.size || !(B.seconds > 0)) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
bad:
	for (const struct option *o = opts; o->name; o++)
		if (o->val == c)
			fprintf(stderr, "nrs-bench: bad value for --%s: '%s'\n",
				o->name, optarg);
	return -EINVAL;
}

static int open_stream(unsigned id)
{
	char path[PATH_MAX];
	int n;

	if (B.same_stream)
		n = snprintf(path, sizeof(path), "%s/%s-shared", B.dir, B.name);
	else
		n = snprintf(path, sizeof(path), "%s/%s-w%03u", B.dir, B.name, id);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		fprintf(stderr, "nrs-bench: path too long\n");
		return -ENAMETOOLONG;
	}
	int fd = open(path, O_WRONLY | O_CREAT | (B.pwrite ? 0 : O_APPEND) | O_CLOEXEC,
		      0644);
	if (fd < 0) {
		int err = -errno;
		fprintf(stderr, "nrs-bench: open %s: %s\n", path, strerror(-err));
		return err;
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct writer *w;
	uint64_t *hist;
	uint64_t ops = 0, max_ns = 0;
	int failed = 0;
	int ret = 2;

	if (parse_args(argc, argv) != 0)
		return 2;
	if (mkdir(B.dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "nrs-bench: mkdir %s: %s\n", B.dir, strerror(errno));
		return 2;
	}

	/* page-aligned, as nereusfs(8) asks of a 1 MiB atomic append: from
	 * an unaligned buffer the kernel sends it as two FUSE writes */
	if (posix_memalign((void **)&B.buf, 4096, B.size) != 0)
		B.buf = NULL;
	w = calloc(B.writers, sizeof(*w));
	hist = calloc(NBUCKETS, sizeof(*hist));
	if (!B.buf || !w || !hist) {
		fprintf(stderr, "nrs-bench: out of memory\n");
		goto out_free;
	}
	/* Printable, recognisable payload: records end in a newline. */
	for (size_t i = 0; i < B.size; i++)
		B.buf[i] = (char)('a' + i % 26);
	B.buf[B.size - 1] = '\n';

	unsigned opened;
	for (opened = 0; opened < B.writers; opened++) {
		w[opened].id = (int)opened;
		w[opened].fd = open_stream(opened);
		if (w[opened].fd < 0)
			goto out_close;
	}

	unsigned started;
	for (started = 0; started < B.writers; started++) {
		if (pthread_create(&w[started].thread, NULL, writer_main, &w[started]) != 0) {
			fprintf(stderr, "nrs-bench: cannot start writer %u\n", started);
			break;
		}
	}
	if (started < B.writers) {
		start_writers(0, 0);	/* already past: they stop at once */
		for (unsigned i = 0; i < started; i++)
			pthread_join(w[i].thread, NULL);
		goto out_close;
	}

	uint64_t t0 = now_ns();
	start_writers(t0, t0 + (uint64_t)(B.seconds * 1e9));
	for (unsigned i = 0; i < B.writers; i++)
		pthread_join(w[i].thread, NULL);
	uint64_t elapsed = now_ns() - t0;

	for (unsigned i = 0; i < B.writers; i++) {
		ops += w[i].ops;
		if (w[i].max_ns > max_ns)
			max_ns = w[i].max_ns;
		if (w[i].err)
			failed++;
		for (unsigned b = 0; b < NBUCKETS; b++)
			hist[b] += w[i].hist[b];
	}
	double secs = (double)elapsed / 1e9;
	printf("ops_s=%.1f mbps=%.2f p50_us=%.1f p99_us=%.1f p999_us=%.1f "
	       "max_us=%.1f ops=%" PRIu64 " errors=%d writers=%u size=%zu seconds=%.2f\n",
	       (double)ops / secs, (double)ops * (double)B.size / secs / 1e6,
	       percentile(hist, ops, 0.50) / 1e3, percentile(hist, ops, 0.99) / 1e3,
	       percentile(hist, ops, 0.999) / 1e3, (double)max_ns / 1e3,
	       ops, failed, B.writers, B.size, secs);
	fflush(stdout);
	ret = failed ? 1 : 0;

out_close:
	for (unsigned i = 0; i < opened; i++)
		close(w[i].fd);
out_free:
	free(hist);
	free(w);
	free(B.buf);
	return ret;
}
