/*
 * owner.c - the owner record of a bucket (owner.h; DESIGN.md I8): the one
 * implementation of struct nrs_owner_ops today, kept in the bucket itself.
 *
 * THE RECORD (key "owner", 64 bytes, an owner id and an epoch) is
 * described at the top of owner_rec.c, which reads and writes it.
 *
 * TWO MODES, chosen by the store's probe (objstore.h OC2):
 *
 *  CAS (conditional writes: AWS S3, moto 5, the embedded store)
 *   claim     no record: put_cond absent (epoch 1); ours: put_cond
 *             If-Match its etag; someone else's: -EBUSY, or with recover
 *             put_cond If-Match its etag with epoch + 1 (a takeover).  A
 *             refused condition means the record moved: read it again.
 *   renew     put_cond If-Match the etag of our last write.
 *
 *  LEASE (no conditional writes: s3rver)
 *   claim     no record: put, then re-read after SETTLE to see we won; ours:
 *             put; someone else's: -EBUSY, or with recover: OR5.
 *   renew     read the record; not ours: fenced; else put it again.
 *
 * RULES
 *  OR1 A renewal runs every lease_ms / 3 (the renew thread), counted from
 *      the start of the last good one, so that slow renewals (a loaded
 *      store) do not stretch the period past the window of OR3.
 *  OR2 A renewal that finds the record is not ours (CAS: its If-Match
 *      refused, or no record; lease: another id or epoch) fences the owner
 *      for good: no more acknowledgements (OR3), no more PUT or DELETE
 *      (owner_store.c OS1), every append ESTALE (core).
 *  OR3 may_ack(now) only while owned and now < t + lease_ms - margin, t
 *      the monotonic time at the start of the last successful renewal
 *      (or claim); margin = lease_ms / 5.  An owner cut off from the store
 *      stops acknowledging within lease_ms - margin on its own.
 *  OR4 A takeover (the record was someone else's, recover) returns only
 *      lease_ms + margin after its write was made (its own monotonic
 *      clock): by then the old owner's OR3 window, which started before
 *      the write, has closed, so no append is acknowledged that the new
 *      owner does not see.
 *  OR5 Lease takeover: watch the record for lease_ms + margin (re-read
 *      every lease_ms / 3).  Unchanged: the owner is gone (its OR3 window
 *      closed before the watch ended) and the record is written.  Changed:
 *      it lives; the record is written anyway and OR4 waited out.  Either
 *      way the record is read again after SETTLE (> one renewal period)
 *      to see that no renewal overwrote it (then written again, a bounded
 *      number of times).
 *
 * CLOCK AND TIMING ASSUMPTIONS (README, "Ownership")
 *  - Decisions use the monotonic clock only (CLOCK_MONOTONIC: not stepped
 *    by NTP or an admin); the record's wall-clock time is never compared
 *    across hosts.
 *  - The two hosts' monotonic clocks run at rates within margin / lease
 *    (20 %) of each other over one lease: true of any working clock.
 *  - Lease mode only: a renewal's read-and-write completes within SETTLE
 *    (lease_ms / 2) and the store is read-after-write consistent for the
 *    key (S3 is since 2020).  A renewal slower than that can overwrite a
 *    takeover unseen; the new owner's own renewal then finds the record
 *    not its own and fences itself: two owners never both acknowledge,
 *    but the takeover can fail.  CAS mode needs neither assumption.
 *  - A daemon that sleeps (SIGSTOP, a VM pause) longer than margin between
 *    checking may_ack and acknowledging can acknowledge late: the object
 *    WAL checks may_ack after the proof of each PUT, as late as it can.
 *
 * STATES (the setter set_state refuses any other move)
 *
 *   state       event                          next       function
 *   UNCLAIMED   claim succeeded                OWNED      claim_*
 *   UNCLAIMED   claim: someone else's (thread) FENCED     owner_thread
 *   OWNED       renewal: record not ours       FENCED     fence
 *   OWNED       renewal or claim succeeded     OWNED      (ack window)
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obj/objstore.h"
#include "owner/owner.h"
#include "owner/owner_priv.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"

#define CLAIM_TRIES	8	/* a record that keeps moving under a claim */

static struct bucket_owner *bo_of(struct nrs_owner *o)
{
	return (struct bucket_owner *)o;
}

/* ---- clocks ------------------------------------------------------------- */

static uint64_t real_mono(void *ctx)
{
	(void)ctx;
	return nrs_now_mono_ns();
}

static int64_t real_wall(void *ctx)
{
	(void)ctx;
	return nrs_now_real_ns() / 1000000;
}

static const struct nrs_owner_clock real_clock = {
	.mono_ns = real_mono, .wall_ms = real_wall, .sleep_ms = NULL,
};

static uint64_t mono(struct bucket_owner *b)
{
	return b->clk->mono_ns(b->clk->ctx);
}

/* Sleep ms (a test's clock sleeps its own way); false if told to stop. */
static bool nap(struct bucket_owner *b, uint64_t ms)
{
	struct timespec ts;
	bool stop;

	if (b->clk->sleep_ms) {
		b->clk->sleep_ms(b->clk->ctx, ms);
		return true;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&b->tlock);
	while (!b->stop &&
	       pthread_cond_timedwait(&b->tcond, &b->tlock, &ts) != ETIMEDOUT)
		;
	stop = b->stop;
	pthread_mutex_unlock(&b->tlock);
	return !stop;
}

/* ---- states --------------------------------------------------------------- */

static void set_state(struct bucket_owner *b, enum nrs_owner_state to)
{
	int from = atomic_load(&b->state);

	/* the table at the top: FENCED is final, nothing goes back to
	 * UNCLAIMED */
	if (from == NRS_OWNER_FENCED || to == NRS_OWNER_UNCLAIMED)
		return;
	atomic_store(&b->state, (int)to);
}

/* A good claim or renewal that started at t0 (OR3). */
static void renewed(struct bucket_owner *b, uint64_t t0)
{
	if (atomic_load(&b->state) == NRS_OWNER_FENCED)
		return;
	set_state(b, NRS_OWNER_OWNED);
	atomic_store(&b->ack_until_ns,
		     t0 + (b->lease_ms - b->margin_ms) * 1000000);	/* OR3 */
	atomic_store(&b->last_renew_ns, (int_fast64_t)t0);
	atomic_fetch_add(&b->renewals, 1);
}

/* OR2: for good. */
static void fence(struct bucket_owner *b, const char *why)
{
	if (atomic_exchange(&b->state, NRS_OWNER_FENCED) != NRS_OWNER_FENCED)
		nrs_err("fenced: %s: another daemon owns this bucket now; this "
			"one acknowledges, PUTs and DELETEs nothing more (mount "
			"with -o recover to take it back)", why);
	atomic_store(&b->ack_until_ns, 0);
}

static void log_other(const struct bucket_owner *b, const struct owner_rec *r)
{
	char hex[33];

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", r->owner[i]);
	nrs_warn("owner record: the bucket is owned by %s (epoch %" PRIu64
		 ", lease %" PRIu64 " ms, written at %" PRId64 " ms since "
		 "1970), not by this data directory (%s)", hex, r->epoch,
		 r->lease_ms, r->renewed_ms, b->id);
}

/* OR4: wait until lease + margin after t_write. */
static void wait_out(struct bucket_owner *b, uint64_t t_write)
{
	uint64_t until = t_write + (b->lease_ms + b->margin_ms) * 1000000;

	for (;;) {
		uint64_t now = mono(b);

		if (now >= until || !nap(b, (until - now + 999999) / 1000000))
			return;
	}
}

/* ---- claim ---------------------------------------------------------------- */

static int probe(struct bucket_owner *b)
{
	int rc;

	if (b->mode != NRS_OWNER_UNKNOWN)
		return 0;
	rc = nrs_obj_cond_supported(b->store);	/* logs */
	if (rc < 0)
		return rc;
	b->mode = rc ? NRS_OWNER_CAS : NRS_OWNER_LEASE;
	nrs_info("owner record: %s mode (lease %" PRIu64 " ms)",
		 nrs_owner_mode_name((enum nrs_owner_mode)b->mode), b->lease_ms);
	return 0;
}

static int claim_cas(struct bucket_owner *b, bool recover)
{
	for (int i = 0; i < CLAIM_TRIES; i++) {
		char etag[NRS_ETAG_MAX];
		struct owner_rec r;
		uint64_t t0 = mono(b);
		int rc = nrs_owrec_read(b, &r, etag);
		bool takeover = false;

		if (rc == -ENOENT) {
			b->epoch = 1;
			b->count = 0;
			rc = nrs_owrec_write(b, true, NULL);
		} else if (rc == -EUCLEAN || (rc == 0 &&
			   memcmp(r.owner, b->idbin, 16) != 0)) {
			if (rc == 0)
				log_other(b, &r);
			else
				nrs_warn("owner record: not a record");
			if (!recover)
				return rc == 0 ? -EBUSY : -EUCLEAN;
			b->epoch = (rc == 0 ? r.epoch : 0) + 1;
			b->count = 0;
			takeover = true;
			rc = etag[0] ? nrs_owrec_write(b, true, etag) : -EIO;
		} else if (rc == 0) {	/* ours: go on with its epoch */
			b->epoch = r.epoch;
			b->count = r.count;
			rc = nrs_owrec_write(b, true, etag);
		}
		if (rc == -EEXIST || rc == -ESTALE || rc == -ENOENT)
			continue;	/* it moved under us: read it again */
		if (rc < 0)
			return rc;
		if (takeover) {
			nrs_warn("owner record: taken over (epoch %" PRIu64
				 "); waiting %" PRIu64 " ms for the old owner "
				 "to stop (OR4)", (uint64_t)b->epoch,
				 b->lease_ms + b->margin_ms);
			wait_out(b, t0);	/* OR4 */
			t0 = mono(b);
		}
		renewed(b, t0);
		return 0;
	}
	return -EAGAIN;
}

/* OR5: the record, watched for lease + margin; *moved if it changed. */
static int watch(struct bucket_owner *b, const struct owner_rec *first, bool *moved)
{
	uint64_t until = mono(b) + (b->lease_ms + b->margin_ms) * 1000000;

	*moved = false;
	while (mono(b) < until) {
		struct owner_rec r;
		int rc;

		if (!nap(b, b->lease_ms / 3))
			return -EINTR;
		rc = nrs_owrec_read(b, &r, NULL);
		if (rc < 0 && rc != -ENOENT && rc != -EUCLEAN)
			return rc;
		if (rc != 0 || !nrs_owrec_same(&r, first))
			*moved = true;
	}
	return 0;
}

static int claim_lease(struct bucket_owner *b, bool recover)
{
	uint64_t settle = b->lease_ms / 2;

	for (int i = 0; i < CLAIM_TRIES; i++) {
		struct owner_rec r;
		uint64_t t0 = mono(b), tw;
		bool moved = false, took = false;
		int rc = nrs_owrec_read(b, &r, NULL);

		if (rc == 0 && memcmp(r.owner, b->idbin, 16) == 0) {
			b->epoch = r.epoch;	/* ours: go on */
			b->count = r.count;
			rc = nrs_owrec_write(b, false, NULL);
			if (rc == 0)
				renewed(b, t0);
			return rc;
		}
		if (rc == 0 || rc == -EUCLEAN) {
			if (rc == 0)
				log_other(b, &r);
			else
				nrs_warn("owner record: not a record");
			bool bad = rc == -EUCLEAN;

			if (!recover)
				return bad ? -EUCLEAN : -EBUSY;
			nrs_warn("owner record: watching it for %" PRIu64
				 " ms before taking it over (OR5)",
				 b->lease_ms + b->margin_ms);
			rc = bad ? 0 : watch(b, &r, &moved);	/* OR5 */
			if (rc < 0)
				return rc;
			b->epoch = (bad ? 0 : r.epoch) + 1;
			took = true;
		} else if (rc == -ENOENT) {
			b->epoch = 1;
		} else {
			return rc;
		}
		b->count = 0;
		tw = mono(b);
		rc = nrs_owrec_write(b, false, NULL);
		if (rc < 0)
			return rc;
		if (!nap(b, settle))
			return -EINTR;
		rc = nrs_owrec_read(b, &r, NULL);
		if (rc < 0 && rc != -ENOENT && rc != -EUCLEAN)
			return rc;
		if (rc != 0 || !nrs_owrec_is_ours(b, &r))
			continue;	/* overwritten: again (OR5) */
		t0 = tw;	/* OR3: from the write that made it ours */
		if (took && moved) {	/* it lives: OR4 */
			nrs_warn("owner record: taken over from a live owner "
				 "(epoch %" PRIu64 "); waiting %" PRIu64 " ms "
				 "for it to stop (OR4)", (uint64_t)b->epoch,
				 b->lease_ms + b->margin_ms);
			wait_out(b, tw);
			t0 = mono(b);
			rc = nrs_owrec_read(b, &r, NULL);
			if (rc < 0 && rc != -ENOENT && rc != -EUCLEAN)
				return rc;
			if (rc != 0 || !nrs_owrec_is_ours(b, &r))
				continue;
		}
		renewed(b, t0);
		return 0;
	}
	return -EAGAIN;
}

static int bo_claim(struct nrs_owner *o, bool recover)
{
	struct bucket_owner *b = bo_of(o);
	int rc;

	if (atomic_load(&b->state) == NRS_OWNER_FENCED)
		return -ESTALE;
	pthread_mutex_lock(&b->lock);
	rc = probe(b);
	if (rc == 0)
		rc = b->mode == NRS_OWNER_CAS ? claim_cas(b, recover)
					      : claim_lease(b, recover);
	pthread_mutex_unlock(&b->lock);
	if (rc == 0)
		nrs_info("owner record: this data directory owns the bucket "
			 "(%s mode, epoch %" PRIu64 ", lease %" PRIu64 " ms)",
			 nrs_owner_mode_name((enum nrs_owner_mode)b->mode),
			 (uint64_t)b->epoch, b->lease_ms);
	return rc;
}

/* ---- renew ---------------------------------------------------------------- */

static int bo_renew(struct nrs_owner *o)
{
	struct bucket_owner *b = bo_of(o);
	uint64_t t0;
	struct owner_rec r;
	int rc;

	if (atomic_load(&b->state) == NRS_OWNER_FENCED)
		return -ESTALE;
	if (atomic_load(&b->state) != NRS_OWNER_OWNED)
		return -EAGAIN;
	pthread_mutex_lock(&b->lock);
	t0 = mono(b);
	rc = nrs_failpoint(NRS_FP_OWNER_RENEW);
	if (rc < 0) {
		/* the store did not answer: still ours, for OR3's window */
	} else if (b->mode == NRS_OWNER_CAS) {
		rc = nrs_owrec_write(b, true, b->etag);
		if (rc == -ESTALE || rc == -ENOENT) {	/* OR2 */
			fence(b, rc == -ESTALE ? "the owner record changed"
					       : "the owner record is gone");
			rc = -ESTALE;
		}
	} else {
		rc = nrs_owrec_read(b, &r, NULL);
		if (rc == -ENOENT || rc == -EUCLEAN ||
		    (rc == 0 && !nrs_owrec_is_ours(b, &r))) {	/* OR2 */
			fence(b, "the owner record is not ours");
			rc = -ESTALE;
		} else if (rc == 0) {
			rc = nrs_owrec_write(b, false, NULL);
		}
	}
	pthread_mutex_unlock(&b->lock);
	if (rc == 0)
		renewed(b, t0);
	else if (rc != -ESTALE)
		atomic_fetch_add(&b->failures, 1);
	return rc;
}

static bool bo_may_ack(struct nrs_owner *o, uint64_t now_ns)
{
	struct bucket_owner *b = bo_of(o);

	return atomic_load(&b->state) == NRS_OWNER_OWNED &&
	       now_ns < atomic_load(&b->ack_until_ns);	/* OR3 */
}

static bool bo_is_fenced(struct nrs_owner *o)
{
	return atomic_load(&bo_of(o)->state) == NRS_OWNER_FENCED;
}

static void bo_status(struct nrs_owner *o, struct nrs_owner_status *out)
{
	struct bucket_owner *b = bo_of(o);
	int64_t last = atomic_load(&b->last_renew_ns);
	uint64_t now = mono(b);

	memset(out, 0, sizeof(*out));
	out->mode = (enum nrs_owner_mode)atomic_load(&b->mode);
	out->epoch = atomic_load(&b->epoch);
	out->state = (enum nrs_owner_state)atomic_load(&b->state);
	out->lease_ms = b->lease_ms;
	out->renewals = atomic_load(&b->renewals);
	out->renew_failures = atomic_load(&b->failures);
	out->since_renew_ms = last < 0 ? -1 :
			      (int64_t)((now - (uint64_t)last) / 1000000);
	out->may_ack = bo_may_ack(o, now);
}

/* ---- the renew thread (OR1) -------------------------------------------- */

/* OR1: the ms until the next renewal is due: a third of a lease after
 * the start of the last good one (a slow renewal does not push the next
 * one back); 100 ms when that is past (renewals failing). */
static uint64_t next_renew_ms(struct bucket_owner *b)
{
	int64_t last = atomic_load(&b->last_renew_ns);
	uint64_t due, now = mono(b);

	if (last < 0 || atomic_load(&b->state) != NRS_OWNER_OWNED)
		return b->lease_ms / 3;
	due = (uint64_t)last + b->lease_ms / 3 * 1000000;
	return due > now ? (due - now) / 1000000 + 1 : 100;	/* failing */
}

static void *owner_thread(void *arg)
{
	struct bucket_owner *b = arg;

	while (nap(b, next_renew_ms(b))) {	/* OR1 */
		int st = atomic_load(&b->state), rc;

		if (st == NRS_OWNER_FENCED)
			break;
		if (st == NRS_OWNER_OWNED) {
			(void)nrs_owner_renew(&b->base);
			continue;
		}
		rc = bo_claim(&b->base, b->recover);
		if (rc == -EBUSY || rc == -EUCLEAN) {
			if (atomic_exchange(&b->state, NRS_OWNER_FENCED) !=
			    NRS_OWNER_FENCED)
				nrs_err("fenced: another daemon owns this bucket; "
					"mount with -o recover to take it back");
		}
	}
	return NULL;
}

static int bo_start(struct nrs_owner *o, bool recover)
{
	struct bucket_owner *b = bo_of(o);
	int rc;

	if (b->running)
		return -EALREADY;
	b->recover = recover;
	rc = pthread_create(&b->thread, NULL, owner_thread, b);
	if (rc)
		return -rc;
	b->running = true;
	return 0;
}

static void bo_close(struct nrs_owner *o)
{
	struct bucket_owner *b = bo_of(o);

	pthread_mutex_lock(&b->tlock);
	b->stop = true;
	pthread_cond_broadcast(&b->tcond);
	pthread_mutex_unlock(&b->tlock);
	if (b->running)
		pthread_join(b->thread, NULL);
	pthread_cond_destroy(&b->tcond);
	pthread_mutex_destroy(&b->tlock);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static const struct nrs_owner_ops bucket_ops = {
	.claim = bo_claim,
	.renew = bo_renew,
	.may_ack = bo_may_ack,
	.is_fenced = bo_is_fenced,
	.status = bo_status,
	.start = bo_start,
	.close = bo_close,
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int nrs_owner_bucket_open(const struct nrs_owner_opts *o,
			  struct nrs_owner **out)
{
	struct bucket_owner *b;
	pthread_condattr_t ca;

	if (!o->store || strlen(o->id) != NRS_OWNER_ID_LEN ||
	    (o->lease_ms && (o->lease_ms < NRS_OWNER_LEASE_MIN_MS ||
			     o->lease_ms > NRS_OWNER_LEASE_MAX_MS)))
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (int i = 0; i < 16; i++) {
		int hi = hexval(o->id[2 * i]), lo = hexval(o->id[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			free(b);
			return -EINVAL;
		}
		b->idbin[i] = (unsigned char)(hi << 4 | lo);
	}
	b->base.ops = &bucket_ops;
	b->store = o->store;
	memcpy(b->id, o->id, sizeof(b->id));
	b->lease_ms = o->lease_ms ? o->lease_ms : NRS_OWNER_LEASE_DEFAULT_MS;
	b->margin_ms = b->lease_ms / 5;	/* OR3 */
	b->clk = o->clock ? o->clock : &real_clock;
	atomic_init(&b->mode, (int)o->mode);
	atomic_init(&b->epoch, 0);
	atomic_init(&b->state, NRS_OWNER_UNCLAIMED);
	atomic_init(&b->ack_until_ns, 0);
	atomic_init(&b->last_renew_ns, -1);
	pthread_mutex_init(&b->lock, NULL);
	pthread_mutex_init(&b->tlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->tcond, &ca);
	pthread_condattr_destroy(&ca);
	*out = &b->base;
	return 0;
}

bool nrs_owner_key_is_ours(const char *key)
{
	return strcmp(key, REC_KEY) == 0 ||
	       strncmp(key, "owner-probe/", 12) == 0;
}

const char *nrs_owner_mode_name(enum nrs_owner_mode m)
{
	switch (m) {
	case NRS_OWNER_CAS:
		return "cas";
	case NRS_OWNER_LEASE:
		return "lease";
	default:
		return "unknown";
	}
}

const char *nrs_owner_state_name(enum nrs_owner_state s)
{
	switch (s) {
	case NRS_OWNER_OWNED:
		return "owned";
	case NRS_OWNER_FENCED:
		return "fenced";
	default:
		return "unclaimed";
	}
}
