/*
 * objstore_s3_v4.c - the V4 path of the S3 provider (objstore_s3.c):
 * put, head, get and delete as requests of s3_curl.c, which signs them
 * with libcurl and sends transient failures again (s3_curl.c SR1..SR3).
 * Here each answer becomes an errno (s3_curl.h's classes), is counted by
 * class (SE1) and, if it failed, logged in one line that says what to fix
 * (SE2); before a request, and once more after one refused for its
 * credentials, the credentials file is read again if it changed (SC1).
 * A GET checks its body against Content-Length and the range it asked for
 * (nrs_s3st_get_checked), and may hand it to a sink as it arrives
 * (get_stream: libcurl's write callback calls the sink; a retry sends it
 * from its start again, objstore.h); a HEAD's x-amz-meta-sha256 that is
 * not 64 hex digits gives no SHA-256.
 *
 * A conditional PUT (objstore.h OC1) sends If-None-Match: * or If-Match;
 * 412 becomes -EEXIST or -ESTALE by the condition that was sent, a 404 of
 * If-Match -ENOENT, none of them logged (they are answers, not faults).
 *  S4C1 A 412 that came after an attempt whose answer was lost (attempts
 *      > 1) may be the refusal of our own first attempt's bytes: the
 *      object is read back (HEAD) and, if its x-amz-meta-sha256 is the
 *      SHA-256 we sent, the put succeeded.  So a lost answer never turns
 *      our own write into someone else's.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "obj/objstore.h"
#include "obj/objstore_s3_priv.h"
#include "obj/s3_curl.h"
#include "util/log.h"

#define CRED_CHECK_MS		1000	/* SC1: stat the file at most this often */

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
	now = nrs_s3st_now_ms();
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
	nrs_s3st_free_secret(k);
	nrs_s3st_free_secret(t);
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
	if (err == 0 || (err == -ENOENT && quiet_enoent) ||
	    o->cls == NRS_S3C_PRECONDITION)
		return err;	/* OC1: a condition's answer is no fault */
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

int nrs_s3v4_put(struct nrs_objstore *os, const char *key, const void *buf,
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

int nrs_s3v4_put_cond(struct nrs_objstore *os, const char *key,
		      const void *buf, size_t len,
		      const unsigned char md5[NRS_MD5_LEN],
		      const unsigned char sha256[NRS_SHA256_LEN],
		      const char *if_match, char etag[NRS_ETAG_MAX])
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = {
		.method = NRS_S3C_PUT, .key = key, .body = buf,
		.body_len = len, .sha256 = sha256, .md5 = md5,
		.if_none_match = !if_match, .if_match = if_match,
	};
	struct nrs_s3c_resp o;
	struct nrs_obj_meta m;
	int err;

	if ((len && !buf) ||
	    (if_match && (!*if_match || strlen(if_match) >= NRS_ETAG_MAX ||
			  strchr(if_match, '"'))))
		return -EINVAL;
	err = v4_run(s, &r, &o, true);
	if (err == -ESTALE && !if_match)
		err = -EEXIST;	/* OC1: If-None-Match refused */
	if ((err == -EEXIST || err == -ESTALE) && o.attempts > 1 && sha256 &&
	    nrs_s3v4_head(os, key, &m) == 0 && m.has_sha256 &&
	    memcmp(m.sha256, sha256, NRS_SHA256_LEN) == 0 && m.etag[0]) {
		memcpy(etag, m.etag, NRS_ETAG_MAX);	/* S4C1: ours */
		return 0;
	}
	if (err < 0)
		return err;
	if (!o.etag[0]) {	/* an answer without ETag: ask for it */
		err = nrs_s3v4_head(os, key, &m);
		if (err < 0)
			return err;
		memcpy(etag, m.etag, NRS_ETAG_MAX);
		return 0;
	}
	_Static_assert(sizeof(o.etag) == NRS_ETAG_MAX, "etag sizes");
	memcpy(etag, o.etag, NRS_ETAG_MAX);
	return 0;
}

int nrs_s3v4_head(struct nrs_objstore *os, const char *key,
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
	memcpy(m.etag, o.etag, NRS_ETAG_MAX);
	if (o.has_meta_sha256) {
		m.has_sha256 = nrs_s3st_parse_sha256(o.meta_sha256, m.sha256);
		if (!m.has_sha256)
			nrs_warn("s3 %s: head %s: x-amz-meta-sha256 is not 64 "
				 "hex digits", s->url, key);
	}
	*out = m;
	return 0;
}

ssize_t nrs_s3v4_get(struct nrs_objstore *os, const char *key, uint64_t off,
		     void *buf, size_t len)
{
	return nrs_s3v4_get_stream(os, key, off, buf, len, NULL, NULL);
}

/* A GET into buf, or with sink to sink as it arrives (buf unused). */
ssize_t nrs_s3v4_get_stream(struct nrs_objstore *os, const char *key,
			    uint64_t off, void *buf, size_t len,
			    nrs_obj_sink_fn sink, void *arg)
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = key, .off = off, .dst = buf,
		.dst_len = len > SSIZE_MAX ? SSIZE_MAX : len,
		.sink = sink, .sink_arg = arg,
	};
	struct nrs_s3c_resp o;
	int err;

	if (len == 0) {	/* no range to ask for: just say if it is there */
		struct nrs_obj_meta m;

		err = nrs_s3v4_head(os, key, &m);
		return err < 0 ? err : 0;
	}
	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	if (off > UINT64_MAX - r.dst_len)
		return -EINVAL;
	err = nrs_s3c_run(s->v4, &r, &o);
	if (err < 0)
		return err;
	if (o.sink_err)
		return o.sink_err;
	if (o.too_long)
		return nrs_s3st_get_checked(s, key, off, r.dst_len, true, false, 0, 0);
	err = v4_result(s, &r, &o, true);
	if (err < 0)
		return err;
	if (o.http == 416)
		return 0;	/* off is at or past the end */
	return nrs_s3st_get_checked(s, key, off, r.dst_len, false, o.have_length,
			   o.content_length, o.got);
}

int nrs_s3v4_del(struct nrs_objstore *os, const char *key)
{
	struct s3_store *s = s3_of(os);
	struct nrs_s3c_req r = { .method = NRS_S3C_DELETE, .key = key };
	struct nrs_s3c_resp o;
	int err = v4_run(s, &r, &o, true);

	return err == -ENOENT ? 0 : err;
}
