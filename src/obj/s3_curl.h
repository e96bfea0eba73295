/*
 * s3_curl.h - S3 requests signed with AWS Signature Version 4, made with
 * libcurl (s3_curl.c and the files of s3_curl_priv.h, the one module that
 * includes curl/curl.h), for the S3 provider (objstore_s3.c) only.
 *
 * The signature is libcurl's (CURLOPT_AWS_SIGV4), never code of ours; this
 * module builds the request (URL in either style, the headers S3 wants),
 * runs it under a deadline with retries, and reads the answer: the status,
 * the headers head() needs, S3's error code from an error body.
 *
 * It also holds what the provider needs to decide about an answer without
 * libcurl: the error classes (nrs_s3_classify), which are pure functions
 * and unit-tested on their own.
 */
#ifndef NRS_S3_CURL_H
#define NRS_S3_CURL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a request failed to get an answer (0: it got one). */
enum nrs_s3_net {
	NRS_S3_NET_OK = 0,
	NRS_S3_NET_REFUSED,	/* connection refused, reset before an answer */
	NRS_S3_NET_RESOLVE,	/* host name not found */
	NRS_S3_NET_TIMEOUT,	/* no (whole) answer within the deadline */
	NRS_S3_NET_TLS,		/* certificate refused, handshake failed */
	NRS_S3_NET_OTHER,	/* anything else libcurl reports */
};

/*
 * Error classes, each one thing a user can act on; the metrics count them
 * (nereus_object_store_errors_total{class=...}).
 */
enum nrs_s3_class {
	NRS_S3C_OK = 0,
	NRS_S3C_NOT_FOUND,	/* NoSuchKey, 404 of an object: not an error */
	NRS_S3C_UNAVAILABLE,	/* refused, name not found, other transport */
	NRS_S3C_TIMEOUT,	/* no answer in time, 400 RequestTimeout */
	NRS_S3C_THROTTLED,	/* 503 SlowDown, 429 */
	NRS_S3C_SERVER,		/* other 5xx */
	NRS_S3C_CLOCK,		/* RequestTimeTooSkewed */
	NRS_S3C_REGION,		/* AuthorizationHeaderMalformed,
				 * PermanentRedirect, IllegalLocationConstraint */
	NRS_S3C_SIGNATURE,	/* SignatureDoesNotMatch: the secret */
	NRS_S3C_KEY,		/* InvalidAccessKeyId: the key id */
	NRS_S3C_TOKEN,		/* ExpiredToken, InvalidToken, a token
				 * refused */
	NRS_S3C_DENIED,		/* AccessDenied, other 403 */
	NRS_S3C_NO_BUCKET,	/* NoSuchBucket */
	NRS_S3C_TLS,		/* the certificate did not verify */
	NRS_S3C_BAD_DIGEST,	/* BadDigest, XAmzContentSHA256Mismatch */
	NRS_S3C_OTHER,		/* any other 4xx, 3xx */
	NRS_S3C_PRECONDITION,	/* 412 PreconditionFailed: a conditional PUT
				 * refused (objstore.h OC1): not an error */
	NRS_S3C_CONFLICT,	/* 409 ConditionalRequestConflict: two
				 * conditional PUTs at once; sent again */
	NRS_S3C_COUNT
};

/* The class's name in metrics and log lines ("signature", ...). */
const char *nrs_s3_class_name(enum nrs_s3_class c);

/*
 * The class of an answer: http is the status (0: none, then net says why),
 * code is S3's <Code> from the error body ("" or NULL: none, as for every
 * HEAD).  is_object: the request named an object (a 404 without a code is
 * then NOT_FOUND; of the bucket, NO_BUCKET).
 */
enum nrs_s3_class nrs_s3_classify(long http, const char *code,
				  enum nrs_s3_net net, bool is_object);

/*
 * SR1 (retries): is a request that ended in class c worth sending again?
 * Yes for the transient ones only: UNAVAILABLE, TIMEOUT, THROTTLED,
 * SERVER, CONFLICT; never PRECONDITION (the condition's answer), never for an answer that will be the same next time (every
 * other 4xx, a refused certificate).
 */
bool nrs_s3_class_is_retryable(enum nrs_s3_class cls);

/* The negative errno of class c (objstore.h's list). */
int nrs_s3_class_errno(enum nrs_s3_class c);

/*
 * SR2: the pause before retry number attempt (1 for the first retry):
 * exponential from base_ms, doubling, at most cap_ms, with full jitter
 * (uniform in [d/2, d]) drawn from *seed.
 */
int nrs_s3_backoff_ms(unsigned int attempt, int base_ms, int cap_ms,
		      unsigned int *seed);

/* One line of advice for a class that a user must fix ("" otherwise). */
const char *nrs_s3_class_advice(enum nrs_s3_class c);

/*
 * Region of an AWS host name: "s3.REGION.amazonaws.com",
 * "s3-REGION.amazonaws.com", "s3.dualstack.REGION.amazonaws.com" or
 * "BUCKET.s3.REGION.amazonaws.com" (a port is ignored) gives REGION into
 * out (size n); false (out untouched) for any other host.
 */
bool nrs_s3_host_region(const char *host, char *out, size_t n);

/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void nrs_s3_hex(char *out, const unsigned char *in, size_t n);
/* Base64 of an MD5 (Content-MD5; libcrypto's EVP_EncodeBlock): 24
 * characters and a NUL. */
void nrs_s3_md5_base64(char out[25], const unsigned char md5[16]);

/* ---- the client ------------------------------------------------------- */

struct nrs_s3c;

struct nrs_s3c_opts {
	bool https;
	const char *host;	/* HOST[:PORT] */
	const char *bucket;
	bool virtual_style;	/* BUCKET.HOST/KEY, else HOST/BUCKET/KEY */
	const char *region;
	const char *access, *secret;
	const char *token;	/* x-amz-security-token, or NULL; at most
				 * 4096 characters */
	const char *ca_file;	/* NULL: the system's CA store */
	int timeout_ms;		/* per operation, retries included */
};

/* Copies every string of o and starts the client's engine thread.  Makes
 * no request. */
int nrs_s3c_new(const struct nrs_s3c_opts *o, struct nrs_s3c **out);
/* Free of NULL is a no-op; the secret is wiped.  Every operation
 * submitted has been waited for. */
void nrs_s3c_free(struct nrs_s3c *c);

/*
 * Sign later requests with these credentials (token NULL or "": none;
 * copied; the old ones are wiped).  Requests already started keep theirs.
 * 1 if they differ from the current ones, 0 if they are the same (nothing
 * changes), -EINVAL (empty key, token longer than 4096), -ENOMEM.
 */
int nrs_s3c_set_creds(struct nrs_s3c *c, const char *access,
		      const char *secret, const char *token);

enum nrs_s3c_method { NRS_S3C_PUT, NRS_S3C_GET, NRS_S3C_HEAD, NRS_S3C_DELETE };

struct nrs_s3c_req {
	enum nrs_s3c_method method;
	const char *key;		/* NULL: the bucket itself */
	/* PUT */
	const void *body;
	size_t body_len;
	const unsigned char *sha256;	/* 32 bytes: x-amz-content-sha256 and
					 * x-amz-meta-sha256; NULL: the
					 * payload is sent UNSIGNED-PAYLOAD */
	const unsigned char *md5;	/* 16 bytes: Content-MD5, or NULL */
	bool if_none_match;		/* If-None-Match: * */
	const char *if_match;		/* If-Match: "etag", or NULL; at most
					 * NRS_ETAG_MAX - 1 characters */
	/* GET: the range [off, off + dst_len) into dst; or, with sink,
	 * handed to sink(sink_arg, pos, bytes, n) as it arrives (dst
	 * unused, dst_len still the most taken; pos relative to off, from 0
	 * again on each attempt; a sink's error aborts the operation, no
	 * retry, and is in the answer's sink_err) */
	uint64_t off;
	void *dst;
	size_t dst_len;
	int (*sink)(void *arg, uint64_t pos, const void *buf, size_t n);
	void *sink_arg;
};

struct nrs_s3c_resp {
	enum nrs_s3_class cls;
	long http;			/* last attempt's status; 0: none */
	enum nrs_s3_net net;
	unsigned int attempts;
	bool timed_out;			/* the operation's deadline passed */
	char code[64];			/* S3's <Code>, or "" */
	char message[192];		/* S3's <Message>, or curl's error */
	char region[48];		/* <Region> of a region error */
	bool have_length;
	uint64_t content_length;
	bool has_meta_sha256;		/* x-amz-meta-sha256 was there */
	char meta_sha256[72];		/* its value (truncated) */
	char etag[80];			/* ETag, quotes removed (truncated),
					 * or "" */
	size_t got;			/* GET: body bytes in dst */
	bool too_long;			/* GET: more than dst_len came */
	int sink_err;			/* GET: the sink's error, or 0 */
};

/*
 * Run r until it succeeds, fails with a class SR1 does not retry, or the
 * operation's deadline (timeout_ms of the client) passes; between
 * attempts wait nrs_s3_backoff_ms.  The outcome is in *out (cls OK for a
 * 2xx answer; a GET answered 416 is OK with got 0).  Returns 0 or -ENOMEM,
 * -EINVAL (never an S3 error: those are in out->cls).
 */
int nrs_s3c_run(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		struct nrs_s3c_resp *out);

/*
 * The same operation without waiting for it: the client's engine thread
 * (s3_curl.c, "CONCURRENCY") runs it among every other one in flight, and
 * the caller may submit more before it waits.  r, what it points to (key,
 * body, dst) and out must stay valid and unchanged until nrs_s3c_wait(op)
 * returns.  done, if not NULL, is called with arg in the engine thread
 * when the operation has ended (out is final): it must not block nor call
 * this client.  Returns 0 with *op set, or -ENOMEM, -EINVAL (then nothing
 * was submitted and done is never called).
 */
struct nrs_s3c_op;
typedef void (*nrs_s3c_done_fn)(void *arg);
int nrs_s3c_submit(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		   struct nrs_s3c_resp *out, nrs_s3c_done_fn done, void *arg,
		   struct nrs_s3c_op **op);
/* Has op ended (nrs_s3c_wait would not block)? */
bool nrs_s3c_op_done(struct nrs_s3c_op *op);
/*
 * Wait for op to end (at most the client's timeout_ms from its submission,
 * SR3), free it, and return what nrs_s3c_run would have.  Every submitted
 * operation is waited for, before nrs_s3c_free.
 */
int nrs_s3c_wait(struct nrs_s3c_op *op);

/*
 * For tests: the request headers the client would send for r (one per
 * line, "Name: value\n", the ones this module sets, before libcurl's
 * signature), into buf of size n.  Returns the length or -ENOSPC.
 */
int nrs_s3c_describe(struct nrs_s3c *c, const struct nrs_s3c_req *r,
		     char *buf, size_t n);

/* The URL of r's object (or bucket) into buf; -ENOSPC if too long. */
int nrs_s3c_url(struct nrs_s3c *c, const char *key, char *buf, size_t n);

/* The name of the TLS library libcurl is built with ("GnuTLS/3.7.9"). */
const char *nrs_s3c_tls_name(void);

#endif
