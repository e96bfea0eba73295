/*
 * test_s3_engine.c - the S3 client's engine (s3_engine.c, SM1-SM3) and
 * its calls (s3_curl.c nrs_s3c_submit / nrs_s3c_wait), against tiny HTTP
 * servers on loopback:
 *
 *  - several requests in flight at once from ONE calling thread: a server
 *    that answers none of them before it holds them all (SM3's connection
 *    cap is not 1; the submissions do not wait for each other), with the
 *    done callbacks run before wait returns (SM1);
 *  - connection reuse: requests one after the other travel over one
 *    connection, the one the server keeps open (SM3), and each is picked
 *    up at once (SM2: the submission wakes the engine);
 *  - the pauses between attempts are not stretched (SM2, SR2) and an
 *    attempt's handle leaves the multi before it is reused (SM1);
 *  - the deadline of an operation in flight holds (SR3) while another
 *    operation goes on.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "obj/s3_curl.h"

#define NREQ	4

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct nrs_s3c *client(int port, int timeout_ms)
{
	char host[64];
	struct nrs_s3c_opts o = {
		.host = host, .bucket = "nereus", .region = "us-east-1",
		.access = "AKIDEXAMPLE", .secret = "secret",
		.timeout_ms = timeout_ms,
	};
	struct nrs_s3c *c;

	snprintf(host, sizeof(host), "127.0.0.1:%d", port);
	assert_int_equal(nrs_s3c_new(&o, &c), 0);
	return c;
}

/* ---- servers ------------------------------------------------------------- */

struct server {
	int lfd, port;
	pthread_t th;
	int mode;		/* GATHER, KEEPALIVE or SCRIPT */
	int accepted;		/* connections taken */
	int served;		/* requests answered */
	const char *script[NREQ];	/* SCRIPT: the answers, in turn;
					 * NULL: take the request, never
					 * answer, hold it 3 s */
};

enum { GATHER, KEEPALIVE, SCRIPT };

/* Read one bodiless request from fd (up to its blank line): 0, or -1 at
 * the end of the connection. */
static int read_request(int fd)
{
	char buf[8192];
	size_t n = 0;

	while (n < sizeof(buf) - 1) {
		ssize_t k = read(fd, buf + n, 1);	/* never past it */

		if (k <= 0)
			return -1;
		n++;
		buf[n] = '\0';
		if (n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0)
			return 0;
	}
	return -1;
}

static void say(int fd, const char *s)
{
	(void)!write(fd, s, strlen(s));
}

static const char body3[] =
	"HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\n"
	"Connection: close\r\n\r\nxyz";
static const char keep[] =
	"HTTP/1.1 204 No Content\r\n\r\n";

static void *server_main(void *arg)
{
	struct server *sv = arg;
	int fds[NREQ];

	switch (sv->mode) {
	case GATHER:	/* all NREQ requests in, then answer them */
		for (int i = 0; i < NREQ; i++) {
			fds[i] = accept(sv->lfd, NULL, NULL);
			if (fds[i] < 0 || read_request(fds[i]) < 0)
				return NULL;
			sv->accepted++;
		}
		for (int i = 0; i < NREQ; i++) {
			say(fds[i], body3);
			close(fds[i]);
			sv->served++;
		}
		break;
	case KEEPALIVE:	/* one connection, NREQ requests on it */
		fds[0] = accept(sv->lfd, NULL, NULL);
		if (fds[0] < 0)
			return NULL;
		sv->accepted++;
		for (int i = 0; i < NREQ && read_request(fds[0]) == 0; i++) {
			say(fds[0], keep);
			sv->served++;
		}
		close(fds[0]);
		break;
	case SCRIPT:	/* a connection per answer */
		for (int i = 0; i < NREQ && sv->script[i]; i++) {
			int fd = accept(sv->lfd, NULL, NULL);

			if (fd < 0 || read_request(fd) < 0)
				return NULL;
			sv->accepted++;
			say(fd, sv->script[i]);
			close(fd);
			sv->served++;
		}
		break;
	}
	return NULL;
}

static void server_start(struct server *sv, int mode)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	sv->mode = mode;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(sv->lfd >= 0);
	assert_int_equal(bind(sv->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(sv->lfd, 16), 0);
	assert_int_equal(getsockname(sv->lfd, (struct sockaddr *)&a, &al), 0);
	sv->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&sv->th, NULL, server_main, sv), 0);
}

static void server_stop(struct server *sv)
{
	shutdown(sv->lfd, SHUT_RDWR);
	pthread_join(sv->th, NULL);
	close(sv->lfd);
}

/* ---- tests --------------------------------------------------------------- */

static void count_done(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

/* NREQ GETs from this one thread, all in flight at once: the server
 * answers none before it holds them all (else the deadline fails them). */
static void test_in_flight_at_once(void **state)
{
	struct server sv = { 0 };
	struct nrs_s3c_req r[NREQ];
	struct nrs_s3c_resp o[NREQ];
	struct nrs_s3c_op *op[NREQ];
	char buf[NREQ][3];
	atomic_int done = 0;
	struct nrs_s3c *c;

	(void)state;
	server_start(&sv, GATHER);
	c = client(sv.port, 3000);
	for (int i = 0; i < NREQ; i++) {
		r[i] = (struct nrs_s3c_req){
			.method = NRS_S3C_GET, .key = "k", .off = 0,
			.dst = buf[i], .dst_len = 3,
		};
		assert_int_equal(nrs_s3c_submit(c, &r[i], &o[i], count_done,
						&done, &op[i]), 0);
	}
	for (int i = 0; i < NREQ; i++) {
		assert_int_equal(nrs_s3c_wait(op[i]), 0);
		assert_int_equal(o[i].cls, NRS_S3C_OK);
		assert_int_equal(o[i].got, 3);
		assert_memory_equal(buf[i], "xyz", 3);
	}
	/* SM1: every callback ran before its wait returned */
	assert_int_equal(atomic_load(&done), NREQ);
	server_stop(&sv);
	assert_int_equal(sv.accepted, NREQ);
	nrs_s3c_free(c);
}

/* One after the other: one connection, kept (SM3), each request taken
 * at once (SM2: the submission wakes the engine). */
static void test_connection_reused(void **state)
{
	struct server sv = { 0 };
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };
	struct nrs_s3c_resp o;
	struct nrs_s3c *c;
	double t0;

	(void)state;
	server_start(&sv, KEEPALIVE);
	c = client(sv.port, 3000);
	t0 = now_s();
	for (int i = 0; i < NREQ; i++) {
		struct nrs_s3c_op *op;

		assert_int_equal(nrs_s3c_submit(c, &r, &o, NULL, NULL, &op), 0);
		assert_int_equal(nrs_s3c_wait(op), 0);
		assert_int_equal(o.cls, NRS_S3C_OK);
		assert_int_equal(o.attempts, 1);
	}
	assert_true(now_s() - t0 < 2.0);
	server_stop(&sv);
	assert_int_equal(sv.accepted, 1);
	assert_int_equal(sv.served, NREQ);
	nrs_s3c_free(c);
}

static const char slow_down[] =
	"HTTP/1.1 503 Slow Down\r\nContent-Length: 56\r\nConnection: close"
	"\r\n\r\n<Error><Code>SlowDown</Code><Message>m</Message></Error>";
static const char ok_empty[] =
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/* Two pauses (SR2: at most 100 + 200 ms) are not stretched by the
 * engine's idle wait (SM2); the handle of each failed attempt leaves the
 * multi before the next attempt takes it again (SM1). */
static void test_pauses_kept(void **state)
{
	struct server sv = { .script = { slow_down, slow_down, ok_empty } };
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };
	struct nrs_s3c_resp o;
	struct nrs_s3c *c;
	double t0;

	(void)state;
	server_start(&sv, SCRIPT);
	c = client(sv.port, 10000);
	t0 = now_s();
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	assert_true(now_s() - t0 < 2.0);
	assert_int_equal(o.cls, NRS_S3C_OK);
	assert_int_equal(o.attempts, 3);
	server_stop(&sv);
	assert_int_equal(sv.served, 3);
	nrs_s3c_free(c);
}

/* A request the server never answers ends at its deadline (SR3) while
 * the engine goes on with others; the client then frees at once. */
static void test_deadline_among_others(void **state)
{
	struct server hang = { .script = { NULL } }, ok = { 0 };
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };
	struct nrs_s3c_resp oh, oo;
	struct nrs_s3c_op *oph;
	struct nrs_s3c *ch, *co;
	double t0;

	(void)state;
	ok.script[0] = ok_empty;
	server_start(&hang, SCRIPT);	/* accepts, never answers */
	server_start(&ok, SCRIPT);
	ch = client(hang.port, 700);
	co = client(ok.port, 3000);
	t0 = now_s();
	assert_int_equal(nrs_s3c_submit(ch, &r, &oh, NULL, NULL, &oph), 0);
	assert_int_equal(nrs_s3c_run(co, &r, &oo), 0);
	assert_int_equal(oo.cls, NRS_S3C_OK);
	assert_false(nrs_s3c_op_done(oph) && oh.cls == NRS_S3C_OK);
	assert_int_equal(nrs_s3c_wait(oph), 0);
	assert_int_equal(oh.cls, NRS_S3C_TIMEOUT);
	assert_true(oh.timed_out);
	assert_true(now_s() - t0 < 1.5);
	nrs_s3c_free(ch);
	nrs_s3c_free(co);
	assert_true(now_s() - t0 < 1.5);
	server_stop(&hang);
	server_stop(&ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_flight_at_once),
		cmocka_unit_test(test_connection_reused),
		cmocka_unit_test(test_pauses_kept),
		cmocka_unit_test(test_deadline_among_others),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
