/*
 * cleaning.c - the cleaning rule of log-structured file systems for the
 * files write once adopted in place (README, "Write once on the embedded
 * store"): a file of the embedded store's objects/w/ whose live records
 * have become a small part of it has them copied out, as ordinary
 * objects, so that the file goes.  Holes punched by GC (lifecycle.c G6)
 * already give the dead bytes back; what cleaning saves is the rows and
 * files kept for a few live records, and the scattered cold reads of them.
 *
 *  CL1 The measure.  A file's live bytes are the lengths (whole WAL
 *     records, header and chunk CRCs included) of the prepared and
 *     committed rows naming its segment; the file is to be cleaned when
 *     they are less than a quarter of its size (st_size: every byte the
 *     segment ever held, punched or not).  A file no live row names is
 *     G7's, not cleaning's.  The file's size, not the rows' sum, is the
 *     measure because retired rows are forgotten after an hour (G5): the
 *     size stays what it was.
 *  CL2 Never while the WAL names it.  A file with a second link (the
 *     WAL's own name of the segment, not yet reclaimed by walgc) is not
 *     cleaned: the WAL may still read it, and its records may not all be
 *     adopted yet.  Once that name is gone no new row can name the file
 *     (G7's reason), so the live rows can only shrink.
 *  CL3 Bounded.  The file to clean is chosen at most every CLEAN_MS, by
 *     one builder, looking at no more than CLEAN_LOOK files (round robin
 *     over the segment numbers, the lowest first); compaction's plan
 *     (compaction.c CP3) then rewrites one live adopted generation of it
 *     per job, through compaction's path: a new generation (DESIGN.md
 *     section 6: prepared, put, proven, published with the old row moving
 *     to draining in the same transaction), the old one punched and its
 *     file deleted by GC (G6, G7) once its last row is retired.  A crash
 *     anywhere leaves an orphan row (MZ6) or a published replacement whose
 *     old row drains: the next choice finds what is left (G3).
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "bg/mat_priv.h"
#include "bg/services.h"
#include "obj/objfmt.h"
#include "stream/reader.h"
#include "stream/table.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sat.h"

#define CLEAN_MS	1000	/* CL3 */
#define CLEAN_LOOK	256	/* CL3: files looked at per choice */

static int by_seg(const void *pa, const void *pb)
{
	const struct nrs_obj_row *a = pa, *b = pb;

	return a->seg < b->seg ? -1 : a->seg > b->seg;
}

/* CL1, CL2 for segment seg with live bytes live: to be cleaned? */
static bool wants(const struct nrs_mat *m, uint64_t seg, uint64_t live)
{
	char key[NRS_OBJKEY_MAX];
	uint64_t size, links;

	nrs_objfmt_adopt_key(key, seg);
	if (nrs_objstore_dir_adopted_stat(m->svc->reader->store, key, &size,
					  &links) != 0)
		return false;
	return links == 1 /* CL2 */ && live < size / 4 /* CL1 */;
}

/* CL1-CL3 over the rows v (n of them, sorted by seg): the first segment
 * above *cursor to clean, 0 for none; *cursor moves on (0: wrapped). */
static uint64_t choose(const struct nrs_mat *m, const struct nrs_obj_row *v,
		       size_t n, uint64_t *cursor)
{
	unsigned int looked = 0;
	size_t i = 0;

	while (i < n && looked < CLEAN_LOOK) {
		uint64_t seg = v[i].seg, live = 0;

		for (; i < n && v[i].seg == seg; i++)
			if (v[i].state == NRS_OBJ_PREPARED ||
			    v[i].state == NRS_OBJ_COMMITTED)
				live = nrs_sat_add(live, v[i].length);
		if (seg <= *cursor || live == 0)
			continue;
		looked++;
		*cursor = seg;
		if (wants(m, seg, live))
			return seg;
	}
	if (i >= n)
		*cursor = 0;	/* wrapped: from the lowest next time */
	return 0;
}

void nrs_mat_clean_choose(struct nrs_mat *m)
{
	int64_t now = (int64_t)nrs_now_mono_ns();
	struct nrs_obj_row *v = NULL;
	size_t n = 0, k = 0;
	uint64_t seg = 0, cursor;

	if (!m->svc->reader->store)
		return;		/* no embedded store: nothing adopted */
	pthread_mutex_lock(&m->lock);
	if (m->clean_at_ns && !nrs_elapsed_ms(now, m->clean_at_ns, CLEAN_MS)) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	m->clean_at_ns = now;	/* CL3: this thread chooses */
	cursor = m->clean_cursor;
	pthread_mutex_unlock(&m->lock);
	if (nrs_meta_obj_rows(m->svc->meta, 0, 0, &v, &n) != 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (v[i].seg)
			v[k++] = v[i];
	if (k > 1)
		qsort(v, k, sizeof(*v), by_seg);
	seg = choose(m, v, k, &cursor);
	free(v);
	pthread_mutex_lock(&m->lock);
	m->clean_cursor = seg ? seg - 1 : cursor;	/* seg again till done */
	pthread_mutex_unlock(&m->lock);
	if (seg != atomic_exchange(&m->clean_seg, seg) && seg)
		nrs_info("cleaning: adopted segment %016" PRIx64 " is less than"
			 " a quarter live: its live records are copied out",
			 seg);
}

bool nrs_mat_clean_wants(const struct nrs_mat *m,
			 const struct nrs_index_ent *e)
{
	return e->kind == NRS_TARGET_ADOPT && e->seg != 0 &&
	       e->seg == atomic_load(&m->clean_seg);
}
