/*
 * nrs-putbench.c - the raw cost of PUTs, the object WAL's baseline
 * (tests/bench/owal.sh, issue 15): THREADS threads PUT COUNT objects of
 * SIZE random bytes in all, each one after another, through the daemon's
 * own S3 provider (src/obj/, the same requests, signatures and headers as
 * a WAL object's PUT: Content-MD5 and x-amz-meta-sha256), with no HEAD,
 * no ordering, no FUSE.  The digests are computed once before timing (one
 * body for every key), so hashing is not counted either.
 *
 *	nrs-putbench THREADS COUNT SIZE PREFIX
 *
 * Keys PREFIX/T-I.  The store: NRS_S3_URL (http://HOST:PORT/BUCKET), the
 * credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.  Prints
 * one line
 *	threads=N size=B puts=K seconds=S mbps=M puts_s=P p50_ms=A p99_ms=B
 * (MB/s in 10^6 bytes; latency of one PUT).  Exit 0, or 1 when a PUT or
 * the setup failed (said on stderr).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"

struct job {
	struct nrs_objstore *store;
	const unsigned char *body;
	size_t size;
	const unsigned char *md5, *sha;
	const char *prefix;
	unsigned int id;
	uint64_t count;
	uint64_t *lat_ns;	/* count of them */
	int err;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	char key[256];

	for (uint64_t i = 0; i < j->count; i++) {
		uint64_t t0 = now_ns();
		int err;

		snprintf(key, sizeof(key), "%s/%u-%" PRIu64, j->prefix, j->id,
			 i);
		err = nrs_obj_put(j->store, key, j->body, j->size, j->md5,
				  j->sha);
		if (err) {
			fprintf(stderr, "nrs-putbench: PUT %s: %s\n", key,
				strerror(-err));
			j->err = err;
			return NULL;
		}
		j->lat_ns[i] = now_ns() - t0;
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static unsigned long num(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0) {
		fprintf(stderr, "nrs-putbench: bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	unsigned char md5[NRS_MD5_LEN], sha[NRS_SHA256_LEN];
	struct nrs_s3_opts so = { 0 };
	struct nrs_objstore *store = NULL;
	unsigned long threads, count, size;
	struct job *jobs;
	pthread_t *tids;
	unsigned char *body;
	uint64_t *lat, t0, el, done = 0;
	int err, ret = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: nrs-putbench THREADS COUNT SIZE PREFIX\n");
		return 2;
	}
	threads = num(argv[1], "thread count");
	count = num(argv[2], "count");
	size = num(argv[3], "size");
	if (threads > 1024 || count < threads || size > (1ul << 30)) {
		fprintf(stderr, "nrs-putbench: 1-1024 threads, count >= threads,"
			" size <= 1 GiB\n");
		return 2;
	}
	so.url = getenv("NRS_S3_URL");
	if (!so.url) {
		fprintf(stderr, "nrs-putbench: NRS_S3_URL is not set\n");
		return 2;
	}
	err = nrs_objstore_s3_open_url(&so, NULL, &store);
	if (err) {
		fprintf(stderr, "nrs-putbench: cannot open %s: %s\n", so.url,
			strerror(-err));
		return 1;
	}
	body = malloc(size);
	lat = calloc(count, sizeof(*lat));
	jobs = calloc(threads, sizeof(*jobs));
	tids = calloc(threads, sizeof(*tids));
	if (!body || !lat || !jobs || !tids) {
		fprintf(stderr, "nrs-putbench: out of memory\n");
		ret = 1;
		goto out;
	}
	srand((unsigned int)now_ns());
	for (size_t i = 0; i < size; i++)
		body[i] = (unsigned char)rand();
	if (nrs_objfmt_digest(body, size, sha, md5) != 0) {
		fprintf(stderr, "nrs-putbench: cannot hash the body\n");
		ret = 1;
		goto out;
	}
	t0 = now_ns();
	for (unsigned long i = 0; i < threads; i++) {
		jobs[i] = (struct job){
			.store = store, .body = body, .size = size, .md5 = md5,
			.sha = sha, .prefix = argv[4], .id = (unsigned int)i,
			.count = count / threads + (i < count % threads),
			.lat_ns = lat + done,
		};
		done += jobs[i].count;
		if (pthread_create(&tids[i], NULL, worker, &jobs[i]) != 0) {
			fprintf(stderr, "nrs-putbench: cannot start a thread\n");
			jobs[i].err = -EAGAIN;
			threads = i;	/* join those started */
			ret = 1;
			break;
		}
	}
	for (unsigned long i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		if (jobs[i].err)
			ret = 1;
	}
	el = now_ns() - t0;
	if (ret)
		goto out;
	qsort(lat, count, sizeof(*lat), cmp_u64);
	printf("threads=%lu size=%lu puts=%lu seconds=%.3f mbps=%.2f puts_s=%.1f"
	       " p50_ms=%.2f p99_ms=%.2f\n", threads, size, count, el / 1e9,
	       (double)count * (double)size / (el / 1e3), count / (el / 1e9),
	       lat[count / 2] / 1e6, lat[(count * 99 - 1) / 100] / 1e6);
out:
	free(tids);
	free(jobs);
	free(lat);
	free(body);
	nrs_obj_close(store);
	return ret;
}
