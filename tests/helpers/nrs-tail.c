/*
 * nrs-tail - follow a stream while writers append, checking every read.
 *
 *	nrs-tail [-w STOPFILE] [-n RECORDS] [-d SECONDS] [-o COPY] [-b BUFSIZE]
 *		 STREAM
 *
 * Polls the stream with pread(2) from its own offset.  Each write of
 * nrs-appender is one atomic append and st_size is the published head, so:
 *   - a read that returns less than asked stops at the head, which is a
 *     record boundary: the bytes read so far end exactly at the end of a
 *     record (a read that fills the buffer may stop anywhere);
 *   - every record is whole and valid (record.h), of this stream, and per
 *     writer the seqs strictly increase;
 *   - the bytes read never reach past st_size as fstat(2) reports it
 *     right after the read (DESIGN.md I4).
 * With -o, every byte read is copied to COPY, so the caller can compare it
 * with the stream read afterwards (I2: committed bytes never change).
 *
 * Stops after RECORDS records (-n), or once STOPFILE exists (-w) and a last
 * read finds nothing more; SECONDS (-d) is the limit: with -n or -w,
 * reaching it is a failure (exit 2), alone it is the run time.
 * Prints "tail PATH records=N bytes=B reads=R short=S"; exit 1 on a
 * violation, 2 on a timeout or usage error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/parse.h"
#include "record.h"

#define NSLOTS 65536

static struct {
	uint32_t writer;
	uint64_t last;
	bool used;
} seen[NSLOTS];

static const char *path;
/* Globals, so a sanitizer build sees them reachable on every exit path. */
static unsigned char *buf;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	printf("nrs-tail: VIOLATION: %s: ", path);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	exit(1);
}

static void check_order(const struct nrs_rec *r, uint64_t off)
{
	size_t i = (r->writer * 2654435761u) % NSLOTS;

	while (seen[i].used && seen[i].writer != r->writer)
		i = (i + 1) % NSLOTS;
	if (seen[i].used && r->seq <= seen[i].last)
		die("offset %" PRIu64 ": writer %u seq %" PRIu64 " after seq %" PRIu64,
		    off, r->writer, r->seq, seen[i].last);
	seen[i].used = true;
	seen[i].writer = r->writer;
	seen[i].last = r->seq;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: nrs-tail [-w STOPFILE] [-n RECORDS] [-d SECONDS] [-o COPY] [-b BUFSIZE] STREAM\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *stopfile = NULL, *copy = NULL;
	uint64_t want = 0, records = 0, reads = 0, shorts = 0, off = 0, v;
	size_t cap = 4u << 20, have = 0, pos, asked;
	double limit = 60, end;
	bool stopping = false;
	struct nrs_rec r;
	struct stat st;
	char why[256];
	int fd, cfd = -1, c, rc;
	uint32_t tag;
	ssize_t n;

	while ((c = getopt(argc, argv, "w:n:d:o:b:")) != -1) {
		switch (c) {
		case 'w':
			stopfile = optarg;
			break;
		case 'n':
			if (nrs_parse_u64_str(optarg, &want))
				usage();
			break;
		case 'd':
			limit = atof(optarg);
			break;
		case 'o':
			copy = optarg;
			break;
		case 'b':
			if (nrs_parse_u64_range(optarg, 1, SIZE_MAX, &v))
				usage();
			cap = (size_t)v;
			break;
		default:
			usage();
		}
	}
	/* room for a record's tail plus a whole 1 MiB record */
	if (optind != argc - 1 || cap < 2 * NRS_REC_MAX)
		usage();
	path = argv[optind];
	tag = nrs_rec_tag(path);
	buf = malloc(cap);
	if (!buf)
		return 2;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die("open: %s", nrs_errname(errno));
	if (copy) {
		cfd = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (cfd < 0) {
			fprintf(stderr, "nrs-tail: %s: %s\n", copy, strerror(errno));
			return 2;
		}
	}
	end = now() + limit;
	for (;;) {
		if (!stopping && stopfile && access(stopfile, F_OK) == 0)
			stopping = true;	/* writers are done: drain */
		asked = cap - have;
		n = pread(fd, buf + have, asked, (off_t)(off + have));
		if (n < 0)
			die("read of %zu bytes at offset %" PRIu64 ": %s", asked,
			    off + have, nrs_errname(errno));
		reads++;
		have += (size_t)n;
		if (n > 0) {
			if (fstat(fd, &st) < 0)
				die("fstat: %s", nrs_errname(errno));
			if ((uint64_t)st.st_size < off + have)
				die("read returned bytes up to offset %" PRIu64
				    " but st_size is %lld just after",
				    off + have, (long long)st.st_size);
		}
		pos = 0;
		while (pos < have) {
			rc = nrs_rec_check(buf + pos, have - pos, &r, why, sizeof(why));
			if (rc < 0)
				die("offset %" PRIu64 ": %s", off + pos, why);
			if (rc == 0)
				break;
			if (r.tag != tag)
				die("offset %" PRIu64 ": record of another stream (tag %08x)",
				    off + pos, r.tag);
			check_order(&r, off + pos);
			records++;
			pos += r.len;
		}
		if ((size_t)n < asked && pos != have)
			die("a read of %zu bytes at offset %" PRIu64 " returned %zd, "
			    "ending %zu bytes into a record of %u bytes at offset %" PRIu64
			    " (bytes there: %s)",
			    asked, off + have - (size_t)n, n, have - pos, r.len,
			    off + pos, nrs_rec_hex(buf + pos, have - pos));
		if (n > 0 && (size_t)n < asked)
			shorts++;
		if (cfd >= 0 && pos && write(cfd, buf, pos) != (ssize_t)pos) {
			fprintf(stderr, "nrs-tail: %s: %s\n", copy, strerror(errno));
			return 2;
		}
		memmove(buf, buf + pos, have - pos);
		have -= pos;
		off += pos;
		if (want && records >= want)
			break;
		if (n == 0) {
			if (stopping)
				break;
			if (now() >= end) {
				if (want || stopfile) {
					printf("nrs-tail: %s: timed out after %.1f s at offset %" PRIu64
					       " with %" PRIu64 " records\n",
					       path, limit, off, records);
					return 2;
				}
				break;
			}
			usleep(500);
		}
	}
	printf("tail %s records=%" PRIu64 " bytes=%" PRIu64 " reads=%" PRIu64
	       " short=%" PRIu64 "\n", path, records, off, reads, shorts);
	if (cfd >= 0)
		close(cfd);
	close(fd);
	free(buf);
	return 0;
}
