/*
 * wal_object_seal.c - the seal of a past run of the object WAL: where the
 * run ends, fixed once in the store (wal_object.c has the object format
 * and OW1-OW12; the scan, OW8, is in wal_object_scan.c, which applies it).
 *
 * WHY.  A PUT of a past run can land after a scan read that run's end.  A
 * daemon taken over (-o recover while it lived) may have PUTs in flight,
 * and may send more before its next renewal fences it (owner.c OR2; a
 * request sent before the fence finishes, owner_store.c OS1); a crashed
 * one may leave a request that the store carries out later.  Such an
 * object was never acknowledged (the old owner's window had closed,
 * OR3, OR4), but a later scan finds it and walks it in log order, before
 * the runs after it: its slices continue the heads as of the old run's
 * end, and then the acknowledged slices the later runs wrote for the same
 * streams no longer continue them -- acknowledged bytes lost.  OW4's
 * abandonment of the inflight_max seqs above the last object found does
 * not cover an object further on, nor one landing in a gap below it.
 *
 * SEAL FORMAT, key "owal/<run, 6 hex>/seal" (from the run number alone;
 * ow_seal_key), 48 + 16 n bytes, little-endian:
 *   0   magic "NRSOWSL1"
 *   8   u64 run (must match the key)
 *   16  u64 from: the first seq the sealing scan probed in the run
 *   24  u64 end: the last seq it found (0: none)
 *   32  u32 n, at most OW_SEAL_HOLES_MAX
 *   36  u32 0
 *   40  n x { u64 lo, u64 hi }: the seqs in [from, end] it did not find,
 *       ascending, disjoint, lo <= hi
 *   40 + 16 n   u32 CRC32C of the bytes before it, u32 0
 * Its SHA-256 is stored with it, as for a WAL object.
 *
 * RULES
 *  SL1 Seal before use.  A scan that may write (not read-only) seals
 *      every run it probed that has no seal yet, with its view of the run
 *      (from, the last seq found, the seqs it crossed without finding),
 *      stored and proven (OB1), before it hands any record to its caller.
 *      So whatever a recovery or a restart publishes from a run, and every
 *      append acknowledged after that, rests on a seal.  A run is sealed
 *      by the first scan after it, whichever host runs it.
 *  SL2 Written once.  The seal is PUT with If-None-Match (OC1) where the
 *      store has it.  One already there (another scan's, whose daemon
 *      lost the answer or died) is read and used instead of ours, whatever
 *      it says: records may have been published from it.  A seal is never
 *      rewritten nor deleted (one small object per run, as the markers,
 *      OW11).  A seal that fails its checks (SHA-256, magic, CRC, run,
 *      holes) fails the scan, -EUCLEAN: the mount stops rather than guess
 *      where the run ends.
 *  SL3 A sealed run stops at its seal.  Every scan (restart, recovery,
 *      nereusfs-fsck) reads a run's seal before its objects and probes
 *      at least up to end.  An object of the run at a seq above end or in
 *      a hole is late: HEAD only, never fetched nor returned, logged once
 *      per run and scan with the count, and counted in
 *      nereus_object_wal_late_objects_total.  It is left in the store
 *      (never acknowledged, it needs nothing; deleting it would be a
 *      second writer's DELETE in a run that is not ours): nereusfs-fsck
 *      does not use it either, and once the floor passes its run no scan
 *      looks at it.  Seqs below from are not the seal's: they are walked
 *      as usual (a scan from an older checkpoint's floor needs them).
 *  SL4 An unsealed run is one no writing scan has seen yet: the last run
 *      (its daemon crashed, stopped, or is being taken over), or one that
 *      predates seals.  Its gaps of fewer than OW14's window of missing seqs
 *      are crossed as OW8 says -- objects in flight at the crash, which
 *      may still land -- and the records after a gap are used; the seal
 *      the scan then writes names the gap as a hole, so that an object
 *      landing there later is ignored (SL3) rather than walked before the
 *      slices published after it.  A read-only scan of an unsealed run
 *      uses what it finds and seals nothing.
 *
 * WHY SEALS AND MARKERS ARE NEVER DELETED, even of a run whose every
 * object is below the floor and reclaimed and that a proven checkpoint
 * covers whole.  Deleting them would be safe only if no scan could ever
 * probe the run again, or look for runs past it, and that cannot be
 * proven from one data directory:
 *  - A scan starts at its own state file's floor and last run (OW6), not
 *    the bucket's.  A recovery starts at a checkpoint's covered position
 *    (core_recover.c RB2), and the newest checkpoint may be passed over
 *    for the one before (checkpoint.c KP6); a data directory that holds a
 *    database keeps its own state when mounted with recover (RB1): one a
 *    takeover left behind comes back with its old floor, however long
 *    after.  Nothing records, for the bucket, a floor below which no scan
 *    will ever start.
 *  - Markers are the bucket's only record of which run numbers were taken
 *    (OW11).  A scan that knows an older last run finds the later runs
 *    through them, crossing fewer than OW_RUN_PROBE missing ones; past
 *    more it stops, loses what the later runs acknowledged, and its own
 *    next run takes a number already used: its objects would land under
 *    keys that held other bytes (OW3).
 *  - A seal is what keeps a run's late objects from being walked (SL3).
 *    They are left in the store, the GC never learns of them (seal_runs
 *    drops them from the list), and a PUT the old owner sent can land at
 *    any later time.  A scan of a run whose seal is gone takes it for
 *    unsealed (SL4) and walks its late objects before the slices later
 *    runs published: the loss SL1 exists to prevent.
 * What they cost is small and does not grow a scan: one marker (32
 * bytes) and one seal (48 bytes and 16 per hole) per run, and a run is a
 * mount that wrote to the object WAL; a scan HEADs the markers past its
 * last run only, and the seals of the runs from its floor's on, never the
 * older ones.  Deleting them would need a bucket-wide low-water mark that
 * every scan refuses to start below (a new format: see README, Profiles).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/backoff.h"
#include "util/clock.h"
#include "util/crc32c.h"
#include "util/le.h"
#include "util/log.h"
#include "wal/wal_object_priv.h"

#define SEAL_MAGIC	"NRSOWSL1"
#define SEAL_FIXED	40		/* bytes before the holes */
#define SEAL_LEN(n)	(SEAL_FIXED + 16 * (size_t)(n) + 8)
#define SEAL_LEN_MAX	SEAL_LEN(OW_SEAL_HOLES_MAX)

void ow_seal_key(char key[NRS_OBJKEY_MAX], uint64_t run)
{
	snprintf(key, NRS_OBJKEY_MAX, "owal/%06" PRIx64 "/seal", run);
}

bool ow_view_excludes(const struct ow_view *v, uint64_t seq)
{
	if (!v->sealed || seq < v->from)
		return false;			/* SL3: not the seal's */
	if (seq > v->end)
		return true;
	for (uint32_t i = 0; i < v->n_holes; i++)
		if (seq >= v->holes[i].lo && seq <= v->holes[i].hi)
			return true;
	return false;
}

int ow_view_add_hole(struct ow_view *v, uint64_t lo, uint64_t hi)
{
	if (v->n_holes == OW_SEAL_HOLES_MAX) {
		nrs_err("object WAL scan: run %" PRIu64 " has more than %d "
			"gaps; it cannot be sealed (SL1)", v->run,
			OW_SEAL_HOLES_MAX);
		return -EOVERFLOW;
	}
	v->holes[v->n_holes].lo = lo;
	v->holes[v->n_holes].hi = hi;
	v->n_holes++;
	return 0;
}

static size_t encode(const struct ow_view *v, unsigned char *out)
{
	size_t at = SEAL_FIXED;

	memset(out, 0, SEAL_LEN(v->n_holes));
	memcpy(out, SEAL_MAGIC, 8);
	nrs_le64_put(out + 8, v->run);
	nrs_le64_put(out + 16, v->from);
	nrs_le64_put(out + 24, v->end);
	nrs_le32_put(out + 32, v->n_holes);
	for (uint32_t i = 0; i < v->n_holes; i++, at += 16) {
		nrs_le64_put(out + at, v->holes[i].lo);
		nrs_le64_put(out + at + 8, v->holes[i].hi);
	}
	nrs_le32_put(out + at, nrs_crc32c(0, out, at));
	return at + 8;
}

/* SL2: decode and check the seal of run; -EBADMSG if anything fails. */
static int decode(const unsigned char *in, size_t len, uint64_t run,
		  struct ow_view *out)
{
	uint64_t prev = 0;
	uint32_t n;
	size_t at = SEAL_FIXED;

	if (len < SEAL_LEN(0) || memcmp(in, SEAL_MAGIC, 8) != 0)
		return -EBADMSG;
	n = nrs_le32_get(in + 32);
	if (n > OW_SEAL_HOLES_MAX || len != SEAL_LEN(n) ||
	    nrs_le32_get(in + 36) != 0 || nrs_le64_get(in + 8) != run ||
	    nrs_le32_get(in + len - 8) != nrs_crc32c(0, in, len - 8) ||
	    nrs_le32_get(in + len - 4) != 0)
		return -EBADMSG;
	out->run = run;
	out->from = nrs_le64_get(in + 16);
	out->end = nrs_le64_get(in + 24);
	out->n_holes = n;
	if (out->from == 0 || out->from > OW_SEQ_MAX || out->end > OW_SEQ_MAX ||
	    (out->end != 0 && out->end < out->from))
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++, at += 16) {
		out->holes[i].lo = nrs_le64_get(in + at);
		out->holes[i].hi = nrs_le64_get(in + at + 8);
		if (out->holes[i].lo > out->holes[i].hi ||
		    out->holes[i].lo < out->from || out->holes[i].hi >= out->end ||
		    (i > 0 && out->holes[i].lo <= prev))
			return -EBADMSG;
		prev = out->holes[i].hi;
	}
	out->sealed = true;
	return 0;
}

int ow_seal_read(struct wal_object *w, uint64_t run, struct ow_view *v)
{
	unsigned char buf[SEAL_LEN_MAX], sha[NRS_SHA256_LEN];
	struct nrs_obj_meta m = { 0 };
	char key[NRS_OBJKEY_MAX];
	struct ow_view got = { 0 };
	ssize_t n;
	int err;

	ow_seal_key(key, run);
	err = nrs_obj_head(w->store, key, &m);
	if (err == -ENOENT)
		return 0;			/* SL4: not sealed */
	if (err) {
		nrs_err("object WAL scan: HEAD %s: %s", key, strerror(-err));
		return err;
	}
	if (m.length > sizeof(buf) || !m.has_sha256)
		goto damaged;
	n = nrs_obj_get(w->store, key, 0, buf, m.length);
	if (n == -ENOENT)
		return 0;
	if (n < 0) {
		nrs_err("object WAL scan: GET %s: %s", key, strerror((int)-n));
		return (int)n;
	}
	if ((uint64_t)n != m.length ||
	    nrs_objfmt_digest(buf, (size_t)n, sha, NULL) != 0 ||
	    memcmp(sha, m.sha256, sizeof(sha)) != 0 ||
	    decode(buf, (size_t)n, run, &got) != 0)
		goto damaged;
	got.ignored = v->ignored;
	*v = got;
	return 0;
damaged:
	nrs_err("object WAL scan: the seal %s of run %" PRIu64 " is damaged "
		"(SL2): the scan stops rather than guess where the run ends",
		key, run);
	return -EUCLEAN;
}

/* Adopt the seal another scan stored first (SL2); lock held. */
static int adopt(struct wal_object *w, struct ow_view *v)
{
	struct ow_view theirs = { .ignored = v->ignored };
	int err = ow_seal_read(w, v->run, &theirs);

	if (err || !theirs.sealed)
		return err ? err : -EAGAIN;
	if (theirs.end != v->end || theirs.from != v->from ||
	    theirs.n_holes != v->n_holes)
		nrs_warn("object WAL scan: run %" PRIu64 " was sealed by "
			 "another scan first (at seq %" PRIu64 ", %" PRIu32
			 " gaps; this one found up to %" PRIu64 "): its seal "
			 "counts (SL2)", v->run, theirs.end, theirs.n_holes,
			 v->end);
	*v = theirs;
	return 0;
}

int ow_seal_store(struct wal_object *w, struct ow_view *v)
{
	unsigned char buf[SEAL_LEN_MAX], sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	uint64_t deadline = nrs_now_mono_ns() + w->timeout_ns;
	bool want_md5 = nrs_obj_wants_md5(w->store);
	char key[NRS_OBJKEY_MAX], etag[NRS_ETAG_MAX];
	unsigned int attempt = 0;
	size_t len = encode(v, buf);
	int err;

	ow_seal_key(key, v->run);
	err = nrs_objfmt_digest(buf, len, sha, want_md5 ? md5 : NULL);
	if (err)
		return err;
	for (;;) {
		struct nrs_obj_meta got = { 0 };
		enum nrs_put_verdict verdict;
		int perr, herr;

		perr = nrs_obj_put_cond(w->store, key, buf, len,
					want_md5 ? md5 : NULL, sha, NULL, etag);
		if (perr == -EOPNOTSUPP)
			perr = nrs_obj_put(w->store, key, buf, len,
					   want_md5 ? md5 : NULL, sha);
		herr = nrs_obj_head(w->store, key, &got);
		verdict = nrs_put_decide(herr, &got, len, sha);
		if (verdict == NRS_PUT_PROVEN) {
			v->sealed = true;
			nrs_info("object WAL: run %" PRIu64 " sealed at seq %"
				 PRIu64 " (%" PRIu32 " gaps) in %s (SL1)",
				 v->run, v->end, v->n_holes, key);
			return 0;
		}
		if (perr == -EEXIST || verdict == NRS_PUT_QUARANTINE) {
			err = adopt(w, v);	/* SL2: theirs counts */
			if (err != -EAGAIN && err != -EUCLEAN)
				return err;
			/* gone again, or half written (OW12): once more */
		}
		if (nrs_now_mono_ns() >= deadline) {
			nrs_err("object WAL: the seal %s of run %" PRIu64 " is "
				"not stored (PUT: %s, HEAD: %s)", key, v->run,
				perr ? strerror(-perr) : "ok",
				herr ? strerror(-herr) : "other bytes");
			return -ETIMEDOUT;
		}
		/* 50 ms, doubling up to 1.6 s */
		if (ow_nap(w, (unsigned int)nrs_backoff_ms(attempt++, 50, 1600)))
			return -ESHUTDOWN;
	}
}
