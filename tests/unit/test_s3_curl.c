/*
 * test_s3_curl.c - the V4 request side of the S3 provider (s3_curl.c)
 * without an S3 server: the error classes, the retry classifier (SR1), the
 * back-off (SR2), the deadline (SR3), errno mapping, the region of a host
 * name, the -o s3_* option parser (objstore_s3_open.c), the headers we set
 * (SH1 x-amz-content-sha256, SH2 Content-MD5, the session token), and the
 * request libcurl signs: a tiny HTTP server on loopback (one thread)
 * captures it, and the test recomputes the AWS4-HMAC-SHA256 signature
 * from the captured request with OpenSSL's HMAC, for a region, a token
 * and either style; a GET into a sink (SR4).  Also: the TLS library is GnuTLS (libs3's libcurl's),
 * and a conditional PUT whose first answer was lost (objstore_s3_v4.c
 * S4C1) against the same server.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"

#define EMPTY_SHA \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- pure functions ------------------------------------------------------ */

static void test_classify(void **state)
{
	(void)state;
	assert_int_equal(nrs_s3_classify(200, NULL, 0, true), NRS_S3C_OK);
	assert_int_equal(nrs_s3_classify(206, "", 0, true), NRS_S3C_OK);
	assert_int_equal(nrs_s3_classify(404, "NoSuchKey", 0, true),
			 NRS_S3C_NOT_FOUND);
	assert_int_equal(nrs_s3_classify(404, "", 0, true), NRS_S3C_NOT_FOUND);
	assert_int_equal(nrs_s3_classify(404, "", 0, false), NRS_S3C_NO_BUCKET);
	assert_int_equal(nrs_s3_classify(404, "NoSuchBucket", 0, true),
			 NRS_S3C_NO_BUCKET);
	assert_int_equal(nrs_s3_classify(403, "RequestTimeTooSkewed", 0, true),
			 NRS_S3C_CLOCK);
	assert_int_equal(nrs_s3_classify(400, "AuthorizationHeaderMalformed",
					 0, true), NRS_S3C_REGION);
	assert_int_equal(nrs_s3_classify(301, "PermanentRedirect", 0, true),
			 NRS_S3C_REGION);
	assert_int_equal(nrs_s3_classify(301, "", 0, true), NRS_S3C_REGION);
	assert_int_equal(nrs_s3_classify(403, "SignatureDoesNotMatch", 0, true),
			 NRS_S3C_SIGNATURE);
	assert_int_equal(nrs_s3_classify(403, "InvalidAccessKeyId", 0, true),
			 NRS_S3C_KEY);
	assert_int_equal(nrs_s3_classify(400, "ExpiredToken", 0, true),
			 NRS_S3C_TOKEN);
	assert_int_equal(nrs_s3_classify(400, "InvalidToken", 0, true),
			 NRS_S3C_TOKEN);
	assert_int_equal(nrs_s3_classify(403, "AccessDenied", 0, true),
			 NRS_S3C_DENIED);
	assert_int_equal(nrs_s3_classify(403, "", 0, true), NRS_S3C_DENIED);
	assert_int_equal(nrs_s3_classify(400, "BadDigest", 0, true),
			 NRS_S3C_BAD_DIGEST);
	assert_int_equal(nrs_s3_classify(400, "XAmzContentSHA256Mismatch", 0,
					 true), NRS_S3C_BAD_DIGEST);
	assert_int_equal(nrs_s3_classify(400, "RequestTimeout", 0, true),
			 NRS_S3C_TIMEOUT);
	assert_int_equal(nrs_s3_classify(503, "SlowDown", 0, true),
			 NRS_S3C_THROTTLED);
	assert_int_equal(nrs_s3_classify(429, "", 0, true), NRS_S3C_THROTTLED);
	assert_int_equal(nrs_s3_classify(500, "InternalError", 0, true),
			 NRS_S3C_SERVER);
	assert_int_equal(nrs_s3_classify(502, "", 0, true), NRS_S3C_SERVER);
	assert_int_equal(nrs_s3_classify(400, "InvalidArgument", 0, true),
			 NRS_S3C_OTHER);
	assert_int_equal(nrs_s3_classify(0, NULL, NRS_S3_NET_REFUSED, true),
			 NRS_S3C_UNAVAILABLE);
	assert_int_equal(nrs_s3_classify(0, NULL, NRS_S3_NET_RESOLVE, true),
			 NRS_S3C_UNAVAILABLE);
	assert_int_equal(nrs_s3_classify(0, NULL, NRS_S3_NET_TIMEOUT, true),
			 NRS_S3C_TIMEOUT);
	assert_int_equal(nrs_s3_classify(0, NULL, NRS_S3_NET_TLS, true),
			 NRS_S3C_TLS);
	for (int i = 0; i < NRS_S3C_COUNT; i++)
		assert_true(strlen(nrs_s3_class_name(i)) > 0);
	assert_string_equal(nrs_objstore_s3_class_name(NRS_S3C_SIGNATURE),
			    "signature");
}

/* SR1: retried exactly when transient. */
static void test_retryable(void **state)
{
	static const struct {
		long http;
		const char *code;
		enum nrs_s3_net net;
		bool retry;
	} cases[] = {
		{ 500, "InternalError", 0, true },
		{ 503, "SlowDown", 0, true },
		{ 503, "", 0, true },
		{ 429, "", 0, true },
		{ 400, "RequestTimeout", 0, true },
		{ 0, NULL, NRS_S3_NET_REFUSED, true },
		{ 0, NULL, NRS_S3_NET_TIMEOUT, true },
		{ 0, NULL, NRS_S3_NET_RESOLVE, true },
		{ 403, "", 0, false },
		{ 403, "AccessDenied", 0, false },
		{ 403, "SignatureDoesNotMatch", 0, false },
		{ 403, "InvalidAccessKeyId", 0, false },
		{ 403, "RequestTimeTooSkewed", 0, false },
		{ 400, "AuthorizationHeaderMalformed", 0, false },
		{ 400, "ExpiredToken", 0, false },
		{ 400, "BadDigest", 0, false },
		{ 400, "InvalidArgument", 0, false },
		{ 404, "NoSuchKey", 0, false },
		{ 404, "NoSuchBucket", 0, false },
		{ 412, "PreconditionFailed", 0, false },	/* OC1 */
		{ 412, "", 0, false },
		{ 409, "ConditionalRequestConflict", 0, true },
		{ 301, "", 0, false },
		{ 200, "", 0, false },
		{ 0, NULL, NRS_S3_NET_TLS, false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum nrs_s3_class c = nrs_s3_classify(cases[i].http,
						      cases[i].code,
						      cases[i].net, true);

		if (nrs_s3_class_is_retryable(c) != cases[i].retry)
			fail_msg("%ld %s: retryable %d", cases[i].http,
				 cases[i].code ? cases[i].code : "-",
				 !cases[i].retry);
	}
}

static void test_errno(void **state)
{
	(void)state;
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_OK), 0);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_NOT_FOUND), -ENOENT);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_UNAVAILABLE), -ECONNREFUSED);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_TIMEOUT), -ETIMEDOUT);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_CLOCK), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_REGION), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_SIGNATURE), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_KEY), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_TOKEN), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_DENIED), -EACCES);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_NO_BUCKET), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_THROTTLED), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_SERVER), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_TLS), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_BAD_DIGEST), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_OTHER), -EIO);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_PRECONDITION), -ESTALE);
	assert_int_equal(nrs_s3_class_errno(NRS_S3C_CONFLICT), -EIO);
	/* every actionable class says what to do */
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_REGION), "s3_region"));
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_SIGNATURE), "secret"));
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_CLOCK), "clock"));
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_KEY), "AWS_ACCESS_KEY_ID"));
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_NO_BUCKET), "bucket"));
	assert_true(strstr(nrs_s3_class_advice(NRS_S3C_DENIED), "s3:ListBucket"));
}

/* SR2: doubling from the base, capped, jittered in [d/2, d], no wrap. */
static void test_backoff(void **state)
{
	unsigned int seed = 1;

	(void)state;
	for (int i = 0; i < 200; i++) {
		int d1 = nrs_s3_backoff_ms(1, 100, 2000, &seed);
		int d3 = nrs_s3_backoff_ms(3, 100, 2000, &seed);
		int dbig = nrs_s3_backoff_ms(UINT32_MAX, 100, 2000, &seed);

		assert_in_range(d1, 50, 100);
		assert_in_range(d3, 200, 400);
		assert_in_range(dbig, 1000, 2000);
	}
	/* jitter: not always the same */
	{
		int a = nrs_s3_backoff_ms(5, 100, 2000, &seed), same = 1;

		for (int i = 0; i < 20; i++)
			same &= nrs_s3_backoff_ms(5, 100, 2000, &seed) == a;
		assert_false(same);
	}
	assert_int_equal(nrs_s3_backoff_ms(1, 0, 2000, &seed), 0);
}

static void test_host_region(void **state)
{
	char r[48];

	(void)state;
	assert_true(nrs_s3_host_region("s3.eu-central-1.amazonaws.com", r,
				       sizeof(r)));
	assert_string_equal(r, "eu-central-1");
	assert_true(nrs_s3_host_region("s3-us-west-2.amazonaws.com:443", r,
				       sizeof(r)));
	assert_string_equal(r, "us-west-2");
	assert_true(nrs_s3_host_region("s3.dualstack.ap-south-1.amazonaws.com",
				       r, sizeof(r)));
	assert_string_equal(r, "ap-south-1");
	assert_true(nrs_s3_host_region("bkt.s3.sa-east-1.amazonaws.com", r,
				       sizeof(r)));
	assert_string_equal(r, "sa-east-1");
	strcpy(r, "untouched");
	assert_false(nrs_s3_host_region("s3.amazonaws.com", r, sizeof(r)));
	assert_false(nrs_s3_host_region("127.0.0.1:9000", r, sizeof(r)));
	assert_false(nrs_s3_host_region("minio.example.com", r, sizeof(r)));
	assert_false(nrs_s3_host_region("amazonaws.com", r, sizeof(r)));
	assert_false(nrs_s3_host_region("s3.x_y.amazonaws.com", r, sizeof(r)));
	assert_string_equal(r, "untouched");
	assert_false(nrs_s3_host_region("s3.eu-central-1.amazonaws.com", r, 4));
}

static void test_opt_parse(void **state)
{
	struct nrs_s3_opts o = { 0 };

	(void)state;
	assert_int_equal(o.style, NRS_S3_PATH);		/* the defaults */
	assert_int_equal(o.signature, NRS_S3_V4);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_style", "virtual"), 0);
	assert_int_equal(o.style, NRS_S3_VIRTUAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_style", "path"), 0);
	assert_int_equal(o.style, NRS_S3_PATH);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_style", "Virtual"), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_style", ""), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_signature", "v2"), 0);
	assert_int_equal(o.signature, NRS_S3_V2);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_signature", "v4"), 0);
	assert_int_equal(o.signature, NRS_S3_V4);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_signature", "v3"), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_region", "eu-west-3"), 0);
	assert_string_equal(o.region, "eu-west-3");
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_region", "EU"), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_region", "a/b"), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_region", ""), -EINVAL);
	assert_int_equal(nrs_s3_opt_parse(&o, "s3_nothing", "x"), -ENOENT);
}

/* Opening checks the combination: V2 is path style only. */
static void test_open_opts(void **state)
{
	struct nrs_objstore *st;
	struct nrs_s3_opts o = {
		.url = "http://127.0.0.1:9/bkt", .access_key = "a",
		.secret_key = "s",
	};

	(void)state;
	o.signature = NRS_S3_V2;
	o.style = NRS_S3_VIRTUAL;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.signature = NRS_S3_V4;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), 0);
	nrs_obj_close(st);
	o.url = "http://127.0.0.1:9/Not_DNS";	/* no host name */
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.url = "http://127.0.0.1:9/bkt";
	o.region = "Bad Region";
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
	o.style = (enum nrs_s3_style)7;
	o.region = NULL;
	assert_int_equal(nrs_objstore_s3_open(&o, &st), -EINVAL);
}

static void test_tls_is_gnutls(void **state)
{
	(void)state;
	/* one TLS stack: libs3's libcurl is libcurl-gnutls */
	assert_true(strncmp(nrs_s3c_tls_name(), "GnuTLS", 6) == 0);
}

/* ---- the headers we set -------------------------------------------------- */

static struct nrs_s3c *client(bool virt, const char *token, const char *host,
			      int timeout_ms)
{
	struct nrs_s3c_opts o = {
		.host = host, .bucket = "nereus", .virtual_style = virt,
		.region = "eu-central-1", .access = "AKIDEXAMPLE",
		.secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		.token = token, .timeout_ms = timeout_ms,
	};
	struct nrs_s3c *c;

	assert_int_equal(nrs_s3c_new(&o, &c), 0);
	return c;
}

/* Content-MD5 (SH2) of known inputs: the MD5 of "" and of "abc" (RFC
 * 1321's test suite), in the base64 `openssl md5 -binary | base64`
 * prints. */
static void test_md5_base64(void **state)
{
	static const struct {
		const char *input, *b64;
	} v[] = {
		{ "", "1B2M2Y8AsgTpgAmY7PhCfg==" },
		{ "abc", "kAFQmDzST7DWlj99KOF/cg==" },
	};
	unsigned char md5[16];
	char out[25];

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		unsigned int n = 0;

		memset(out, 'x', sizeof(out));
		assert_int_equal(EVP_Digest(v[i].input, strlen(v[i].input), md5,
					    &n, EVP_md5(), NULL), 1);
		assert_int_equal(n, 16);
		nrs_s3_md5_base64(out, md5);
		assert_string_equal(out, v[i].b64);
	}
	/* every bit set: the last group's padding */
	memset(md5, 0xff, sizeof(md5));
	nrs_s3_md5_base64(out, md5);
	assert_string_equal(out, "/////////////////////w==");
}

static void test_headers(void **state)
{
	unsigned char sha[32], md5[16];
	char buf[2048], url[512];
	struct nrs_s3c *c = client(false, "TOKEN/x+y=", "s3.example:9000",
				   1000);
	struct nrs_s3c_req r = { .method = NRS_S3C_PUT, .key = "a/b" };

	(void)state;
	for (int i = 0; i < 32; i++)
		sha[i] = (unsigned char)i;
	for (int i = 0; i < 16; i++)
		md5[i] = (unsigned char)(0xf0 + i);
	r.sha256 = sha;
	r.md5 = md5;
	assert_true(nrs_s3c_describe(c, &r, buf, sizeof(buf)) > 0);
	/* SH1: the object's SHA-256 as the payload hash, and as metadata */
	assert_non_null(strstr(buf, "x-amz-content-sha256: 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"));
	assert_non_null(strstr(buf, "x-amz-meta-sha256: 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"));
	/* SH2: Content-MD5 is base64 of the 16 bytes */
	assert_non_null(strstr(buf, "Content-MD5: 8PHy8/T19vf4+fr7/P3+/w==\n"));
	assert_non_null(strstr(buf, "x-amz-security-token: TOKEN/x+y=\n"));
	assert_null(strstr(buf, "Expect"));
	assert_null(strstr(buf, "If-"));
	/* OC1: the conditions of a conditional PUT */
	r.if_none_match = true;
	assert_true(nrs_s3c_describe(c, &r, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "If-None-Match: *\n"));
	r.if_none_match = false;
	r.if_match = "0123abcd";
	assert_true(nrs_s3c_describe(c, &r, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "If-Match: \"0123abcd\"\n"));
	assert_null(strstr(buf, "If-None-Match"));
	r.if_match = NULL;
	/* no SHA-256: unsigned payload, no metadata */
	r.sha256 = NULL;
	r.md5 = NULL;
	assert_true(nrs_s3c_describe(c, &r, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "x-amz-content-sha256: UNSIGNED-PAYLOAD\n"));
	assert_null(strstr(buf, "x-amz-meta-sha256"));
	assert_null(strstr(buf, "Content-MD5"));
	/* SH1: bodiless requests carry the empty body's digest */
	for (int m = NRS_S3C_GET; m <= NRS_S3C_DELETE; m++) {
		struct nrs_s3c_req q = { .method = m, .key = "k", .off = 10,
					 .dst = buf, .dst_len = 5 };

		assert_true(nrs_s3c_describe(c, &q, buf, sizeof(buf)) > 0);
		assert_non_null(strstr(buf, "x-amz-content-sha256: " EMPTY_SHA "\n"));
		if (m == NRS_S3C_GET)
			assert_non_null(strstr(buf, "Range: bytes=10-14\n"));
		else
			assert_null(strstr(buf, "Range"));
	}
	assert_int_equal(nrs_s3c_describe(c, &r, buf, 10), -ENOSPC);
	assert_true(nrs_s3c_url(c, "a/b", url, sizeof(url)) > 0);
	assert_string_equal(url, "http://s3.example:9000/nereus/a/b");
	assert_true(nrs_s3c_url(c, NULL, url, sizeof(url)) > 0);
	assert_string_equal(url, "http://s3.example:9000/nereus");
	nrs_s3c_free(c);
	c = client(true, NULL, "s3.example:9000", 1000);
	assert_true(nrs_s3c_url(c, "a/b", url, sizeof(url)) > 0);
	assert_string_equal(url, "http://nereus.s3.example:9000/a/b");
	r.method = NRS_S3C_HEAD;
	assert_true(nrs_s3c_describe(c, &r, buf, sizeof(buf)) > 0);
	assert_null(strstr(buf, "x-amz-security-token"));
	nrs_s3c_free(c);
}

/* ---- a capturing server -------------------------------------------------- */

#define CAP_MAX 8

struct capture {
	int lfd, port;
	pthread_t th;
	const char *answers[CAP_MAX];	/* status line + headers + body */
	int nanswers;
	int hang;		/* accept, read, never answer (SR3) */
	const char *expired;	/* a token answered 400 ExpiredToken, not
				 * counted among the answers */
	int served;
	char req[CAP_MAX][8192];	/* requests, headers and body */
	size_t req_len[CAP_MAX];
};

static size_t content_length(const char *hdrs)
{
	const char *p = strcasestr(hdrs, "\r\ncontent-length:");

	return p ? strtoul(p + 17, NULL, 10) : 0;
}

static void *cap_main(void *arg)
{
	struct capture *cp = arg;

	for (int i = 0; i < cp->nanswers || (cp->hang && i < 1); i++) {
		int fd = accept(cp->lfd, NULL, NULL);
		char *rq = cp->req[i];
		size_t n = 0;

		if (fd < 0)
			break;
		for (;;) {
			ssize_t k = read(fd, rq + n, sizeof(cp->req[i]) - 1 - n);

			if (k <= 0)
				break;
			n += (size_t)k;
			rq[n] = '\0';
			const char *end = strstr(rq, "\r\n\r\n");
			if (end && n >= (size_t)(end + 4 - rq) + content_length(rq))
				break;
			if (end && strcasestr(rq, "Expect: 100-continue") &&
			    !strstr(rq, "HTTP/1.1 100")) {
				/* let the body come */
				if (n == (size_t)(end + 4 - rq))
					(void)!write(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
			}
		}
		cp->req_len[i] = n;
		cp->served = i + 1;
		if (cp->expired) {
			char hdr[256];

			snprintf(hdr, sizeof(hdr), "x-amz-security-token: %s\r\n",
				 cp->expired);
			if (strstr(rq, hdr)) {
				static const char body[] =
					"<Error><Code>ExpiredToken</Code><Message>"
					"The provided token has expired.</Message>"
					"</Error>";
				char ans[512];

				snprintf(ans, sizeof(ans), "HTTP/1.1 400 Bad Request"
					 "\r\nConnection: close\r\nContent-Length: "
					 "%zu\r\n\r\n%s", strlen(body), body);
				(void)!write(fd, ans, strlen(ans));
				close(fd);
				cp->nanswers++;	/* this one did not count */
				continue;
			}
		}
		if (cp->hang) {
			sleep(3);
			close(fd);
			break;
		}
		(void)!write(fd, cp->answers[i], strlen(cp->answers[i]));
		close(fd);
	}
	return NULL;
}

static void cap_start(struct capture *cp)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cp->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cp->lfd >= 0);
	assert_int_equal(bind(cp->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(cp->lfd, 8), 0);
	assert_int_equal(getsockname(cp->lfd, (struct sockaddr *)&a, &al), 0);
	cp->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&cp->th, NULL, cap_main, cp), 0);
}

static void cap_stop(struct capture *cp)
{
	shutdown(cp->lfd, SHUT_RDWR);
	pthread_join(cp->th, NULL);
	close(cp->lfd);
}

/* The value of header name (lower-case) in request rq, into out. */
static bool req_header(const char *rq, const char *name, char *out, size_t n)
{
	const char *p = rq;
	size_t nl = strlen(name);

	while ((p = strstr(p, "\r\n")) != NULL) {
		p += 2;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1, *e = strstr(v, "\r\n");

			while (*v == ' ')
				v++;
			snprintf(out, n, "%.*s", (int)(e - v), v);
			return true;
		}
	}
	return false;
}

static void hexs(char *o, const unsigned char *in, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(o + 2 * i, "%02x", in[i]);
}

static void hmac(const void *key, size_t kl, const char *msg,
		 unsigned char out[32])
{
	unsigned int ol = 32;

	assert_non_null(HMAC(EVP_sha256(), key, (int)kl,
			     (const unsigned char *)msg, strlen(msg), out, &ol));
}

/*
 * Recompute the V4 signature of captured request rq with secret, from its
 * own headers (SignedHeaders names them; the payload hash is its
 * x-amz-content-sha256), and compare with the one it carries.
 */
static void check_signature(const char *rq, const char *secret,
			    const char *region)
{
	char auth[1024], date[32], signed_h[512], sig[80], cred[256];
	char canon[8192], sts[1024], method[16], uri[1024], payload[80];
	char exp[65], scope[128];
	unsigned char k1[32], k2[32], k3[32], k4[32], mac[32], h[32];
	const char *p;
	size_t cl = 0;

	assert_true(req_header(rq, "authorization", auth, sizeof(auth)));
	assert_true(req_header(rq, "x-amz-date", date, sizeof(date)));
	assert_true(req_header(rq, "x-amz-content-sha256", payload,
			       sizeof(payload)));
	assert_int_equal(sscanf(rq, "%15s %1023s", method, uri), 2);
	assert_int_equal(strncmp(auth, "AWS4-HMAC-SHA256 ", 17), 0);
	p = strstr(auth, "Credential=");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "Credential=%255[^,]", cred), 1);
	p = strstr(auth, "SignedHeaders=");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "SignedHeaders=%511[^,]", signed_h), 1);
	p = strstr(auth, "Signature=");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "Signature=%79s", sig), 1);
	snprintf(scope, sizeof(scope), "%.8s/%s/s3/aws4_request", date, region);
	assert_non_null(strstr(cred, scope));	/* the region we asked for */

	cl += (size_t)snprintf(canon + cl, sizeof(canon) - cl, "%s\n%s\n\n",
			       method, uri);
	{
		char list[512], *save = NULL;

		snprintf(list, sizeof(list), "%s", signed_h);
		for (char *n = strtok_r(list, ";", &save); n;
		     n = strtok_r(NULL, ";", &save)) {
			char v[1024];

			assert_true(req_header(rq, n, v, sizeof(v)));
			cl += (size_t)snprintf(canon + cl, sizeof(canon) - cl,
					       "%s:%s\n", n, v);
		}
	}
	snprintf(canon + cl, sizeof(canon) - cl, "\n%s\n%s", signed_h,
		 payload);
	SHA256((const unsigned char *)canon, strlen(canon), h);
	hexs(exp, h, 32);
	snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s\n%s", date,
		 scope, exp);
	{
		char k0[128], d[9];

		snprintf(k0, sizeof(k0), "AWS4%s", secret);
		snprintf(d, sizeof(d), "%.8s", date);
		hmac(k0, strlen(k0), d, k1);
	}
	hmac(k1, 32, region, k2);
	hmac(k2, 32, "s3", k3);
	hmac(k3, 32, "aws4_request", k4);
	hmac(k4, 32, sts, mac);
	hexs(exp, mac, 32);
	if (strcmp(exp, sig) != 0)
		fail_msg("signature %s, expected %s; canonical request:\n%s",
			 sig, exp, canon);
}

static const char ok_reply[] =
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/* The PUT libcurl signs, in either style, with a region and a token. */
static void signed_put(bool virt)
{
	struct capture cp = { .answers = { ok_reply }, .nanswers = 1 };
	unsigned char sha[32], md5[16];
	char host[64], v[256], shahex[65];
	const char body[] = "hello, signed world";
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = {
		.method = NRS_S3C_PUT, .key = "s/1/obj", .body = body,
		.body_len = sizeof(body) - 1, .sha256 = sha, .md5 = md5,
	};

	SHA256((const unsigned char *)body, r.body_len, sha);
	EVP_Digest(body, r.body_len, md5, NULL, EVP_md5(), NULL);
	hexs(shahex, sha, 32);
	cap_start(&cp);
	/* virtual: libcurl resolves nereus.localhost to loopback */
	snprintf(host, sizeof(host), "%s:%d", virt ? "localhost" : "127.0.0.1",
		 cp.port);
	c = client(virt, "FQoGZXIvYXdzE//token=", host, 5000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	cap_stop(&cp);
	assert_int_equal(o.cls, NRS_S3C_OK);
	assert_int_equal(cp.served, 1);
	cp.req[0][cp.req_len[0]] = '\0';
	if (virt) {
		assert_int_equal(strncmp(cp.req[0], "PUT /s/1/obj HTTP/1.1", 21), 0);
		assert_true(req_header(cp.req[0], "host", v, sizeof(v)));
		snprintf(host, sizeof(host), "nereus.localhost:%d", cp.port);
		assert_string_equal(v, host);
	} else {
		assert_int_equal(strncmp(cp.req[0], "PUT /nereus/s/1/obj HTTP/1.1",
					 28), 0);
	}
	assert_true(req_header(cp.req[0], "x-amz-content-sha256", v, sizeof(v)));
	assert_string_equal(v, shahex);
	assert_true(req_header(cp.req[0], "content-md5", v, sizeof(v)));
	assert_true(req_header(cp.req[0], "x-amz-security-token", v, sizeof(v)));
	assert_string_equal(v, "FQoGZXIvYXdzE//token=");
	assert_true(req_header(cp.req[0], "authorization", v, sizeof(v)));
	/* what the signature covers */
	assert_non_null(strstr(v, "x-amz-content-sha256"));
	assert_non_null(strstr(v, "x-amz-security-token"));
	assert_non_null(strstr(v, "content-md5"));
	assert_non_null(strstr(v, "host"));
	assert_null(strstr(v, "expect"));
	assert_non_null(strstr(cp.req[0], "\r\n\r\nhello, signed world"));
	check_signature(cp.req[0], "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
			"eu-central-1");
	nrs_s3c_free(c);
}

static void test_signed_put_path(void **state)
{
	(void)state;
	signed_put(false);
}

static void test_signed_put_virtual(void **state)
{
	(void)state;
	signed_put(true);
}

static void test_signed_get(void **state)
{
	static const char answer[] =
		"HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\n"
		"x-amz-meta-sha256: abc\r\nConnection: close\r\n\r\nxyz";
	struct capture cp = { .answers = { answer }, .nanswers = 1 };
	char host[64], v[256], buf[3];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = "k", .off = 7, .dst = buf,
		.dst_len = 3,
	};

	(void)state;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 5000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	cap_stop(&cp);
	assert_int_equal(o.cls, NRS_S3C_OK);
	assert_int_equal(o.got, 3);
	assert_memory_equal(buf, "xyz", 3);
	assert_true(o.has_meta_sha256);
	assert_string_equal(o.meta_sha256, "abc");
	cp.req[0][cp.req_len[0]] = '\0';
	assert_true(req_header(cp.req[0], "x-amz-content-sha256", v, sizeof(v)));
	assert_string_equal(v, EMPTY_SHA);
	assert_true(req_header(cp.req[0], "range", v, sizeof(v)));
	assert_string_equal(v, "bytes=7-9");
	assert_false(req_header(cp.req[0], "x-amz-security-token", v, sizeof(v)));
	check_signature(cp.req[0], "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
			"eu-central-1");
	nrs_s3c_free(c);
}

/* An error answer "HTTP/1.1 status" with S3's code (static storage,
 * the i-th). */
static const char *err_reply(int i, const char *status, const char *code)
{
	static char bufs[CAP_MAX][512];
	char body[256];

	snprintf(body, sizeof(body),
		 "<Error><Code>%s</Code><Message>m</Message></Error>", code);
	snprintf(bufs[i], sizeof(bufs[i]), "HTTP/1.1 %s\r\nContent-Type: "
		 "application/xml\r\nConnection: close\r\nContent-Length: "
		 "%zu\r\n\r\n%s", status, strlen(body), body);
	return bufs[i];
}

/* SR1 in action: 503 SlowDown, 500, then 200: three attempts. */
static void test_retry_transient(void **state)
{
	struct capture cp = { .nanswers = 3 };
	char host[64];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };

	(void)state;
	cp.answers[0] = err_reply(0, "503 Slow Down", "SlowDown");
	cp.answers[1] = err_reply(1, "500 Internal", "InternalError");
	cp.answers[2] = ok_reply;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 10000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	cap_stop(&cp);
	assert_int_equal(o.cls, NRS_S3C_OK);
	assert_int_equal(o.attempts, 3);
	assert_int_equal(cp.served, 3);
	nrs_s3c_free(c);
}

struct sink_got {
	char b[8];
	size_t n;
	int calls, fail;
};

static int sink_collect(void *arg, uint64_t pos, const void *buf, size_t n)
{
	struct sink_got *s = arg;

	s->calls++;
	if (s->fail)
		return s->fail;
	assert_true(pos + n <= sizeof(s->b));
	memcpy(s->b + pos, buf, n);
	if (pos + n > s->n)
		s->n = (size_t)(pos + n);
	return 0;
}

/* A GET with a sink: the body goes to it as it comes, the error body of
 * an attempt sent again (503) never does; a sink's error ends the
 * operation at once, with no attempt more (objstore.h nrs_obj_sink_fn). */
static void test_get_sink(void **state)
{
	static const char answer[] =
		"HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\n"
		"Connection: close\r\n\r\nxyz";
	struct capture cp = { .nanswers = 3 };
	struct sink_got got = { .n = 0 };
	char host[64];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = "k", .off = 7, .dst_len = 3,
		.sink = sink_collect, .sink_arg = &got,
	};

	(void)state;
	cp.answers[0] = err_reply(0, "503 Slow Down", "SlowDown");
	cp.answers[1] = answer;
	cp.answers[2] = answer;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 10000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	assert_int_equal(o.cls, NRS_S3C_OK);
	assert_int_equal(o.attempts, 2);
	assert_int_equal(o.got, 3);
	assert_int_equal(o.sink_err, 0);
	assert_int_equal(got.n, 3);
	assert_memory_equal(got.b, "xyz", 3);
	got.fail = -ENOSPC;
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	cap_stop(&cp);
	assert_int_equal(o.sink_err, -ENOSPC);
	assert_int_equal(o.attempts, 1);
	assert_int_equal(cp.served, 3);
	nrs_s3c_free(c);
}

/* SR1: a 403 is never sent again; its code and message are read. */
static void test_no_retry_403(void **state)
{
	struct capture cp = { .nanswers = 2 };
	char host[64];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };

	(void)state;
	cp.answers[0] = err_reply(0, "403 Forbidden", "SignatureDoesNotMatch");
	cp.answers[1] = ok_reply;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 10000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	assert_int_equal(o.cls, NRS_S3C_SIGNATURE);
	assert_int_equal(o.attempts, 1);
	assert_int_equal(o.http, 403);
	assert_string_equal(o.code, "SignatureDoesNotMatch");
	assert_string_equal(o.message, "m");
	/* the second answer is still waiting: nobody asked */
	assert_int_equal(cp.served, 1);
	cap_stop(&cp);
	nrs_s3c_free(c);
}

/* A region error names the region to use. */
static void test_region_error(void **state)
{
	static const char body[] =
		"<Error><Code>AuthorizationHeaderMalformed</Code><Message>the "
		"region 'eu-central-1' is wrong; expecting 'us-west-2'</Message>"
		"<Region>us-west-2</Region></Error>";
	char ans[512], host[64];
	struct capture cp = { .nanswers = 1 };
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };

	(void)state;
	snprintf(ans, sizeof(ans), "HTTP/1.1 400 Bad Request\r\nConnection: "
		 "close\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
	cp.answers[0] = ans;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 10000);
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	cap_stop(&cp);
	assert_int_equal(o.cls, NRS_S3C_REGION);
	assert_string_equal(o.region, "us-west-2");
	assert_int_equal(o.attempts, 1);
	nrs_s3c_free(c);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* SR3: a server that takes the request and never answers holds the
 * operation for the deadline, not longer. */
static void test_deadline(void **state)
{
	struct capture cp = { .hang = 1 };
	char host[64];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = "k" };
	double t0;

	(void)state;
	cap_start(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 700);
	t0 = now_s();
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	assert_true(now_s() - t0 < 1.5);
	assert_int_equal(o.cls, NRS_S3C_TIMEOUT);
	assert_true(o.timed_out);
	cap_stop(&cp);
	nrs_s3c_free(c);
}

/* No server at all: refused, retried a few times, failed fast. */
static void test_refused(void **state)
{
	struct capture cp = { 0 };
	char host[64];
	struct nrs_s3c *c;
	struct nrs_s3c_resp o;
	struct nrs_s3c_req r = { .method = NRS_S3C_HEAD, .key = "k" };
	double t0;

	(void)state;
	cap_start(&cp);		/* a port, then nobody on it */
	cap_stop(&cp);
	snprintf(host, sizeof(host), "127.0.0.1:%d", cp.port);
	c = client(false, NULL, host, 10000);
	t0 = now_s();
	assert_int_equal(nrs_s3c_run(c, &r, &o), 0);
	assert_true(now_s() - t0 < 5.0);
	assert_int_equal(o.cls, NRS_S3C_UNAVAILABLE);
	assert_true(o.attempts > 1);
	assert_int_equal(nrs_s3_class_errno(o.cls), -ECONNREFUSED);
	nrs_s3c_free(c);
}

static const char missing[] =
	"HTTP/1.1 404 Not Found\r\nConnection: close\r\n"
	"Content-Length: 0\r\n\r\n";

/* A store at the capturing server cp with the credentials file path,
 * the probe answered (404). */
static struct nrs_objstore *open_with_file(struct capture *cp,
					   const char *path)
{
	struct nrs_s3_opts o = { .timeout_ms = 5000 };
	struct nrs_objstore *st;
	char url[128];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/nereus", cp->port);
	o.url = url;
	assert_int_equal(nrs_objstore_s3_open_url(&o, path, &st), 0);
	return st;
}

static void write_creds(const char *path, const char *token)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "AWS_ACCESS_KEY_ID=ASIAEXAMPLE\nAWS_SECRET_ACCESS_KEY=sekrit\n"
		"AWS_SESSION_TOKEN=%s\n", token);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, 0600), 0);
}

/* SC1: a token the store calls expired makes the provider read the
 * credentials file again, and the request goes once more with the new
 * token; nothing is remounted. */
static void test_creds_reread(void **state)
{
	struct capture cp = {
		.answers = { missing, ok_reply, ok_reply, ok_reply },
		.nanswers = 2,
	};
	const char *tmp = getenv("TMPDIR");
	char path[512], v[256];
	struct nrs_objstore *st;
	unsigned char sha[32] = { 1 }, md5[16] = { 2 };

	(void)state;
	snprintf(path, sizeof(path), "%s/creds.%d", tmp && *tmp ? tmp : "/tmp",
		 (int)getpid());
	write_creds(path, "TOKEN-1");
	cap_start(&cp);
	/* the probe (a GET answered 404) goes out with TOKEN-1 */
	st = open_with_file(&cp, path);
	/* then TOKEN-1 expires, and the file gets the next one, as an STS
	 * refresher does (whether the provider sees the file change first
	 * or the refusal first depends on the time it takes: both are SC1) */
	cp.expired = "TOKEN-1";
	write_creds(path, "TOKEN-2");
	assert_int_equal(nrs_obj_put(st, "k", "abc", 3, md5, sha), 0);
	nrs_obj_close(st);
	cap_stop(&cp);
	unlink(path);
	assert_true(cp.served >= 3);
	cp.req[cp.served - 1][cp.req_len[cp.served - 1]] = '\0';
	assert_true(req_header(cp.req[cp.served - 1], "x-amz-security-token", v,
			       sizeof(v)));
	assert_string_equal(v, "TOKEN-2");
	assert_int_equal(strncmp(cp.req[cp.served - 1], "PUT /nereus/k ", 14), 0);
}

/* SC1: a file replaced by a rename (another inode) is read again before
 * the next request, at most a second later. */
static void test_creds_renamed(void **state)
{
	struct capture cp = {
		.answers = { missing, ok_reply }, .nanswers = 2,
	};
	const char *tmp = getenv("TMPDIR");
	char path[512], path2[520], v[512];
	struct nrs_objstore *st;
	unsigned char sha[32] = { 1 }, md5[16] = { 2 };

	(void)state;
	snprintf(path, sizeof(path), "%s/creds-r.%d",
		 tmp && *tmp ? tmp : "/tmp", (int)getpid());
	snprintf(path2, sizeof(path2), "%s.new", path);
	write_creds(path, "OLD");
	cap_start(&cp);
	st = open_with_file(&cp, path);
	write_creds(path2, "NEW");
	assert_int_equal(rename(path2, path), 0);
	usleep(1100 * 1000);	/* past CRED_CHECK_MS */
	assert_int_equal(nrs_obj_put(st, "k", "abc", 3, md5, sha), 0);
	nrs_obj_close(st);
	cap_stop(&cp);
	unlink(path);
	assert_int_equal(cp.served, 2);
	cp.req[1][cp.req_len[1]] = '\0';
	assert_true(req_header(cp.req[1], "x-amz-security-token", v, sizeof(v)));
	assert_string_equal(v, "NEW");
}

/* PROBE: a definite answer refuses the mount, no answer does not. */
static void test_probe(void **state)
{
	static const struct {
		const char *status, *code;
		int err;
	} cases[] = {
		{ "400 Bad Request", "AuthorizationHeaderMalformed", -EACCES },
		{ "403 Forbidden", "RequestTimeTooSkewed", -EACCES },
		{ "403 Forbidden", "SignatureDoesNotMatch", -EACCES },
		{ "403 Forbidden", "InvalidAccessKeyId", -EACCES },
		{ "400 Bad Request", "ExpiredToken", -EACCES },
		{ "403 Forbidden", "AccessDenied", -EACCES },
		{ "404 Not Found", "NoSuchBucket", -ENXIO },
		{ "404 Not Found", "NoSuchKey", 0 },
		{ "500 Internal Server Error", "InternalError", 0 },
	};

	(void)state;
	assert_int_equal(setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1), 0);
	assert_int_equal(setenv("AWS_SECRET_ACCESS_KEY", "secret", 1), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct capture cp = { .nanswers = CAP_MAX };
		struct nrs_s3_opts o = { .timeout_ms = 5000 };
		struct nrs_objstore *st = NULL;
		char url[128];

		for (int k = 0; k < CAP_MAX; k++)	/* 5xx: retried */
			cp.answers[k] = err_reply(k, cases[i].status,
						  cases[i].code);
		cap_start(&cp);
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/nereus", cp.port);
		o.url = url;
		if (nrs_objstore_s3_open_url(&o, NULL, &st) != cases[i].err)
			fail_msg("%s %s: not %d", cases[i].status, cases[i].code,
				 cases[i].err);
		nrs_obj_close(st);
		cap_stop(&cp);
	}
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

/*
 * S4C1: a conditional PUT whose first answer was lost (a 500 after the
 * server stored it) is refused 412 on the retry; the object read back
 * holds our SHA-256, so the put succeeded, with the ETag of that HEAD.
 * The same refusal with other bytes under the key is -EEXIST.
 */
static void put_cond_after_lost(bool ours, int expect)
{
	static char head[CAP_MAX][512];
	struct capture cp = { .nanswers = 4 };
	struct nrs_s3_opts o = { .timeout_ms = 5000 };
	struct nrs_objstore *st = NULL;
	unsigned char sha[32], md5[16], other[32];
	char url[128], shahex[65], etag[NRS_ETAG_MAX] = "";
	const char body[] = "owner record";

	SHA256((const unsigned char *)body, sizeof(body) - 1, sha);
	EVP_Digest(body, sizeof(body) - 1, md5, NULL, EVP_md5(), NULL);
	memset(other, 0x5a, sizeof(other));
	hexs(shahex, ours ? sha : other, 32);
	snprintf(head[ours], sizeof(head[ours]), "HTTP/1.1 200 OK\r\n"
		 "Content-Length: 0\r\nETag: \"e1\"\r\nx-amz-meta-sha256: %s\r\n"
		 "Connection: close\r\n\r\n", shahex);
	cp.answers[0] = err_reply(0, "404 Not Found", "NoSuchKey"); /* probe */
	cp.answers[1] = err_reply(1, "500 Internal Server Error",
				  "InternalError");
	cp.answers[2] = err_reply(2, "412 Precondition Failed",
				  "PreconditionFailed");
	cp.answers[3] = head[ours];
	assert_int_equal(setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1), 0);
	assert_int_equal(setenv("AWS_SECRET_ACCESS_KEY", "secret", 1), 0);
	cap_start(&cp);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/nereus", cp.port);
	o.url = url;
	assert_int_equal(nrs_objstore_s3_open_url(&o, NULL, &st), 0);
	assert_int_equal(nrs_obj_put_cond(st, "owner", body, sizeof(body) - 1,
					  md5, sha, NULL, etag), expect);
	if (expect == 0)
		assert_string_equal(etag, "e1");
	nrs_obj_close(st);
	cap_stop(&cp);
	assert_int_equal(cp.served, 4);
	assert_non_null(strstr(cp.req[1], "If-None-Match: *"));
	assert_non_null(strstr(cp.req[2], "If-None-Match: *"));
	assert_true(strncmp(cp.req[3], "HEAD ", 5) == 0);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}

static void test_put_cond_lost_answer(void **state)
{
	(void)state;
	put_cond_after_lost(true, 0);
	put_cond_after_lost(false, -EEXIST);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_retryable),
		cmocka_unit_test(test_errno),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_host_region),
		cmocka_unit_test(test_opt_parse),
		cmocka_unit_test(test_open_opts),
		cmocka_unit_test(test_tls_is_gnutls),
		cmocka_unit_test(test_md5_base64),
		cmocka_unit_test(test_headers),
		cmocka_unit_test(test_signed_put_path),
		cmocka_unit_test(test_signed_put_virtual),
		cmocka_unit_test(test_signed_get),
		cmocka_unit_test(test_get_sink),
		cmocka_unit_test(test_retry_transient),
		cmocka_unit_test(test_no_retry_403),
		cmocka_unit_test(test_region_error),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_creds_reread),
		cmocka_unit_test(test_creds_renamed),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_put_cond_lost_answer),
	};

	return cmocka_run_group_tests_name("s3_curl", tests, NULL, NULL);
}
