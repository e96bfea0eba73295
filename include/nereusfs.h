/*
 * nereusfs.h - the ioctl interface of a nereusfs stream, for adapters.
 * Installed; no other nereusfs header is.  See nereusfs(8), section
 * ADAPTERS, and nereusctl(8) for a tool built on it.
 *
 * FUSE forwards only "restricted" ioctls on regular files: the argument's
 * size and direction are encoded in the command number and the kernel
 * copies exactly that many bytes, never following a pointer.  So every
 * argument below is a fixed-size structure without pointers, and a
 * conditional append is two calls: NRS_IOC_EXPECT arms the handle's next
 * write(), then write() carries the bytes.  On a handle without O_APPEND,
 * pwrite() at the expected offset is the same conditional append in one
 * call (one FUSE request instead of two): prefer it where the handle need
 * not be O_APPEND.
 *
 * Versioning: every structure starts with abi.  In structures the caller
 * passes (BIND, EXPECT), the caller sets abi = NRS_IOC_ABI and zeroes
 * flags bits it does not use; anything else is EINVAL.  In the one the
 * daemon fills (SNAPSHOT), it sets abi to the version it filled.  A
 * layout never changes: a new layout gets a new size, hence a new command
 * number.  Reserved fields are 0.  Layouts are the same for 32- and 64-bit
 * callers, but nereusfs 0.2 refuses ioctls from 32-bit processes on a
 * 64-bit kernel (ENOTTY).
 *
 * Errors (errno after ioctl() returns -1):
 *   EINVAL  bad abi, flags or reserved field
 *   EBADF   BIND or EXPECT on a descriptor not open for writing
 *   ESTALE  BIND: the stream's epoch is already higher than the one asked
 *   ENOTTY  not a nereusfs stream (a directory, a file under /.nereus, another fs),
 *           an unknown command, or a 32-bit caller
 *   EIO     the daemon could not make the new epoch durable
 */
#ifndef NEREUSFS_H
#define NEREUSFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

#define NRS_IOC_ABI		1u
#define NRS_IOC_MAGIC		'N'	/* numbers 0xA0.. (0x00-0x7f are taken) */

/*
 * NRS_IOC_BIND: fence and bind.  Raises the stream's writer epoch to
 * epoch if it is lower, fencing every handle opened or bound under a lower
 * one (their later writes fail ESTALE; appends ordered before the fence
 * complete), then this handle writes under epoch.  Equal: nothing to
 * fence, the handle is bound (a retry is safe).  Higher: ESTALE, nothing
 * changes.  Returns once the new epoch is durable.
 */
struct nrs_ioc_bind {
	uint32_t abi;		/* in: NRS_IOC_ABI */
	uint32_t flags;		/* in: 0 */
	uint64_t epoch;		/* in: the leader's epoch */
};

/*
 * NRS_IOC_EXPECT: arm the handle's next write() with an expected offset.
 * That write is a conditional append at exactly offset, with or without
 * O_APPEND: it fails ESPIPE, writing nothing, unless offset is the head
 * when the append is ordered.  The next non-empty write on the handle
 * consumes the expectation whatever its outcome (arm again before a
 * retry); a second EXPECT replaces the first.  flags NRS_EXPECT_DISARM
 * drops an armed expectation (offset ignored).  Keep the write within one
 * append (1 MiB, see README "Limits"): the kernel splits a larger one, and
 * only its first part is conditional.
 *
 * flags NRS_EXPECT_FOLLOW: the expectation is not consumed but follows the
 * handle's own appends, so one EXPECT makes every later write() on the
 * handle conditional, each one FUSE request: a write of n bytes that lands
 * at the expected offset moves it to offset + n; a write that fails once
 * ordered (ESPIPE, ESTALE, EIO...) leaves NRS_EXPECT_BROKEN, so that every
 * later write fails ESPIPE (nothing written) until the next EXPECT or
 * DISARM; one refused before that (EBUSY, ENOMEM, EFBIG) leaves it as it
 * was.  Writes on a
 * following handle must not overlap (one thread's write()s never do): a
 * write sent while the one before it is unanswered expects that one's
 * offset, so it fails and breaks the expectation.
 */
#define NRS_EXPECT_DISARM	1u
#define NRS_EXPECT_FOLLOW	2u
#define NRS_EXPECT_BROKEN	(UINT64_MAX - 1)	/* no head is there */
struct nrs_ioc_expect {
	uint32_t abi;		/* in: NRS_IOC_ABI */
	uint32_t flags;		/* in: 0, NRS_EXPECT_DISARM, NRS_EXPECT_FOLLOW */
	uint64_t offset;	/* in: the head the write must land at */
};

/*
 * NRS_IOC_SNAPSHOT: the stream's published {head, version, start, epoch},
 * read together under the stream's lock (four getxattr calls could mix two
 * commits).  handle_epoch is the epoch this handle writes under: lower than
 * epoch means it is fenced.  expect is the armed offset, or
 * NRS_EXPECT_NONE; flags has NRS_EXPECT_FOLLOW when it follows the
 * handle's appends (then NRS_EXPECT_BROKEN after a failed write).
 */
#define NRS_EXPECT_NONE		UINT64_MAX
struct nrs_ioc_snapshot {
	uint32_t abi;		/* out: NRS_IOC_ABI */
	uint32_t flags;		/* out: 0 or NRS_EXPECT_FOLLOW */
	uint64_t head;		/* == st_size == user.nereus.head */
	uint64_t version;	/* user.nereus.version */
	uint64_t start;		/* user.nereus.start */
	uint64_t epoch;		/* user.nereus.epoch */
	uint64_t handle_epoch;
	uint64_t expect;
	uint64_t reserved;	/* 0 */
};

#define NRS_IOC_BIND	 _IOW(NRS_IOC_MAGIC, 0xA0, struct nrs_ioc_bind)
#define NRS_IOC_EXPECT	 _IOW(NRS_IOC_MAGIC, 0xA1, struct nrs_ioc_expect)
#define NRS_IOC_SNAPSHOT _IOR(NRS_IOC_MAGIC, 0xA2, struct nrs_ioc_snapshot)

/* The ABI: these never change (tests/unit/test_abi.c holds the numbers). */
#ifdef __cplusplus
#define NRS_STATIC_ASSERT static_assert
#else
#define NRS_STATIC_ASSERT _Static_assert
#endif
NRS_STATIC_ASSERT(sizeof(struct nrs_ioc_bind) == 16, "nrs_ioc_bind ABI");
NRS_STATIC_ASSERT(offsetof(struct nrs_ioc_bind, epoch) == 8,
		  "nrs_ioc_bind ABI");
NRS_STATIC_ASSERT(sizeof(struct nrs_ioc_expect) == 16, "nrs_ioc_expect ABI");
NRS_STATIC_ASSERT(offsetof(struct nrs_ioc_expect, offset) == 8,
		  "nrs_ioc_expect ABI");
NRS_STATIC_ASSERT(sizeof(struct nrs_ioc_snapshot) == 64,
		  "nrs_ioc_snapshot ABI");
NRS_STATIC_ASSERT(offsetof(struct nrs_ioc_snapshot, head) == 8 &&
		  offsetof(struct nrs_ioc_snapshot, epoch) == 32 &&
		  offsetof(struct nrs_ioc_snapshot, reserved) == 56,
		  "nrs_ioc_snapshot ABI");
#undef NRS_STATIC_ASSERT

#endif
