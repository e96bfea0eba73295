/*
 * objstore_s3_v2.c - the V2 path of the S3 provider (objstore_s3.c):
 * requests made and signed by libs3 2.0 (Debian's libs3-dev 2.0-4), for
 * old endpoints that know no signature V4 (s3_signature=v2), path style
 * only.  This is the only file that includes libs3.h (STYLE.md); the URL
 * and bucket checks of objstore_s3_open.c ask it (nrs_s3v2_bucket_ok),
 * for both paths.
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
 *   TLS.  libs3 2.0 turns certificate verification off;
 *   objstore_s3_v2tls.c turns it back on for every request made here.
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
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/select.h>
#include <time.h>

/* libs3.h declares S3_deinitialize() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <libs3.h>
#pragma GCC diagnostic pop

#include "obj/objstore.h"
#include "obj/objstore_s3_priv.h"
#include "obj/s3_curl.h"
#include "util/log.h"

#define MAX_IDLE_WAIT_MS	10	/* poll step while curl has no fd */
#define SHA256_META		"sha256"	/* x-amz-meta-sha256 */

_Static_assert(HOST_MAX == S3_MAX_HOSTNAME_SIZE, "libs3's longest host");

/* A V2 store's libs3 state: the bucket context (its strings are the
 * store's), read only after open. */
struct nrs_s3v2 {
	S3BucketContext bc;
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

/* ---- callbacks (made in the calling thread) ---------------------------- */

static S3Status on_properties(const S3ResponseProperties *p, void *data)
{
	struct s3_call *c = data;

	c->have_props = true;
	c->content_length = p->contentLength;
	for (int i = 0; i < p->metaDataCount; i++) {
		if (strcasecmp(p->metaData[i].name, SHA256_META) != 0)
			continue;
		c->has_sha256 = nrs_s3st_parse_sha256(p->metaData[i].value, c->sha256);
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

/* Start c's request in rc (libs3 sets up its curl handle right here). */
static void call_issue(struct s3_call *c, S3RequestContext *rc,
		       const S3PutProperties *pp, uint64_t off)
{
	const S3BucketContext *bc = &c->s->v2->bc;

	nrs_s3v2_tls_begin(c->s->ca_file, c->curl_error);
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
	nrs_s3v2_tls_end();
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
	int64_t deadline = nrs_s3st_now_ms() + c->s->timeout_ms;
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
		left = deadline - nrs_s3st_now_ms();
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

int nrs_s3v2_put(struct nrs_objstore *os, const char *key, const void *buf,
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

int nrs_s3v2_head(struct nrs_objstore *os, const char *key,
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

ssize_t nrs_s3v2_get(struct nrs_objstore *os, const char *key, uint64_t off,
		     void *buf, size_t len)
{
	struct s3_store *s = s3_of(os);
	struct s3_call c;
	int err;

	if (len == 0) {	/* no range to ask for: just say if it is there */
		struct nrs_obj_meta m;

		err = nrs_s3v2_head(os, key, &m);
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
		return nrs_s3st_get_checked(s, key, off, c.dst_len, true, false, 0, 0);
	err = call_result(&c, true);
	if (err < 0)
		return err;
	return nrs_s3st_get_checked(s, key, off, c.dst_len, false, c.have_props,
			   c.content_length, c.got);
}

int nrs_s3v2_del(struct nrs_objstore *os, const char *key)
{
	struct s3_call c;
	int err = call_init(&c, s3_of(os), OP_DELETE, key);

	if (err < 0)
		return err;
	call_run(&c, NULL, 0);
	err = call_result(&c, true);
	return err == -ENOENT ? 0 : err;
}

/* ---- open and close ----------------------------------------------------- */

bool nrs_s3v2_bucket_ok(const char *bucket, bool virtual_host)
{
	return S3_validate_bucket_name(bucket, virtual_host ?
				       S3UriStyleVirtualHost : S3UriStylePath)
	       == S3StatusOK;
}

int nrs_s3v2_open(struct s3_store *s)
{
	struct nrs_s3v2 *v2 = calloc(1, sizeof(*v2));
	int rc;

	if (!v2)
		return -ENOMEM;
	v2->bc.protocol = s->https ? S3ProtocolHTTPS : S3ProtocolHTTP;
	v2->bc.hostName = s->host;
	v2->bc.bucketName = s->bucket;
	v2->bc.uriStyle = S3UriStylePath;
	v2->bc.accessKeyId = s->access;
	v2->bc.secretAccessKey = s->secret;
	rc = lib_get();
	if (rc < 0) {
		free(v2);
		return rc;
	}
	s->v2 = v2;
	return 0;
}

void nrs_s3v2_close(struct nrs_s3v2 *v2)
{
	if (!v2)
		return;
	lib_put();
	free(v2);
}

