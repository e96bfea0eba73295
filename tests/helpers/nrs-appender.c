/*
 * nrs-appender - concurrent writers appending self-checking records.
 *
 *	nrs-appender [-t WRITERS] [-n COUNT] [-d SECONDS] [-s MIN[-MAX]]
 *		     [-E EVERY] [-w FIRST_ID] [-a ACKLOG] [-S SEED] [-k] [-T]
 *		     STREAM...
 *
 * Writer i (a thread with its own file description, opened O_WRONLY |
 * O_APPEND | O_CREAT) has id FIRST_ID + i and appends to STREAM[i % n]
 * records of record.h, one write(2) each, seq 0, 1, 2, ...  A record is
 * MIN..MAX bytes in total (uniform, header included; MIN >= 33), except
 * that with -E every EVERY-th record of a writer (seq % EVERY == EVERY / 2)
 * is exactly 1 MiB, the mount's max atomic write.
 *
 * After each write that returned the full length, the writer appends the
 * line "STREAM-BASENAME WRITER SEQ LEN\n" to ACKLOG with one write(2) on an
 * O_APPEND descriptor: ACKLOG is the acknowledged set, and it survives a
 * kill -9 of the daemon (the appender is a separate process).  With -T
 * the line starts with "TS " instead: CLOCK_MONOTONIC in nanoseconds as 20
 * decimal digits, read right after write(2) returned (the clock and format
 * nrs-powerfail.so and nrs-powerreplay use, so a test can tell which acks
 * came before a simulated power cut; strip the field for nrs-verify).
 *
 * A writer stops after COUNT records, after SECONDS, on SIGTERM/SIGINT, or
 * on its first failed write (with -k it counts the failure and goes on with
 * the next seq).  A short write (0 <= n < len) is always a violation: an
 * append is all or nothing.
 *
 * Exit: 0 every write succeeded; 3 some write or open failed (reported on
 * stderr with the errno name: expected when a test kills the daemon);
 * 1 a violation or a local failure (short write, ACKLOG write); 2 usage.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/parse.h"
#include "record.h"

struct writer {
	pthread_t thread;
	uint32_t id;
	const char *path;
	const char *base;
	uint64_t rng;
	/* results */
	uint64_t acked, failed, bytes;
	int fatal;		/* 1: violation or local failure */
};

static struct {
	uint64_t count;		/* 0: unlimited */
	double seconds;		/* 0: unlimited */
	uint32_t min, max, big_every;
	bool keep_going, stamp;
	int ack_fd;
} opt = { .min = 64, .max = 4096, .ack_fd = -1 };

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: state never 0 (seeded so) */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static uint32_t pick_len(struct writer *w, uint64_t seq)
{
	if (opt.big_every && seq % opt.big_every == opt.big_every / 2)
		return NRS_REC_MAX;
	return opt.min + (uint32_t)(rng_next(&w->rng) % (opt.max - opt.min + 1));
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull +
	       (unsigned long long)ts.tv_nsec;
}

/* ts: now_ns() right after the write returned (used with -T). */
static int ack(struct writer *w, uint64_t seq, uint32_t len,
	       unsigned long long ts)
{
	char line[512], stamp[32] = "";
	int n;

	if (opt.stamp)
		snprintf(stamp, sizeof(stamp), "%020llu ", ts);
	n = snprintf(line, sizeof(line), "%s%s %u %llu %u\n", stamp, w->base,
		     w->id, (unsigned long long)seq, len);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	if (write(opt.ack_fd, line, (size_t)n) != n)
		return -1;
	return 0;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	unsigned char *buf;
	double end = opt.seconds > 0 ? now() + opt.seconds : 0;
	struct nrs_rec r;
	unsigned long long ts;
	uint64_t seq;
	ssize_t n;
	int fd;

	/* Page-aligned, as nereusfs(8) asks for writes of a whole 1 MiB: the
	 * kernel pins at most 256 pages per request, and an unaligned 1 MiB
	 * buffer spans 257, so it would be split into two appends. */
	if (posix_memalign((void **)&buf, 4096, NRS_REC_MAX) != 0)
		buf = NULL;
	if (!buf) {
		fprintf(stderr, "nrs-appender: writer %u: out of memory\n", w->id);
		w->fatal = 1;
		return NULL;
	}
	fd = open(w->path, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd < 0) {
		fprintf(stderr, "nrs-appender: writer %u: open %s: %s\n", w->id,
			w->path, nrs_errname(errno));
		w->failed++;
		free(buf);
		return NULL;
	}
	for (seq = 0; !stop; seq++) {
		if (opt.count && seq >= opt.count)
			break;
		if (end && now() >= end)
			break;
		r.len = pick_len(w, seq);
		r.writer = w->id;
		r.tag = nrs_rec_tag(w->path);
		r.seq = seq;
		nrs_rec_build(&r, buf);
		n = write(fd, buf, r.len);
		ts = now_ns();
		if (n < 0) {
			fprintf(stderr,
				"nrs-appender: writer %u (%s) seq %llu len %u: write: %s\n",
				w->id, w->base, (unsigned long long)seq, r.len,
				nrs_errname(errno));
			w->failed++;
			if (!opt.keep_going)
				break;
			continue;
		}
		if ((size_t)n != r.len) {
			fprintf(stderr,
				"nrs-appender: VIOLATION: writer %u (%s) seq %llu: short write %zd of %u bytes\n",
				w->id, w->base, (unsigned long long)seq, n, r.len);
			w->fatal = 1;
			break;
		}
		if (ack(w, seq, r.len, ts) < 0) {
			fprintf(stderr, "nrs-appender: writer %u: ack log: %s\n",
				w->id, strerror(errno));
			w->fatal = 1;
			break;
		}
		w->acked++;
		w->bytes += r.len;
	}
	close(fd);
	free(buf);
	return NULL;
}

static int parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;

	if (nrs_parse_u64_range(s, 0, UINT32_MAX, &v))	/* parse.h N1 */
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: nrs-appender [-t WRITERS] [-n COUNT] [-d SECONDS] [-s MIN[-MAX]]\n"
		"                    [-E EVERY] [-w FIRST_ID] [-a ACKLOG] [-S SEED] [-k] [-T]\n"
		"                    STREAM...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint32_t nwriters = 1, first_id = 0, i, v;
	uint64_t seed = 1, acked = 0, failed = 0, bytes = 0;
	const char *acklog = "/dev/null";
	struct sigaction sa;
	struct writer *ws;
	int c, fatal = 0;
	char *dash;

	while ((c = getopt(argc, argv, "t:n:d:s:E:w:a:S:kT")) != -1) {
		switch (c) {
		case 't':
			if (parse_u32(optarg, &nwriters) || !nwriters)
				usage();
			break;
		case 'n':
			if (parse_u32(optarg, &v))
				usage();
			opt.count = v;
			break;
		case 'd':
			opt.seconds = atof(optarg);
			break;
		case 's':
			dash = strchr(optarg, '-');
			if (dash)
				*dash++ = '\0';
			if (parse_u32(optarg, &opt.min) ||
			    parse_u32(dash ? dash : optarg, &opt.max))
				usage();
			break;
		case 'E':
			if (parse_u32(optarg, &opt.big_every))
				usage();
			break;
		case 'w':
			if (parse_u32(optarg, &first_id))
				usage();
			break;
		case 'a':
			acklog = optarg;
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			opt.keep_going = true;
			break;
		case 'T':
			opt.stamp = true;
			break;
		default:
			usage();
		}
	}
	if (optind >= argc || opt.min < NRS_REC_MIN || opt.max > NRS_REC_MAX ||
	    opt.min > opt.max)
		usage();

	opt.ack_fd = open(acklog, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (opt.ack_fd < 0) {
		fprintf(stderr, "nrs-appender: %s: %s\n", acklog, strerror(errno));
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	ws = calloc(nwriters, sizeof(*ws));
	if (!ws)
		return 1;
	for (i = 0; i < nwriters; i++) {
		struct writer *w = &ws[i];
		const char *slash;

		w->id = first_id + i;
		w->path = argv[optind + (int)(i % (uint32_t)(argc - optind))];
		slash = strrchr(w->path, '/');
		w->base = slash ? slash + 1 : w->path;
		w->rng = (seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)w->id << 17) ^
			 0x5851f42d4c957f2dull;
		if (!w->rng)
			w->rng = 1;
		if (pthread_create(&w->thread, NULL, writer_main, w)) {
			fprintf(stderr, "nrs-appender: pthread_create failed\n");
			return 1;
		}
	}
	for (i = 0; i < nwriters; i++) {
		pthread_join(ws[i].thread, NULL);
		acked += ws[i].acked;
		failed += ws[i].failed;
		bytes += ws[i].bytes;
		fatal |= ws[i].fatal;
	}
	printf("appender writers=%u acked=%llu failed=%llu bytes=%llu\n",
	       nwriters, (unsigned long long)acked, (unsigned long long)failed,
	       (unsigned long long)bytes);
	free(ws);
	close(opt.ack_fd);
	if (fatal)
		return 1;
	return failed ? 3 : 0;
}
