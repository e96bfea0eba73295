/*
 * s3_sign.c - the headers of a V4 request (nrs_s3c_describe), which
 * libcurl signs (CURLOPT_AWS_SIGV4, s3_curl.c), and the encodings they
 * use (hex, Content-MD5's base64).
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
 *  - A conditional PUT (objstore.h OC1) carries If-None-Match: * or
 *    If-Match: "ETAG", signed like the others.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include <openssl/evp.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"
#include "obj/s3_curl_priv.h"
#define EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

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
		if (r->if_none_match)
			ADD("If-None-Match: *\n");
		else if (r->if_match)
			ADD("If-Match: \"%s\"\n", r->if_match);
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
