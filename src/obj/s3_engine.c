/*
 * s3_engine.c - the engine of an S3 client (s3_curl.c, "CONCURRENCY"):
 * one thread that drives every transfer of the client through one
 * libcurl multi handle.  Callers hand it operations (nrs_s3c_submit puts
 * them on c->queue and wakes the thread with curl_multi_wakeup); the
 * thread starts their attempts (s3_curl.c nrs_s3c_op_next), runs them
 * all at once with curl_multi_perform and curl_multi_poll, hands each
 * ended attempt back to s3_curl.c (nrs_s3c_op_ended: SR1-SR3 decide
 * between done and a pause), keeps the paused operations on a list of
 * its own and wakes the caller of each operation that is done.
 *
 * An operation is on exactly one of: c->queue (submitted), the engine's
 * ready list, the multi (an attempt in flight), the paused list; then
 * done, when the engine no longer touches it.
 *
 *  SM1  An attempt's easy handle is removed from the multi before its
 *      answer is read and the handle goes back to the pool (s3_curl.c
 *      attempt_end), so no handle is in the multi twice and none is
 *      reused or freed while libcurl still drives it.  An operation's
 *      callback runs before it is marked done: nrs_s3c_wait returns only
 *      after it.  The engine stops (nrs_s3c_free) only once nothing is
 *      queued, paused or in flight, so no operation is dropped.
 *  SM2  The engine never sleeps past what is due: curl_multi_poll waits
 *      at most until the earliest paused operation may start again (and
 *      libcurl shortens it to its own timers, the attempts'
 *      CURLOPT_TIMEOUT_MS), and a submission wakes it; so neither a
 *      pause (SR2) nor an operation's deadline (SR3) stretches, and a
 *      stalled service holds unmount for at most the deadline.
 *  SM3  Connections are the multi's: at most MAX_HOST_CONNS at once to
 *      the store (CURLMOPT_MAX_HOST_CONNECTIONS; libcurl queues the
 *      transfers past that, their deadlines running), up to CACHE_CONNS
 *      idle ones kept for reuse (CURLMOPT_MAXCONNECTS).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <curl/curl.h>

#include "obj/s3_curl.h"
#include "obj/s3_curl_priv.h"

#define MAX_HOST_CONNS		16	/* SM3: as the pool of handles had */
#define CACHE_CONNS		32	/* SM3: idle connections kept */
#define IDLE_WAIT_MS		5000	/* SM2: a wakeup comes sooner */

/* op has ended: its callback, then done (SM1). */
static void finish(struct nrs_s3c *c, struct nrs_s3c_op *op)
{
	if (op->cb)
		op->cb(op->cb_arg);
	pthread_mutex_lock(&c->lock);
	op->done = true;
	pthread_cond_signal(&op->cond);
	pthread_mutex_unlock(&c->lock);	/* op may be freed from here on */
}

/* The next attempt of op (its pause is over, or it is new). */
static void start(struct nrs_s3c *c, struct nrs_s3c_op *op, int *inflight)
{
	if (nrs_s3c_op_next(c, op) != OP_STARTED) {
		finish(c, op);
		return;
	}
	if (curl_multi_add_handle(c->multi, op->a.h) == CURLM_OK) {
		(*inflight)++;
		return;
	}
	/* never in the multi: ends as a failed attempt, no retry */
	if (nrs_s3c_op_ended(c, op, CURLE_OUT_OF_MEMORY) != OP_DONE)
		op->err = -ENOMEM;
	finish(c, op);
}

/* Start every paused operation whose pause is over at now (SR2). */
static void start_due(struct nrs_s3c *c, struct nrs_s3c_op **paused,
		      int64_t now, int *inflight)
{
	struct nrs_s3c_op **pp = paused;

	while (*pp) {
		struct nrs_s3c_op *op = *pp;

		if (op->start_at > now) {
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		op->next = NULL;
		start(c, op, inflight);
	}
}

/* The attempts libcurl has ended: each op done or paused (SR1-SR3). */
static void reap(struct nrs_s3c *c, struct nrs_s3c_op **paused,
		 int *inflight)
{
	CURLMsg *m;
	int msgs;

	while ((m = curl_multi_info_read(c->multi, &msgs))) {
		CURL *h = m->easy_handle;
		CURLcode rc = m->data.result;
		struct nrs_s3c_op *op;
		char *priv = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
		op = (struct nrs_s3c_op *)(void *)priv;
		curl_multi_remove_handle(c->multi, h);	/* SM1 */
		(*inflight)--;
		if (nrs_s3c_op_ended(c, op, rc) == OP_PAUSE) {
			op->next = *paused;
			*paused = op;
		} else {
			finish(c, op);
		}
	}
}

/* How long the engine may sleep: until the first pause ends (SM2). */
static int64_t wait_ms(const struct nrs_s3c_op *paused, int64_t now)
{
	int64_t wait = IDLE_WAIT_MS;

	for (const struct nrs_s3c_op *op = paused; op; op = op->next)
		if (op->start_at - now < wait)
			wait = op->start_at > now ? op->start_at - now : 0;
	return wait;
}

static void *engine_main(void *arg)
{
	struct nrs_s3c *c = arg;
	struct nrs_s3c_op *paused = NULL;
	int inflight = 0;

	for (;;) {
		struct nrs_s3c_op *ready = NULL, *q;
		bool stopping;
		int running;

		pthread_mutex_lock(&c->lock);
		for (q = c->queue; q;) {	/* oldest first */
			struct nrs_s3c_op *next = q->next;

			q->next = ready;
			ready = q;
			q = next;
		}
		c->queue = NULL;
		stopping = c->stopping;
		pthread_mutex_unlock(&c->lock);

		while (ready) {
			struct nrs_s3c_op *op = ready;

			ready = op->next;
			op->next = NULL;
			start(c, op, &inflight);
		}
		start_due(c, &paused, nrs_s3c_now_ms(), &inflight);
		curl_multi_perform(c->multi, &running);
		reap(c, &paused, &inflight);
		if (stopping && !inflight && !paused)	/* SM1 */
			break;
		curl_multi_poll(c->multi, NULL, 0,
				(int)wait_ms(paused, nrs_s3c_now_ms()), NULL);
	}
	return NULL;
}

int nrs_s3c_engine_start(struct nrs_s3c *c)
{
	CURLMcode mc;
	int rc;

	c->multi = curl_multi_init();
	if (!c->multi)
		return -ENOMEM;
	mc = curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			       (long)MAX_HOST_CONNS);	/* SM3 */
	if (mc == CURLM_OK)
		mc = curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS,
				       (long)CACHE_CONNS);
	if (mc != CURLM_OK) {
		curl_multi_cleanup(c->multi);
		c->multi = NULL;
		return -ENOMEM;
	}
	rc = pthread_create(&c->engine, NULL, engine_main, c);
	if (rc != 0) {
		curl_multi_cleanup(c->multi);
		c->multi = NULL;
		return -rc;
	}
	c->engine_running = true;
	return 0;
}

void nrs_s3c_engine_stop(struct nrs_s3c *c)
{
	if (c->engine_running) {
		pthread_mutex_lock(&c->lock);
		c->stopping = true;
		pthread_mutex_unlock(&c->lock);
		curl_multi_wakeup(c->multi);
		pthread_join(c->engine, NULL);
		c->engine_running = false;
	}
	if (c->multi)
		curl_multi_cleanup(c->multi);	/* closes its connections */
	c->multi = NULL;
}

void nrs_s3c_engine_submit(struct nrs_s3c *c, struct nrs_s3c_op *op)
{
	pthread_mutex_lock(&c->lock);
	op->next = c->queue;
	c->queue = op;
	pthread_mutex_unlock(&c->lock);
	curl_multi_wakeup(c->multi); /* SM2 */
}
