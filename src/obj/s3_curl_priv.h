/*
 * s3_curl_priv.h - what the files of the S3 client share, and nothing
 * outside src/obj/ may include: the client, one attempt of a request,
 * and the functions one file calls in another.  With these files it is
 * the one module that includes curl/curl.h.  The rules are at the top of
 * each file:
 *
 *   s3_curl.c   the client, its handle pool, one attempt, the retries and
 *               the deadline (SR1-SR3)
 *   s3_sign.c   the headers that go with the V4 signature (SH1, SH2)
 *   s3_resp.c   reading an answer: body, error body, headers, transport
 *   s3_class.c  the error classes (pure)
 */
#ifndef NRS_S3_CURL_PRIV_H
#define NRS_S3_CURL_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "obj/s3_curl.h"

#define POOL_MAX		16
#define ERRBODY_MAX		8192	/* bytes of an error body kept */

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

struct attempt {
	const struct nrs_s3c_req *r;
	struct nrs_s3c_resp *out;
	CURL *h;
	size_t sent;		/* PUT: body bytes handed to curl */
	char errbody[ERRBODY_MAX + 1];
	size_t errlen;
	char curl_error[CURL_ERROR_SIZE];
};


/* s3_resp.c: libcurl's callbacks and what an attempt reads of its answer */
long nrs_s3c_status_of(CURL *h);
size_t nrs_s3c_on_write(char *buf, size_t size, size_t nmemb, void *data);
size_t nrs_s3c_on_header(char *buf, size_t size, size_t nitems, void *data);
void nrs_s3c_xml_value(const char *body, const char *tag, char *out,
		       size_t n);
enum nrs_s3_net nrs_s3c_net_of(CURLcode rc);

#endif
