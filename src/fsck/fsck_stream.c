/*
 * fsck_stream.c - nereusfs-fsck's checks of the WAL and of every stream
 * row (fsck.c lists them): the WAL's segments and records (F3-F6, F29),
 * each stream's row (F7, F8, F27, F28), its commit chain back from the
 * head (F9-F12), the records that continue it (F13) and the committed
 * generations below it (F20), taken as recovery takes them (recovery.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsck/fsck.h"
#include "fsck/fsck_priv.h"
#include "stream/recovery.h"

/* Where a record or damaged range is: a local WAL segment file, or an
 * object WAL object's key (NRS_OBJKEY_MAX). */
static void seg_file(char buf[NRS_OBJKEY_MAX], uint64_t seg, bool object)
{
	char name[NRS_WAL_SEG_NAME_MAX];

	if (object) {
		nrs_wal_object_key(buf, seg);
		return;
	}
	nrs_wal_local_seg_name(name, seg);
	snprintf(buf, NRS_OBJKEY_MAX, "wal/%s", name);
}

/* ---- F3-F6: the WAL ----------------------------------------------------- */

/* F29: a record no daemon writes.  Recovery ignores it (RD2); here
 * check_pending skips it, and no chain can reach it: every prev_lsn is
 * below its record's LSN, every last LSN in range (F28), and a chain
 * ends at the head, in range too. */
void nrs_fsck_check_recs(struct nrs_fsck *f)
{
	char sf[NRS_OBJKEY_MAX];

	for (size_t i = 0; i < f->nrecs; i++) {
		const struct nrs_wal_rec_info *ri = &f->recs[i];
		const char *why = nrs_recover_rec_damage(&ri->rec);

		if (!why)
			continue;
		seg_file(sf, ri->pos.seg, ri->object);
		ERR(f, "F29 %s at %" PRIu64 ": record LSN %" PRIu64 " of stream %"
		    PRIu64 ", bytes [%" PRIu64 ", +%" PRIu32 "): %s: damage; "
		    "the daemon ignores it (an orphan)", sf, ri->pos.off,
		    ri->rec.lsn, ri->rec.stream_id, ri->rec.base, ri->rec.len,
		    why);
	}
}

void nrs_fsck_check_wal(struct nrs_fsck *f)
{
	char sf[NRS_OBJKEY_MAX], sg[NRS_OBJKEY_MAX];

	for (size_t i = 0; i < f->ndamage; i++) {
		const struct nrs_wal_damage *d = &f->damage[i];
		uint64_t n = d->end - d->start;

		seg_file(sf, d->seg, d->object);
		switch (d->kind) {
		case NRS_WAL_BAD_SEGMENT:
			ERR(f, "F3 %s: segment header is corrupt: all %" PRIu64
			    " bytes of the segment are unreadable", sf, n);
			break;
		case NRS_WAL_CORRUPT:
			if (d->object)
				ERR(f, "F4 %s: the WAL object (%" PRIu64 " bytes)"
				    " fails its SHA-256 or its header: none of "
				    "its records is used", sf, n);
			else
				ERR(f, "F4 %s bytes [%" PRIu64 ", %" PRIu64 "): "
				    "corrupt: no record header verifies", sf,
				    d->start, d->end);
			break;
		case NRS_WAL_BAD_CHUNK:
			ERR(f, "F4 %s bytes [%" PRIu64 ", %" PRIu64 "): record "
			    "LSN %" PRIu64 ": payload chunk %" PRIu32 " fails its "
			    "CRC32C", sf, d->start, d->end, d->lsn, d->chunk);
			break;
		case NRS_WAL_TORN_TAIL:
			f->torn++;
			ERR(f, "F5 %s bytes [%" PRIu64 ", %" PRIu64 "): torn tail"
			    " (%" PRIu64 " bytes): --repair or the next mount"
			    " cuts it", sf, d->start, d->end, n);
			break;
		case NRS_WAL_TORN_SEGMENT:
			f->torn++;
			ERR(f, "F5 %s: torn at creation (%" PRIu64 " bytes, no "
			    "record): --repair or the next mount removes it",
			    sf, n);
			break;
		}
	}
	for (size_t i = 1; i < f->nrecs; i++) {
		const struct nrs_walrec *a = &f->recs[i - 1].rec;
		const struct nrs_walrec *b = &f->recs[i].rec;

		if (a->lsn != b->lsn)
			continue;
		if (a->stream_id == b->stream_id && a->base == b->base &&
		    a->len == b->len && a->n_appends == b->n_appends &&
		    a->epoch == b->epoch && a->prev_lsn == b->prev_lsn)
			continue;	/* a copy of the same intent */
		seg_file(sf, f->recs[i - 1].pos.seg, f->recs[i - 1].object);
		seg_file(sg, f->recs[i].pos.seg, f->recs[i].object);
		ERR(f, "F6 LSN %" PRIu64 ": two different records, %s at %"
		    PRIu64 " and %s at %" PRIu64, a->lsn, sf,
		    f->recs[i - 1].pos.off, sg, f->recs[i].pos.off);
	}
}

/* ---- F7-F12: heads and commit chains ------------------------------------ */

/* F9 for a chain recovery RC5 could not follow whole: exactly the range
 * that reads EIO, and why. */
static void report_broken(struct nrs_fsck *f, const struct nrs_stream_row *st,
			  const char *who, uint64_t floor,
			  const struct nrs_chain *ch)
{
	const struct nrs_wal_rec_info *ri = ch->broken_lsn ?
		rec_of(f, ch->broken_lsn) : NULL;
	char sf[NRS_OBJKEY_MAX], objs[64] = "";

	if (floor > st->start && ch->miss_start == floor)
		snprintf(objs, sizeof(objs), " (its objects end at %" PRIu64 ")",
			 floor);
	if (ch->twin[0]) {
		ERR(f, "F9 %s: commit chain broken: LSN %" PRIu64 " and LSN %"
		    PRIu64 " both continue it at offset %" PRIu64 ": committed "
		    "bytes [%" PRIu64 ", %" PRIu64 ") cannot be told (I2) and "
		    "reads of them fail", who, ch->twin[0], ch->twin[1],
		    ch->miss_start, ch->miss_start, ch->miss_end);
	} else if (ch->broken_lsn == 0) {
		ERR(f, "F9 %s: commit chain ends at offset %" PRIu64 ", above "
		    "the %s %" PRIu64 ": committed bytes [%" PRIu64 ", %"
		    PRIu64 ") have no record", who, ch->miss_end,
		    floor > st->start ? "end of its objects" : "start", floor,
		    ch->miss_start, ch->miss_end);
	} else if (!ri) {
		ERR(f, "F9 %s: commit chain broken: LSN %" PRIu64 " is"
		    " not in the WAL: committed bytes [%" PRIu64 ", %" PRIu64
		    ") cannot be reached%s", who, ch->broken_lsn, ch->miss_start,
		    ch->miss_end, objs);
	} else {
		seg_file(sf, ri->pos.seg, ri->object);
		ERR(f, "F9 %s: commit chain broken: LSN %" PRIu64 " (%s"
		    " at %" PRIu64 ") holds stream %" PRIu64 " bytes [%"
		    PRIu64 ", %" PRIu64 "), but the %s is at %" PRIu64
		    ": committed bytes [%" PRIu64 ", %" PRIu64 ") cannot be "
		    "reached", who, ch->broken_lsn, sf, ri->pos.off,
		    ri->rec.stream_id, ri->rec.base, ri->rec.base + ri->rec.len,
		    ch->miss_end == st->head ? "head" : "next commit",
		    ch->miss_end, ch->miss_start, ch->miss_end);
	}
	f->chains_intact = false;
}

/* F9-F12 for one linked stream, down to floor (recovery.h RC5); who is
 * "stream N (/path)".  Returns 0 or -ENOMEM. */
static int check_chain(struct nrs_fsck *f, const struct nrs_stream_row *st,
		       const char *who, uint64_t floor)
{
	uint64_t appends = 0, later_epoch = UINT64_MAX;
	struct nrs_chain ch;
	char sf[NRS_OBJKEY_MAX];
	int err;

	err = nrs_recover_chain(f->recs, f->nrecs, st->id, st->head,
				st->last_lsn, floor, &ch);
	if (err)
		return err;
	if (ch.miss_end > ch.miss_start)
		report_broken(f, st, who, floor, &ch);
	for (size_t i = ch.n; i > 0; i--) {	/* newest first */
		const struct nrs_wal_rec_info *ri = &f->recs[ch.idx[i - 1]];
		const struct nrs_walrec *r = &ri->rec;

		seg_file(sf, ri->pos.seg, ri->object);
		if (!ri->data_ok) {
			ERR(f, "F10 %s: committed bytes [%" PRIu64 ", %" PRIu64
			    ") fail their CRC32C in %s at %" PRIu64 " (LSN %"
			    PRIu64 "): reads of them fail", who, r->base,
			    r->base + r->len, sf, ri->pos.off, r->lsn);
			f->chains_intact = false;
		}
		if (r->epoch > st->epoch)
			ERR(f, "F11 %s: LSN %" PRIu64 " was written under epoch %"
			    PRIu64 ", above the stream's epoch %" PRIu64, who,
			    r->lsn, r->epoch, st->epoch);
		else if (r->epoch > later_epoch)
			ERR(f, "F11 %s: LSN %" PRIu64 " has epoch %" PRIu64 ", "
			    "above the epoch %" PRIu64 " of the commit after it",
			    who, r->lsn, r->epoch, later_epoch);
		later_epoch = r->epoch;
		appends += r->n_appends;
	}
	if (ch.miss_end == ch.miss_start &&
	    (ch.n && f->recs[ch.idx[0]].rec.base == 0 ? st->version != appends
						      : st->version < appends))
		ERR(f, "F12 %s: version %" PRIu64 ", but the commit chain holds"
		    " %" PRIu64 " appends", who, st->version, appends);
	nrs_chain_free(&ch);
	return 0;
}

/* F13: recovery RC3 and RC9 over the records in LSN order: a fence of
 * a new epoch that continues the head is pending too. */
int nrs_fsck_check_pending(struct nrs_fsck *f, const struct ns *ns)
{
	struct nrs_stream_row *cur = calloc(f->nstreams + 1, sizeof(*cur));
	uint64_t *nrec = calloc(f->nstreams + 1, sizeof(*nrec));
	uint64_t *nfence = calloc(f->nstreams + 1, sizeof(*nfence));
	char path[512];

	if (!cur || !nrec || !nfence) {
		free(cur);
		free(nrec);
		free(nfence);
		return -ENOMEM;
	}
	if (f->nstreams)
		memcpy(cur, f->streams, f->nstreams * sizeof(*cur));
	for (size_t i = 0; i < f->nrecs; i++) {
		const struct nrs_wal_rec_info *ri = &f->recs[i];
		ssize_t s = stream_at(f, ri->rec.stream_id);
		struct nrs_stream_row *c = s < 0 ? NULL : &cur[s];

		if (!c || c->corrupt || c->unlinked ||
		    nrs_recover_row_damage(&f->streams[s]) ||	/* RD1 */
		    nrs_recover_rec_damage(&ri->rec) ||		/* RD2 */
		    ri->rec.lsn <= c->last_lsn || ri->rec.base != c->head ||
		    ri->rec.prev_lsn != c->last_lsn ||
		    ri->rec.epoch < c->epoch || !ri->data_ok)
			continue;
		if (ri->rec.len == 0 && ri->rec.epoch == c->epoch)
			continue;	/* RC9: a fence of no new epoch */
		c->epoch = ri->rec.epoch;			/* RC9 */
		nrec[s]++;
		if (ri->rec.len == 0) {
			nfence[s]++;	/* RC9: beside the chain */
			continue;
		}
		c->head += ri->rec.len;
		c->version += ri->rec.n_appends;
		c->last_lsn = ri->rec.lsn;
	}
	for (size_t s = 0; s < f->nstreams; s++) {
		const struct nrs_stream_row *st = &f->streams[s];

		if (!nrec[s])
			continue;
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F13 stream %" PRIu64 " (%s):"
			     " pending: %" PRIu64 " WAL records past the head "
			     "continue it (%" PRIu64 " of them fences): the next"
			     " mount publishes head %" PRIu64 " -> %" PRIu64
			     ", version %" PRIu64 " -> %" PRIu64 ", epoch %"
			     PRIu64 " -> %" PRIu64, st->id,
			     nrs_fsck_path_of(f, ns, st->ino, path, sizeof(path)),
			     nrec[s], nfence[s], st->head, cur[s].head,
			     st->version, cur[s].version, st->epoch,
			     cur[s].epoch);
	}
	free(cur);
	free(nrec);
	free(nfence);
	return 0;
}

/* ---- F20: object generations, as recovery RC5 takes them ----------------- */

static bool obj_is_checked(const struct nrs_obj_row *o)
{
	return o->state == NRS_OBJ_COMMITTED && nrs_recover_obj_is_possible(o);
}

/*
 * F20 for one linked stream: its committed generations, from f->objs[*oi]
 * on (the cursor moves past the stream's rows).  Returns its materialized
 * end (0 if no generation serves).
 */
static uint64_t check_stream_objects(struct nrs_fsck *f,
				     const struct nrs_stream_row *st,
				     const char *who, size_t *oi)
{
	/* The last generation that serves: an empty one before the first. */
	struct nrs_obj_row last = { .gen = 0 };

	while (*oi < f->nobjs && f->objs[*oi].stream_id < st->id)
		(*oi)++;
	for (; *oi < f->nobjs && f->objs[*oi].stream_id == st->id; (*oi)++) {
		const struct nrs_obj_row *o = &f->objs[*oi];
		uint64_t below = last.gen ? last.end : st->start;

		if (!obj_is_checked(o))
			continue;	/* check_objects says why */
		switch (nrs_recover_obj_use(o, st->start, st->head, last.end)) {
		case NRS_OBJ_USE_TRIMMED:
			continue;
		case NRS_OBJ_USE_PAST_HEAD:
			ERR(f, "F20 %s: object generation %" PRIu64 " [%" PRIu64
			    ", %" PRIu64 ") reaches past the head %" PRIu64 ": "
			    "the next mount does not read it", who, o->gen,
			    o->start, o->end, st->head);
			continue;
		case NRS_OBJ_USE_OVERLAPS:
			ERR(f, "F20 %s: object generation %" PRIu64 " [%" PRIu64
			    ", %" PRIu64 ") overlaps generation %" PRIu64 " [%"
			    PRIu64 ", %" PRIu64 "): the next mount does not read"
			    " it", who, o->gen, o->start, o->end, last.gen,
			    last.start, last.end);
			continue;
		case NRS_OBJ_USE_SERVES:
			break;
		}
		if (o->start > below) {
			ERR(f, "F20 %s: committed bytes [%" PRIu64 ", %" PRIu64
			    ") are in no object (a gap below generation %" PRIu64
			    "), and the commit chain stops above them: reads of"
			    " them fail", who, below, o->start, o->gen);
			f->chains_intact = false;
		}
		last = *o;
	}
	return last.end;
}
/* F27: the path of the inode that names stream id, or "?". */
static const char *stream_path(const struct nrs_fsck *f, const struct ns *ns,
			       uint64_t id, char *buf, size_t size)
{
	for (size_t i = 0; i < f->ninodes; i++)
		if (f->inodes[i].stream_id == id && S_ISREG(f->inodes[i].mode))
			return nrs_fsck_path_of(f, ns, f->inodes[i].ino, buf,
						size);
	return "?";
}

int nrs_fsck_check_streams(struct nrs_fsck *f, const struct ns *ns)
{
	char path[512], who[600];
	size_t oi = 0;
	int err = 0;

	for (size_t s = 0; s < f->nstreams; s++) {
		const struct nrs_stream_row *st = &f->streams[s];
		uint64_t materialized;
		const char *why;
		bool ok = true;

		if (st->corrupt) {
			ERR(f, "F27 stream %" PRIu64 " (%s): its row in meta.db "
			    "fails its checksum: its head, version, start and "
			    "epoch are unknown; the daemon keeps it offline (EIO)",
			    st->id, stream_path(f, ns, st->id, path,
						sizeof(path)));
			f->chains_intact = false;
			continue;
		}
		if (st->unlinked)
			continue;	/* F19 reports it */
		snprintf(who, sizeof(who), "stream %" PRIu64 " (%s)", st->id,
			 nrs_fsck_path_of(f, ns, st->ino, path, sizeof(path)));
		if ((why = nrs_recover_row_range(st))) {
			ERR(f, "F28 %s: %s (id %" PRIu64 ", head %" PRIu64
			    ", last LSN %" PRIu64 "): damage; the daemon keeps "
			    "it offline (EIO)", who, why, st->id, st->head,
			    st->last_lsn);
			f->chains_intact = false;
			continue;
		}
		if (st->start > st->head) {
			ERR(f, "F7 %s: start %" PRIu64 " is above the head %"
			    PRIu64, who, st->start, st->head);
			ok = false;
		}
		if (st->head > 0 && st->last_lsn == 0) {
			ERR(f, "F8 %s: head %" PRIu64 " but no last LSN: no "
			    "commit chain leads to the committed bytes", who,
			    st->head);
			f->chains_intact = false;
			ok = false;
		}
		if (st->head > 0 ? st->version == 0 || st->version > st->head
				 : st->version != 0) {
			ERR(f, "F8 %s: version %" PRIu64 " is impossible at head %"
			    PRIu64 " (every append is at least one byte)", who,
			    st->version, st->head);
			ok = false;
		}
		materialized = check_stream_objects(f, st, who, &oi);
		if (ok)
			err = check_chain(f, st, who,
					  nrs_recover_chain_floor(st->start,
								  materialized));
		if (err)
			break;
	}
	return err;
}
