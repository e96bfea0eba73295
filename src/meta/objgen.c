/*
 * objgen.c - the state machine of object generations (meta.h enum
 * nrs_obj_state, DESIGN.md 6), the same for every store: the table below
 * is the only place it is drawn, and nrs_meta_obj_transition() is the
 * check each store runs before it changes a row's state (MC7 of meta.h).
 *
 *   state        event                              next         function
 *   -----------  ---------------------------------  -----------  ---------------------
 *   (none)       intent recorded before the upload  prepared     nrs_meta_obj_prepare
 *   prepared     upload proven (materializer MZ4)    committed    nrs_meta_obj_publish
 *   prepared     a compaction's upload proven       committed    nrs_meta_obj_replace
 *   committed    replaced by that compaction        draining     nrs_meta_obj_replace
 *   committed    no longer needed (lifecycle G1)    draining     nrs_meta_obj_set_state
 *   draining     grace over, object deleted (GC)    retired      nrs_meta_obj_set_state
 *   prepared     the key held other bytes           quarantined  nrs_meta_obj_set_state
 *   any          row forgotten (an orphan intent,   (none)       nrs_meta_obj_delete
 *                a retired row)
 *
 * Committed is the only state the index serves from; retired and
 * quarantined are final (a new generation gets a new key, never an old
 * row back).
 *
 *   GS1 nrs_meta_obj_set_state moves a row only along a line of the table
 *       whose function it is (the last three state changes).  Any other
 *       (from, to) -- a state that skips one, goes back, stays, leaves a
 *       final state or is no state at all -- is -EINVAL and a log line,
 *       and the store is not asked: nothing changes.  nrs_meta_obj_publish
 *       and nrs_meta_obj_replace name their transitions themselves.
 *   GS2 Every state change is a compare-and-set on the state it leaves: a
 *       row not in that state (or gone) is -ESTALE and is left as it is
 *       (the store's part; SQLite: UPDATE ... WHERE state = from).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>

#include "meta/meta.h"
#include "util/log.h"

/* The lines of the table that nrs_meta_obj_set_state may take (GS1). */
static const struct {
	int from, to;
} set_state_moves[] = {
	{ NRS_OBJ_COMMITTED, NRS_OBJ_DRAINING },
	{ NRS_OBJ_DRAINING, NRS_OBJ_RETIRED },
	{ NRS_OBJ_PREPARED, NRS_OBJ_QUARANTINED },
};

const char *nrs_meta_obj_state_name(int state)
{
	switch (state) {
	case NRS_OBJ_PREPARED:		return "prepared";
	case NRS_OBJ_COMMITTED:		return "committed";
	case NRS_OBJ_DRAINING:		return "draining";
	case NRS_OBJ_RETIRED:		return "retired";
	case NRS_OBJ_QUARANTINED:	return "quarantined";
	default:			return NULL;
	}
}

static const char *state_name(int state)
{
	const char *name = nrs_meta_obj_state_name(state);

	return name ? name : "no state";
}

int nrs_meta_obj_transition(uint64_t gen, int from, int to)
{
	for (size_t i = 0; i < sizeof(set_state_moves) /
			       sizeof(set_state_moves[0]); i++)
		if (set_state_moves[i].from == from &&
		    set_state_moves[i].to == to)
			return 0;
	nrs_err("meta: object generation %llu: %s (%d) -> %s (%d) is not a"
		" transition of the generation state machine (objgen.c GS1);"
		" nothing changed", (unsigned long long)gen, state_name(from),
		from, state_name(to), to);
	return -EINVAL;
}
