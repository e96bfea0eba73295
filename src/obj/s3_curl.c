/*
 * s3_curl.c - S3 requests signed with AWS Signature Version 4 by libcurl;
 * with the other files of its module (s3_curl_priv.h), the only code that
 * includes curl/curl.h (STYLE.md), used by the S3 provider (objstore_s3.c)
 * alone.
 *
 *
 * The module is cut by concern (s3_curl_priv.h): this file holds the
 * client, one attempt and the retries (SR1-SR3), and the calls a caller
 * makes (run, submit, wait); s3_engine.c the thread that drives every
 * transfer through libcurl's multi interface (SM1-SM3); s3_sign.c the
 * headers that go with the signature (SH1, SH2); s3_resp.c the reading
 * of an answer; s3_class.c the error classes (pure).

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
 * (What curl does and does not do for V4, and so the headers we add,
 * SH1 and SH2, are in s3_sign.c.)
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
 *      answer, 409 ConditionalRequestConflict (another conditional PUT
 *      of the key was in progress).  Never another 4xx: the same request
 *      gets the same answer; above all never 412 (the condition's answer,
 *      objstore.h OC1).
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
 *  SR4  A GET's sink (s3_curl.h) that refuses bytes ends the operation
 *      there, as an answer (sink_err), never sent again: the refusal is
 *      the caller's, and another attempt would meet it again.  The sink
 *      runs in the engine thread, so it must not wait.
 *
 * CONCURRENCY: ONE ENGINE THREAD AND LIBCURL'S MULTI INTERFACE
 *
 * Every operation of a client runs in its one engine thread
 * (s3_engine.c), which drives all transfers in flight with one CURLM
 * (curl_multi_poll; a submission wakes it with curl_multi_wakeup).  A
 * caller either blocks (nrs_s3c_run: submit, then wait on the operation's
 * condition) or submits and waits later (nrs_s3c_submit, nrs_s3c_wait),
 * so one thread -- the object WAL's, a prefetcher -- keeps several PUTs
 * and GETs in flight at once.  Decided so, rather than a thread per
 * request running curl_easy_perform on a pooled handle as before,
 * because: the requests in flight are no longer bounded by the threads
 * that wait for them; the connections live in the multi's connection
 * cache (CURLMOPT_MAX_HOST_CONNECTIONS, CURLMOPT_MAXCONNECTS), which
 * every request shares and reuses (keep-alive, TLS sessions), with
 * requests past the per-host cap queued by libcurl rather than opening
 * more; and a pause between attempts (SR2) costs a timer in the engine,
 * not a sleeping thread.  The price is one thread doing every transfer's
 * I/O and copies: memcpy and, over https, GnuTLS's AES run at GB/s, far
 * above what an object store gives one client.  Each attempt keeps its
 * own CURLOPT_TIMEOUT_MS (what is left of its operation's deadline,
 * SR3), which the multi enforces as curl_easy_perform did.
 *
 * Idle easy handles go back to a small pool (POOL_MAX), so an attempt
 * costs no handle set-up; the connections are the multi's, not theirs.
 *
 * TLS: CURLOPT_SSL_VERIFYPEER 1 and VERIFYHOST 2 on every request (curl's
 * defaults, set anyway), CURLOPT_CAINFO when a CA file is given; else
 * GnuTLS's system store.  Our calls to curl_easy_setopt pass through
 * objstore_s3_v2tls.c's interposition unchanged (it acts only while libs3
 * sets up a request).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"
#include "obj/s3_curl_priv.h"
#include "util/backoff.h"

#define BACKOFF_BASE_MS		100
#define BACKOFF_CAP_MS		2000
#define IO_BUFFER		(512 << 10)	/* curl's read and upload buffers:
					 * 16 KiB and 64 KiB by default */
#define MAX_ATTEMPTS		4	/* SR1: a refused connection fails in ~1 s */
#define TOKEN_MAX		4096	/* a session token's length, at most */
#define HEADERS_MAX		(TOKEN_MAX + 1024)

/* ---- the client --------------------------------------------------------- */

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
	nrs_s3c_engine_stop(c);	/* after the operations it ran */
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
	int rc;

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
	rc = nrs_s3c_engine_start(c);
	if (rc < 0) {
		nrs_s3c_free(c);
		return rc;
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

/* ---- one attempt -------------------------------------------------------- */

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

static CURL *handle_get(struct nrs_s3c *c)
{
	CURL *h = NULL;

	pthread_mutex_lock(&c->lock);
	if (c->npool > 0)
		h = c->pool[--c->npool];
	pthread_mutex_unlock(&c->lock);
	if (h)
		curl_easy_reset(h);
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

/* Set up one attempt of a->r with timeout_ms in a->h, for the engine to
 * add to its multi; 0, or -ENOMEM, -EINVAL with nothing held. */
static int attempt_start(struct nrs_s3c *c, struct attempt *a,
			 long timeout_ms, void *priv)
{
	const struct nrs_s3c_req *r = a->r;
	struct nrs_s3c_resp *o = a->out;
	char url[URL_MAX], hdrs[HEADERS_MAX];
	struct curl_slist *list = NULL;
	CURLcode rc = CURLE_OK;
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
	a->hdrs = list;
	o->got = 0;
	o->too_long = false;
	o->sink_err = 0;
	o->have_length = false;
	o->has_meta_sha256 = false;
	o->code[0] = o->message[0] = o->region[0] = '\0';
	a->sent = 0;
	a->errlen = 0;
	a->curl_error[0] = '\0';

#define SET(opt, v) do { if (rc == CURLE_OK) rc = curl_easy_setopt(a->h, opt, v); } while (0)
	SET(CURLOPT_URL, url);	/* curl copies strings, not the list */
	SET(CURLOPT_PRIVATE, priv);
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
	SET(CURLOPT_WRITEFUNCTION, nrs_s3c_on_write);
	SET(CURLOPT_WRITEDATA, a);
	SET(CURLOPT_HEADERFUNCTION, nrs_s3c_on_header);
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
	if (rc != CURLE_OK) {
		curl_slist_free_all(list);
		a->hdrs = NULL;
		handle_put(c, a->h);
		a->h = NULL;
		return rc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
	}
	return 0;
}

/* The attempt in a->h ended with rc (the engine removed it from its
 * multi): read its answer into a->out, give the handle back. */
static int attempt_end(struct nrs_s3c *c, struct attempt *a, CURLcode rc)
{
	const struct nrs_s3c_req *r = a->r;
	struct nrs_s3c_resp *o = a->out;
	int err = 0;

	o->http = nrs_s3c_status_of(a->h);
	if (rc == CURLE_WRITE_ERROR && (o->too_long || o->sink_err))
		rc = CURLE_OK;	/* our own abort (SR4); the caller sees
				 * too_long or sink_err */
	o->net = nrs_s3c_net_of(rc);
	if (rc != CURLE_OK) {
		o->http = 0;	/* an answer cut short is no answer */
		const char *m = a->curl_error[0] ? a->curl_error :
				curl_easy_strerror(rc);
		size_t ml = strnlen(m, sizeof(o->message) - 1);

		memcpy(o->message, m, ml);
		o->message[ml] = '\0';
	} else if (o->http >= 300) {
		a->errbody[a->errlen] = '\0';
		nrs_s3c_xml_value(a->errbody, "Code", o->code,
				  sizeof(o->code));
		nrs_s3c_xml_value(a->errbody, "Message", o->message,
				  sizeof(o->message));
		nrs_s3c_xml_value(a->errbody, "Region", o->region,
				  sizeof(o->region));
	} else if (r->method == NRS_S3C_PUT && a->sent != r->body_len) {
		err = -EIO;	/* not whole: never taken for a success */
	}
	if (rc == CURLE_OUT_OF_MEMORY)
		err = -ENOMEM;
	curl_slist_free_all(a->hdrs);
	a->hdrs = NULL;
	handle_put(c, a->h);
	a->h = NULL;
	return err;
}

/* ---- the retries and the deadline (SR1-SR3) ----------------------------- */

int64_t nrs_s3c_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int nrs_s3_backoff_ms(unsigned int attempt, int base_ms, int cap_ms,
		      unsigned int *seed)
{
	if (base_ms <= 0 || cap_ms <= 0)
		return 0;
	/* SR2: stops doubling at the cap, never wraps */
	return (int)nrs_backoff_jitter_ms(attempt ? attempt - 1 : 0,
					  (uint64_t)base_ms, (uint64_t)cap_ms,
					  seed);
}

bool nrs_s3_class_is_retryable(enum nrs_s3_class cls)
{
	switch (cls) {	/* SR1 */
	case NRS_S3C_UNAVAILABLE:
	case NRS_S3C_TIMEOUT:
	case NRS_S3C_THROTTLED:
	case NRS_S3C_SERVER:
	case NRS_S3C_CONFLICT:
		return true;
	default:
		return false;
	}
}

/* The next attempt of op, now (its pause, if any, is over). */
enum op_step nrs_s3c_op_next(struct nrs_s3c *c, struct nrs_s3c_op *op)
{
	struct nrs_s3c_resp *out = op->a.out;
	int64_t left = op->deadline - nrs_s3c_now_ms();	/* SR3 */
	int err;

	if (left <= 0) {
		out->timed_out = true;
		out->cls = NRS_S3C_TIMEOUT;
		return OP_DONE;
	}
	out->attempts++;
	err = attempt_start(c, &op->a, (long)left, op);
	if (err < 0) {
		op->err = err;
		return OP_DONE;
	}
	return OP_STARTED;
}

/* op's attempt ended with rc: done, or another attempt after a pause. */
enum op_step nrs_s3c_op_ended(struct nrs_s3c *c, struct nrs_s3c_op *op,
			      CURLcode rc)
{
	const struct nrs_s3c_req *r = op->a.r;
	struct nrs_s3c_resp *out = op->a.out;
	int64_t left;
	int pause;
	int err = attempt_end(c, &op->a, rc);

	if (err < 0) {
		op->err = err;
		return OP_DONE;
	}
	if (r->method == NRS_S3C_GET && out->http == 416) {
		out->cls = NRS_S3C_OK;	/* off at or past the end */
		out->got = 0;
		return OP_DONE;
	}
	out->cls = nrs_s3_classify(out->http, out->code, out->net,
				   r->key != NULL);
	if (out->net == NRS_S3_NET_TIMEOUT && op->deadline - nrs_s3c_now_ms() <= 0)
		out->timed_out = true;
	if (!nrs_s3_class_is_retryable(out->cls) ||	/* SR1 */
	    out->attempts >= MAX_ATTEMPTS)
		return OP_DONE;
	pthread_mutex_lock(&c->lock);
	pause = nrs_s3_backoff_ms(out->attempts, BACKOFF_BASE_MS,
				  BACKOFF_CAP_MS, &c->seed);	/* SR2 */
	pthread_mutex_unlock(&c->lock);
	left = op->deadline - nrs_s3c_now_ms();
	if (left <= pause) {	/* SR3: no pause past the deadline */
		out->timed_out = true;
		return OP_DONE;
	}
	op->start_at = nrs_s3c_now_ms() + pause;
	return OP_PAUSE;
}

/* ---- run, submit, wait -------------------------------------------------- */

int nrs_s3c_submit(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		   struct nrs_s3c_resp *out, nrs_s3c_done_fn done, void *arg,
		   struct nrs_s3c_op **opp)
{
	struct nrs_s3c_op *op;

	if (r->method == NRS_S3C_PUT && r->body_len && !r->body)
		return -EINVAL;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	if (pthread_cond_init(&op->cond, NULL) != 0) {
		free(op);
		return -ENOMEM;
	}
	memset(out, 0, sizeof(*out));
	op->c = c;
	op->deadline = nrs_s3c_now_ms() + c->timeout_ms;	/* SR3 */
	op->start_at = 0;
	op->err = 0;
	op->done = false;
	op->cb = done;
	op->cb_arg = arg;
	op->next = NULL;
	op->a.r = r;
	op->a.out = out;
	op->a.h = NULL;
	op->a.hdrs = NULL;
	nrs_s3c_engine_submit(c, op);
	*opp = op;
	return 0;
}

bool nrs_s3c_op_done(struct nrs_s3c_op *op)
{
	bool d;

	pthread_mutex_lock(&op->c->lock);
	d = op->done;
	pthread_mutex_unlock(&op->c->lock);
	return d;
}

int nrs_s3c_wait(struct nrs_s3c_op *op)
{
	struct nrs_s3c *c = op->c;
	int err;

	pthread_mutex_lock(&c->lock);
	while (!op->done)
		pthread_cond_wait(&op->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	err = op->err;
	pthread_cond_destroy(&op->cond);
	free(op);
	return err;
}

int nrs_s3c_run(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		struct nrs_s3c_resp *out)
{
	struct nrs_s3c_op *op;
	int err = nrs_s3c_submit(c, r, out, NULL, NULL, &op);

	return err < 0 ? err : nrs_s3c_wait(op);
}
