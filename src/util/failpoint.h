/*
 * failpoint.h - named fault-injection points for the durability tests
 * (issue 3).  The syntax of NRS_FAILPOINTS and what each point does are
 * given at the top of failpoint.c.
 *
 * A point fires with one of three actions: crash (SIGKILL at once),
 * error:E (the step fails with -E), or, at a write point only (wal.write,
 * through nrs_failpoint_write), short[:E]: the write stops after a prefix
 * of its bytes (half, rounded down to 512) and then fails with -E (EIO by
 * default), as a short write followed by an error would.
 *
 * Every build has them; they are inert unless nrs_failpoint_init() found
 * NRS_FAILPOINTS set (or a unit test called nrs_failpoint_parse()).  Off,
 * a point costs one load and one predictable branch.
 */
#ifndef NRS_FAILPOINT_H
#define NRS_FAILPOINT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum nrs_fp {
	NRS_FP_WAL_BEFORE_WRITE,	/* "wal.before_write" */
	NRS_FP_WAL_WRITE,		/* "wal.write": a write point, below */
	NRS_FP_WAL_AFTER_WRITE,		/* "wal.after_write" */
	NRS_FP_WAL_BEFORE_SYNC,		/* "wal.before_sync" */
	NRS_FP_WAL_AFTER_SYNC,		/* "wal.after_sync" */
	NRS_FP_META_BEFORE_COMMIT,	/* "meta.before_commit" */
	NRS_FP_META_AFTER_COMMIT,	/* "meta.after_commit" */
	NRS_FP_PIPELINE_BEFORE_REPLY,	/* "pipeline.before_reply" */
	NRS_FP_RECOVERY_BEFORE_PUBLISH,	/* "recovery.before_publish" */
	NRS_FP_OBJ_BEFORE_PUT,		/* "obj.before_put" */
	NRS_FP_OBJ_AFTER_PUT,		/* "obj.after_put" */
	NRS_FP_OBJ_BEFORE_PUBLISH,	/* "obj.before_publish" */
	NRS_FP_OBJ_AFTER_PUBLISH,	/* "obj.after_publish" */
	NRS_FP_WAL_BEFORE_RECLAIM,	/* "wal.before_reclaim" */
	NRS_FP_GC_BEFORE_DELETE,	/* "gc.before_delete" */
	NRS_FP_GC_AFTER_DELETE,		/* "gc.after_delete" */
	NRS_FP_OWAL_BEFORE_PUT,		/* "owal.before_put" */
	NRS_FP_OWAL_AFTER_PUT,		/* "owal.after_put" */
	NRS_FP_OWAL_AFTER_PROOF,	/* "owal.after_proof" */
	NRS_FP_OWNER_RENEW,		/* "owner.renew" */
	NRS_FP_OWAL_BEFORE_FLOOR,	/* "owal.before_floor" */
	NRS_FP_OWAL_BEFORE_DELETE,	/* "owal.before_delete" */
	NRS_FP_OWAL_AFTER_DELETE,	/* "owal.after_delete" */
	NRS_FP_COUNT
};

/* true once a spec with at least one point is armed; read without a lock */
extern atomic_bool nrs_failpoints_armed;

/*
 * Arm the points named by the spec (syntax: failpoint.c), replacing any
 * armed before and resetting every hit count.  NULL or "" disarms all.
 * 0, or -EINVAL for a spec that does not parse (an unknown name, action or
 * errno, a bad count): then nothing is armed.  Call before the threads that
 * hit the points start (it is not synchronised with nrs_failpoint_hit).
 */
int nrs_failpoint_parse(const char *spec);

/* nrs_failpoint_parse(getenv("NRS_FAILPOINTS")), logging what it armed. */
int nrs_failpoint_init(void);

/* The name of a point ("wal.after_write"), or NULL past the last. */
const char *nrs_failpoint_name(enum nrs_fp fp);

/*
 * Count a hit of an armed fp: 0 when it does not fire, a negative errno
 * when it fires with error:, and no return when it fires with crash.
 */
int nrs_failpoint_hit(enum nrs_fp fp);

/*
 * Count a hit of an armed write point (one that accepts the short action:
 * wal.write), about to write *len bytes.  As nrs_failpoint_hit, and *len
 * becomes what to write before failing: all of it when 0 is returned, 0
 * for error:, a prefix for short (half of *len rounded down to a multiple
 * of 512 bytes, or of 8 when that is 0).
 */
int nrs_failpoint_hit_write(enum nrs_fp fp, size_t *len);

/* 0 or a negative errno to fail the step with (crash: never returns). */
static inline int nrs_failpoint(enum nrs_fp fp)
{
	if (__builtin_expect(atomic_load_explicit(&nrs_failpoints_armed,
						  memory_order_relaxed), 0))
		return nrs_failpoint_hit(fp);
	return 0;
}

/* A write point: 0, or a negative errno after writing the first *len
 * bytes (see nrs_failpoint_hit_write). */
static inline int nrs_failpoint_write(enum nrs_fp fp, size_t *len)
{
	if (__builtin_expect(atomic_load_explicit(&nrs_failpoints_armed,
						  memory_order_relaxed), 0))
		return nrs_failpoint_hit_write(fp, len);
	return 0;
}

#endif
