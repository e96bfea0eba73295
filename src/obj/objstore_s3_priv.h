/*
 * objstore_s3_priv.h - what the files of the S3 provider share, and
 * nothing outside them may include: the store's structure and the
 * functions one of its files calls in another.  Free of libs3.h and
 * curl/curl.h: objstore_s3_v2.c is the one file that includes libs3.h,
 * the S3 client (s3_curl.c, s3_curl_priv.h) the one module that includes
 * curl/curl.h.
 *
 *   objstore_s3.c        the provider: V4 or V2, close, counters, shared
 *                        helpers; the rules SE1, SE2, SC1
 *   objstore_s3_open.c   URL, s3_ options, region, credentials, PROBE, open
 *   objstore_s3_v4.c     the V4 path: requests of s3_curl.c, their errnos,
 *                        log lines and counts; credentials re-read (SC1)
 *   objstore_s3_v2.c     the V2 path: libs3 requests against our deadline
 *   objstore_s3_v2tls.c  certificate verification for libs3's requests
 */
#ifndef NRS_OBJSTORE_S3_PRIV_H
#define NRS_OBJSTORE_S3_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"

#define REGION_MAX		48
#define HOST_MAX		255	/* libs3's S3_MAX_HOSTNAME_SIZE */
#define CURL_ERROR_SIZE		256	/* libcurl's ABI (curl/curl.h) */

struct nrs_s3v2;

struct s3_store {
	struct nrs_objstore base;
	bool https;		/* the URL says https:// */
	char *host, *bucket, *access, *secret;
	char *url;		/* for log lines */
	char *ca_file;		/* NULL: curl's CA bundle */
	int timeout_ms;
	struct nrs_s3c *v4;	/* V4: libcurl's requests; NULL: V2, libs3 */
	struct nrs_s3v2 *v2;	/* V2: libs3's bucket context, or NULL */
	char region[REGION_MAX];
	atomic_uint_fast64_t errors[NRS_S3C_COUNT];	/* by class */
	atomic_uint_fast64_t retries;
	/* SC1: the credentials file, re-read when it changes */
	char *cred_file;	/* NULL: keys from the environment or opts */
	pthread_mutex_t cred_lock;
	struct stat cred_st;	/* the file when last read; cred_lock */
	int64_t cred_checked_ms;	/* last stat; cred_lock */
};

static inline struct s3_store *s3_of(struct nrs_objstore *s)
{
	return (struct s3_store *)s;
}

/* objstore_s3.c */
extern const struct nrs_objstore_ops nrs_s3st_ops;
int64_t nrs_s3st_now_ms(void);
bool nrs_s3st_parse_sha256(const char *v, unsigned char sha[NRS_SHA256_LEN]);
ssize_t nrs_s3st_get_checked(struct s3_store *s, const char *key,
			     uint64_t off, size_t len, bool too_long,
			     bool have_len, uint64_t content_length,
			     size_t got);

void nrs_s3st_store_free(struct s3_store *s);

/* objstore_s3_open.c */
void nrs_s3st_free_secret(char *v);

/* objstore_s3_v4.c */
int nrs_s3v4_put(struct nrs_objstore *os, const char *key, const void *buf,
		 size_t len, const unsigned char md5[NRS_MD5_LEN],
		 const unsigned char sha256[NRS_SHA256_LEN]);
int nrs_s3v4_put_cond(struct nrs_objstore *os, const char *key,
		      const void *buf, size_t len,
		      const unsigned char md5[NRS_MD5_LEN],
		      const unsigned char sha256[NRS_SHA256_LEN],
		      const char *if_match, char etag[NRS_ETAG_MAX]);
int nrs_s3v4_head(struct nrs_objstore *os, const char *key,
		  struct nrs_obj_meta *out);
ssize_t nrs_s3v4_get(struct nrs_objstore *os, const char *key, uint64_t off,
		     void *buf, size_t len);
ssize_t nrs_s3v4_get_stream(struct nrs_objstore *os, const char *key,
			    uint64_t off, void *buf, size_t len,
			    nrs_obj_sink_fn sink, void *arg);
int nrs_s3v4_del(struct nrs_objstore *os, const char *key);

/* objstore_s3_v2.c */
int nrs_s3v2_open(struct s3_store *s);
void nrs_s3v2_close(struct nrs_s3v2 *v2);
bool nrs_s3v2_bucket_ok(const char *bucket, bool virtual_host);
int nrs_s3v2_put(struct nrs_objstore *os, const char *key, const void *buf,
		 size_t len, const unsigned char md5[NRS_MD5_LEN],
		 const unsigned char sha256[NRS_SHA256_LEN]);
int nrs_s3v2_head(struct nrs_objstore *os, const char *key,
		  struct nrs_obj_meta *out);
ssize_t nrs_s3v2_get(struct nrs_objstore *os, const char *key, uint64_t off,
		     void *buf, size_t len);
int nrs_s3v2_del(struct nrs_objstore *os, const char *key);

/* objstore_s3_v2tls.c: the libs3 request that this thread sets up between
 * _begin and _end verifies the server's certificate (against ca_file if
 * not NULL) and writes curl's error message to errbuf, which must outlive
 * the request. */
void nrs_s3v2_tls_begin(const char *ca_file, char errbuf[CURL_ERROR_SIZE]);
void nrs_s3v2_tls_end(void);

#endif
