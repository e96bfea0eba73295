/*
 * objstore_s3.c - the S3 object store provider.  Two ways of signing:
 *
 *   V4 (the default, s3_signature=v4): requests of our own made and
 *      signed by libcurl (s3_curl.c says how and why); objstore_s3_v4.c
 *      maps their answers to errnos, logs and counts them (SE1, SE2).
 *   V2 (s3_signature=v2, for old endpoints): libs3 2.0 (Debian's
 *      libs3-dev 2.0-4), path style only, in objstore_s3_v2.c, the only
 *      file that includes libs3.h (STYLE.md), and objstore_s3_v2tls.c,
 *      which makes libs3 verify certificates.
 *
 * objstore_s3_open.c parses the URL, the s3_ options and the credentials,
 * opens the store and probes the bucket at mount (PROBE).  This file is
 * the provider itself: each call goes down the path the store was opened
 * with; close, the error counters, and what both paths share.  The rules
 * below hold for both paths (V2 has no SC1: libs3 keeps the keys it was
 * opened with).
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
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obj/objstore.h"
#include "obj/objstore_s3_priv.h"
#include "obj/s3_curl.h"
#include "util/log.h"

_Static_assert(NRS_S3C_COUNT == NRS_S3_CLASSES, "objstore.h's class count");

int64_t nrs_s3st_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 64 hex digits (and nothing else) into sha; false if v is not that. */
bool nrs_s3st_parse_sha256(const char *v, unsigned char sha[NRS_SHA256_LEN])
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

/*
 * What a GET of len bytes at off brought (either path): -EIO, logged, for
 * more than was asked for (too_long) or a body other than its
 * Content-Length (have_len false: none came); else the byte count.
 */
ssize_t nrs_s3st_get_checked(struct s3_store *s, const char *key,
			     uint64_t off, size_t len, bool too_long,
			     bool have_len, uint64_t content_length,
			     size_t got)
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

/* ---- the provider: V4 or V2 -------------------------------------------- */

static int s3_put(struct nrs_objstore *os, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	return s3_of(os)->v4 ? nrs_s3v4_put(os, key, buf, len, md5, sha256)
			     : nrs_s3v2_put(os, key, buf, len, md5, sha256);
}

/* V2 (libs3) sends no conditions: -EOPNOTSUPP (objstore.h OC1). */
static int s3_put_cond(struct nrs_objstore *os, const char *key,
		       const void *buf, size_t len,
		       const unsigned char md5[NRS_MD5_LEN],
		       const unsigned char sha256[NRS_SHA256_LEN],
		       const char *if_match, char etag[NRS_ETAG_MAX])
{
	if (!s3_of(os)->v4)
		return -EOPNOTSUPP;
	return nrs_s3v4_put_cond(os, key, buf, len, md5, sha256, if_match,
				 etag);
}

static int s3_head(struct nrs_objstore *os, const char *key,
		   struct nrs_obj_meta *out)
{
	return s3_of(os)->v4 ? nrs_s3v4_head(os, key, out)
			     : nrs_s3v2_head(os, key, out);
}

static ssize_t s3_get(struct nrs_objstore *os, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	return s3_of(os)->v4 ? nrs_s3v4_get(os, key, off, buf, len)
			     : nrs_s3v2_get(os, key, off, buf, len);
}

/* V4 streams the body to sink; V2 (libs3) reads it into one buffer. */
static ssize_t s3_get_stream(struct nrs_objstore *os, const char *key,
			     uint64_t off, size_t len, nrs_obj_sink_fn sink,
			     void *arg)
{
	if (s3_of(os)->v4)
		return nrs_s3v4_get_stream(os, key, off, NULL, len, sink, arg);
	return nrs_obj_get_buffered(os, key, off, len, sink, arg);
}

static int s3_del(struct nrs_objstore *os, const char *key)
{
	return s3_of(os)->v4 ? nrs_s3v4_del(os, key) : nrs_s3v2_del(os, key);
}

/* Free s and all it holds, on either path; s may be half open. */
void nrs_s3st_store_free(struct s3_store *s)
{
	nrs_s3c_free(s->v4);
	nrs_s3v2_close(s->v2);
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
	nrs_s3st_store_free(s3_of(os));
}

void nrs_objstore_s3_errors(struct nrs_objstore *os,
			    struct nrs_objstore_errors *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < NRS_S3C_COUNT; i++)
		out->name[i] = nrs_s3_class_name((enum nrs_s3_class)i);
	if (!os || os->ops != &nrs_s3st_ops)
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

const struct nrs_objstore_ops nrs_s3st_ops = {
	.name = "s3",
	.wants_md5 = true,
	.put = s3_put,
	.put_cond = s3_put_cond,
	.head = s3_head,
	.get = s3_get,
	.get_stream = s3_get_stream,
	.del = s3_del,
	.close = s3_close,
};
