/*
 * objstore_s3.c - the S3 object store provider.  Two ways of signing:
 *
 *   V4 (the default, s3_signature=v4): requests of our own made and
 *      signed by libcurl (s3_curl.c says how and why); this file maps
 *      their answers to errnos, logs and counts them (SE1, SE2), and probes
 *      the bucket at mount (PROBE, above nrs_objstore_s3_open_url).
 *   V2 (s3_signature=v2, for old endpoints): libs3 2.0 (Debian's
 *      libs3-dev 2.0-4), path style only.  This file is the only one that
 *      includes libs3.h (STYLE.md); everything below about libs3 concerns
 *      the V2 path alone.
 *
 *  SE1  Every failed request is counted by its class (s3_curl.h), for
 *      nereus_object_store_errors_total{class=...} (V2's libs3 statuses
 *      mapped to the same classes); V4 requests sent again are counted
 *      too.
 *  SE2  and logged in one line: the request, key, status, S3's code and
 *      message, the class, the attempts, and what to fix (a region error
 *      names the region to set).
 *  SC1  The s3_credentials file is read again when it changes (stat at
 *      most every CRED_CHECK_MS, before a request) and at once after a
 *      request refused for its credentials (a token, key or signature
 *      class), which is then sent once more if the keys changed; so
 *      rotated keys and renewed STS tokens need no remount.
 *
 * The rest of this comment describes the V2 path.
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
#include <stdatomic.h>
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

#include "obj/objstore.h"
#include "obj/s3_curl.h"
#include "util/log.h"

#define DEFAULT_TIMEOUT_MS	30000
#define MAX_IDLE_WAIT_MS	10	/* poll step while curl has no fd */
#define CREDS_FILE_MAX		(64u << 10)
#define SHA256_META		"sha256"	/* x-amz-meta-sha256 */
#define DEFAULT_REGION		"us-east-1"
#define REGION_MAX		48
#define PROBE_KEY		"nereusfs-probe"
#define CRED_CHECK_MS		1000	/* SC1: stat the file at most this often */

_Static_assert(NRS_S3C_COUNT == NRS_S3_CLASSES, "objstore.h's class count");

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
	struct nrs_s3c *v4;	/* V4: libcurl's requests; NULL: V2, libs3 */
	char region[REGION_MAX];
	atomic_uint_fast64_t errors[NRS_S3C_COUNT];	/* by class */
	atomic_uint_fast64_t retries;
	/* SC1: the credentials file, re-read when it changes */
	char *cred_file;	/* NULL: keys from the environment or opts */
	pthread_mutex_t cred_lock;
	struct stat cred_st;	/* the file when last read; cred_lock */
	int64_t cred_checked_ms;	/* last stat; cred_lock */
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

/* The class (s3_curl.h) of a libs3 status, for the metrics (SE1). */
static enum nrs_s3_class v2_class(S3Status st)
{
	switch (st) {
	case S3StatusErrorNoSuchKey:
	case S3StatusHttpErrorNotFound:
		return NRS_S3C_NOT_FOUND;
	case S3StatusFailedToConnect:
	case S3StatusNameLookupError:
		return NRS_S3C_UNAVAILABLE;
	case S3StatusConnectionFailed:
	case S3StatusErrorRequestTimeout:
	case S3StatusInterrupted:
		return NRS_S3C_TIMEOUT;
	case S3StatusErrorSignatureDoesNotMatch:
		return NRS_S3C_SIGNATURE;
	case S3StatusErrorInvalidAccessKeyId:
		return NRS_S3C_KEY;
	case S3StatusErrorExpiredToken:
	case S3StatusErrorInvalidToken:
		return NRS_S3C_TOKEN;
	case S3StatusErrorRequestTimeTooSkewed:
		return NRS_S3C_CLOCK;
	case S3StatusErrorAccessDenied:
	case S3StatusHttpErrorForbidden:
		return NRS_S3C_DENIED;
	case S3StatusErrorNoSuchBucket:
		return NRS_S3C_NO_BUCKET;
	case S3StatusServerFailedVerification:
		return NRS_S3C_TLS;
	case S3StatusErrorBadDigest:
		return NRS_S3C_BAD_DIGEST;
	case S3StatusErrorSlowDown:
		return NRS_S3C_THROTTLED;
	case S3StatusErrorInternalError:
		return NRS_S3C_SERVER;
	default:
		return NRS_S3C_OTHER;
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
	atomic_fetch_add_explicit(&c->s->errors[c->timed_out ? NRS_S3C_TIMEOUT :
						 v2_class(c->status)], 1,
				  memory_order_relaxed);	/* SE1 */
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

static int v2_put(struct nrs_objstore *os, const char *key, const void *buf,
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
		nrs_s3_md5_base64(md5_b64, md5);
		pp.md5 = md5_b64;
	}
	if (sha256) {
		nrs_s3_hex(sha_hex, sha256, NRS_SHA256_LEN);
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

static int v2_head(struct nrs_objstore *os, const char *key,
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

/*
 * What a GET of len bytes at off brought (either path): -EIO, logged, for
 * more than was asked for (too_long) or a body other than its
 * Content-Length (have_len false: none came); else the byte count.
 */
static ssize_t get_checked(struct s3_store *s, const char *key, uint64_t off,
			   size_t len, bool too_long, bool have_len,
			   uint64_t content_length, size_t got)
{
	if (too_long) {
		nrs_warn("s3 %s: get %s at %" PRIu64 ": the answer is longer "
			 "than the %zu bytes asked for", s->url, key, off, len);
		return -EIO;
	}
	if (!have_len || got != content_length) {
		nrs_warn("s3 %s: get %s at %" PRIu64 ": body cut short (%zu of "
			 "%" PRIu64 " bytes)", s->url, key, off, got,
			 content_length);
		return -EIO;
	}
	return (ssize_t)got;
}

static ssize_t v2_get(struct nrs_objstore *os, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	struct s3_store *s = s3_of(os);
	struct s3_call c;
	int err;

	if (len == 0) {	/* no range to ask for: just say if it is there */
		struct nrs_obj_meta m;

		err = v2_head(os, key, &m);
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
	if (c.too_long)
		return get_checked(s, key, off, c.dst_len, true, false, 0, 0);
	err = call_result(&c, true);
	if (err < 0)
		return err;
	return get_checked(s, key, off, c.dst_len, false, c.have_props,
			   c.content_length, c.got);
}

static int v2_del(struct nrs_objstore *os, const char *key)
{
	struct s3_call c;
	int err = call_init(&c, s3_of(os), OP_DELETE, key);

	if (err < 0)
		return err;
	call_run(&c, NULL, 0);
	err = call_result(&c, true);
	return err == -ENOENT ? 0 : err;
}

/* ---- signature V4: requests of our own on libcurl (s3_curl.c) ----------- */

static void free_secret(char *v)
{
	if (v)
		explicit_bzero(v, strlen(v));
	free(v);
}

static bool same_file_state(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
	       a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * SC1: re-read the credentials file if it changed (another inode -- a
 * rename over it, as secret managers do --, size, mtime or ctime; looked
 * at most every CRED_CHECK_MS), or at once when force (a request was
 * refused for its credentials).  Returns true if other credentials are in
 * use now.  A file that cannot be read or parsed leaves the current ones,
 * logged.
 */
static bool creds_reload(struct s3_store *s, bool force)
{
	char *a = NULL, *k = NULL, *t = NULL;
	bool changed = false;
	struct stat st;
	int64_t now;
	int rc;

	if (!s->cred_file || !s->v4)
		return false;
	now = now_ms();
	pthread_mutex_lock(&s->cred_lock);
	if (!force && now - s->cred_checked_ms < CRED_CHECK_MS)
		goto out_unlock;
	s->cred_checked_ms = now;
	if (stat(s->cred_file, &st) < 0 ||
	    (!force && same_file_state(&st, &s->cred_st)))
		goto out_unlock;
	s->cred_st = st;
	rc = nrs_s3_credentials(s->cred_file, &a, &k, &t);	/* logs */
	if (rc == 0)
		rc = nrs_s3c_set_creds(s->v4, a, k, t);
	if (rc > 0) {
		changed = true;
		nrs_info("s3 %s: new credentials read from %s", s->url,
			 s->cred_file);
	} else if (rc < 0) {
		nrs_warn("s3 %s: credentials file %s: %s: keeping the ones in "
			 "use", s->url, s->cred_file, strerror(-rc));
	}
	free(a);
	free_secret(k);
	free_secret(t);
out_unlock:
	pthread_mutex_unlock(&s->cred_lock);
	return changed;
}

static const char *const method_names[] = {
	[NRS_S3C_PUT] = "put", [NRS_S3C_GET] = "get",
	[NRS_S3C_HEAD] = "head", [NRS_S3C_DELETE] = "delete",
};

/*
 * Count the outcome of r (by class, SE1) and log a failure in one line
 * that says what to fix (SE2), unless it is a missing object and
 * quiet_enoent.  Returns its errno.
 */
static int v4_result(struct s3_store *s, const struct nrs_s3c_req *r,
		     const struct nrs_s3c_resp *o, bool quiet_enoent)
{
	int err = nrs_s3_class_errno(o->cls);
	const char *advice = nrs_s3_class_advice(o->cls);
	const char *key = r->key ? r->key : "(bucket)";

	if (o->attempts > 1)
		atomic_fetch_add_explicit(&s->retries, o->attempts - 1,
					  memory_order_relaxed);
	if (o->cls != NRS_S3C_OK && o->cls != NRS_S3C_NOT_FOUND)
		atomic_fetch_add_explicit(&s->errors[o->cls], 1,
					  memory_order_relaxed);
	if (err == 0 || (err == -ENOENT && quiet_enoent))
		return err;
	if (o->cls == NRS_S3C_REGION && o->region[0])
		nrs_warn("s3 %s: %s %s: %s: the bucket is in region %s, not %s: "
			 "set -o s3_region=%s", s->url, method_names[r->method],
			 key, o->code[0] ? o->code : "region error", o->region,
			 s->region, o->region);
	else if (o->http)
		nrs_warn("s3 %s: %s %s: HTTP %ld %s%s%s (%s, %u attempt%s)%s%s",
			 s->url, method_names[r->method], key, o->http,
			 o->code, o->message[0] ? ": " : "", o->message,
			 nrs_s3_class_name(o->cls), o->attempts,
			 o->attempts == 1 ? "" : "s", *advice ? ": " : "",
			 advice);
	else
		nrs_warn("s3 %s: %s %s: %s%s (%s, %u attempt%s)%s%s", s->url,
			 method_names[r->method], key,
			 o->timed_out ? "no answer within the deadline: " : "",
			 o->message, nrs_s3_class_name(o->cls), o->attempts,
			 o->attempts == 1 ? "" : "s", *advice ? ": " : "",
			 advice);
	return err;
}

/* Run r (its key checked first) and give its errno (v4_result). */
static int v4_run(struct s3_store *s, const struct nrs_s3c_req *r,
		  struct nrs_s3c_resp *o, bool quiet_enoent)
{
	int err;

	if (!nrs_objkey_is_valid(r->key))
		return -EINVAL;
	creds_reload(s, false);	/* SC1 */
	err = nrs_s3c_run(s->v4, r, o);
	/* SC1: refused for its credentials (an expired token, a rotated
	 * key): once more if the file holds others now */
	if (err == 0 && (o->cls == NRS_S3C_TOKEN || o->cls == NRS_S3C_KEY ||
			 o->cls == NRS_S3C_SIGNATURE) && creds_reload(s, true))
		err = nrs_s3c_run(s->v4, r, o);
	return err < 0 ? err : v4_result(s, r, o, quiet_enoent);
}

static int v4_put(struct nrs_objstore *os, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = {
		.method = NRS_S3C_PUT, .key = key, .body = buf,
		.body_len = len, .sha256 = sha256, .md5 = md5,
	};
	struct nrs_s3c_resp o;

	if (len && !buf)
		return -EINVAL;
	return v4_run(s, &r, &o, false);
}

static int v4_head(struct nrs_objstore *os, const char *key,
		   struct nrs_obj_meta *out)
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = { .method = NRS_S3C_HEAD, .key = key };
	struct nrs_obj_meta m = { 0 };
	struct nrs_s3c_resp o;
	int err = v4_run(s, &r, &o, true);

	if (err < 0)
		return err;
	if (!o.have_length) {
		nrs_warn("s3 %s: head %s: an answer without Content-Length",
			 s->url, key);
		return -EIO;
	}
	m.length = o.content_length;
	if (o.has_meta_sha256) {
		m.has_sha256 = parse_sha256(o.meta_sha256, m.sha256);
		if (!m.has_sha256)
			nrs_warn("s3 %s: head %s: x-amz-meta-sha256 is not 64 "
				 "hex digits", s->url, key);
	}
	*out = m;
	return 0;
}

static ssize_t v4_get(struct nrs_objstore *os, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = key, .off = off, .dst = buf,
		.dst_len = len > SSIZE_MAX ? SSIZE_MAX : len,
	};
	struct nrs_s3c_resp o;
	int err;

	if (len == 0) {	/* no range to ask for: just say if it is there */
		struct nrs_obj_meta m;

		err = v4_head(os, key, &m);
		return err < 0 ? err : 0;
	}
	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	if (off > UINT64_MAX - r.dst_len)
		return -EINVAL;
	err = nrs_s3c_run(s->v4, &r, &o);
	if (err < 0)
		return err;
	if (o.too_long)
		return get_checked(s, key, off, r.dst_len, true, false, 0, 0);
	err = v4_result(s, &r, &o, true);
	if (err < 0)
		return err;
	if (o.http == 416)
		return 0;	/* off is at or past the end */
	return get_checked(s, key, off, r.dst_len, false, o.have_length,
			   o.content_length, o.got);
}

static int v4_del(struct nrs_objstore *os, const char *key)
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = key };
	struct nrs_s3c_resp o;
	int err = v4_run(s, &r, &o, true);

	return err == -ENOENT ? 0 : err;
}

/* ---- the provider: V4 or V2 ---------------------------------------------- */

static int s3_put(struct nrs_objstore *os, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	return s3_of(os)->v4 ? v4_put(os, key, buf, len, md5, sha256)
			     : v2_put(os, key, buf, len, md5, sha256);
}

static int s3_head(struct nrs_objstore *os, const char *key,
		   struct nrs_obj_meta *out)
{
	return s3_of(os)->v4 ? v4_head(os, key, out) : v2_head(os, key, out);
}

static ssize_t s3_get(struct nrs_objstore *os, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	return s3_of(os)->v4 ? v4_get(os, key, off, buf, len)
			     : v2_get(os, key, off, buf, len);
}

static int s3_del(struct nrs_objstore *os, const char *key)
{
	return s3_of(os)->v4 ? v4_del(os, key) : v2_del(os, key);
}

static void store_free(struct s3_store *s)
{
	nrs_s3c_free(s->v4);
	free(s->cred_file);
	pthread_mutex_destroy(&s->cred_lock);
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
	bool v2 = !s3_of(os)->v4;

	store_free(s3_of(os));
	if (v2)
		lib_put();
}

static const struct nrs_objstore_ops s3_ops;

void nrs_objstore_s3_errors(struct nrs_objstore *os,
			    struct nrs_objstore_errors *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < NRS_S3C_COUNT; i++)
		out->name[i] = nrs_s3_class_name((enum nrs_s3_class)i);
	if (!os || os->ops != &s3_ops)
		return;
	for (int i = 0; i < NRS_S3C_COUNT; i++)
		out->by_class[i] = atomic_load_explicit(&s3_of(os)->errors[i],
							memory_order_relaxed);
	out->retries = atomic_load_explicit(&s3_of(os)->retries,
					    memory_order_relaxed);
}

const char *nrs_objstore_s3_class_name(unsigned int i)
{
	return nrs_s3_class_name((enum nrs_s3_class)i);
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

/* Is r a region name: 1 to REGION_MAX - 1 of [a-z0-9-]? */
static bool region_ok(const char *r)
{
	size_t n = strlen(r);

	if (n == 0 || n >= REGION_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!islower((unsigned char)r[i]) && !isdigit((unsigned char)r[i]) &&
		    r[i] != '-')
			return false;
	return true;
}

int nrs_s3_opt_parse(struct nrs_s3_opts *o, const char *name,
		     const char *value)
{
	if (strcmp(name, "s3_region") == 0) {
		if (!value || !region_ok(value))
			return -EINVAL;
		o->region = value;
	} else if (strcmp(name, "s3_style") == 0) {
		if (value && strcmp(value, "path") == 0)
			o->style = NRS_S3_PATH;
		else if (value && strcmp(value, "virtual") == 0)
			o->style = NRS_S3_VIRTUAL;
		else
			return -EINVAL;
	} else if (strcmp(name, "s3_signature") == 0) {
		if (value && strcmp(value, "v4") == 0)
			o->signature = NRS_S3_V4;
		else if (value && strcmp(value, "v2") == 0)
			o->signature = NRS_S3_V2;
		else
			return -EINVAL;
	} else {
		return -ENOENT;
	}
	return 0;
}

/*
 * The region to sign for (REGION below): o->region if given (it wins
 * over the host name, with a warning when the two differ), else the one
 * an AWS host name names, else us-east-1.
 */
static int pick_region(const struct nrs_s3_opts *o, const char *host,
		       char out[REGION_MAX])
{
	char from_host[REGION_MAX];
	bool named = nrs_s3_host_region(host, from_host, sizeof(from_host));

	if (o->region) {
		if (!region_ok(o->region)) {
			nrs_err("s3 %s: s3_region=%s is not a region name "
				"(lower-case letters, digits and '-')", o->url,
				o->region);
			return -EINVAL;
		}
		if (named && strcmp(from_host, o->region) != 0)
			nrs_warn("s3 %s: the host names region %s; signing for "
				 "s3_region=%s as told", o->url, from_host,
				 o->region);
		snprintf(out, REGION_MAX, "%s", o->region);
	} else {
		snprintf(out, REGION_MAX, "%s", named ? from_host : DEFAULT_REGION);
	}
	return 0;
}

int nrs_objstore_s3_open(const struct nrs_s3_opts *o, struct nrs_objstore **out)
{
	struct s3_store *s;
	int rc;

	if (!o || !o->url || !o->access_key || !*o->access_key ||
	    !o->secret_key || !*o->secret_key || o->timeout_ms < 0 ||
	    (o->style != NRS_S3_PATH && o->style != NRS_S3_VIRTUAL) ||
	    (o->signature != NRS_S3_V4 && o->signature != NRS_S3_V2))
		return -EINVAL;
	if (o->signature == NRS_S3_V2 && o->style == NRS_S3_VIRTUAL) {
		nrs_err("s3 %s: s3_signature=v2 takes s3_style=path only",
			o->url);
		return -EINVAL;
	}
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
	pthread_mutex_init(&s->cred_lock, NULL);
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
	if (rc == 0 && o->style == NRS_S3_VIRTUAL &&
	    S3_validate_bucket_name(s->bucket, S3UriStyleVirtualHost) !=
	    S3StatusOK) {
		nrs_err("s3 %s: bucket %s cannot be a host name: use "
			"s3_style=path", o->url, s->bucket);
		rc = -EINVAL;
		goto out_free;
	}
	if (rc < 0) {
		if (rc == -EINVAL)
			nrs_err("s3: %s is not http[s]://HOST[:PORT]/BUCKET",
				o->url);
		goto out_free;
	}
	rc = pick_region(o, s->host, s->region);
	if (rc < 0)
		goto out_free;
	if (o->signature == NRS_S3_V4) {
		struct nrs_s3c_opts co = {
			.https = s->bc.protocol == S3ProtocolHTTPS,
			.host = s->host, .bucket = s->bucket,
			.virtual_style = o->style == NRS_S3_VIRTUAL,
			.region = s->region, .access = s->access,
			.secret = s->secret, .token = o->session_token,
			.ca_file = s->ca_file, .timeout_ms = s->timeout_ms,
		};

		rc = nrs_s3c_new(&co, &s->v4);
		if (rc < 0)
			goto out_free;
		*out = &s->base;
		return 0;
	}
	if (o->session_token && *o->session_token)
		nrs_warn("s3 %s: s3_signature=v2 sends no session token",
			 o->url);
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

int nrs_s3_credentials(const char *file, char **access, char **secret,
		       char **token)
{
	char *a = NULL, *k = NULL, *t = NULL, *text;
	size_t len;
	int rc = 0;

	if (!file) {
		const char *ea = getenv("AWS_ACCESS_KEY_ID");
		const char *ek = getenv("AWS_SECRET_ACCESS_KEY");
		const char *et = getenv("AWS_SESSION_TOKEN");

		if (!ea || !*ea || !ek || !*ek)
			return -ENOENT;
		a = strdup(ea);
		k = strdup(ek);
		if (et && *et)
			t = strdup(et);
		if (!a || !k || (et && *et && !t))
			rc = -ENOMEM;
	} else {
		rc = creds_read(file, &text, &len);
		if (rc != 0)
			return rc;
		a = creds_value(text, text + len, "AWS_ACCESS_KEY_ID", &rc);
		k = creds_value(text, text + len, "AWS_SECRET_ACCESS_KEY", &rc);
		t = creds_value(text, text + len, "AWS_SESSION_TOKEN", &rc);
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
		free_secret(k);
		free_secret(t);
		return rc;
	}
	*access = a;
	*secret = k;
	*token = t;
	return 0;
}

/*
 * PROBE: at mount, one GET of PROBE_KEY (a key nereusfs never writes;
 * bytes 0-0) through the store's own path.  Absent (404 NoSuchKey) or
 * present, the credentials, region and bucket work.  A definite refusal
 * (403 of any kind, a region error, NoSuchBucket, a clock skew, a
 * certificate) fails the mount: nothing would ever materialize.  No
 * answer, or a 5xx, is a warning: the mount goes on (appends of local-wal
 * streams never wait for the bucket).  An AccessDenied on a missing key
 * is a refusal too: without s3:ListBucket S3 answers 403 for every missing
 * key, and the proof of an uncertain upload (DESIGN.md 6) needs 404.
 * With V2 the probe is a head() through libs3, whose answers are coarser
 * (-EACCES refuses).
 */
static int probe(struct s3_store *s)
{
	unsigned char b;
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = PROBE_KEY, .dst = &b,
		.dst_len = 1,
	};
	struct nrs_s3c_resp o;
	int err;

	if (!s->v4) {
		struct nrs_obj_meta m;

		err = v2_head(&s->base, PROBE_KEY, &m);
		if (err == 0 || err == -ENOENT)
			return 0;
		if (err == -EACCES) {
			nrs_err("S3 %s: the store refuses these credentials "
				"(signature V2): check the keys, or use "
				"s3_signature=v4", s->url);
			return err;
		}
		nrs_warn("S3 %s: the store did not answer the probe (%s): "
			 "mounting anyway, objects wait", s->url, strerror(-err));
		return 0;
	}
	err = nrs_s3c_run(s->v4, &r, &o);
	if (err < 0)
		return err;
	switch (o.cls) {
	case NRS_S3C_OK:
	case NRS_S3C_NOT_FOUND:
		return 0;
	case NRS_S3C_UNAVAILABLE:
	case NRS_S3C_TIMEOUT:
	case NRS_S3C_THROTTLED:
	case NRS_S3C_SERVER:
	case NRS_S3C_OTHER:
		nrs_warn("S3 %s: the store did not answer the probe (%s%s%s): "
			 "mounting anyway, objects wait", s->url,
			 nrs_s3_class_name(o.cls), o.message[0] ? ": " : "",
			 o.message);
		return 0;
	default:
		break;
	}
	atomic_fetch_add_explicit(&s->errors[o.cls], 1, memory_order_relaxed);
	if (o.cls == NRS_S3C_REGION && o.region[0])
		nrs_err("S3 %s: refused: the bucket is in region %s, not %s: "
			"set -o s3_region=%s", s->url, o.region, s->region,
			o.region);
	else
		nrs_err("S3 %s: refused (HTTP %ld %s, %s): %s", s->url, o.http,
			o.code[0] ? o.code : "", nrs_s3_class_name(o.cls),
			nrs_s3_class_advice(o.cls));
	return o.cls == NRS_S3C_NO_BUCKET ? -ENXIO : -EACCES;
}

int nrs_objstore_s3_open_url(const struct nrs_s3_opts *o,
			     const char *cred_file, struct nrs_objstore **out)
{
	struct nrs_s3_opts so = *o;
	char *access = NULL, *secret = NULL, *token = NULL;
	struct nrs_objstore *st;
	int err;

	err = nrs_s3_credentials(cred_file, &access, &secret, &token);
	if (err) {
		/* The daemon's words: nereusfs-fsck says its own. */
		nrs_err("S3 %s: no credentials (%s): set AWS_ACCESS_KEY_ID and"
			" AWS_SECRET_ACCESS_KEY or -o s3_credentials=FILE",
			o->url, strerror(-err));
		return err;
	}
	so.access_key = access;
	so.secret_key = secret;
	so.session_token = token;
	err = nrs_objstore_s3_open(&so, &st);
	if (err)
		nrs_err("S3 %s: %s", o->url, err == -EINVAL ?
			"not a URL of the form http[s]://HOST[:PORT]/BUCKET, "
			"or bad s3_ options (see above)" : strerror(-err));
	free(access);
	free_secret(secret);
	free_secret(token);
	if (err)
		return err;
	if (cred_file && s3_of(st)->v4) {	/* SC1 */
		struct s3_store *s = s3_of(st);

		s->cred_file = strdup(cred_file);
		if (!s->cred_file || stat(cred_file, &s->cred_st) < 0) {
			err = s->cred_file ? -errno : -ENOMEM;
			nrs_obj_close(st);
			return err;
		}
		s->cred_checked_ms = now_ms();
	}
	err = probe(s3_of(st));
	if (err) {
		nrs_obj_close(st);
		return err;
	}
	*out = st;
	return 0;
}
