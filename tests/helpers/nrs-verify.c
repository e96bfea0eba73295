/*
 * nrs-verify - check streams written by nrs-appender, record by record.
 *
 *	nrs-verify [-a ACKLOG]... [-c] [-u MAX] [-s START] STREAM...
 *
 * Reads each STREAM from offset START (default 0) to its end and checks:
 *   - every record is whole and valid (record.h: magic, length, CRC,
 *     payload byte-exact), carries the tag of this stream, and the file
 *     ends exactly at a record boundary (no partial or garbage bytes);
 *   - per writer, seq is strictly increasing (no duplicate, no reordering);
 *     with -c also without gaps, from 0 (from any first seq with -s);
 *   - the bytes read equal st_size (DESIGN.md I4);
 *   - every record acknowledged in an ACKLOG (nrs-appender's) is present
 *     in its stream with its length (I1);
 *   - with -u MAX: at most MAX present records per writer are not
 *     acknowledged, and each has a seq above every acknowledged one of its
 *     writer (I3: a write that did not return may appear, but not out of
 *     order; a writer stops at its first failure, so -u 1 fits a crash).
 *
 * Prints one line per stream ("stream PATH records=N bytes=B writers=W
 * acked=A unacked=U") and exits 0; on a violation prints what, where and
 * why, and exits 1 (2 on usage or local errors).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/parse.h"
#include "record.h"
#include "util/grow.h"

#define BUF_SIZE	(4u << 20)
#define MAX_VIOLATIONS	20

struct entry {
	uint64_t seq;
	uint64_t off;
	uint32_t len;
	bool acked;
};

/* One writer in one stream. */
struct wstate {
	uint32_t tag, writer;
	int stream;		/* index into argv streams */
	struct entry *e;
	size_t n, cap;
	uint64_t max_acked;
	bool any_acked;
	struct wstate *next;	/* hash chain */
};

#define NBUCKETS 4096
static struct wstate *buckets[NBUCKETS];
static int violations;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void violation(const char *fmt, ...)
{
	va_list ap;

	if (++violations > MAX_VIOLATIONS)
		return;
	fputs("nrs-verify: VIOLATION: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static struct wstate *wstate_get(uint32_t tag, uint32_t writer, bool create)
{
	size_t b = (tag * 31u + writer) % NBUCKETS;
	struct wstate *w;

	for (w = buckets[b]; w; w = w->next)
		if (w->tag == tag && w->writer == writer)
			return w;
	if (!create)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w) {
		perror("nrs-verify");
		exit(2);
	}
	w->tag = tag;
	w->writer = writer;
	w->next = buckets[b];
	buckets[b] = w;
	return w;
}

static void wstate_add(struct wstate *w, const struct nrs_rec *r, uint64_t off)
{
	if (nrs_grow((void **)&w->e, &w->cap, w->n + 1, sizeof(*w->e))) {
		errno = ENOMEM;
		perror("nrs-verify");
		exit(2);
	}
	w->e[w->n].seq = r->seq;
	w->e[w->n].off = off;
	w->e[w->n].len = r->len;
	w->e[w->n].acked = false;
	w->n++;
}

struct stream {
	const char *path;
	uint32_t tag;
	uint64_t records, bytes, acked, unacked;
	uint32_t writers;
	bool damaged;		/* the scan stopped at a violation */
	uint64_t damage_off;	/* where */
	uint64_t unchecked;	/* acks that may lie past the damage */
};

static bool contiguous;
static uint64_t start;
static struct stream *all;	/* global: reachable at exit for LeakSanitizer */

/* Check one record found at off in stream s. */
static void take(struct stream *s, int si, const struct nrs_rec *r, uint64_t off)
{
	struct wstate *w;

	if (r->tag != s->tag) {
		violation("%s offset %" PRIu64 ": record of writer %u seq %" PRIu64
			  " belongs to another stream (tag %08x, this one is %08x)",
			  s->path, off, r->writer, r->seq, r->tag, s->tag);
		return;
	}
	w = wstate_get(r->tag, r->writer, true);
	if (!w->n) {
		w->stream = si;
		s->writers++;
		if (contiguous && !start && r->seq != 0)
			violation("%s offset %" PRIu64 ": first record of writer %u has seq %" PRIu64 ", not 0",
				  s->path, off, r->writer, r->seq);
	} else {
		const struct entry *p = &w->e[w->n - 1];

		if (r->seq == p->seq)
			violation("%s offset %" PRIu64 ": writer %u seq %" PRIu64
				  " appears twice (first at offset %" PRIu64 ")",
				  s->path, off, r->writer, r->seq, p->off);
		else if (r->seq < p->seq)
			violation("%s offset %" PRIu64 ": writer %u seq %" PRIu64
				  " after seq %" PRIu64 " (at offset %" PRIu64 "): out of order",
				  s->path, off, r->writer, r->seq, p->seq, p->off);
		else if (contiguous && r->seq != p->seq + 1)
			violation("%s offset %" PRIu64 ": writer %u seq %" PRIu64
				  " follows seq %" PRIu64 ": seqs %" PRIu64 "..%" PRIu64 " missing",
				  s->path, off, r->writer, r->seq, p->seq,
				  p->seq + 1, r->seq - 1);
	}
	wstate_add(w, r, off);
	s->records++;
}

static int scan(struct stream *s, int si)
{
	unsigned char *buf = malloc(BUF_SIZE);
	size_t have = 0, pos;
	uint64_t off = start;	/* file offset of buf[0] */
	struct nrs_rec r;
	struct stat st;
	char why[256];
	bool complete = false;
	ssize_t n;
	int fd, rc;

	if (!buf)
		return -1;
	fd = open(s->path, O_RDONLY);
	if (fd < 0) {
		violation("%s: open: %s", s->path, nrs_errname(errno));
		free(buf);
		return 0;
	}
	for (;;) {
		n = pread(fd, buf + have, BUF_SIZE - have, (off_t)(off + have));
		if (n < 0) {
			violation("%s: read at offset %" PRIu64 ": %s", s->path,
				  off + have, nrs_errname(errno));
			s->damaged = true;
			s->damage_off = off + have;
			break;
		}
		have += (size_t)n;
		pos = 0;
		while (pos < have) {
			rc = nrs_rec_check(buf + pos, have - pos, &r, why,
					   sizeof(why));
			if (rc < 0) {
				violation("%s offset %" PRIu64 ": %s", s->path,
					  off + pos, why);
				s->damaged = true;
				s->damage_off = off + pos;
				goto out;
			}
			if (rc == 0)
				break;
			take(s, si, &r, off + pos);
			pos += r.len;
		}
		memmove(buf, buf + pos, have - pos);
		have -= pos;
		off += pos;
		if (n == 0) {
			if (have)
				violation("%s: ends inside a record: %zu bytes at offset %" PRIu64
					  " (%s), which claims %u bytes",
					  s->path, have, off, nrs_rec_hex(buf, have), r.len);
			else
				complete = true;
			break;
		}
	}
out:
	s->bytes = off + have - start;
	if (fstat(fd, &st) < 0)
		violation("%s: fstat: %s", s->path, nrs_errname(errno));
	else if (complete && (uint64_t)st.st_size != off + have)
		violation("%s: st_size %lld but the stream reads to offset %" PRIu64,
			  s->path, (long long)st.st_size, off + have);
	close(fd);
	free(buf);
	return 0;
}

static struct entry *find_seq(struct wstate *w, uint64_t seq)
{
	size_t lo = 0, hi = w->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->e[mid].seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < w->n && w->e[lo].seq == seq ? &w->e[lo] : NULL;
}

static int load_acks(const char *path, struct stream *ss, int ns)
{
	char line[512], base[256];
	unsigned long long seq;
	unsigned int writer, len;
	struct wstate *w;
	struct entry *e;
	int lineno = 0, i;
	uint32_t tag;
	FILE *f;

	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "nrs-verify: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (sscanf(line, "%255s %u %llu %u", base, &writer, &seq, &len) != 4) {
			violation("%s:%d: malformed ack line", path, lineno);
			continue;
		}
		tag = nrs_rec_tag(base);
		for (i = 0; i < ns; i++)
			if (ss[i].tag == tag)
				break;
		if (i == ns) {
			violation("%s:%d: ack for stream %s, which was not verified",
				  path, lineno, base);
			continue;
		}
		w = wstate_get(tag, writer, false);
		e = w ? find_seq(w, seq) : NULL;
		if (!e && ss[i].damaged) {
			/* it may lie past the damage already reported */
			ss[i].unchecked++;
			continue;
		}
		if (!e) {
			violation("%s: acknowledged record writer %u seq %llu (%u bytes) is missing",
				  ss[i].path, writer, seq, len);
			continue;
		}
		if (e->len != len)
			violation("%s offset %" PRIu64 ": writer %u seq %llu has %u bytes, %u acknowledged",
				  ss[i].path, e->off, writer, seq, e->len, len);
		if (e->acked)
			violation("%s:%d: writer %u seq %llu acknowledged twice",
				  path, lineno, writer, seq);
		e->acked = true;
		ss[i].acked++;
		if (!w->any_acked || seq > w->max_acked)
			w->max_acked = seq;
		w->any_acked = true;
	}
	fclose(f);
	return 0;
}

/* Unacknowledged records: at most max per writer, all after its acks. */
static void check_unacked(struct stream *ss, bool have_acks, long max)
{
	struct wstate *w;
	size_t b, k;
	long n;

	for (b = 0; b < NBUCKETS; b++) {
		for (w = buckets[b]; w; w = w->next) {
			n = 0;
			for (k = 0; k < w->n; k++) {
				if (w->e[k].acked)
					continue;
				n++;
				ss[w->stream].unacked++;
				if (have_acks && max >= 0 && w->any_acked &&
				    w->e[k].seq < w->max_acked)
					violation("%s offset %" PRIu64 ": writer %u seq %" PRIu64
						  " was never acknowledged but seq %" PRIu64 " was",
						  ss[w->stream].path, w->e[k].off,
						  w->writer, w->e[k].seq, w->max_acked);
			}
			if (have_acks && max >= 0 && n > max)
				violation("%s: writer %u has %ld records present that were not acknowledged (at most %ld allowed)",
					  ss[w->stream].path, w->writer, n, max);
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: nrs-verify [-a ACKLOG]... [-c] [-u MAX] [-s START] STREAM...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *acks[64];
	int nacks = 0, ns, i, c;
	long max_unacked = -1;
	uint64_t total = 0, v;

	while ((c = getopt(argc, argv, "a:cu:s:")) != -1) {
		switch (c) {
		case 'a':
			if (nacks == 64)
				usage();
			acks[nacks++] = optarg;
			break;
		case 'c':
			contiguous = true;
			break;
		case 'u':
			if (nrs_parse_u64_range(optarg, 0, LONG_MAX, &v))
				usage();
			max_unacked = (long)v;
			break;
		case 's':
			if (nrs_parse_u64_str(optarg, &start))
				usage();
			break;
		default:
			usage();
		}
	}
	ns = argc - optind;
	if (ns <= 0)
		usage();
	all = calloc((size_t)ns, sizeof(*all));
	if (!all)
		return 2;
	for (i = 0; i < ns; i++) {
		all[i].path = argv[optind + i];
		all[i].tag = nrs_rec_tag(all[i].path);
		if (scan(&all[i], i) < 0)
			return 2;
	}
	for (i = 0; i < nacks; i++)
		if (load_acks(acks[i], all, ns) < 0)
			return 2;
	check_unacked(all, nacks > 0, max_unacked);
	for (i = 0; i < ns; i++) {
		if (all[i].unchecked)
			printf("nrs-verify: %s: %" PRIu64 " acknowledged records not found before the damage at offset %" PRIu64 " (not checked)\n",
			       all[i].path, all[i].unchecked, all[i].damage_off);
		printf("stream %s records=%" PRIu64 " bytes=%" PRIu64 " writers=%u acked=%" PRIu64
		       " unacked=%" PRIu64 "\n",
		       all[i].path, all[i].records, all[i].bytes, all[i].writers,
		       all[i].acked, all[i].unacked);
		total += all[i].records;
	}
	if (violations) {
		if (violations > MAX_VIOLATIONS)
			printf("nrs-verify: ... %d violations in all\n", violations);
		printf("nrs-verify: FAILED\n");
		return 1;
	}
	printf("nrs-verify: ok, %" PRIu64 " records\n", total);
	return 0;
}
