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
 *  OW7 Reclaim.  reclaim(below) first records durably (OW6) the new
 *      floor -- the lowest segment still held, at most below -- then
 *      deletes the objects under it.  An object still being PUT is kept
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
 * STEPS, and what a crash at each leaves (the failpoints name them,
 * util/failpoint.c): owal.before_floor -- grace over, nothing recorded:
 * the next run holds every object and starts their grace again;
 * owal.before_delete -- the floor recorded, the Nth DELETE not sent: the
 * objects below the floor not yet deleted stay, orphans that no scan
 * reads (nothing deletes them later: only a listing would find them);
 * owal.after_delete -- the Nth object gone (they go highest first).  No
 * step deletes an object at or above the floor a scan starts from, and
 * none moves the floor over an object a slice above `below` needs.
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
	uint64_t due = 0;

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

/* Delete the objects of gone, freeing them; the count of proven ones. */
static int delete_all(struct wal_object *w, struct ow_obj *gone,
		      uint64_t *bytes)
{
	int n = 0;

	while (gone) {
		struct ow_obj *o = gone;
		char key[NRS_OBJKEY_MAX];
		int err = 0;

		gone = o->next;
		ow_key(key, o->seg);
		if (o->state == OW_PROVEN && w->named &&
		    w->named(w->named_ctx, o->seg) != 0) {	/* OW18 */
			nrs_debug("object WAL: %s stays: a generation names"
				  " it", key);
		} else if (o->state == OW_PROVEN) {
			err = nrs_failpoint(NRS_FP_OWAL_BEFORE_DELETE);
			if (!err && !may_delete(w))
				err = -ESTALE;			/* OWG2 */
			if (!err)
				err = nrs_obj_del(w->store, key);
			if (!err)
				err = nrs_failpoint(NRS_FP_OWAL_AFTER_DELETE);
			*bytes += o->size;
			n++;
		}
		if (err)	/* below the floor: an orphan, left */
			nrs_warn("object WAL: delete of %s: %s", key,
				 strerror(-err));
		free(o->buf);
		free(o);
	}
	return n;
}

/* OW7, OWG1, OWG2 */
int ow_reclaim(struct nrs_wal *wal, uint64_t below, uint64_t *bytes)
{
	struct wal_object *w = (struct wal_object *)wal;
	struct ow_obj *gone = NULL, **pp;
	uint64_t floor;
	int err;

	*bytes = 0;
	if (w->read_only)
		return -EROFS;
	if (!may_delete(w))
		return 0;					/* OWG2 */
	pthread_mutex_lock(&w->lock);
	floor = new_floor(w, below, nrs_now_mono_ns());
	if (floor <= w->floor) {
		pthread_mutex_unlock(&w->lock);
		return 0;
	}
	err = nrs_failpoint(NRS_FP_OWAL_BEFORE_FLOOR);
	if (!err)
		err = ow_state_write(w->state_path, w->dir, floor,
				     w->last_run);
	if (err) {
		pthread_mutex_unlock(&w->lock);
		nrs_warn("object WAL: cannot record floor %016" PRIx64 " in %s:"
			 " %s", floor, w->state_path, strerror(-err));
		return err;
	}
	w->floor = floor;
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
	return delete_all(w, gone, bytes);
}
