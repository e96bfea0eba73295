/*
 * objstore_s3.c - the S3 object store provider, on libs3 2.0 (Debian's
 * libs3-dev 2.0-4), the only file that includes libs3.h (STYLE.md).
 *
 * REQUESTS
 *
 *   put    PUT /BUCKET/KEY, Content-MD5 (base64 of the MD5 put() is given)
 *          and x-amz-meta-sha256 (64 lower-case hex digits); the server
 *          refuses a body that does not match the MD5 (BadDigest).
 *   head   HEAD /BUCKET/KEY: Content-Length and x-amz-meta-sha256.  A
 *          sha256 value that is not 64 hex digits gives has_sha256 false.
 *   get    GET /BUCKET/KEY, Range: bytes=off-(off+len-1).  A range that
 *          starts at or past the end (416 InvalidRange) reads 0 bytes.  A
 *          body shorter than its Content-Length, or longer than the range
 *          asked for, is -EIO: libs3 2.0 reports a connection closed early
 *          (curl's PARTIAL_FILE) as success, so the byte count is checked
 *          here.
 *   del    DELETE /BUCKET/KEY; S3 answers 204 for a missing key as well.
 * Requests are path-style ("http[s]://HOST[:PORT]/BUCKET/KEY"), signed
 * with AWS signature version 2, the only one libs3 2.0 knows.  Nothing here
 * lists a bucket (objstore.h); a listing would fail against s3rver 3.x
 * anyway, which canonicalizes bucket-level requests without the trailing
 * '/' that libs3 signs.
 *
 * WHAT LIBS3 2.0 DOES AND DOES NOT LET US SET
 *
 *   Timeouts.  Its API has none.  Each request gets its curl options from
 *   libs3 alone: a low-speed abort (CURLOPT_LOW_SPEED_LIMIT 1024 bytes/s
 *   for LOW_SPEED_TIME 15 s) and curl's defaults otherwise (no
 *   CONNECTTIMEOUT: curl's 300 s; no TIMEOUT: no total limit).
 *   So every call here runs its request in a request context of its own
 *   (a curl multi handle), driven by select() against our deadline
 *   (timeout_ms per request); past it the context is destroyed, which
 *   aborts the request, and the call fails -ETIMEDOUT.  The cost: no
 *   connection is reused from one call to the next (a TCP, and with https
 *   a TLS, handshake per request).
 *   TLS.  libs3 2.0 turns certificate verification OFF: it sets
 *   CURLOPT_SSL_VERIFYPEER to 0 on every request (seen by tracing its
 *   curl_easy_setopt calls; its API has no way to change that, nor to name
 *   a CA file).  https through it unchanged would encrypt but accept any
 *   server.  So this file stands in for libcurl's curl_easy_setopt (see
 *   TLS VERIFICATION below) and, for the requests it makes, sets
 *   VERIFYPEER 1, VERIFYHOST 2 and, when opts->ca_file is given,
 *   CURLOPT_CAINFO; otherwise the system's trust store is used (Debian's
 *   libcurl-gnutls has no CA file of its own and asks GnuTLS, whose
 *   default is /etc/ssl/certs/ca-certificates.crt).  A certificate that
 *   does not verify, or names another host, fails the request with -EIO
 *   (libs3's ServerFailedVerification), logged with curl's own message.
 *
 * ERRORS (objstore.h): NoSuchKey / 404 -> -ENOENT; 403, AccessDenied,
 * InvalidAccessKeyId, SignatureDoesNotMatch, expired or bad tokens, a
 * skewed clock -> -EACCES; connection refused -> -ECONNREFUSED; host name
 * not found -> -EHOSTUNREACH; our deadline, libs3's low-speed abort, S3's
 * RequestTimeout -> -ETIMEDOUT; out of memory -> -ENOMEM; anything else
 * (BadDigest, 5xx, TLS failures, NoSuchBucket) -> -EIO.  Every failure but
 * a missing object is logged with the request, key and libs3 status.  A
 * HEAD of a key in a missing bucket is a bodiless 404 and so -ENOENT: the
 * bucket is checked by the first put, which fails -EIO, logged.
 *
 * THREADS
 *
 * libs3 may be called from any number of threads at once, except
 * S3_initialize (guarded here by lib_lock, counted so that the last close
 * deinitializes).  The bucket context is read only after open, and each
 * call owns its request context and callback data.
 *
 * TLS VERIFICATION
 *
 * libs3 calls libcurl's curl_easy_setopt through the PLT, so the definition
 * below, linked into the program, takes the place of libcurl's for it
 * (the way test_meta.c counts SQLite's fsyncs).  It passes every option on
 * to libcurl unchanged, by its type (long, pointer, function pointer,
 * curl_off_t: the type is the option number / 10000, curl's ABI), except
 * while this thread is starting one of our requests (setup_call is set:
 * libs3 configures the curl handle synchronously inside S3_put_object and
 * friends, even with a request context): then VERIFYPEER 0 becomes 1, and
 * after CURLOPT_URL, which libs3 sets on every request (it resets a reused
 * handle first), VERIFYPEER, VERIFYHOST, CAINFO and an error buffer are
 * set.  Option numbers are curl's, fixed since curl 7.0 (curl/curl.h):
 * libcurl's headers are not needed to build.
 */
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* libs3.h declares S3_deinitialize() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <libs3.h>
#pragma GCC diagnostic pop

#include "log.h"
#include "objstore.h"

#define DEFAULT_TIMEOUT_MS	30000
#define MAX_IDLE_WAIT_MS	10	/* poll step while curl has no fd */
#define CREDS_FILE_MAX		(64u << 10)
#define SHA256_META		"sha256"	/* x-amz-meta-sha256 */

/* libcurl's ABI (curl/curl.h) */
#define CURLOPT_SSL_VERIFYPEER	64
#define CURLOPT_SSL_VERIFYHOST	81
#define CURLOPT_URL		10002
#define CURLOPT_ERRORBUFFER	10010
#define CURLOPT_CAINFO		10065
#define CURL_ERROR_SIZE		256
#define CURLE_FAILED_INIT	2

struct s3_store {
	struct nrs_objstore base;
	S3BucketContext bc;	/* its strings are the fields below */
	char *host, *bucket, *access, *secret;
	char *url;		/* for log lines */
	char *ca_file;		/* NULL: curl's CA bundle */
	int timeout_ms;
};

enum s3_op { OP_PUT, OP_HEAD, OP_GET, OP_DELETE };

/* One request: its inputs, and what the callbacks saw. */
struct s3_call {
	struct s3_store *s;
	enum s3_op op;
	const char *key;
	bool done, timed_out;
	S3Status status;
	char message[160];	/* S3's error message, if any */
	char curl_error[CURL_ERROR_SIZE];	/* curl's, if any */
	/* response properties */
	bool have_props, has_sha256, bad_sha256;
	uint64_t content_length;
	unsigned char sha256[NRS_SHA256_LEN];
	/* put: the body */
	const unsigned char *src;
	size_t src_len, src_off;
	/* get: where the body goes */
	unsigned char *dst;
	size_t dst_len, got;
	bool too_long;
};

/* The call whose request libs3 is setting up in this thread, or NULL. */
static __thread struct s3_call *setup_call;

typedef int (*setopt_fn)(void *curl, int option, ...);
static setopt_fn real_setopt;
static pthread_once_t setopt_once = PTHREAD_ONCE_INIT;

static void setopt_resolve(void)
{
	real_setopt = (setopt_fn)dlsym(RTLD_NEXT, "curl_easy_setopt");
}

/* libcurl's curl_easy_setopt, for libs3 (TLS VERIFICATION above). */
int curl_easy_setopt(void *curl, int option, ...);
int curl_easy_setopt(void *curl, int option, ...)
{
	struct s3_call *c = setup_call;
	va_list ap;
	int rc;

	pthread_once(&setopt_once, setopt_resolve);
	if (!real_setopt)
		return CURLE_FAILED_INIT;
	va_start(ap, option);
	switch (option / 10000) {
	case 0: {	/* long */
		long v = va_arg(ap, long);

		if (c && option == CURLOPT_SSL_VERIFYPEER)
			v = 1;
		rc = real_setopt(curl, option, v);
		break;
	}
	case 2: {	/* function pointer */
		void (*f)(void) = va_arg(ap, void (*)(void));

		rc = real_setopt(curl, option, f);
		break;
	}
	case 3: {	/* curl_off_t, 64 bits */
		int64_t v = va_arg(ap, int64_t);

		rc = real_setopt(curl, option, v);
		break;
	}
	default: {	/* object or blob pointer */
		void *p = va_arg(ap, void *);

		rc = real_setopt(curl, option, p);
		break;
	}
	}
	va_end(ap);
	if (c && option == CURLOPT_URL && rc == 0) {
		rc = real_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
		if (rc == 0)
			rc = real_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
		if (rc == 0 && c->s->ca_file)
			rc = real_setopt(curl, CURLOPT_CAINFO, c->s->ca_file);
		/* c outlives every transfer of the handle that can write
		 * here: the next request resets the handle first. */
		if (rc == 0)
			rc = real_setopt(curl, CURLOPT_ERRORBUFFER, c->curl_error);
	}
	return rc;
}

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_users;	/* open stores; protected by lib_lock */

static int lib_get(void)
{
	int rc = 0;

	pthread_mutex_lock(&lib_lock);
	if (lib_users == 0) {
		S3Status st = S3_initialize("nereusfs", S3_INIT_ALL, NULL);

		if (st != S3StatusOK) {
			nrs_err("s3: libs3 initialization: %s",
				S3_get_status_name(st));
			rc = st == S3StatusOutOfMemory ? -ENOMEM : -EIO;
		}
	}
	if (rc == 0)
		lib_users++;
	pthread_mutex_unlock(&lib_lock);
	return rc;
}

static void lib_put(void)
{
	pthread_mutex_lock(&lib_lock);
	if (--lib_users == 0)
		S3_deinitialize();
	pthread_mutex_unlock(&lib_lock);
}

static struct s3_store *s3_of(struct nrs_objstore *s)
{
	return (struct s3_store *)s;
}

static int status_errno(S3Status st)
{
	switch (st) {
	case S3StatusOK:
		return 0;
	case S3StatusOutOfMemory:
		return -ENOMEM;
	case S3StatusErrorNoSuchKey:
	case S3StatusHttpErrorNotFound:
		return -ENOENT;
	case S3StatusFailedToConnect:
		return -ECONNREFUSED;
	case S3StatusNameLookupError:
		return -EHOSTUNREACH;
	case S3StatusConnectionFailed:	/* curl: timed out, or write error */
	case S3StatusErrorRequestTimeout:
	case S3StatusInterrupted:
		return -ETIMEDOUT;
	case S3StatusErrorAccessDenied:
	case S3StatusHttpErrorForbidden:
	case S3StatusErrorInvalidAccessKeyId:
	case S3StatusErrorSignatureDoesNotMatch:
	case S3StatusErrorAccountProblem:
	case S3StatusErrorExpiredToken:
	case S3StatusErrorInvalidToken:
	case S3StatusErrorInvalidSecurity:
	case S3StatusErrorNotSignedUp:
	case S3StatusErrorRequestTimeTooSkewed:
		return -EACCES;
	default:
		return -EIO;
	}
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 64 hex digits (and nothing else) into sha; false if v is not that. */
static bool parse_sha256(const char *v, unsigned char sha[NRS_SHA256_LEN])
{
	if (strlen(v) != (size_t)2 * NRS_SHA256_LEN)
		return false;
	for (size_t i = 0; i < NRS_SHA256_LEN; i++) {
		int hi = hexval((unsigned char)v[2 * i]);
		int lo = hexval((unsigned char)v[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		sha[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

static void hex_encode(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

/* Base64 of the 16 bytes of an MD5: 24 characters and a NUL. */
static void md5_base64(char out[25], const unsigned char md5[NRS_MD5_LEN])
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	int o = 0;

	for (int i = 0; i < NRS_MD5_LEN; i += 3) {
		uint32_t v = (uint32_t)md5[i] << 16;
		int n = NRS_MD5_LEN - i < 3 ? NRS_MD5_LEN - i : 3;

		if (n > 1)
			v |= (uint32_t)md5[i + 1] << 8;
		if (n > 2)
			v |= md5[i + 2];
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = n > 1 ? b64[v >> 6 & 63] : '=';
		out[o++] = n > 2 ? b64[v & 63] : '=';
	}
	out[o] = '\0';
}

/* ---- callbacks (made in the calling thread) ---------------------------- */

static S3Status on_properties(const S3ResponseProperties *p, void *data)
{
	struct s3_call *c = data;

	c->have_props = true;
	c->content_length = p->contentLength;
	for (int i = 0; i < p->metaDataCount; i++) {
		if (strcasecmp(p->metaData[i].name, SHA256_META) != 0)
			continue;
		c->has_sha256 = parse_sha256(p->metaData[i].value, c->sha256);
		c->bad_sha256 = !c->has_sha256;
	}
	return S3StatusOK;
}

static void on_complete(S3Status st, const S3ErrorDetails *e, void *data)
{
	struct s3_call *c = data;

	c->done = true;
	c->status = st;
	if (e && e->message)
		snprintf(c->message, sizeof(c->message), "%s", e->message);
}

static int on_put_data(int size, char *buf, void *data)
{
	struct s3_call *c = data;
	size_t n = c->src_len - c->src_off;

	if (size < 0)
		return -1;
	if (n > (size_t)size)
		n = (size_t)size;
	memcpy(buf, c->src + c->src_off, n);
	c->src_off += n;
	return (int)n;
}

static S3Status on_get_data(int size, const char *buf, void *data)
{
	struct s3_call *c = data;

	if (size < 0 || (size_t)size > c->dst_len - c->got) {
		c->too_long = true;
		return S3StatusAbortedByCallback;
	}
	memcpy(c->dst + c->got, buf, (size_t)size);
	c->got += (size_t)size;
	return S3StatusOK;
}

static const S3ResponseHandler response_handler = {
	.propertiesCallback = on_properties,
	.completeCallback = on_complete,
};

static const S3PutObjectHandler put_handler = {
	.responseHandler = { on_properties, on_complete },
	.putObjectDataCallback = on_put_data,
};

static const S3GetObjectHandler get_handler = {
	.responseHandler = { on_properties, on_complete },
	.getObjectDataCallback = on_get_data,
};

/* ---- running one request against the deadline ------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Start c's request in rc (libs3 sets up its curl handle right here). */
static void call_issue(struct s3_call *c, S3RequestContext *rc,
		       const S3PutProperties *pp, uint64_t off)
{
	const S3BucketContext *bc = &c->s->bc;

	setup_call = c;
	switch (c->op) {
	case OP_PUT:
		S3_put_object(bc, c->key, c->src_len, pp, rc, &put_handler, c);
		break;
	case OP_HEAD:
		S3_head_object(bc, c->key, rc, &response_handler, c);
		break;
	case OP_GET:
		S3_get_object(bc, c->key, NULL, off, c->dst_len, rc,
			      &get_handler, c);
		break;
	case OP_DELETE:
		S3_delete_object(bc, c->key, rc, &response_handler, c);
		break;
	}
	setup_call = NULL;
}

/*
 * Run c's request (pp: put's properties; off: get's offset) in a request
 * context of its own until it completes or the deadline passes, then
 * destroy the context, which aborts a request still running (its complete
 * callback then gets S3StatusInterrupted).  The outcome is in c.
 */
static void call_run(struct s3_call *c, const S3PutProperties *pp,
		     uint64_t off)
{
	int64_t deadline = now_ms() + c->s->timeout_ms;
	S3RequestContext *rc;
	S3Status st = S3_create_request_context(&rc);

	if (st != S3StatusOK) {
		c->status = st;
		return;
	}
	call_issue(c, rc, pp, off);
	for (;;) {
		fd_set rd, wr, ex;
		int remaining = 0, maxfd = -1;
		int64_t left, wait;

		st = S3_runonce_request_context(rc, &remaining);
		if (st != S3StatusOK) {
			c->status = st;
			break;
		}
		if (c->done || remaining == 0)
			break;
		left = deadline - now_ms();
		if (left <= 0) {
			c->timed_out = true;
			break;
		}
		FD_ZERO(&rd);
		FD_ZERO(&wr);
		FD_ZERO(&ex);
		st = S3_get_request_context_fdsets(rc, &rd, &wr, &ex, &maxfd);
		if (st != S3StatusOK) {
			c->status = st;
			break;
		}
		wait = S3_get_request_context_timeout(rc);
		if (wait < 0 || wait > left)
			wait = left;
		if (maxfd < 0 || maxfd >= FD_SETSIZE) {
			/* Not connected yet, or sockets select() cannot
			 * take (curl leaves those out of the sets). */
			if (wait > MAX_IDLE_WAIT_MS)
				wait = MAX_IDLE_WAIT_MS;
			poll(NULL, 0, (int)wait);
		} else {
			struct timeval tv = {
				.tv_sec = (time_t)(wait / 1000),
				.tv_usec = (suseconds_t)(wait % 1000 * 1000),
			};

			select(maxfd + 1, &rd, &wr, &ex, &tv);
		}
	}
	S3_destroy_request_context(rc);
	if (!c->done && !c->timed_out && c->status == S3StatusOK)
		c->status = S3StatusInternalError;	/* never completed */
}

/* Prepare c for one request; -EINVAL for a bad key. */
static int call_init(struct s3_call *c, struct s3_store *s, enum s3_op op,
		     const char *key)
{
	memset(c, 0, sizeof(*c));
	c->s = s;
	c->op = op;
	c->key = key;
	c->status = S3StatusInternalError;
	return nrs_objkey_is_valid(key) ? 0 : -EINVAL;
}

/* The call's errno, logged unless it is 0 or (quiet_enoent) -ENOENT. */
static int call_result(struct s3_call *c, bool quiet_enoent)
{
	static const char *const op_names[] = {
		[OP_PUT] = "put", [OP_HEAD] = "head", [OP_GET] = "get",
		[OP_DELETE] = "delete",
	};
	int rc = c->timed_out ? -ETIMEDOUT : status_errno(c->status);

	if (rc == 0 || (rc == -ENOENT && quiet_enoent))
		return rc;
	if (c->timed_out)
		nrs_warn("s3 %s: %s %s: no answer within %d ms", c->s->url,
			 op_names[c->op], c->key, c->s->timeout_ms);
	else
		nrs_warn("s3 %s: %s %s: %s%s%s%s%s", c->s->url, op_names[c->op],
			 c->key, S3_get_status_name(c->status),
			 c->message[0] ? ": " : "", c->message,
			 c->curl_error[0] ? ": " : "", c->curl_error);
	return rc;
}

/* ---- the provider ------------------------------------------------------- */

static int s3_put(struct nrs_objstore *os, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	struct s3_store *s = s3_of(os);
	char md5_b64[25], sha_hex[2 * NRS_SHA256_LEN + 1];
	S3NameValue meta = { SHA256_META, sha_hex };
	S3PutProperties pp = {
		.contentType = "application/octet-stream",
		.expires = -1,
		.cannedAcl = S3CannedAclPrivate,
	};
	struct s3_call c;
	int err = call_init(&c, s, OP_PUT, key);

	if (err < 0 || (len && !buf))
		return -EINVAL;
	if (md5) {
		md5_base64(md5_b64, md5);
		pp.md5 = md5_b64;
	}
	if (sha256) {
		hex_encode(sha_hex, sha256, NRS_SHA256_LEN);
		pp.metaDataCount = 1;
		pp.metaData = &meta;
	}
	c.src = buf;
	c.src_len = len;
	call_run(&c, &pp, 0);
	err = call_result(&c, false);
	if (err == 0 && c.src_off != len) {
		nrs_warn("s3 %s: put %s: sent %zu of %zu bytes", s->url, key,
			 c.src_off, len);
		err = -EIO;
	}
	return err;
}

static int s3_head(struct nrs_objstore *os, const char *key,
		   struct nrs_obj_meta *out)
{
	struct s3_store *s = s3_of(os);
	struct nrs_obj_meta m = { 0 };
	struct s3_call c;
	int err = call_init(&c, s, OP_HEAD, key);

	if (err < 0)
		return err;
	call_run(&c, NULL, 0);
	err = call_result(&c, true);
	if (err < 0)
		return err;
	if (!c.have_props) {
		nrs_warn("s3 %s: head %s: an answer without headers", s->url,
			 key);
		return -EIO;
	}
	if (c.bad_sha256)
		nrs_warn("s3 %s: head %s: x-amz-meta-sha256 is not 64 hex digits",
			 s->url, key);
	m.length = c.content_length;
	m.has_sha256 = c.has_sha256;
	if (m.has_sha256)
		memcpy(m.sha256, c.sha256, NRS_SHA256_LEN);
	*out = m;
	return 0;
}

static ssize_t s3_get(struct nrs_objstore *os, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	struct s3_store *s = s3_of(os);
	struct s3_call c;
	int err;

	if (len == 0) {	/* no range to ask for: just say if it is there */
		struct nrs_obj_meta m;

		err = s3_head(os, key, &m);
		return err < 0 ? err : 0;
	}
	err = call_init(&c, s, OP_GET, key);
	if (err < 0)
		return err;
	c.dst = buf;
	c.dst_len = len > SSIZE_MAX ? SSIZE_MAX : len;
	call_run(&c, NULL, off);
	if (c.status == S3StatusErrorInvalidRange && !c.timed_out)
		return 0;	/* off is at or past the end */
	if (c.too_long) {
		nrs_warn("s3 %s: get %s at %" PRIu64 ": the answer is longer "
			 "than the %zu bytes asked for", s->url, key, off,
			 c.dst_len);
		return -EIO;
	}
	err = call_result(&c, true);
	if (err < 0)
		return err;
	if (!c.have_props || c.got != c.content_length) {
		nrs_warn("s3 %s: get %s at %" PRIu64 ": body cut short (%zu of "
			 "%" PRIu64 " bytes)", s->url, key, off, c.got,
			 c.content_length);
		return -EIO;
	}
	return (ssize_t)c.got;
}

static int s3_del(struct nrs_objstore *os, const char *key)
{
	struct s3_call c;
	int err = call_init(&c, s3_of(os), OP_DELETE, key);

	if (err < 0)
		return err;
	call_run(&c, NULL, 0);
	err = call_result(&c, true);
	return err == -ENOENT ? 0 : err;
}

static void store_free(struct s3_store *s)
{
	free(s->host);
	free(s->bucket);
	free(s->access);
	if (s->secret)
		explicit_bzero(s->secret, strlen(s->secret));
	free(s->secret);
	free(s->url);
	free(s->ca_file);
	free(s);
}

static void s3_close(struct nrs_objstore *os)
{
	store_free(s3_of(os));
	lib_put();
}

static const struct nrs_objstore_ops s3_ops = {
	.name = "s3",
	.wants_md5 = true,
	.put = s3_put,
	.head = s3_head,
	.get = s3_get,
	.del = s3_del,
	.close = s3_close,
};

/* ---- URL and credentials ------------------------------------------------ */

/* Is [p, end) a port number, 1 to 65535? */
static bool port_ok(const char *p, const char *end)
{
	unsigned long v = 0;

	if (p == end || end - p > 5)
		return false;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v >= 1 && v <= 65535;
}

/* Is [p, end) HOST[:PORT], HOST a name, an IPv4 address or [IPv6]? */
static bool host_ok(const char *p, const char *end)
{
	const char *q = p;

	if (p == end || end - p > S3_MAX_HOSTNAME_SIZE)
		return false;
	if (*p == '[') {
		for (q = p + 1; q < end && *q != ']'; q++)
			if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
				return false;
		if (q == end || q == p + 1)
			return false;
		q++;	/* past ']' */
	} else {
		for (; q < end && *q != ':'; q++)
			if (!isalnum((unsigned char)*q) && *q != '.' && *q != '-')
				return false;
		if (q == p)
			return false;
	}
	if (q == end)
		return true;
	return *q == ':' && port_ok(q + 1, end);
}

/* http[s]://HOST[:PORT]/BUCKET[/] into s's protocol, host and bucket. */
static int parse_url(const char *url, struct s3_store *s)
{
	const char *p, *slash, *end;

	if (strncmp(url, "http://", 7) == 0) {
		s->bc.protocol = S3ProtocolHTTP;
		p = url + 7;
	} else if (strncmp(url, "https://", 8) == 0) {
		s->bc.protocol = S3ProtocolHTTPS;
		p = url + 8;
	} else {
		return -EINVAL;
	}
	slash = strchr(p, '/');
	if (!slash || !host_ok(p, slash))
		return -EINVAL;
	end = slash + 1 + strlen(slash + 1);
	if (end > slash + 1 && end[-1] == '/')
		end--;	/* one trailing '/' is allowed */
	s->host = strndup(p, (size_t)(slash - p));
	s->bucket = strndup(slash + 1, (size_t)(end - slash - 1));
	if (!s->host || !s->bucket)
		return -ENOMEM;
	if (!*s->bucket || strchr(s->bucket, '/') ||
	    S3_validate_bucket_name(s->bucket, S3UriStylePath) != S3StatusOK)
		return -EINVAL;
	return 0;
}

int nrs_objstore_s3_open(const struct nrs_s3_opts *o, struct nrs_objstore **out)
{
	struct s3_store *s;
	int rc;

	if (!o || !o->url || !o->access_key || !*o->access_key ||
	    !o->secret_key || !*o->secret_key || o->timeout_ms < 0)
		return -EINVAL;
	if (o->ca_file && access(o->ca_file, R_OK) < 0) {
		rc = -errno;
		nrs_err("s3 %s: CA file %s: %s", o->url, o->ca_file,
			strerror(-rc));
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &s3_ops;
	s->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
	s->url = strdup(o->url);
	s->access = strdup(o->access_key);
	s->secret = strdup(o->secret_key);
	s->ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
	if (!s->url || !s->access || !s->secret ||
	    (o->ca_file && !s->ca_file)) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = parse_url(o->url, s);
	if (rc < 0) {
		if (rc == -EINVAL)
			nrs_err("s3: %s is not http[s]://HOST[:PORT]/BUCKET",
				o->url);
		goto out_free;
	}
	s->bc.hostName = s->host;
	s->bc.bucketName = s->bucket;
	s->bc.uriStyle = S3UriStylePath;
	s->bc.accessKeyId = s->access;
	s->bc.secretAccessKey = s->secret;
	rc = lib_get();
	if (rc < 0)
		goto out_free;
	*out = &s->base;
	return 0;

out_free:
	store_free(s);
	return rc;
}

/* Strip leading and trailing blanks (and a CR) of [*p, *end). */
static void trim(const char **p, const char **end)
{
	while (*p < *end && isspace((unsigned char)**p))
		(*p)++;
	while (*end > *p && isspace((unsigned char)(*end)[-1]))
		(*end)--;
}

/*
 * The whole of a credentials file, NUL-terminated, in *text (the caller
 * wipes and frees it), its length in *len.  Logged: -EPERM if another user
 * could read or write it, or it is not a regular file; -EINVAL if longer
 * than CREDS_FILE_MAX; an open or read error.
 */
static int creds_read(const char *file, char **text, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	ssize_t n = 0;
	int fd, rc = 0;

	/* Not O_NOFOLLOW: mounted secrets are often links to the file. */
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode) || (st.st_mode & 0066) != 0) {
		nrs_err("s3 credentials %s: must be a regular file no other user "
			"can read or write (mode 0600), not %04o", file,
			(unsigned)(st.st_mode & 07777));
		rc = -EPERM;
	} else if (st.st_size > (off_t)CREDS_FILE_MAX) {
		nrs_err("s3 credentials %s: longer than %u bytes", file,
			CREDS_FILE_MAX);
		rc = -EINVAL;
	} else if (!(buf = calloc(1, (size_t)st.st_size + 1))) {
		rc = -ENOMEM;
	} else if ((n = pread(fd, buf, (size_t)st.st_size, 0)) < 0) {
		rc = -errno;
	}
	if (rc == 0 && (!buf || n < 0))
		rc = -EIO;	/* errno was 0 */
	if (rc != 0 && rc != -EPERM && rc != -EINVAL)
		nrs_err("s3 credentials %s: %s", file, strerror(-rc));
	if (fd >= 0)
		close(fd);
	if (rc != 0) {
		free(buf);
		return rc;
	}
	*text = buf;
	*len = (size_t)n;
	return 0;
}

/* The value of "NAME=value" lines in [p, end) (the last one wins); NULL
 * if there is none, or no memory (*rc then -ENOMEM). */
static char *creds_value(const char *p, const char *end, const char *name,
			 int *rc)
{
	size_t nl = strlen(name);
	char *v = NULL;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *lend = eol ? eol : end;

		trim(&p, &lend);
		if ((size_t)(lend - p) > nl + 1 && memcmp(p, name, nl) == 0 &&
		    p[nl] == '=') {
			free(v);
			v = strndup(p + nl + 1, (size_t)(lend - p) - nl - 1);
			if (!v) {
				*rc = -ENOMEM;
				return NULL;
			}
		}
		p = eol ? eol + 1 : end;
	}
	return v;
}

int nrs_s3_credentials(const char *file, char **access, char **secret)
{
	char *a = NULL, *k = NULL, *text;
	size_t len;
	int rc = 0;

	if (!file) {
		const char *ea = getenv("AWS_ACCESS_KEY_ID");
		const char *ek = getenv("AWS_SECRET_ACCESS_KEY");

		if (!ea || !*ea || !ek || !*ek)
			return -ENOENT;
		a = strdup(ea);
		k = strdup(ek);
		if (!a || !k)
			rc = -ENOMEM;
	} else {
		rc = creds_read(file, &text, &len);
		if (rc != 0)
			return rc;
		a = creds_value(text, text + len, "AWS_ACCESS_KEY_ID", &rc);
		k = creds_value(text, text + len, "AWS_SECRET_ACCESS_KEY", &rc);
		explicit_bzero(text, len);
		free(text);
		if (rc == 0 && (!a || !k)) {
			nrs_err("s3 credentials %s: needs the lines "
				"AWS_ACCESS_KEY_ID=... and "
				"AWS_SECRET_ACCESS_KEY=...", file);
			rc = -ENOENT;
		}
	}
	if (rc < 0) {
		free(a);
		free(k);
		return rc;
	}
	*access = a;
	*secret = k;
	return 0;
}

int nrs_objstore_s3_open_url(const char *url, const char *cred_file,
			     const char *ca_file, struct nrs_objstore **out)
{
	struct nrs_s3_opts so = { .url = url, .ca_file = ca_file };
	char *access = NULL, *secret = NULL;
	int err;

	err = nrs_s3_credentials(cred_file, &access, &secret);
	if (err) {
		/* The daemon's words: nereusfs-fsck says its own. */
		nrs_err("S3 %s: no credentials (%s): set AWS_ACCESS_KEY_ID and"
			" AWS_SECRET_ACCESS_KEY or -o s3_credentials=FILE",
			url, strerror(-err));
		return err;
	}
	so.access_key = access;
	so.secret_key = secret;
	err = nrs_objstore_s3_open(&so, out);
	if (err)
		nrs_err("S3 %s: %s", url, err == -EINVAL ?
			"not a URL of the form http[s]://HOST[:PORT]/BUCKET"
			: strerror(-err));
	free(access);
	explicit_bzero(secret, strlen(secret));
	free(secret);
	return err;
}
