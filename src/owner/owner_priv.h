/*
 * owner_priv.h - what the files of the bucket owner share, and nothing
 * outside src/owner/ may include: the owner's state (owner.c) and the
 * record's reading and writing (owner_rec.c, which gives its format).
 */
#ifndef NRS_OWNER_PRIV_H
#define NRS_OWNER_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "obj/objstore.h"
#include "owner/owner.h"

#define REC_KEY		"owner"	/* the record's key (owner_rec.c) */

/* A record, decoded (owner_rec.c). */
struct owner_rec {
	unsigned char owner[16];
	uint64_t epoch, lease_ms;
	int64_t renewed_ms;
	uint32_t count;
};

/* The bucket implementation of struct nrs_owner (owner.c). */
struct bucket_owner {
	struct nrs_owner base;
	struct nrs_objstore *store;
	char id[NRS_OWNER_ID_LEN + 1];
	unsigned char idbin[16];
	uint64_t lease_ms, margin_ms;
	const struct nrs_owner_clock *clk;
	pthread_mutex_t lock;	/* one claim or renewal at a time; protects
				 * etag, count, and the writes of mode and
				 * epoch (status reads those two without it:
				 * a claim can hold the lock for leases) */
	atomic_int mode;	/* enum nrs_owner_mode */
	atomic_uint_fast64_t epoch;
	char etag[NRS_ETAG_MAX];	/* CAS: of our last write */
	uint32_t count;
	atomic_int state;		/* enum nrs_owner_state */
	atomic_uint_fast64_t ack_until_ns;	/* OR3; 0: none */
	atomic_int_fast64_t last_renew_ns;	/* -1: none */
	atomic_uint_fast64_t renewals, failures;
	/* the renew thread */
	pthread_t thread;
	bool running;
	bool recover;
	pthread_mutex_t tlock;
	pthread_cond_t tcond;	/* with tlock: stop */
	bool stop;		/* protected by tlock */
};

/* owner_rec.c */
/* The record now, and its etag (if etag is not NULL).  -ENOENT: none;
 * -EUCLEAN: bytes that are no record; else the store's errno. */
int nrs_owrec_read(struct bucket_owner *b, struct owner_rec *r,
		   char etag[NRS_ETAG_MAX]);
/* Write our record (b's id, epoch, lease; count + 1): with cond, a
 * conditional put (if_match NULL: absent) that keeps the etag in b->etag;
 * else a plain put.  Under b->lock. */
int nrs_owrec_write(struct bucket_owner *b, bool cond, const char *if_match);
bool nrs_owrec_same(const struct owner_rec *a, const struct owner_rec *b);
/* b's id and the epoch b claimed. */
bool nrs_owrec_is_ours(const struct bucket_owner *b,
		       const struct owner_rec *r);

#endif
