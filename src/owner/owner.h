/*
 * owner.h - who owns a bucket (DESIGN.md I8: at most one daemon
 * acknowledges appends of a namespace at a time; an owner that lost
 * ownership acknowledges nothing more).
 *
 * An interface (struct nrs_owner_ops) so that ownership can move to a
 * coordination service (ZooKeeper) later; the one implementation today
 * keeps an owner record in the bucket itself (owner.c, which gives the
 * record's format, the two modes, compare-and-set and lease, and the
 * clock and timing assumptions).  owner_store.c wraps an object store so
 * that a fenced owner PUTs and DELETEs nothing more.
 *
 * Thread safety: every function may be called from any thread; may_ack()
 * and is_fenced() take no lock of the caller's and never wait on the store.
 */
#ifndef NRS_OWNER_H
#define NRS_OWNER_H

#include <stdbool.h>
#include <stdint.h>

struct nrs_objstore;

#define NRS_OWNER_ID_LEN	32	/* hex digits of a 128-bit owner id */

enum nrs_owner_mode {
	NRS_OWNER_UNKNOWN = 0,	/* not probed yet (the store did not answer) */
	NRS_OWNER_CAS,		/* conditional writes: compare-and-set */
	NRS_OWNER_LEASE,	/* none: a lease with time bounds */
};

enum nrs_owner_state {
	NRS_OWNER_UNCLAIMED = 0,	/* not (yet) the owner: the store did not
					 * answer at mount */
	NRS_OWNER_OWNED,		/* the record is ours */
	NRS_OWNER_FENCED,		/* someone else took it: final */
};

/* The clock an owner runs on: the real one (NULL in the options), or a
 * test's. */
struct nrs_owner_clock {
	uint64_t (*mono_ns)(void *ctx);		/* never steps back */
	int64_t (*wall_ms)(void *ctx);		/* stored, for operators */
	void (*sleep_ms)(void *ctx, uint64_t ms);
	void *ctx;
};

struct nrs_owner_opts {
	struct nrs_objstore *store;	/* borrowed; outlives the owner */
	char id[NRS_OWNER_ID_LEN + 1];	/* this data directory's id */
	uint64_t lease_ms;		/* 0: NRS_OWNER_LEASE_DEFAULT_MS */
	const struct nrs_owner_clock *clock;	/* NULL: the real clocks */
	enum nrs_owner_mode mode;	/* UNKNOWN: probe the store */
};

#define NRS_OWNER_LEASE_DEFAULT_MS	15000
#define NRS_OWNER_LEASE_MIN_MS		30
#define NRS_OWNER_LEASE_MAX_MS		60000

/* What /.nereus/status and metrics show. */
struct nrs_owner_status {
	enum nrs_owner_mode mode;
	enum nrs_owner_state state;
	uint64_t epoch;
	uint64_t lease_ms;
	uint64_t renewals, renew_failures;
	int64_t since_renew_ms;		/* since the start of the last good
					 * renewal; -1: none */
	bool may_ack;
};

struct nrs_owner;

struct nrs_owner_ops {
	int (*claim)(struct nrs_owner *o, bool recover);
	int (*renew)(struct nrs_owner *o);
	bool (*may_ack)(struct nrs_owner *o, uint64_t now_ns);
	bool (*is_fenced)(struct nrs_owner *o);
	void (*status)(struct nrs_owner *o, struct nrs_owner_status *out);
	int (*start)(struct nrs_owner *o, bool recover);
	void (*close)(struct nrs_owner *o);
};

struct nrs_owner {
	const struct nrs_owner_ops *ops;
};

/* The bucket's owner record (owner.c).  Makes no request. */
int nrs_owner_bucket_open(const struct nrs_owner_opts *o,
			  struct nrs_owner **out);

/*
 * Take ownership (owner.c CLAIM): 0 owned; -EBUSY another owner holds the
 * record and recover is false (refuse the mount); -EUCLEAN a record that
 * is not one (recover overwrites it); a store's errno when it did not
 * answer (retry: the renew thread does).  With recover, a record of
 * someone else is taken over (epoch + 1), and claim returns only once
 * the old owner can acknowledge nothing more (OR4).
 */
static inline int nrs_owner_claim(struct nrs_owner *o, bool recover)
{
	return o->ops->claim(o, recover);
}

/* One renewal (OR2): 0, -ESTALE fenced (final), or the store's errno. */
static inline int nrs_owner_renew(struct nrs_owner *o)
{
	return o->ops->renew(o);
}

/*
 * OR3: may an append be acknowledged at monotonic time now_ns?  Only while
 * owned and within the lease of the last good renewal.  For the object
 * WAL: an append whose proof came after this turned false is not
 * acknowledged.
 */
static inline bool nrs_owner_may_ack(struct nrs_owner *o, uint64_t now_ns)
{
	return o->ops->may_ack(o, now_ns);
}

/* Has someone else taken the bucket?  Final once true. */
static inline bool nrs_owner_is_fenced(struct nrs_owner *o)
{
	return o->ops->is_fenced(o);
}

static inline void nrs_owner_status(struct nrs_owner *o,
				    struct nrs_owner_status *out)
{
	o->ops->status(o, out);
}

/* The renew thread: renews every lease_ms / 3, claims first if the store
 * did not answer at mount (with recover as given). */
static inline int nrs_owner_start(struct nrs_owner *o, bool recover)
{
	return o->ops->start(o, recover);
}

/* Stops the thread; close of NULL is a no-op.  The record stays. */
static inline void nrs_owner_close(struct nrs_owner *o)
{
	if (o)
		o->ops->close(o);
}

/* Is key one of the owner layer's ("owner", "owner-probe/...": owner.c,
 * objstore.h OC2), not a stream's object? */
bool nrs_owner_key_is_ours(const char *key);

const char *nrs_owner_mode_name(enum nrs_owner_mode m);
const char *nrs_owner_state_name(enum nrs_owner_state s);

/*
 * This data directory's owner id (owner_id.c): read from DIR/owner-id, or
 * made (128 random bits, hex) and stored there at the first call.
 * *was_owner: the file says this directory has owned a bucket before
 * (nrs_owner_id_mark_owner).  0 or a negative errno (logged).
 */
int nrs_owner_id_load(const char *dir, char id[NRS_OWNER_ID_LEN + 1],
		      bool *was_owner);
/* Note in DIR/owner-id that this directory owns a bucket now. */
int nrs_owner_id_mark_owner(const char *dir, const char *id);

/*
 * An object store that forwards to inner until owner is fenced, then
 * refuses put, put_cond and del with -ESTALE (owner_store.c OS1); head
 * and get go on.  inner and owner are borrowed.  Closing it does not
 * close inner.
 */
int nrs_owner_store_wrap(struct nrs_objstore *inner, struct nrs_owner *owner,
			 struct nrs_objstore **out);

#endif
