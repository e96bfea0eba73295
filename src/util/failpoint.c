/*
 * failpoint.c - named fault-injection points, for tests only (issue 3).
 *
 * The durability promise (DESIGN.md section 1, I1-I6) has to hold whatever
 * step of an append or of recovery fails.  A test arms points through the
 * environment of the daemon; nothing else can arm them, and a daemon whose
 * environment does not set NRS_FAILPOINTS never fires one (the check is one
 * relaxed load and a predicted branch, failpoint.h).
 *
 * SYNTAX
 *
 *     NRS_FAILPOINTS = POINT ["," POINT]...
 *     POINT          = NAME "=" ACTION ["@" WHEN]
 *     ACTION         = "crash" | "error:" ERRNO | "short" [":" ERRNO]
 *     ERRNO          = EIO | ENOSPC | EDQUOT | EROFS | ENOMEM | EAGAIN | EBUSY
 *     WHEN           = N          only the Nth hit (hits count from 1)
 *                    | N "+"      the Nth hit and every later one
 *                    | N "-" M    hits N to M, both included (N <= M)
 *
 * Without WHEN a point fires at every hit.  N and M are decimal, >= 1.  A
 * NAME may appear once.  Blanks are not allowed.  short is for write points
 * only (wal.write).  Anything else (an unknown name, action or errno, a bad
 * count, short at a point that writes nothing) makes the whole spec
 * invalid, and the daemon refuses to start: a typo must not turn a fault
 * test into a test of nothing.  Example:
 *
 *     NRS_FAILPOINTS=wal.after_write=crash@40,meta.before_commit=error:EIO@3+
 *
 * ACTIONS
 *
 *   crash     writes "nereusfs: failpoint NAME: crash at hit N" to standard
 *             error and kills the process with SIGKILL at once: no atexit
 *             handler, no unmount, no flush -- what a process crash leaves
 *             (the page cache keeps what was written; for power loss see
 *             issue 3).
 *   error:E   the step fails with -E, as if the system call or library
 *             call it stands for had failed with E; it is logged at warning
 *             level.
 *   short[:E] at a write point: the write stops after a prefix -- half
 *             the bytes, rounded down to a multiple of 512 (a sector), or
 *             of 8 when that is 0 -- and then fails with -E (default EIO):
 *             what a write that comes up short and is then refused leaves
 *             behind (pwritev returned a short count, the next call E).
 *             Logged at warning level with both byte counts.
 *
 * POINTS (where, and what error: stands for)
 *
 *   wal.before_write        wal_local_append.c WA2, before the batch's
 *                           pwritev: the write failed having written
 *                           nothing.
 *   wal.write               WA2, the batch's pwritev itself (a write
 *                           point): crash and error: act before any byte
 *                           is written, as at wal.before_write; short
 *                           writes the prefix first, and WA3 undoes it.
 *   wal.after_write         WA2, after the pwritev, before the fdatasync:
 *                           the write failed after (part of) the batch
 *                           reached the file; WA3 undoes it.
 *   wal.before_sync         same place: the fdatasync failed (WA3 and WA4).
 *   wal.after_sync          after the fdatasync returned: it failed after
 *                           all (WA3 and WA4; the batch is undone).
 *   meta.before_commit      meta_sqlite.c nrs_meta_publish, after the head
 *                           CAS statements, before COMMIT: the commit
 *                           failed and was rolled back.
 *   meta.after_commit       after COMMIT succeeded: the caller is told it
 *                           failed (a lost answer; a retry finds the CAS
 *                           already done, -ESTALE).
 *   pipeline.before_reply   pipeline.c PL5, after PL4, before the batch's
 *                           replies: every request of the batch completes
 *                           with the error though its bytes are published
 *                           (DESIGN.md I3 allows it).
 *   recovery.before_publish recovery.c RC4, before the transaction that
 *                           re-publishes heads from the WAL: start-up
 *                           fails.
 *   obj.before_put          mat_object.c MZ3, before an object's PUT:
 *                           the PUT failed having sent nothing.
 *   obj.after_put           after the PUT returned: its answer was lost
 *                           (an uncertain PUT, resolved by HEAD proof).
 *   obj.before_publish      MZ4, before the transaction that publishes the
 *                           object's generation: it failed.
 *   obj.after_publish       after it: published, the caller told it failed
 *                           (crash here: the index is rebuilt at mount).
 *   wal.before_reclaim      MZ5, before WAL segments are deleted.
 *   gc.before_delete        lifecycle.c G2, before a draining object is
 *                           deleted from the store.
 *   gc.after_delete         after the delete, before the row is retired.
 *   owal.before_put         wal_object.c OW1, before a WAL object's PUT:
 *                           it failed having sent nothing (retried, OW2).
 *   owal.after_put          after the PUT returned: its answer was lost
 *                           (resolved by the HEAD proof that follows).
 *   owal.after_proof        after the HEAD proved the object, before its
 *                           appends may be acknowledged: the proof's
 *                           answer was lost (the PUT is retried, OW2).
 *   owner.renew             owner/owner.c OR1, a renewal of the owner
 *                           record: the store did not answer (the owner
 *                           stays owned, and acknowledges only until its
 *                           window ends, OR3).
 *   owal.before_floor       wal_object_gc.c OW7, once objects' grace is
 *                           over (OWG1), before the new floor is recorded
 *                           (OW6): nothing recorded, nothing deleted.
 *   owal.before_delete      after the floor is recorded, before each WAL
 *                           object's DELETE, also of one owed from
 *                           before (OWG3): it failed having sent
 *                           nothing (the object stays below the floor,
 *                           owed: sent again by a later reclaim).
 *   owal.after_delete       after each DELETE returned: its answer was
 *                           lost (the object is gone).
 *
 * nrs_meta_publish serves both the pipeline (PL3) and recovery (RC4), so the
 * meta.* points are hit by both.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/failpoint.h"
#include "util/log.h"

atomic_bool nrs_failpoints_armed;

static const char *const fp_names[NRS_FP_COUNT] = {
	[NRS_FP_WAL_BEFORE_WRITE] = "wal.before_write",
	[NRS_FP_WAL_WRITE] = "wal.write",
	[NRS_FP_WAL_AFTER_WRITE] = "wal.after_write",
	[NRS_FP_WAL_BEFORE_SYNC] = "wal.before_sync",
	[NRS_FP_WAL_AFTER_SYNC] = "wal.after_sync",
	[NRS_FP_META_BEFORE_COMMIT] = "meta.before_commit",
	[NRS_FP_META_AFTER_COMMIT] = "meta.after_commit",
	[NRS_FP_PIPELINE_BEFORE_REPLY] = "pipeline.before_reply",
	[NRS_FP_RECOVERY_BEFORE_PUBLISH] = "recovery.before_publish",
	[NRS_FP_OBJ_BEFORE_PUT] = "obj.before_put",
	[NRS_FP_OBJ_AFTER_PUT] = "obj.after_put",
	[NRS_FP_OBJ_BEFORE_PUBLISH] = "obj.before_publish",
	[NRS_FP_OBJ_AFTER_PUBLISH] = "obj.after_publish",
	[NRS_FP_WAL_BEFORE_RECLAIM] = "wal.before_reclaim",
	[NRS_FP_GC_BEFORE_DELETE] = "gc.before_delete",
	[NRS_FP_GC_AFTER_DELETE] = "gc.after_delete",
	[NRS_FP_OWAL_BEFORE_PUT] = "owal.before_put",
	[NRS_FP_OWAL_AFTER_PUT] = "owal.after_put",
	[NRS_FP_OWAL_AFTER_PROOF] = "owal.after_proof",
	[NRS_FP_OWNER_RENEW] = "owner.renew",
	[NRS_FP_OWAL_BEFORE_FLOOR] = "owal.before_floor",
	[NRS_FP_OWAL_BEFORE_DELETE] = "owal.before_delete",
	[NRS_FP_OWAL_AFTER_DELETE] = "owal.after_delete",
};

/* The errnos a point may inject (the grammar's ERRNO), named by errname.h. */
static const int fp_errnos[] = {
	EIO, ENOSPC, EDQUOT, EROFS, ENOMEM, EAGAIN, EBUSY,
};

/* The points that stand for a write, where short makes sense. */
static bool is_write_point(int fp)
{
	return fp == NRS_FP_WAL_WRITE;
}

struct fp_state {
	bool armed;
	bool short_write;		/* short: write a prefix, then err */
	int err;			/* 0: crash; else the positive errno */
	uint64_t first, last;		/* fire at hits first..last */
	atomic_uint_fast64_t hits;
};

static struct fp_state fps[NRS_FP_COUNT];

const char *nrs_failpoint_name(enum nrs_fp fp)
{
	return (unsigned)fp < NRS_FP_COUNT ? fp_names[fp] : NULL;
}

/* A decimal >= 1 at *p, advancing *p; false if there is none. */
static bool parse_count(const char **p, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v == 0)
		return false;
	*p = s;
	*out = v;
	return true;
}

/* The positive errno named by the len bytes at s, or -1. */
static int parse_errno(const char *s, size_t len)
{
	char name[16];
	int e;

	if (len >= sizeof(name))
		return -1;
	memcpy(name, s, len);
	name[len] = '\0';
	e = nrs_errno_of(name);
	for (size_t i = 0; i < sizeof(fp_errnos) / sizeof(fp_errnos[0]); i++)
		if (fp_errnos[i] == e)
			return e;
	return -1;
}

/* One POINT of len bytes at s into t; false if it does not parse. */
static bool parse_point(const char *s, size_t len, struct fp_state *t)
{
	const char *eq = memchr(s, '=', len), *end = s + len, *p;
	const char *at;
	size_t nlen, alen;
	int fp = -1;

	if (!eq)
		return false;
	nlen = (size_t)(eq - s);
	for (int i = 0; i < NRS_FP_COUNT; i++)
		if (strlen(fp_names[i]) == nlen && !memcmp(fp_names[i], s, nlen))
			fp = i;
	if (fp < 0 || t[fp].armed)
		return false;
	p = eq + 1;
	at = memchr(p, '@', (size_t)(end - p));
	alen = (size_t)((at ? at : end) - p);
	t[fp].err = -1;
	if (alen == 5 && !memcmp(p, "crash", 5)) {
		t[fp].err = 0;
	} else if (alen > 6 && !memcmp(p, "error:", 6)) {
		t[fp].err = parse_errno(p + 6, alen - 6);
	} else if (alen >= 5 && !memcmp(p, "short", 5) && is_write_point(fp)) {
		t[fp].short_write = true;
		t[fp].err = alen == 5 ? EIO : p[5] != ':' ? -1 :
			parse_errno(p + 6, alen - 6);
	}
	if (t[fp].err < 0)
		return false;
	t[fp].first = 1;
	t[fp].last = UINT64_MAX;
	if (at) {
		p = at + 1;
		if (!parse_count(&p, &t[fp].first))
			return false;
		if (p < end && *p == '+') {
			p++;
		} else if (p < end && *p == '-') {
			p++;
			if (!parse_count(&p, &t[fp].last) ||
			    t[fp].last < t[fp].first)
				return false;
		} else {
			t[fp].last = t[fp].first;
		}
		if (p != end)
			return false;
	}
	t[fp].armed = true;
	return true;
}

int nrs_failpoint_parse(const char *spec)
{
	struct fp_state t[NRS_FP_COUNT];
	bool any = false;

	int err = 0;

	memset(t, 0, sizeof(t));
	while (spec && *spec) {
		const char *comma = strchr(spec, ',');
		size_t len = comma ? (size_t)(comma - spec) : strlen(spec);

		if (!parse_point(spec, len, t) ||
		    (comma && !comma[1])) {	/* a trailing comma */
			memset(t, 0, sizeof(t));
			any = false;
			err = -EINVAL;
			break;
		}
		any = true;
		spec += comma ? len + 1 : len;
	}
	atomic_store(&nrs_failpoints_armed, false);
	for (int i = 0; i < NRS_FP_COUNT; i++) {
		fps[i].armed = t[i].armed;
		fps[i].short_write = t[i].short_write;
		fps[i].err = t[i].err;
		fps[i].first = t[i].first;
		fps[i].last = t[i].last;
		atomic_store(&fps[i].hits, 0);
	}
	atomic_store(&nrs_failpoints_armed, any);
	return err;
}

int nrs_failpoint_init(void)
{
	const char *spec = getenv("NRS_FAILPOINTS");
	int err;

	if (!spec || !*spec)
		return 0;
	err = nrs_failpoint_parse(spec);
	if (err)
		nrs_err("NRS_FAILPOINTS='%s' does not parse (see failpoint.c)",
			spec);
	else
		nrs_warn("fault injection armed (tests only): %s", spec);
	return err;
}

int nrs_failpoint_hit(enum nrs_fp fp)
{
	size_t len = 0;

	return nrs_failpoint_hit_write(fp, &len);
}

int nrs_failpoint_hit_write(enum nrs_fp fp, size_t *len)
{
	struct fp_state *f;
	size_t want = *len;
	uint64_t n;

	if ((unsigned)fp >= NRS_FP_COUNT || !fps[fp].armed)
		return 0;
	f = &fps[fp];
	n = atomic_fetch_add(&f->hits, 1) + 1;
	if (n < f->first || n > f->last)
		return 0;
	if (f->err == 0) {
		char buf[128];
		int blen = snprintf(buf, sizeof(buf),
				    "nereusfs: failpoint %s: crash at hit %" PRIu64 "\n",
				    fp_names[fp], n);

		if (blen > 0)
			(void)!write(STDERR_FILENO, buf,
				     (size_t)blen < sizeof(buf) ? (size_t)blen : sizeof(buf) - 1);
		raise(SIGKILL);
		_exit(137);
	}
	if (f->short_write) {
		*len = want / 2 / 512 * 512;
		if (*len == 0)
			*len = want / 2 / 8 * 8;
		nrs_warn("failpoint %s: short write of %zu of %zu bytes, then "
			 "error %s at hit %" PRIu64, fp_names[fp], *len, want,
			 strerror(f->err), n);
		return -f->err;
	}
	*len = 0;
	nrs_warn("failpoint %s: error %s at hit %" PRIu64, fp_names[fp],
		 strerror(f->err), n);
	return -f->err;
}
