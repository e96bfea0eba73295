/*
 * s3_curl_priv.h - what the files of the S3 client share, and nothing
 * outside src/obj/ may include: the client, one attempt of a request,
 * and the functions one file calls in another.  With these files it is
 * the one module that includes curl/curl.h.  The rules are at the top of
 * each file:
 *
 *   s3_curl.c   the client, one attempt, the retries and the deadline
 *               (SR1-SR3), run / submit / wait
 *   s3_engine.c the engine thread: libcurl's multi handle, its queue of
 *               operations, the pauses between attempts (SM1-SM3)
 *   s3_sign.c   the headers that go with the V4 signature (SH1, SH2)
 *   s3_resp.c   reading an answer: body, error body, headers, transport
 *   s3_class.c  the error classes (pure)
 */
#ifndef NRS_S3_CURL_PRIV_H
#define NRS_S3_CURL_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "obj/objstore.h"
#include "obj/s3_curl.h"

#define POOL_MAX		16	/* idle easy handles kept */
#define ERRBODY_MAX		8192	/* bytes of an error body kept */
#define URL_MAX			(NRS_OBJKEY_MAX + 512)

struct nrs_s3c_op;

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
	/* the engine (s3_engine.c) */
	CURLM *multi;		/* its connection cache is the client's */
	pthread_t engine;
	bool engine_running;
	bool stopping;			/* protected by lock */
	struct nrs_s3c_op *queue;	/* submitted, not yet taken by the
					 * engine, newest first; lock */
};

struct attempt {
	const struct nrs_s3c_req *r;
	struct nrs_s3c_resp *out;
	CURL *h;
	struct curl_slist *hdrs;	/* must live as long as the transfer */
	size_t sent;		/* PUT: body bytes handed to curl */
	char errbody[ERRBODY_MAX + 1];
	size_t errlen;
	char curl_error[CURL_ERROR_SIZE];
};

/* One operation: a request and its attempts (s3_curl.c), driven by the
 * engine (s3_engine.c). */
struct nrs_s3c_op {
	struct nrs_s3c *c;
	int64_t deadline;	/* SR3: monotonic ms */
	int64_t start_at;	/* SR2: the next attempt not before this */
	int err;		/* what nrs_s3c_wait returns */
	bool done;		/* protected by c->lock */
	pthread_cond_t cond;	/* done turned true */
	nrs_s3c_done_fn cb;
	void *cb_arg;
	struct nrs_s3c_op *next;	/* in the queue or the engine's lists */
	struct attempt a;
};

/* What an operation does next (s3_curl.c tells the engine). */
enum op_step {
	OP_STARTED,	/* a->h is set up: the engine adds it to the multi */
	OP_PAUSE,	/* SR2: start again at op->start_at */
	OP_DONE,	/* out and err are final */
};

/* s3_curl.c: the steps of an operation, called by the engine thread */
int64_t nrs_s3c_now_ms(void);
enum op_step nrs_s3c_op_next(struct nrs_s3c *c, struct nrs_s3c_op *op);
enum op_step nrs_s3c_op_ended(struct nrs_s3c *c, struct nrs_s3c_op *op,
			      CURLcode rc);

/* s3_engine.c */
int nrs_s3c_engine_start(struct nrs_s3c *c);
void nrs_s3c_engine_stop(struct nrs_s3c *c);
void nrs_s3c_engine_submit(struct nrs_s3c *c, struct nrs_s3c_op *op);


/* s3_resp.c: libcurl's callbacks and what an attempt reads of its answer */
long nrs_s3c_status_of(CURL *h);
size_t nrs_s3c_on_write(char *buf, size_t size, size_t nmemb, void *data);
size_t nrs_s3c_on_header(char *buf, size_t size, size_t nitems, void *data);
void nrs_s3c_xml_value(const char *body, const char *tag, char *out,
		       size_t n);
enum nrs_s3_net nrs_s3c_net_of(CURLcode rc);

#endif
