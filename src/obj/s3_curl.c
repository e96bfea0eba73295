/*
 * s3_curl.c - S3 requests signed with AWS Signature Version 4 by libcurl;
 * the one file that includes curl/curl.h (STYLE.md), used by the S3
 * provider (objstore_s3.c) alone.
 *
 * WHY LIBCURL, AND WHY OUR OWN REQUESTS
 *
 * libs3 2.0 (Debian's) signs only V2, which AWS refuses for every bucket
 * made since 2020 and R2 and B2 never took.  libcurl, which libs3 already
 * brought into the process, signs V4 itself since 7.75
 * (CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3"), so the signature is a
 * maintained library's, not ours, and the requests are ours: their
 * timeouts, TLS verification and connection reuse are set here directly
 * rather than through libs3, which offers none of them.  libs3 stays for
 * s3_signature=v2 only.  We link the libcurl libs3 links (Debian's
 * libcurl-gnutls: libcurl4-gnutls-dev), so the process has one libcurl and
 * one TLS stack (GnuTLS); a unit test checks the TLS library's name.
 *
 * WHAT CURL 7.88 (DEBIAN 12) DOES AND DOES NOT DO FOR V4
 *
 *  - It hashes only a POSTFIELDS body and adds no x-amz-content-sha256
 *    (curl 8 does): so every request carries that header, set here (SH1):
 *    the object's SHA-256 in hex on PUT (the digest the proof of
 *    DESIGN.md 6 uses, so the service refuses a body damaged on the way;
 *    "UNSIGNED-PAYLOAD" when put() has none), the empty body's digest on
 *    GET, HEAD and DELETE.  curl then signs with that value as the
 *    payload hash, as the service checks it.
 *  - It signs every header we add, including one we add empty to
 *    suppress it: so "Expect:" is never set (the 100-continue curl adds
 *    itself is not signed, and costs one round trip per PUT).
 *  - It does not sort a query string (8.3 does): we send none.
 *  - Content-MD5 is kept on PUT (SH2): servers that ignore the SHA-256
 *    header (moto, s3rver) check it.
 *
 * REQUESTS: PUT, HEAD, GET with a Range, DELETE of BUCKET/KEY in the path
 * ("http[s]://HOST/BUCKET/KEY") or virtual-hosted ("http[s]://BUCKET.HOST/
 * KEY") style.  Keys are nrs_objkey_is_valid() keys: no character needs
 * escaping.  x-amz-security-token carries a session token.
 *
 * RETRIES AND DEADLINE (SR1, SR2, SR3)
 *
 *  SR1  A request is sent again only when its class is transient: a 5xx,
 *      503 SlowDown or 429, 400 RequestTimeout, no connection or no
 *      answer.  Never another 4xx: the same request gets the same answer.
 *      At most MAX_ATTEMPTS in all: the callers (materializer, reader)
 *      retry on their own schedule, so a store that is down fails an
 *      operation in about a second rather than holding it.
 *  SR2  Between attempts: exponential back-off from 100 ms, doubling, at
 *      most 2 s, with jitter (uniform in [d/2, d]) so threads that failed
 *      together do not retry together.
 *  SR3  One deadline per operation (timeout_ms, retries and pauses
 *      included): every attempt's CURLOPT_TIMEOUT is what is left of it,
 *      and no pause runs past it.  So a stalled service holds a caller
 *      (and unmount) for at most timeout_ms.
 *
 * CONNECTIONS: finished easy handles go back to a small pool (POOL_MAX),
 * so the next request reuses their connection (keep-alive) and TLS
 * session.
 *
 * TLS: CURLOPT_SSL_VERIFYPEER 1 and VERIFYHOST 2 on every request (curl's
 * defaults, set anyway), CURLOPT_CAINFO when a CA file is given; else
 * GnuTLS's system store.  Our calls to curl_easy_setopt pass through
 * objstore_s3_v2tls.c's interposition unchanged (it acts only while libs3
 * sets up a request).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"

#define POOL_MAX		16
#define ERRBODY_MAX		8192	/* bytes of an error body kept */
#define BACKOFF_BASE_MS		100
#define BACKOFF_CAP_MS		2000
#define IO_BUFFER		(512 << 10)	/* curl's read and upload buffers:
					 * 16 KiB and 64 KiB by default */
#define MAX_ATTEMPTS		4	/* SR1: a refused connection fails in ~1 s */
#define EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define URL_MAX			(NRS_OBJKEY_MAX + 512)
#define TOKEN_MAX		4096	/* a session token's length, at most */
#define HEADERS_MAX		(TOKEN_MAX + 1024)

/* ---- classes (pure) ----------------------------------------------------- */

static const char *const class_names[NRS_S3C_COUNT] = {
	[NRS_S3C_OK] = "ok",
	[NRS_S3C_NOT_FOUND] = "not_found",
	[NRS_S3C_UNAVAILABLE] = "unavailable",
	[NRS_S3C_TIMEOUT] = "timeout",
	[NRS_S3C_THROTTLED] = "throttled",
	[NRS_S3C_SERVER] = "server",
	[NRS_S3C_CLOCK] = "clock_skew",
	[NRS_S3C_REGION] = "region",
	[NRS_S3C_SIGNATURE] = "signature",
	[NRS_S3C_KEY] = "access_key",
	[NRS_S3C_TOKEN] = "token",
	[NRS_S3C_DENIED] = "access_denied",
	[NRS_S3C_NO_BUCKET] = "no_bucket",
	[NRS_S3C_TLS] = "tls",
	[NRS_S3C_BAD_DIGEST] = "bad_digest",
	[NRS_S3C_OTHER] = "other",
};

const char *nrs_s3_class_name(enum nrs_s3_class c)
{
	return (unsigned)c < NRS_S3C_COUNT ? class_names[c] : "other";
}

const char *nrs_s3_class_advice(enum nrs_s3_class c)
{
	switch (c) {
	case NRS_S3C_CLOCK:
		return "this machine's clock is off by more than 15 minutes: "
		       "set it right (NTP)";
	case NRS_S3C_REGION:
		return "the bucket is in another region: set -o s3_region= "
		       "to its region";
	case NRS_S3C_SIGNATURE:
		return "the secret key is wrong: check AWS_SECRET_ACCESS_KEY "
		       "(or the s3_credentials file), or try s3_signature=v2 "
		       "for a server that only takes V2";
	case NRS_S3C_KEY:
		return "the access key id is unknown to the store: check "
		       "AWS_ACCESS_KEY_ID (or the s3_credentials file)";
	case NRS_S3C_TOKEN:
		return "the session token is expired or wrong: renew "
		       "AWS_SESSION_TOKEN (or the s3_credentials file)";
	case NRS_S3C_DENIED:
		return "these credentials may not use the bucket: grant "
		       "s3:GetObject, s3:PutObject, s3:DeleteObject and "
		       "s3:ListBucket on it";
	case NRS_S3C_NO_BUCKET:
		return "there is no such bucket: create it, or fix the URL";
	case NRS_S3C_TLS:
		return "the server's certificate does not verify: fix the "
		       "server, or name its CA with -o s3_ca=FILE";
	default:
		return "";
	}
}

enum nrs_s3_class nrs_s3_classify(long http, const char *code,
				  enum nrs_s3_net net, bool is_object)
{
	static const struct {
		const char *code;
		enum nrs_s3_class cls;
	} codes[] = {
		{ "NoSuchKey", NRS_S3C_NOT_FOUND },
		{ "NoSuchBucket", NRS_S3C_NO_BUCKET },
		{ "RequestTimeout", NRS_S3C_TIMEOUT },
		{ "SlowDown", NRS_S3C_THROTTLED },
		{ "RequestTimeTooSkewed", NRS_S3C_CLOCK },
		{ "AuthorizationHeaderMalformed", NRS_S3C_REGION },
		{ "PermanentRedirect", NRS_S3C_REGION },
		{ "IllegalLocationConstraintException", NRS_S3C_REGION },
		{ "SignatureDoesNotMatch", NRS_S3C_SIGNATURE },
		{ "InvalidAccessKeyId", NRS_S3C_KEY },
		{ "ExpiredToken", NRS_S3C_TOKEN },
		{ "InvalidToken", NRS_S3C_TOKEN },
		{ "TokenRefreshRequired", NRS_S3C_TOKEN },
		{ "AccessDenied", NRS_S3C_DENIED },
		{ "BadDigest", NRS_S3C_BAD_DIGEST },
		{ "XAmzContentSHA256Mismatch", NRS_S3C_BAD_DIGEST },
		{ "InvalidDigest", NRS_S3C_BAD_DIGEST },
	};

	if (http == 0) {
		switch (net) {
		case NRS_S3_NET_TIMEOUT:
			return NRS_S3C_TIMEOUT;
		case NRS_S3_NET_TLS:
			return NRS_S3C_TLS;
		default:
			return NRS_S3C_UNAVAILABLE;
		}
	}
	if (http >= 200 && http < 300)
		return NRS_S3C_OK;
	if (code && *code)
		for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
			if (strcmp(code, codes[i].code) == 0)
				return codes[i].cls;
	if (http == 429 || http == 503)
		return NRS_S3C_THROTTLED;
	if (http >= 500)
		return NRS_S3C_SERVER;
	if (http == 404)
		return is_object ? NRS_S3C_NOT_FOUND : NRS_S3C_NO_BUCKET;
	if (http == 403)
		return NRS_S3C_DENIED;
	if (http == 301)
		return NRS_S3C_REGION;	/* a HEAD in the wrong region */
	return NRS_S3C_OTHER;
}

bool nrs_s3_class_is_retryable(enum nrs_s3_class cls)
{
	switch (cls) {	/* SR1 */
	case NRS_S3C_UNAVAILABLE:
	case NRS_S3C_TIMEOUT:
	case NRS_S3C_THROTTLED:
	case NRS_S3C_SERVER:
		return true;
	default:
		return false;
	}
}

int nrs_s3_class_errno(enum nrs_s3_class c)
{
	switch (c) {
	case NRS_S3C_OK:
		return 0;
	case NRS_S3C_NOT_FOUND:
		return -ENOENT;
	case NRS_S3C_UNAVAILABLE:
		return -ECONNREFUSED;
	case NRS_S3C_TIMEOUT:
		return -ETIMEDOUT;
	case NRS_S3C_CLOCK:
	case NRS_S3C_REGION:
	case NRS_S3C_SIGNATURE:
	case NRS_S3C_KEY:
	case NRS_S3C_TOKEN:
	case NRS_S3C_DENIED:
		return -EACCES;
	default:	/* THROTTLED, SERVER, NO_BUCKET, TLS, BAD_DIGEST, OTHER */
		return -EIO;
	}
}

int nrs_s3_backoff_ms(unsigned int attempt, int base_ms, int cap_ms,
		      unsigned int *seed)
{
	int64_t d = base_ms;

	if (base_ms <= 0 || cap_ms <= 0)
		return 0;
	for (unsigned int i = 1; i < attempt && d < cap_ms; i++)
		d *= 2;	/* SR2: stops doubling at the cap, never wraps */
	if (d > cap_ms)
		d = cap_ms;
	return (int)(d / 2 + rand_r(seed) % (d / 2 + 1));
}

bool nrs_s3_host_region(const char *host, char *out, size_t n)
{
	static const char *const tails[] = {
		".amazonaws.com", ".amazonaws.com.cn",
	};
	const char *colon = strchr(host, ':');
	size_t hl = colon ? (size_t)(colon - host) : strlen(host);
	size_t end = 0, start, rl;

	for (size_t i = 0; i < 2 && !end; i++) {
		size_t tl = strlen(tails[i]);

		if (hl > tl && strncasecmp(host + hl - tl, tails[i], tl) == 0)
			end = hl - tl;	/* the region label ends here */
	}
	if (!end)
		return false;
	start = end;
	while (start > 0 && host[start - 1] != '.')
		start--;
	/* s3.REGION, BUCKET.s3.REGION, s3.dualstack.REGION or s3-REGION */
	if (start >= 3 && strncasecmp(host + start - 3, "s3.", 3) == 0)
		;
	else if (start >= 13 &&
		 strncasecmp(host + start - 13, "s3.dualstack.", 13) == 0)
		;
	else if (end - start > 3 && strncasecmp(host + start, "s3-", 3) == 0)
		start += 3;
	else
		return false;
	rl = end - start;
	if (rl == 0 || rl >= n)
		return false;
	for (size_t i = start; i < end; i++)
		if (!isalnum((unsigned char)host[i]) && host[i] != '-')
			return false;
	memcpy(out, host + start, rl);
	out[rl] = '\0';
	return true;
}

/* ---- the client --------------------------------------------------------- */

struct nrs_s3c {
	bool https, virtual_style;
	char *host, *bucket, *region, *ca_file;
	char *sigv4;		/* "aws:amz:REGION:s3" */
	pthread_mutex_t cred_lock;
	char *access, *secret;	/* protected by cred_lock */
	char *token;		/* NULL: none; protected by cred_lock */
	char *userpwd;		/* "ACCESS:SECRET", wiped on free; protected
				 * by cred_lock */
	int timeout_ms;
	pthread_mutex_t lock;
	CURL *pool[POOL_MAX];	/* idle handles; protected by lock */
	int npool;		/* protected by lock */
	unsigned int seed;	/* jitter; protected by lock */
};

#define SWAP_STR(x, y) do { char *t_ = (x); (x) = (y); (y) = t_; } while (0)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_ALL);
}

static void wipe_free(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
	free(s);
}

void nrs_s3c_free(struct nrs_s3c *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->npool; i++)
		curl_easy_cleanup(c->pool[i]);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->cred_lock);
	free(c->host);
	free(c->bucket);
	free(c->region);
	free(c->access);
	wipe_free(c->secret);
	wipe_free(c->token);
	wipe_free(c->userpwd);
	free(c->ca_file);
	free(c->sigv4);
	free(c);
}

static char *dup_opt(const char *s, bool *fail)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*fail = true;
	return d;
}

int nrs_s3c_new(const struct nrs_s3c_opts *o, struct nrs_s3c **out)
{
	struct nrs_s3c *c;
	bool fail = false;

	if (!o->host || !o->bucket || !o->region || !o->access || !o->secret ||
	    o->timeout_ms <= 0 || (o->token && strlen(o->token) > TOKEN_MAX))
		return -EINVAL;
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return -ENOMEM;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->cred_lock, NULL);
	c->https = o->https;
	c->virtual_style = o->virtual_style;
	c->timeout_ms = o->timeout_ms;
	c->seed = (unsigned int)time(NULL) ^ (unsigned int)(uintptr_t)c;
	c->host = dup_opt(o->host, &fail);
	c->bucket = dup_opt(o->bucket, &fail);
	c->region = dup_opt(o->region, &fail);
	c->access = dup_opt(o->access, &fail);
	c->secret = dup_opt(o->secret, &fail);
	c->token = dup_opt(o->token && *o->token ? o->token : NULL, &fail);
	c->ca_file = dup_opt(o->ca_file, &fail);
	if (!fail && (asprintf(&c->sigv4, "aws:amz:%s:s3", o->region) < 0 ||
		      asprintf(&c->userpwd, "%s:%s", o->access, o->secret) < 0)) {
		c->sigv4 = NULL;
		fail = true;
	}
	if (fail) {
		nrs_s3c_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

static bool same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int nrs_s3c_set_creds(struct nrs_s3c *c, const char *access,
		      const char *secret, const char *token)
{
	char *a, *k, *t = NULL, *up = NULL;
	int rc;

	if (!access || !*access || !secret || !*secret ||
	    (token && strlen(token) > TOKEN_MAX))
		return -EINVAL;
	if (token && !*token)
		token = NULL;
	pthread_mutex_lock(&c->cred_lock);
	rc = same(c->access, access) && same(c->secret, secret) &&
	     same(c->token, token);
	pthread_mutex_unlock(&c->cred_lock);
	if (rc)
		return 0;	/* nothing new */
	a = strdup(access);
	k = strdup(secret);
	if (token)
		t = strdup(token);
	if (!a || !k || (token && !t) ||
	    asprintf(&up, "%s:%s", access, secret) < 0) {
		free(a);
		wipe_free(k);
		wipe_free(t);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->cred_lock);	/* swap, then wipe the old */
	SWAP_STR(c->access, a);
	SWAP_STR(c->secret, k);
	SWAP_STR(c->token, t);
	SWAP_STR(c->userpwd, up);
	pthread_mutex_unlock(&c->cred_lock);
	free(a);
	wipe_free(k);
	wipe_free(t);
	wipe_free(up);
	return 1;
}

int nrs_s3c_url(struct nrs_s3c *c, const char *key, char *buf, size_t n)
{
	const char *scheme = c->https ? "https" : "http";
	int len;

	if (c->virtual_style)
		len = snprintf(buf, n, "%s://%s.%s/%s", scheme, c->bucket,
			       c->host, key ? key : "");
	else
		len = snprintf(buf, n, "%s://%s/%s%s%s", scheme, c->host,
			       c->bucket, key ? "/" : "", key ? key : "");
	return len < 0 || (size_t)len >= n ? -ENOSPC : len;
}

const char *nrs_s3c_tls_name(void)
{
	const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);

	return v && v->ssl_version ? v->ssl_version : "";
}

void nrs_s3_hex(char *out, const unsigned char *in, size_t n)
{
	static const char d[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[in[i] >> 4];
		out[2 * i + 1] = d[in[i] & 15];
	}
	out[2 * n] = '\0';
}

void nrs_s3_md5_base64(char out[25], const unsigned char md5[NRS_MD5_LEN])
{
	/* 16 bytes: 24 characters ("==" at the end) and a NUL */
	_Static_assert(4 * ((NRS_MD5_LEN + 2) / 3) + 1 == 25, "out's size");
	EVP_EncodeBlock((unsigned char *)out, md5, NRS_MD5_LEN);
}

/* The headers of r, one per line, into buf (SH1, SH2). */
int nrs_s3c_describe(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		     char *buf, size_t n)
{
	size_t len = 0;
	int k;

#define ADD(...) do {							\
		k = snprintf(buf + len, n - len, __VA_ARGS__);		\
		if (k < 0 || (size_t)k >= n - len)			\
			return -ENOSPC;					\
		len += (size_t)k;					\
	} while (0)

	if (n == 0)
		return -ENOSPC;
	buf[0] = '\0';
	if (r->method == NRS_S3C_PUT) {
		if (r->sha256) {
			char sha[2 * NRS_SHA256_LEN + 1];

			nrs_s3_hex(sha, r->sha256, NRS_SHA256_LEN);
			ADD("x-amz-content-sha256: %s\n", sha);
			ADD("x-amz-meta-sha256: %s\n", sha);
		} else {
			ADD("x-amz-content-sha256: UNSIGNED-PAYLOAD\n");
		}
		if (r->md5) {
			char md5[25];

			nrs_s3_md5_base64(md5, r->md5);
			ADD("Content-MD5: %s\n", md5);
		}
		ADD("Content-Type: application/octet-stream\n");
	} else {
		ADD("x-amz-content-sha256: " EMPTY_SHA256 "\n");
	}
	if (r->method == NRS_S3C_GET && r->dst_len)
		ADD("Range: bytes=%" PRIu64 "-%" PRIu64 "\n", r->off,
		    r->off + (uint64_t)r->dst_len - 1);
#undef ADD
	pthread_mutex_lock(&c->cred_lock);
	k = c->token ? snprintf(buf + len, n - len, "x-amz-security-token: %s\n",
				c->token) : 0;
	pthread_mutex_unlock(&c->cred_lock);
	if (k < 0 || (size_t)k >= n - len)
		return -ENOSPC;
	len += (size_t)k;
	return (int)len;
}

/* ---- one attempt -------------------------------------------------------- */

struct attempt {
	const struct nrs_s3c_req *r;
	struct nrs_s3c_resp *out;
	CURL *h;
	size_t sent;		/* PUT: body bytes handed to curl */
	char errbody[ERRBODY_MAX + 1];
	size_t errlen;
	char curl_error[CURL_ERROR_SIZE];
};

static size_t on_read(char *buf, size_t size, size_t nitems, void *data)
{
	struct attempt *a = data;
	size_t n = a->r->body_len - a->sent, room = size * nitems;

	if (n > room)
		n = room;
	memcpy(buf, (const char *)a->r->body + a->sent, n);
	a->sent += n;
	return n;
}

static long status_of(CURL *h)
{
	long st = 0;

	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
	return st;
}

static size_t on_write(char *buf, size_t size, size_t nmemb, void *data)
{
	struct attempt *a = data;
	struct nrs_s3c_resp *o = a->out;
	size_t n = size * nmemb;
	long st = status_of(a->h);

	if (st >= 200 && st < 300) {
		if (a->r->method != NRS_S3C_GET)
			return n;	/* a PUT's or DELETE's small answer */
		if (n > a->r->dst_len - o->got) {
			o->too_long = true;
			return 0;	/* aborts the transfer */
		}
		memcpy((char *)a->r->dst + o->got, buf, n);
		o->got += n;
		return n;
	}
	if (n > ERRBODY_MAX - a->errlen)
		n = ERRBODY_MAX - a->errlen;	/* the rest is dropped */
	memcpy(a->errbody + a->errlen, buf, n);
	a->errlen += n;
	return size * nmemb;
}

/* Is line (of n bytes) the header name?  Then *val is its value. */
static bool header_is(const char *line, size_t n, const char *name,
		      const char **val, size_t *vlen)
{
	size_t nl = strlen(name);
	const char *v, *e = line + n;

	if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return false;
	v = line + nl + 1;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && isspace((unsigned char)e[-1]))
		e--;
	*val = v;
	*vlen = (size_t)(e - v);
	return true;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *data)
{
	struct attempt *a = data;
	struct nrs_s3c_resp *o = a->out;
	size_t n = size * nitems, vl;
	const char *v;

	if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		/* a new answer (after a 100 Continue, say): forget the
		 * headers of the one before */
		o->have_length = false;
		o->has_meta_sha256 = false;
		return n;
	}
	if (header_is(buf, n, "content-length", &v, &vl)) {
		uint64_t len = 0;
		bool ok = vl > 0 && vl <= 19;

		for (size_t i = 0; ok && i < vl; i++) {
			if (v[i] < '0' || v[i] > '9')
				ok = false;
			else
				len = len * 10 + (uint64_t)(v[i] - '0');
		}
		o->have_length = ok;
		o->content_length = ok ? len : 0;
	} else if (header_is(buf, n, "x-amz-meta-sha256", &v, &vl)) {
		if (vl >= sizeof(o->meta_sha256))
			vl = sizeof(o->meta_sha256) - 1;
		memcpy(o->meta_sha256, v, vl);
		o->meta_sha256[vl] = '\0';
		o->has_meta_sha256 = true;
	}
	return n;
}

/* The text of <tag>...</tag> in body into out (size n), or "". */
static void xml_value(const char *body, const char *tag, char *out, size_t n)
{
	char open[40], close[40];
	const char *p, *e;
	size_t l;

	out[0] = '\0';
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	p = strstr(body, open);
	if (!p)
		return;
	p += strlen(open);
	e = strstr(p, close);
	if (!e)
		return;
	l = (size_t)(e - p);
	if (l >= n)
		l = n - 1;
	memcpy(out, p, l);
	out[l] = '\0';
	for (size_t i = 0; i < l; i++)	/* for log lines: printable only */
		if (!isprint((unsigned char)out[i]))
			out[i] = '?';
}

static enum nrs_s3_net net_of(CURLcode rc)
{
	switch (rc) {
	case CURLE_OK:
		return NRS_S3_NET_OK;
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return NRS_S3_NET_REFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
		return NRS_S3_NET_RESOLVE;
	case CURLE_OPERATION_TIMEDOUT:
		return NRS_S3_NET_TIMEOUT;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
		return NRS_S3_NET_TLS;
	default:
		return NRS_S3_NET_OTHER;
	}
}

static CURL *handle_get(struct nrs_s3c *c)
{
	CURL *h = NULL;

	pthread_mutex_lock(&c->lock);
	if (c->npool > 0)
		h = c->pool[--c->npool];
	pthread_mutex_unlock(&c->lock);
	if (h)
		curl_easy_reset(h);	/* keeps its connections */
	else
		h = curl_easy_init();
	return h;
}

static void handle_put(struct nrs_s3c *c, CURL *h)
{
	pthread_mutex_lock(&c->lock);
	if (c->npool < POOL_MAX) {
		c->pool[c->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (h)
		curl_easy_cleanup(h);
}

/* One attempt of r with timeout_ms; the answer into a->out. */
static int attempt_run(struct nrs_s3c *c, struct attempt *a, long timeout_ms)
{
	const struct nrs_s3c_req *r = a->r;
	struct nrs_s3c_resp *o = a->out;
	char url[URL_MAX], hdrs[HEADERS_MAX];
	struct curl_slist *list = NULL;
	CURLcode rc = CURLE_OK;
	int err = 0;
	char *line, *save = NULL;

	if (nrs_s3c_url(c, r->key, url, sizeof(url)) < 0 ||
	    nrs_s3c_describe(c, r, hdrs, sizeof(hdrs)) < 0)
		return -EINVAL;
	for (line = strtok_r(hdrs, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		struct curl_slist *l = curl_slist_append(list, line);

		if (!l) {
			curl_slist_free_all(list);
			return -ENOMEM;
		}
		list = l;
	}
	a->h = handle_get(c);
	if (!a->h) {
		curl_slist_free_all(list);
		return -ENOMEM;
	}
	o->got = 0;
	o->too_long = false;
	o->have_length = false;
	o->has_meta_sha256 = false;
	o->code[0] = o->message[0] = o->region[0] = '\0';
	a->sent = 0;
	a->errlen = 0;
	a->curl_error[0] = '\0';

#define SET(opt, v) do { if (rc == CURLE_OK) rc = curl_easy_setopt(a->h, opt, v); } while (0)
	SET(CURLOPT_URL, url);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_AWS_SIGV4, c->sigv4);
	pthread_mutex_lock(&c->cred_lock);
	SET(CURLOPT_USERPWD, c->userpwd);	/* curl keeps a copy */
	pthread_mutex_unlock(&c->cred_lock);
	SET(CURLOPT_HTTPHEADER, list);
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	if (c->ca_file)
		SET(CURLOPT_CAINFO, c->ca_file);
	SET(CURLOPT_TIMEOUT_MS, timeout_ms);
	SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	SET(CURLOPT_ERRORBUFFER, a->curl_error);
	SET(CURLOPT_WRITEFUNCTION, on_write);
	SET(CURLOPT_WRITEDATA, a);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, a);
	SET(CURLOPT_USERAGENT, "nereusfs");
	SET(CURLOPT_BUFFERSIZE, (long)IO_BUFFER);
	SET(CURLOPT_UPLOAD_BUFFERSIZE, (long)IO_BUFFER);
	switch (r->method) {
	case NRS_S3C_PUT:
		SET(CURLOPT_UPLOAD, 1L);
		SET(CURLOPT_READFUNCTION, on_read);
		SET(CURLOPT_READDATA, a);
		SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
		break;
	case NRS_S3C_HEAD:
		SET(CURLOPT_NOBODY, 1L);
		break;
	case NRS_S3C_DELETE:
		SET(CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	case NRS_S3C_GET:
		break;
	}
#undef SET
	if (rc == CURLE_OK)
		rc = curl_easy_perform(a->h);
	o->http = status_of(a->h);
	if (rc == CURLE_WRITE_ERROR && o->too_long)
		rc = CURLE_OK;	/* our own abort; the caller sees too_long */
	o->net = net_of(rc);
	if (rc != CURLE_OK) {
		o->http = 0;	/* an answer cut short is no answer */
		const char *m = a->curl_error[0] ? a->curl_error :
				curl_easy_strerror(rc);
		size_t ml = strnlen(m, sizeof(o->message) - 1);

		memcpy(o->message, m, ml);
		o->message[ml] = '\0';
	} else if (o->http >= 300) {
		a->errbody[a->errlen] = '\0';
		xml_value(a->errbody, "Code", o->code, sizeof(o->code));
		xml_value(a->errbody, "Message", o->message,
			  sizeof(o->message));
		xml_value(a->errbody, "Region", o->region, sizeof(o->region));
	} else if (r->method == NRS_S3C_PUT && a->sent != r->body_len) {
		err = -EIO;	/* not whole: never taken for a success */
	}
	if (rc == CURLE_OUT_OF_MEMORY)
		err = -ENOMEM;
	curl_slist_free_all(list);
	handle_put(c, a->h);
	a->h = NULL;
	return err;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int nrs_s3c_run(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		struct nrs_s3c_resp *out)
{
	int64_t deadline = now_ms() + c->timeout_ms;	/* SR3 */
	struct attempt *a;
	int err = 0;

	if (r->method == NRS_S3C_PUT && r->body_len && !r->body)
		return -EINVAL;
	a = malloc(sizeof(*a));
	if (!a)
		return -ENOMEM;
	memset(out, 0, sizeof(*out));
	a->r = r;
	a->out = out;
	for (;;) {
		int64_t left = deadline - now_ms();
		int pause;

		if (left <= 0) {
			out->timed_out = true;
			out->cls = NRS_S3C_TIMEOUT;
			break;
		}
		out->attempts++;
		err = attempt_run(c, a, (long)left);
		if (err < 0)
			break;
		if (r->method == NRS_S3C_GET && out->http == 416) {
			out->cls = NRS_S3C_OK;	/* off at or past the end */
			out->got = 0;
			break;
		}
		out->cls = nrs_s3_classify(out->http, out->code, out->net,
					   r->key != NULL);
		if (out->net == NRS_S3_NET_TIMEOUT && deadline - now_ms() <= 0)
			out->timed_out = true;
		if (!nrs_s3_class_is_retryable(out->cls) ||	/* SR1 */
		    out->attempts >= MAX_ATTEMPTS)
			break;
		pthread_mutex_lock(&c->lock);
		pause = nrs_s3_backoff_ms(out->attempts, BACKOFF_BASE_MS,
					  BACKOFF_CAP_MS, &c->seed);	/* SR2 */
		pthread_mutex_unlock(&c->lock);
		left = deadline - now_ms();
		if (left <= pause) {	/* SR3: no pause past the deadline */
			out->timed_out = true;
			break;
		}
		struct timespec ts = { pause / 1000, (long)(pause % 1000) * 1000000 };
		nanosleep(&ts, NULL);
	}
	free(a);
	return err;
}
