/*
 * wal_object_gc.c - the object WAL's reclaim: which WAL objects go, when,
 * and in what order its steps run (wal_object.c has the object format and
 * the other rules; the caller, bg/walgc.c MZ5 and MZ8, decides `below`:
 * every slice below it is materialized, trimmed or unlinked, the last
 * proven checkpoint covers it, and no read of it is in flight, I5).
 *
 * THE GRACE CLOCK LIVES IN MEMORY.  The time an object was first found
 * reclaimable is kept in its struct ow_obj only, on the monotonic clock;
 * nothing of it is stored.  After a restart (or a recovery from the
 * bucket) every object the scan finds starts its grace again from the
 * first reclaim of the new run: a crash only makes WAL objects live
 * longer, never shorter.
 *
 *  OW7 Reclaim.  reclaim(below) first records durably the DELETEs it
 *      will owe (OWG3), then (OW6) the new floor -- the lowest segment
 *      still held, at most below -- then deletes the objects under it.  An object still being PUT is kept
 *      (its key may yet be filled), and so holds the floor down.  A
 *      quarantined or damaged object is never deleted (an operator looks
 *      at it), but does not hold the floor.
 *  OW18 Named.  A WAL object a generation still names (a slice of it
 *      adopted as a stream's generation, mat_adopt.c MZ13: the opts'
 *      named()) is not deleted when the floor moves over it: below the
 *      floor no scan reads it, and its generations' GC deletes it once
 *      none names it (lifecycle.c G9).  An error of named() keeps it.
 *  OWG1 Grace.  An object is deleted no earlier than grace_ms (-o
 *      gc_grace_ms, the grace segment objects get, lifecycle.c G2) after
 *      a reclaim first found it reclaimable: proven, below `below`, no
 *      worker using its bytes.  Until then it is held as any other --
 *      read, scanned, and holding the floor down -- so a recovery that
 *      read an older checkpoint pointer, or a reader the caller's drain
 *      could not see, still finds it.  An object a later reclaim finds
 *      at or above `below` again loses its time (needed again: its grace
 *      starts over once it is reclaimable again).  stats() gives, in
 *      reclaim_due_ns, the time the first wait ends, so that the caller
 *      calls again then even if its bound has not moved (walgc.c MZ5).
 *  OWG2 Fence.  While the owner gate (may_ack, DESIGN I8) refuses -- the
 *      mount is fenced, or its lease ran out -- a reclaim records no
 *      floor and deletes nothing, and the gate is asked again before each
 *      DELETE: a fenced owner's GC must not delete what the new owner
 *      needs.  (The fencing store refuses its DELETEs anyway, owner_store.c
 *      OS1, but only once it knows it is fenced, and the floor would move
 *      over objects that stay.)
 *
 *  OWG3 Owed DELETEs are recorded.  Before a reclaim records its floor,
 *      it records durably the DELETEs that floor makes owed -- every
 *      proven object under it that no generation names (OW18's are not
 *      owed: G9 deletes them), with those still owed from before -- in
 *      the gc record, DIR/gc (wal_object_gcrec.c has its format and
 *      checks).  An entry goes once its DELETE succeeded (a DELETE of a
 *      missing key succeeds), and the record with the last one.  What
 *      is still owed -- a DELETE that failed, or all of them after a
 *      crash (the record is read at open) -- is sent again by the next
 *      reclaim, first, before any floor moves: at once after an open,
 *      else OW_OWED_RETRY_MS after the failure (stats()'
 *      reclaim_due_ns says when, and walgc.c calls then even with no
 *      object held).  named() is asked again first: an object a
 *      generation names now is G9's, dropped, and an error of it keeps
 *      the entry for later.  A record holds OW_OWED_MAX entries at
 *      most: a reclaim that would owe more stops its floor under the
 *      first that does not fit (held, the next reclaim takes it).  A
 *      damaged record is reported, ignored and removed: the objects it
 *      owed leak (nereusfs-fsck's F32 names them), nothing is deleted
 *      on its word.  OWG2 holds for the resent DELETEs too: none while
 *      fenced, the gate asked before each.
 *  OWG4 Only under the recorded floor.  An owed entry at or above the
 *      floor of the state file (OW6) is never deleted but dropped: the
 *      reclaim that wrote it crashed (or failed) before its floor, so
 *      the object is held again, scanned, and its grace starts over
 *      (OWG1) -- deleting it would leave a gap a scan ends at (OW8).
 *
 * STEPS, and what a crash at each leaves (the failpoints name them,
 * util/failpoint.c): owal.before_floor -- grace over, the owed DELETEs
 * recorded, the floor not: the next run holds every object and starts
 * their grace again, and its first reclaim drops the entries at or above
 * its floor unsent (OWG4); owal.before_delete -- the floor recorded, the
 * Nth DELETE not sent: the objects below the floor not yet deleted stay
 * until the next run's first reclaim deletes them, being owed (OWG3);
 * owal.after_delete -- the Nth object gone (they go highest first), its
 * entry still in the record: sent again, a DELETE of nothing.  A crash
 * after the last DELETE, before the record is removed, sends them all
 * again.  The resent DELETEs go through the same two points.  No step
 * deletes an object at or above the floor a scan starts from, and none
 * moves the floor over an object a slice above `below` needs.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "obj/objstore.h"
#include "util/clock.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_object_priv.h"

/* OWG2: may this mount delete from the bucket now? */
static bool may_delete(const struct wal_object *w)
{
	return !w->may_ack || w->may_ack(w->may_ack_ctx);
}

/*
 * OW7, OWG1: the floor a reclaim below `below` at time now may record (lock
 * held): the lowest object below `below` that must stay -- being PUT, in
 * use, or within its grace -- else below.  Marks the time of each object
 * found reclaimable, and clears it on one found needed again.
 */
static uint64_t new_floor(struct wal_object *w, uint64_t below, uint64_t now)
{
	uint64_t floor = below;

	for (struct ow_obj *o = w->head; o; o = o->next) {
		if (o->seg >= below) {
			o->t_dead_ns = 0;		/* OWG1: needed again */
			continue;
		}
		if (o->state == OW_BAD)
			continue;		/* kept, holds nothing (OW7) */
		if (o->state != OW_PROVEN || o->users) {
			o->t_dead_ns = 0;
		} else {
			if (o->t_dead_ns == 0)
				o->t_dead_ns = now ? now : 1;
			if (now - o->t_dead_ns >= w->grace_ns)	/* OWG1 */
				continue;
		}
		if (o->seg < floor)
			floor = o->seg;
	}
	return floor;
}

uint64_t ow_reclaim_due(const struct wal_object *w)
{
	uint64_t due = w->owed_due_ns;				/* OWG3 */

	for (const struct ow_obj *o = w->head; o; o = o->next) {
		uint64_t t;

		if (!o->t_dead_ns)
			continue;
		t = o->t_dead_ns > UINT64_MAX - w->grace_ns ? UINT64_MAX :
		    o->t_dead_ns + w->grace_ns;
		if (due == 0 || t < due)
			due = t;
	}
	return due;
}

/*
 * OWG3: drop the owed entries marked 0, then make the gc record say what
 * is left (removed when nothing is; gc_lock held).  What is left was not
 * deleted (a failure, or fenced): another reclaim comes for it later.
 */
static void owed_settle(struct wal_object *w, uint64_t floor, bool changed)
{
	size_t k = 0;
	int err = 0;

	for (size_t i = 0; i < w->n_owed; i++)
		if (w->owed[i])
			w->owed[k++] = w->owed[i];
	w->n_owed = k;
	if (changed || w->gc_stale)
		err = ow_gc_write(w->gc_path, w->dir, floor, w->owed, k);
	if (err) {
		nrs_warn("object WAL: cannot update the gc record %s: %s (its "
			 "DELETEs are sent again)", w->gc_path,
			 strerror(-err));
		w->gc_stale = true;
	} else {
		w->gc_stale = false;
	}
	pthread_mutex_lock(&w->lock);
	w->owed_due_ns = k || err ? nrs_now_mono_ns() +
			 OW_OWED_RETRY_MS * 1000000ull : 0;
	pthread_mutex_unlock(&w->lock);
}

/* OWG2, OWG3: the DELETE of owed object seg; 0 or -errno. */
static int delete_owed(struct wal_object *w, uint64_t seg)
{
	char key[NRS_OBJKEY_MAX];
	int err;

	ow_key(key, seg);
	err = nrs_failpoint(NRS_FP_OWAL_BEFORE_DELETE);
	if (!err && !may_delete(w))
		err = -ESTALE;					/* OWG2 */
	if (!err)
		err = nrs_obj_del(w->store, key);	/* a missing key: 0 */
	if (!err)
		err = nrs_failpoint(NRS_FP_OWAL_AFTER_DELETE);
	if (err)
		nrs_warn("object WAL: delete of %s: %s (sent again later, "
			 "OWG3)", key, strerror(-err));
	return err;
}

/*
 * OWG3, OWG4: send again the DELETEs owed by an earlier reclaim (of this
 * run, or of one a crash ended; gc_lock held); the count sent.  Only an
 * owed object below the recorded floor is deleted: one at or above it is
 * owed by a reclaim that crashed before its floor, is held and scanned
 * again, and is dropped from the record.
 */
static int resend(struct wal_object *w)
{
	uint64_t floor;
	bool failed = false, changed = false;
	int n = 0;

	if (!w->n_owed && !w->gc_stale)
		return 0;
	pthread_mutex_lock(&w->lock);
	floor = w->floor;
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; i < w->n_owed; i++) {
		uint64_t seg = w->owed[i];
		int named = 0;

		if (seg >= floor) {				/* OWG4 */
			w->owed[i] = 0;
			changed = true;
			continue;
		}
		if (w->named)
			named = w->named(w->named_ctx, seg);	/* OW18 */
		if (named > 0) {
			w->owed[i] = 0;		/* G9's now, not owed */
			changed = true;
		} else if (named < 0 || failed) {
			failed = true;		/* asked again later */
		} else if (delete_owed(w, seg) == 0) {
			w->owed[i] = 0;
			changed = true;
			n++;
		} else {
			failed = true;
		}
	}
	owed_settle(w, floor, changed);
	return n;
}

/*
 * Delete the objects of gone (highest first) that are owed (the ascending
 * owed[0, n_owed); gc_lock held), freeing every one; the count deleted.
 * A deleted one's entry becomes 0; one whose DELETE fails stays owed
 * (OWG3), and the rest are not sent.
 */
static int delete_all(struct wal_object *w, struct ow_obj *gone,
		      uint64_t *bytes)
{
	size_t j = w->n_owed;
	bool failed = false;
	int n = 0;

	while (gone) {
		struct ow_obj *o = gone;
		bool owed;

		gone = o->next;
		while (j > 0 && w->owed[j - 1] > o->seg)
			j--;
		owed = j > 0 && w->owed[j - 1] == o->seg;
		if (o->state == OW_PROVEN && !owed)
			nrs_debug("object WAL: %016" PRIx64 " stays: a "
				  "generation names it", o->seg);  /* OW18 */
		if (owed) {
			j--;
			if (!failed && delete_owed(w, o->seg) == 0) {
				w->owed[j] = 0;
				*bytes += o->size;
				n++;
			} else {
				failed = true;	/* sent again later */
			}
		}
		free(o->buf);
		free(o);
	}
	return n;
}

/*
 * OW7, OW18, OWG3: the floor a reclaim below `below` moves to, and the
 * DELETEs it owes, appended (not yet counted) at owed[n_owed]: every
 * proven object under it no generation names.  *floor == w->floor: none.
 * gc_lock held, not lock; *nnew the count appended.
 */
static void plan(struct wal_object *w, uint64_t below, uint64_t *floor,
		 size_t *nnew)
{
	size_t room = OW_OWED_MAX - w->n_owed, c = 0, k = 0;
	uint64_t *add = w->owed + w->n_owed, f;

	*nnew = 0;
	pthread_mutex_lock(&w->lock);
	f = new_floor(w, below, nrs_now_mono_ns());
	*floor = w->floor;
	if (f <= w->floor) {
		pthread_mutex_unlock(&w->lock);
		return;
	}
	for (struct ow_obj *o = w->head; o && o->seg < f; o = o->next) {
		if (o->state != OW_PROVEN)
			continue;
		if (c == room) {	/* the record is full: stop under o */
			f = o->seg;
			break;
		}
		add[c++] = o->seg;
	}
	pthread_mutex_unlock(&w->lock);
	if (f <= *floor)
		return;
	*floor = f;
	/* OW18, without the lock: objects under f stay as they are (only
	 * this reclaim, under gc_lock, takes them; none is PUT) */
	for (size_t i = 0; i < c; i++)
		if (!w->named || w->named(w->named_ctx, add[i]) == 0)
			add[k++] = add[i];
	*nnew = k;
}

/* OW7, OWG1-OWG4 (gc_lock held) */
static int reclaim(struct wal_object *w, uint64_t below, uint64_t *bytes)
{
	struct ow_obj *gone = NULL, **pp;
	uint64_t floor;
	size_t nnew;
	int n = resend(w), err = 0;

	plan(w, below, &floor, &nnew);
	if (floor <= w->floor)
		return n;
	if (nnew > 0)			/* OWG3: owed before the floor moves */
		err = ow_gc_write(w->gc_path, w->dir, floor, w->owed,
				  w->n_owed + nnew);
	if (err) {
		nrs_warn("object WAL: cannot record the DELETEs under floor "
			 "%016" PRIx64 " in %s: %s", floor, w->gc_path,
			 strerror(-err));
		w->gc_stale = true;
		return err;
	}
	if (nnew)
		w->gc_stale = false;
	pthread_mutex_lock(&w->lock);
	err = nrs_failpoint(NRS_FP_OWAL_BEFORE_FLOOR);
	if (!err)
		err = ow_state_write(w->state_path, w->dir, floor,
				     w->last_run);
	if (err) {
		pthread_mutex_unlock(&w->lock);
		/* the record names objects above the floor: harmless (OWG4),
		 * and rewritten by the next reclaim */
		if (nnew > 0)
			w->gc_stale = true;
		nrs_warn("object WAL: cannot record floor %016" PRIx64 " in %s:"
			 " %s", floor, w->state_path, strerror(-err));
		return err;
	}
	w->floor = floor;
	w->n_owed += nnew;
	pp = &w->head;
	while (*pp && (*pp)->seg < floor) {
		struct ow_obj *o = *pp;

		*pp = o->next;
		w->held_bytes -= o->size;
		if (o->buf && o->state == OW_PROVEN)
			w->cached_bytes -= o->size;
		o->next = gone;
		gone = o;
	}
	if (!w->head)
		w->tail = NULL;
	pthread_mutex_unlock(&w->lock);
	n += delete_all(w, gone, bytes);
	owed_settle(w, floor, nnew > 0);
	return n;
}

/* OW7, OWG1-OWG4 */
int ow_reclaim(struct nrs_wal *wal, uint64_t below, uint64_t *bytes)
{
	struct wal_object *w = (struct wal_object *)wal;
	int n;

	*bytes = 0;
	if (w->read_only)
		return -EROFS;
	if (!may_delete(w))
		return 0;				/* OWG2, OWG3 */
	pthread_mutex_lock(&w->gc_lock);
	n = reclaim(w, below, bytes);
	pthread_mutex_unlock(&w->gc_lock);
	return n;
}
