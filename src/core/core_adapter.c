/*
 * core_adapter.c - what a broker adapter needs beyond POSIX (DESIGN.md
 * section 4, the ioctls of include/nereusfs.h): fence-and-bind a handle
 * to an epoch, arm a handle's next write with an expected offset, and read
 * a stream's published state in one step.
 *
 * Where each guarantee comes from:
 *  - bind goes through nrs_core_fence, the pipeline's ordered fence (PL1 in
 *    pipeline.c): the "is the stream's epoch higher?" check and the raise
 *    happen in the committer thread, in the same ordered step as every
 *    append's epoch check and head CAS.  So no append of a fenced handle
 *    is ordered after the fence, and none is published after it.
 *  - the handle's epoch only grows (two binds racing on one handle leave
 *    the higher), and is read by nrs_core_append under h->lock;
 *  - an armed expectation lives under h->lock and nrs_core_append takes it
 *    and queues its request in one critical section (core.c).
 *
 *  EX1 A following expectation (NRS_EXPECT_FOLLOW) moves only when an
 *     append that took it completes, before its reply: to expected + len
 *     if the append landed (it landed at the expected offset, PL1), to
 *     NRS_EXPECT_BROKEN -- which no head reaches, so every later write
 *     fails ESPIPE -- if it failed; and only from the value that append
 *     took (a compare-and-swap), so a newer EXPECT, or an overlapping
 *     write's outcome, is never overwritten by an older append's.  Moving
 *     it at submission instead would let the write after a failed one
 *     land wherever the failed one would have ended: after another
 *     writer's bytes of the same length.
 *
 * Decisions (documented in nereusfs(8)): BIND and EXPECT need a handle
 * open for writing (-EBADF); SNAPSHOT works on any stream handle; an
 * offset of UINT64_MAX cannot be a head and is -EINVAL.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "nereusfs.h"

_Static_assert(NRS_EXPECT_BROKEN > NRS_HEAD_MAX &&
	       NRS_EXPECT_BROKEN != NRS_EXPECT_ANY,
	       "a broken expectation matches no head (EX1)");

static int writable_stream(const struct nrs_handle *h)
{
	if (!h || h->kind != NRS_H_STREAM)
		return -ENOTTY;
	if ((h->flags & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	return 0;
}

/*
 * Fence and bind h (open for writing) to epoch: raise the stream's epoch
 * to it through the pipeline's ordered fence, so the check and the raise
 * are one ordered step (-ESTALE if the stream's is higher, nothing
 * changes), then h writes under it.  Waits until the epoch is durable.
 */
static int adapter_bind(struct nrs_core *c, struct nrs_handle *h,
			uint64_t epoch)
{
	int err = writable_stream(h);

	if (err)
		return err;
	err = nrs_core_fence(c, h->st, epoch, true) ?:
	      nrs_core_bucket_sync_epoch(c, h->st, h->ino);	/* NS4 */
	if (err)
		return err;
	pthread_mutex_lock(&h->lock);
	if (epoch > h->epoch)
		h->epoch = epoch;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/*
 * Arm h's next append (disarm if !arm) with the offset it must land at,
 * with or without O_APPEND; the next nrs_core_append on h consumes it,
 * or, with follow, moves it (EX1).
 */
static int adapter_expect(struct nrs_core *c, struct nrs_handle *h, bool arm,
			  bool follow, uint64_t off)
{
	int err = writable_stream(h);

	(void)c;
	if (err)
		return err;
	if (arm && off == UINT64_MAX)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	h->armed = arm;
	h->follow = arm && follow;
	atomic_store(&h->expect, off);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

uint64_t nrs_core_expect_take(struct nrs_handle *h, bool at_head,
			      uint64_t off, bool *follow)
{
	*follow = h->armed && h->follow;
	if (!h->armed)
		return at_head ? NRS_EXPECT_ANY : off;
	if (!h->follow)
		h->armed = false;	/* consumed */
	return atomic_load(&h->expect);
}

/* EX1; no lock: the append may complete inside nrs_core_append, which
 * holds h->lock (a pipeline that failed completes it at once). */
void nrs_core_expect_followed(struct nrs_handle *h, uint64_t expected,
			      size_t len, int err)
{
	uint64_t from = expected;

	atomic_compare_exchange_strong(&h->expect, &from,
				       err ? NRS_EXPECT_BROKEN
					   : expected + len);
}

struct nrs_snapshot {
	uint64_t head, version, start, epoch;	/* one published state */
	uint64_t handle_epoch;			/* h writes under it */
	uint64_t expect;			/* armed, or UINT64_MAX */
	bool follow;				/* NRS_EXPECT_FOLLOW */
};

static int adapter_snapshot(struct nrs_core *c, struct nrs_handle *h,
			    struct nrs_snapshot *out)
{
	struct nrs_stream *st;
	struct nrs_snapshot s;

	(void)c;
	if (!h || h->kind != NRS_H_STREAM)
		return -ENOTTY;
	st = h->st;
	pthread_mutex_lock(&st->lock);
	s.head = st->head;
	s.version = st->version;
	s.start = st->start;
	s.epoch = st->epoch;
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_lock(&h->lock);
	s.handle_epoch = h->epoch;
	s.expect = h->armed ? atomic_load(&h->expect) : UINT64_MAX;
	s.follow = h->armed && h->follow;
	pthread_mutex_unlock(&h->lock);
	*out = s;
	return 0;
}

/* ---- the ABI ------------------------------------------------------- */

ssize_t nrs_core_ioctl(struct nrs_core *c, struct nrs_handle *h,
		       unsigned int cmd, const void *in, size_t in_len,
		       void *out, size_t out_size)
{
	struct nrs_ioc_bind b;
	struct nrs_ioc_expect e;
	struct nrs_ioc_snapshot so;
	struct nrs_snapshot s;
	int err;

	switch (cmd) {
	case NRS_IOC_BIND:
		if (in_len != sizeof(b))
			return -EINVAL;
		memcpy(&b, in, sizeof(b));
		if (b.abi != NRS_IOC_ABI || b.flags != 0)
			return -EINVAL;
		return adapter_bind(c, h, b.epoch);
	case NRS_IOC_EXPECT:
		if (in_len != sizeof(e))
			return -EINVAL;
		memcpy(&e, in, sizeof(e));
		if (e.abi != NRS_IOC_ABI ||
		    (e.flags & ~(NRS_EXPECT_DISARM | NRS_EXPECT_FOLLOW)))
			return -EINVAL;
		return adapter_expect(c, h, !(e.flags & NRS_EXPECT_DISARM),
				      (e.flags & NRS_EXPECT_FOLLOW) != 0,
				      e.offset);
	case NRS_IOC_SNAPSHOT:
		if (out_size < sizeof(so))
			return -EINVAL;
		err = adapter_snapshot(c, h, &s);
		if (err)
			return err;
		memset(&so, 0, sizeof(so));
		so.abi = NRS_IOC_ABI;
		so.flags = s.follow ? NRS_EXPECT_FOLLOW : 0;
		so.head = s.head;
		so.version = s.version;
		so.start = s.start;
		so.epoch = s.epoch;
		so.handle_epoch = s.handle_epoch;
		so.expect = s.expect;
		memcpy(out, &so, sizeof(so));
		return (ssize_t)sizeof(so);
	default:
		return -ENOTTY;
	}
}
