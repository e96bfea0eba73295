/*
 * fsck.c - what nereusfs-fsck checks, over the metadata rows and WAL records
 * the tool gathered (fsck.h).  No I/O but the look-ups, reads and listing
 * of objects through the store the caller lends (F21, F23-F26), so every
 * check is unit-tested on hand-made rows or a data directory built with the
 * real modules (tests/unit/test_fsck.c).
 *
 * The truth is the one recovery uses (recovery.c R1-R6, DESIGN.md 1 and 6):
 * published heads, the committed object generations, and the commit chain
 * that leads back from each head through the WAL down to where the objects
 * end (recovery.h: the same rules, shared).  Every finding is one line
 * "Fn where: what", where names a stream (id and path), an inode, a WAL
 * segment file and byte range, or an object (generation, range, key).
 *
 * CHECKS (F1, F2 are made by the tool; the rest here)
 *
 *   F1  The data directory is not in use: DIR/lock can be flock(2)ed
 *       (else exit 2: a running daemon's files are not a consistent state).
 *   F2  DIR/meta.db opens, its schema version is ours (else exit 2), and
 *       SQLite's integrity_check finds nothing.
 *   F3  Every WAL segment header verifies: a bad one hides a whole segment.
 *   F4  Every WAL record header and payload chunk verifies its CRC32C:
 *       bytes where no header verifies are corrupt, a record whose chunk
 *       fails is damaged (wal_local.c R2-R4).
 *   F5  The last segment has no torn tail and is not torn at creation: a
 *       crash artefact that the next mount (or --repair) cuts (R1, R5).
 *   F6  An LSN names one commit intent: copies of a record agree.
 *   F7  A stream's start <= head.
 *   F8  head > 0 requires last_lsn > 0 and 1 <= version <= head (versions
 *       count appends, each at least one byte); head 0 requires version 0.
 *   F9  The commit chain: walking back from last_lsn by prev_lsn, every
 *       record is in the WAL, belongs to the stream and ends where the
 *       next one begins (the newest at the head), until it reaches the
 *       floor max(start, materialized) -- below it the objects hold the
 *       bytes and the WAL segments may be gone (recovery R5, F20); a chain
 *       that ends (prev_lsn 0) ends at offset 0.  Else a committed range
 *       has no copy: reads of it fail, and the finding names exactly the
 *       range recovery R5b cannot rebuild from the floor upwards (or
 *       cannot tell, when two records continue the chain at one base).
 *   F10 Every record of the chain passes its payload CRCs (DESIGN.md I6).
 *   F11 Epochs along the chain never decrease and never exceed the
 *       stream's epoch (a fenced writer cannot publish).
 *   F12 version == the appends of the chain when it reaches offset 0, and
 *       >= them when earlier records were trimmed away.
 *   F13 Records past a head that continue it exactly (recovery R3) are
 *       "pending": the next mount publishes them.  Not an error.
 *   F14 The root (inode 1) exists, is a directory, is its own parent and
 *       has no name.
 *   F15 Every dirent has a valid name (meta_sqlite.c M6), its parent is an
 *       existing directory, its inode exists, is linked and records that
 *       parent; an inode has one name (M1: no hard links).
 *   F16 Every linked inode but the root has a name, and its parent chain
 *       reaches the root (M4).
 *   F17 A directory's nlink is 2 + its subdirectories; a named stream's 1.
 *   F18 Inodes and streams agree: mode is a directory or a regular file;
 *       a directory has no stream; a stream inode's stream row exists,
 *       names it back and is marked unlinked exactly when nlink is 0; every
 *       stream row belongs to such an inode.
 *   F19 No inode has nlink 0: one left by a crash (M2) is forgotten by the
 *       next mount (or --repair); a directory never has nlink 0.
 *   F20 Committed object generations (meta.h), taken per stream as
 *       recovery R5 takes them (recovery.h): each row is possible (a
 *       non-empty range shorter than 2^32, gen >= 1, a length of exactly
 *       header + payload); none reaches past its stream's head; none
 *       overlaps another; and with the commit chain above them they cover
 *       [start, head) with no gap (a gap is reported with its range).
 *       The materialized end is the floor of F9.
 *   F21 Every committed object a published state needs (not F23's) is in
 *       the store (missing is a finding; a store that cannot be read makes
 *       the check fail), is exactly as long as its row says, verifies
 *       (objfmt.c O1-O6: its header names its stream, range and
 *       generation, every block CRC32C), has the row's SHA-256, and the
 *       store's proof (the SHA-256 head() returns) agrees.  Only when the
 *       caller lends a store (not --no-objects).
 *   F22 Prepared rows are pending upload intents whose objects (if stored)
 *       and rows the next mount deletes (materializer.c M6), not an error;
 *       quarantined ones are said with -v.
 *
 *   The lifecycle (lifecycle.c G1-G4).  F23-F25 look each object up in
 *   the store (HEAD, never a read) when one is lent; F24 and F26 judge
 *   ages against gc_grace_ms (f->gc_grace_ms, the daemon's default unless
 *   told otherwise) at f->now_ns.  Nothing here deletes anything.
 *
 *   F23 A committed generation no published state needs (G1: its stream
 *       is gone or unlinked, or it lies wholly below the stream's start)
 *       is pending: "awaiting GC", which moves it to draining.  Its bytes
 *       are not read (F21), and an object already gone is fine: no byte
 *       of it is readable.  A generation wholly covered by a newer
 *       committed one is *not* among these: the daemon never leaves one
 *       (compaction moves what it replaces to draining in the transaction
 *       that publishes the new generation), its GC would never drain it,
 *       and the next mount reads only one of the two: F20's overlap.
 *   F24 A draining row is pending, "awaiting GC since" its last state
 *       change; one older than the grace period is still only pending
 *       (no daemon runs to delete it), and the message says so.  Its
 *       object may be stored or gone (a crash between G2's delete and the
 *       state change: GC retires the row).
 *   F25 A retired row's object is gone from the store (HEAD says ENOENT):
 *       a retired object still stored is a GC bug (G2 deletes first, then
 *       retires) that nothing will ever clean up.
 *   F26 In the embedded store (a directory: it may be listed here, the
 *       daemon never relies on a listing), every file is named by a row of
 *       the objects table (any state; a retired one's is F25's).  A file
 *       no row names is an "unreferenced object" if it was written longer
 *       than the grace period ago, else pending.  A bucket is not listed:
 *       unreferenced objects in S3 are found only through their rows.
 *   F27 Every stream row passes its checksum (meta_sqlite.c C3).  A row
 *       that fails is reported with the path of the inode that names the
 *       stream, and nothing else of it is checked: its head, version,
 *       start, epoch, inode and unlinked flag are unknown (the daemon
 *       keeps the stream offline).  No repair: only an operator can tell
 *       what the row held.
 *   F28 Every stream row's id, head and last LSN are in range (recovery.h
 *       RD1: an id in [1, 2^63), a head and a last LSN below 2^63).  A row
 *       out of range is damage the daemon keeps offline, as it does a row
 *       that fails F7 or F8; nothing else of it is checked.
 *   F30 The AUTOINCREMENT sequences (meta_sqlite.c M3): sqlite_sequence
 *       holds an integer for inodes and streams, below INT64_MAX (there
 *       SQLite refuses every new row: no inode or stream can be created),
 *       and at least every id its table holds, and the streams one every
 *       stream id an objects row holds (SQLite never lets it fall below
 *       an id it issued; one below would give a new stream the id of an
 *       old one, whose object rows it would then take for its own).
 *   F29 Every WAL record's LSN is at most NRS_WALREC_LSN_MAX and its end
 *       at most NRS_HEAD_MAX (recovery.h RD2).  Another is damage, an orphan
 *       the daemon ignores: never pending (F13), never a link of a chain.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bg/lifecycle.h"
#include "fsck/fsck.h"
#include "obj/objfmt.h"
#include "stream/recovery.h"
#include "util/grow.h"
#include "util/parse.h"

#define PATH_DEPTH_MAX	4096	/* deeper, or a loop: F16 */
#define PATH_SHOW_MAX	32	/* components a message shows */

void nrs_fsck_init(struct nrs_fsck *f, nrs_fsck_report_cb report, void *ctx)
{
	struct timespec ts;

	memset(f, 0, sizeof(*f));
	f->report = report;
	f->ctx = ctx;
	clock_gettime(CLOCK_REALTIME, &ts);
	f->now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	f->gc_grace_ms = NRS_GC_GRACE_MS_DEFAULT;
}

void nrs_fsck_free(struct nrs_fsck *f)
{
	free(f->inodes);
	free(f->dirents);
	free(f->streams);
	free(f->recs);
	free(f->damage);
	free(f->objs);
	nrs_fsck_init(f, f->report, f->ctx);
}

#define PUSH(f, arr, n, cap, val) \
	(nrs_grow((void **)&(f)->arr, &(f)->cap, (f)->n + 1, \
		  sizeof(*(f)->arr)) ?: \
	 ((f)->arr[(f)->n++] = (val), 0))

int nrs_fsck_add_inode(void *ctx, const struct nrs_attr *a)
{
	struct nrs_fsck *f = ctx;

	return PUSH(f, inodes, ninodes, icap, *a);
}

int nrs_fsck_add_dirent(void *ctx, uint64_t parent, const void *name,
			size_t len, uint64_t ino)
{
	struct nrs_fsck *f = ctx;
	struct nrs_fsck_dirent d = { .parent = parent, .ino = ino, .len = len };

	memcpy(d.name, name, len < NRS_NAME_MAX ? len : NRS_NAME_MAX);
	return PUSH(f, dirents, ndirents, dcap, d);
}

int nrs_fsck_add_stream(void *ctx, const struct nrs_stream_row *s)
{
	struct nrs_fsck *f = ctx;

	return PUSH(f, streams, nstreams, scap, *s);
}

int nrs_fsck_add_rec(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct nrs_fsck *f = ctx;

	return PUSH(f, recs, nrecs, rcap, *ri);
}

int nrs_fsck_add_obj(void *ctx, const struct nrs_obj_row *o)
{
	struct nrs_fsck *f = ctx;

	return PUSH(f, objs, nobjs, ocap, *o);
}

void nrs_fsck_add_damage(void *ctx, const struct nrs_wal_damage *d)
{
	struct nrs_fsck *f = ctx;

	/* A torn tail swallows the bad-chunk records reported inside it. */
	while (d->kind == NRS_WAL_TORN_TAIL && f->ndamage > 0 &&
	       f->damage[f->ndamage - 1].kind == NRS_WAL_BAD_CHUNK &&
	       f->damage[f->ndamage - 1].seg == d->seg &&
	       f->damage[f->ndamage - 1].start >= d->start)
		f->ndamage--;
	if (PUSH(f, damage, ndamage, mcap, *d))
		f->oom = -ENOMEM;
}

void nrs_fsck_say(struct nrs_fsck *f, enum nrs_fsck_sev sev,
		  const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (sev == NRS_FSCK_ERROR)
		f->errors++;
	else if (sev == NRS_FSCK_PENDING)
		f->pending++;
	if (f->report)
		f->report(f->ctx, sev, line);
}

#define ERR(f, ...)	nrs_fsck_say(f, NRS_FSCK_ERROR, __VA_ARGS__)

/* ---- lookups ------------------------------------------------------------ */

static int cmp_ino(const void *a, const void *b)
{
	const struct nrs_attr *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int cmp_sid(const void *a, const void *b)
{
	const struct nrs_stream_row *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_lsn(const void *a, const void *b)
{
	const struct nrs_wal_rec_info *x = a, *y = b;

	return x->rec.lsn < y->rec.lsn ? -1 : x->rec.lsn > y->rec.lsn;
}

/* Binary search of arr[0..n), sorted by field: the index of an element
 * whose field is key, or -1. */
#define BSEARCH(arr, n, field, key) ({					\
	ssize_t lo_ = 0, hi_ = (ssize_t)(n), at_ = -1;			\
	while (lo_ < hi_) {						\
		ssize_t mid_ = lo_ + (hi_ - lo_) / 2;			\
		if ((arr)[mid_].field == (key)) { at_ = mid_; break; }	\
		if ((arr)[mid_].field < (key)) lo_ = mid_ + 1;		\
		else hi_ = mid_;					\
	}								\
	at_; })

static ssize_t inode_at(const struct nrs_fsck *f, uint64_t ino)
{
	return BSEARCH(f->inodes, f->ninodes, ino, ino);
}

static ssize_t stream_at(const struct nrs_fsck *f, uint64_t id)
{
	return BSEARCH(f->streams, f->nstreams, id, id);
}

static const struct nrs_wal_rec_info *rec_of(const struct nrs_fsck *f,
					     uint64_t lsn)
{
	ssize_t i = BSEARCH(f->recs, f->nrecs, rec.lsn, lsn);

	return i < 0 ? NULL : &f->recs[i];
}

/* Per inode (same index as f->inodes), from the dirents. */
struct ns {
	size_t *names;		/* dirents naming it */
	ssize_t *name;		/* one of them, -1 if none */
	size_t *subdirs;	/* its entries that are directories */
};

/* "/a/b" for inode ino, from its names; "?" where the chain breaks,
 * "..." where it is too long to show. */
static const char *path_of(const struct nrs_fsck *f, const struct ns *ns,
			   uint64_t ino, char *buf, size_t size)
{
	size_t pos = size - 1;

	buf[pos] = '\0';
	for (int depth = 0; ino != NRS_ROOT_INO; depth++) {
		ssize_t i = inode_at(f, ino);
		const struct nrs_fsck_dirent *d;
		size_t len;

		if (i < 0 || ns->name[i] < 0) {
			buf[--pos] = '?';
			break;
		}
		d = &f->dirents[ns->name[i]];
		len = strlen(d->name);
		if (depth >= PATH_SHOW_MAX || len + 5 > pos) {
			pos -= 3;
			memcpy(buf + pos, "...", 3);
			break;
		}
		pos -= len;
		memcpy(buf + pos, d->name, len);
		buf[--pos] = '/';
		ino = d->parent;
	}
	if (buf[pos] == '\0' && pos > 0)
		buf[--pos] = '/';
	return buf + pos;
}

static void seg_file(char buf[40], uint64_t seg)
{
	snprintf(buf, 40, "wal/%016" PRIx64 ".seg", seg);
}

/* ---- F3-F6: the WAL ----------------------------------------------------- */

/* F29: a record no daemon writes.  Recovery ignores it (RD2); here
 * check_pending skips it, and no chain can reach it: every prev_lsn is
 * below its record's LSN, every last LSN in range (F28), and a chain
 * ends at the head, in range too. */
static void check_recs(struct nrs_fsck *f)
{
	char sf[40];

	for (size_t i = 0; i < f->nrecs; i++) {
		const struct nrs_wal_rec_info *ri = &f->recs[i];
		const char *why = nrs_recover_rec_damage(&ri->rec);

		if (!why)
			continue;
		seg_file(sf, ri->pos.seg);
		ERR(f, "F29 %s at %" PRIu64 ": record LSN %" PRIu64 " of stream %"
		    PRIu64 ", bytes [%" PRIu64 ", +%" PRIu32 "): %s: damage; "
		    "the daemon ignores it (an orphan)", sf, ri->pos.off,
		    ri->rec.lsn, ri->rec.stream_id, ri->rec.base, ri->rec.len,
		    why);
	}
}

static void check_wal(struct nrs_fsck *f)
{
	char sf[40], sg[40];

	for (size_t i = 0; i < f->ndamage; i++) {
		const struct nrs_wal_damage *d = &f->damage[i];
		uint64_t n = d->end - d->start;

		seg_file(sf, d->seg);
		switch (d->kind) {
		case NRS_WAL_BAD_SEGMENT:
			ERR(f, "F3 %s: segment header is corrupt: all %" PRIu64
			    " bytes of the segment are unreadable", sf, n);
			break;
		case NRS_WAL_CORRUPT:
			ERR(f, "F4 %s bytes [%" PRIu64 ", %" PRIu64 "): corrupt:"
			    " no record header verifies", sf, d->start, d->end);
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
		seg_file(sf, f->recs[i - 1].pos.seg);
		seg_file(sg, f->recs[i].pos.seg);
		ERR(f, "F6 LSN %" PRIu64 ": two different records, %s at %"
		    PRIu64 " and %s at %" PRIu64, a->lsn, sf,
		    f->recs[i - 1].pos.off, sg, f->recs[i].pos.off);
	}
}

/* ---- F7-F12: heads and commit chains ------------------------------------ */

/* F9 for a chain recovery R5 could not follow whole: exactly the range
 * that reads EIO, and why. */
static void report_broken(struct nrs_fsck *f, const struct nrs_stream_row *st,
			  const char *who, uint64_t floor,
			  const struct nrs_chain *ch)
{
	const struct nrs_wal_rec_info *ri = ch->broken_lsn ?
		rec_of(f, ch->broken_lsn) : NULL;
	char sf[40], objs[64] = "";

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
		seg_file(sf, ri->pos.seg);
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

/* F9-F12 for one linked stream, down to floor (recovery.h R5); who is
 * "stream N (/path)".  Returns 0 or -ENOMEM. */
static int check_chain(struct nrs_fsck *f, const struct nrs_stream_row *st,
		       const char *who, uint64_t floor)
{
	uint64_t appends = 0, later_epoch = UINT64_MAX;
	struct nrs_chain ch;
	char sf[40];
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

		seg_file(sf, ri->pos.seg);
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

/* F13: recovery R3 over the records in LSN order. */
static int check_pending(struct nrs_fsck *f, const struct ns *ns)
{
	struct nrs_stream_row *cur = calloc(f->nstreams + 1, sizeof(*cur));
	uint64_t *nrec = calloc(f->nstreams + 1, sizeof(*nrec));
	char path[512];

	if (!cur || !nrec) {
		free(cur);
		free(nrec);
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
		    ri->rec.len == 0 ||
		    ri->rec.lsn <= c->last_lsn || ri->rec.base != c->head ||
		    ri->rec.prev_lsn != c->last_lsn ||
		    ri->rec.epoch < c->epoch || !ri->data_ok)
			continue;
		c->head += ri->rec.len;
		c->version += ri->rec.n_appends;
		c->last_lsn = ri->rec.lsn;
		nrec[s]++;
	}
	for (size_t s = 0; s < f->nstreams; s++) {
		const struct nrs_stream_row *st = &f->streams[s];

		if (!nrec[s])
			continue;
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F13 stream %" PRIu64 " (%s):"
			     " pending: %" PRIu64 " WAL records past the head "
			     "continue it: the next mount publishes head %" PRIu64
			     " -> %" PRIu64 ", version %" PRIu64 " -> %" PRIu64,
			     st->id, path_of(f, ns, st->ino, path, sizeof(path)),
			     nrec[s], st->head, cur[s].head, st->version,
			     cur[s].version);
	}
	free(cur);
	free(nrec);
	return 0;
}

/* ---- F20: object generations, as recovery R5 takes them ----------------- */

/* What the object of row o must say it holds. */
static struct nrs_objhdr obj_hdr(const struct nrs_obj_row *o)
{
	return (struct nrs_objhdr){
		.stream_id = o->stream_id, .start = o->start, .end = o->end,
		.gen = o->gen,
	};
}

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

/* ---- F21, F22: every row of the objects table -------------------------- */

/* Why nrs_objfmt_verify() refused buf (len bytes, the length its row says)
 * that should hold h: a phrase for a finding. */
static void explain_bad_object(const unsigned char *buf, size_t len,
			       const struct nrs_objhdr *h, int err,
			       char *why, size_t size)
{
	struct nrs_objinfo oi;
	uint32_t bad = 0, first = 0;
	int perr;

	if (err == -EPROTO) {
		snprintf(why, size, "it is in a newer object format than this "
			 "nereusfs-fsck reads");
		return;
	}
	perr = nrs_objfmt_parse(buf, len, NULL, &oi);
	if (perr == -EBADMSG) {
		snprintf(why, size, "its header fails its CRC32C");
		return;
	}
	if (perr) {
		snprintf(why, size, "its header holds fields no writer "
			 "produces");
		return;
	}
	if (err == -EUCLEAN) {
		snprintf(why, size, "its header names stream %" PRIu64 " [%"
			 PRIu64 ", %" PRIu64 ") gen %" PRIu64 " instead",
			 oi.h.stream_id, oi.h.start, oi.h.end, oi.h.gen);
		return;
	}
	if (nrs_objfmt_verify_table(&oi, buf + NRS_OBJ_FIXED)) {
		snprintf(why, size, "its block table fails its CRC32C");
		return;
	}
	for (uint32_t i = oi.nblocks; i-- > 0;) {
		size_t at = nrs_objfmt_hdr_len(h->end - h->start) +
			    (size_t)i * NRS_OBJ_BLOCK;

		if (nrs_objfmt_verify_block(&oi, buf + NRS_OBJ_FIXED, i,
					    buf + at,
					    nrs_objfmt_block_len(&oi, i))) {
			bad++;
			first = i;
		}
	}
	if (bad)
		snprintf(why, size, "%" PRIu32 " of its %" PRIu32 " payload "
			 "blocks fail their CRC32C, the first holding bytes [%"
			 PRIu64 ", %" PRIu64 ")", bad, oi.nblocks,
			 h->start + (uint64_t)first * NRS_OBJ_BLOCK,
			 h->start + (uint64_t)first * NRS_OBJ_BLOCK +
			 nrs_objfmt_block_len(&oi, first));
	else
		snprintf(why, size, "it fails verification (%s)",
			 strerror(-err));
}

/*
 * F21 for committed row o; what is "object KEY (stream ...)".  0 when the
 * object was judged (whatever was found), else the error of a store that
 * could not be read, or -ENOMEM.
 */
static int check_object(struct nrs_fsck *f, const struct nrs_obj_row *o,
			const char *key, const char *what)
{
	struct nrs_objhdr h = obj_hdr(o);
	unsigned char sha[NRS_SHA256_LEN], *buf;
	struct nrs_obj_meta meta;
	char why[200];
	ssize_t n;
	int err;

	err = f->store ? nrs_obj_head(f->store, key, &meta) : -ENOENT;
	if (err == -ENOENT)
		goto missing;
	if (err)
		return err;
	if (meta.length != o->length) {
		ERR(f, "F21 %s: holds %" PRIu64 " bytes, its row says %" PRIu64,
		    what, meta.length, o->length);
		goto lost;
	}
	buf = malloc(o->length);
	if (!buf)
		return -ENOMEM;
	n = nrs_obj_get(f->store, key, 0, buf, o->length);
	if (n == -ENOENT) {
		free(buf);
		goto missing;
	}
	if (n < 0) {
		free(buf);
		return (int)n;
	}
	if ((uint64_t)n != o->length) {
		ERR(f, "F21 %s: a read of it ended after %zd of its %" PRIu64
		    " bytes", what, n, o->length);
		free(buf);
		goto lost;
	}
	err = nrs_objfmt_verify(buf, (size_t)n, &h);
	if (err) {
		explain_bad_object(buf, (size_t)n, &h, err, why, sizeof(why));
		free(buf);
		ERR(f, "F21 %s: %s: reads of it fail", what, why);
		goto lost;
	}
	err = nrs_objfmt_digest(buf, (size_t)n, sha, NULL);
	free(buf);
	if (err)
		return err;
	if (memcmp(sha, o->sha256, NRS_SHA256_LEN) != 0) {
		ERR(f, "F21 %s: its SHA-256 is not the one its row recorded "
		    "when it was published", what);
		goto lost;
	}
	if (!meta.has_sha256 ||
	    memcmp(meta.sha256, o->sha256, NRS_SHA256_LEN) != 0)
		ERR(f, "F21 %s: its bytes are intact, but the store %s", what,
		    meta.has_sha256 ? "keeps another SHA-256 for it"
				    : "keeps no valid SHA-256 for it");
	else
		f->objects_verified++;
	return 0;

missing:
	ERR(f, "F21 %s: missing from the object store%s: committed bytes [%"
	    PRIu64 ", %" PRIu64 ") have no copy there", what, f->store ? "" :
	    " (there is no object directory: are the objects in S3?)",
	    o->start, o->end);
lost:
	f->chains_intact = false;
	return 0;
}

static const char *obj_state_name(int state)
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

/* ---- F23-F26: the lifecycle (lifecycle.c G1-G4) ------------------------ */

/* Milliseconds from time (ns, a row's mtime or a file's) to f->now_ns; 0
 * for a time in the future. */
static uint64_t age_ms(const struct nrs_fsck *f, int64_t time)
{
	return f->now_ns > time ? (uint64_t)(f->now_ns - time) / 1000000 : 0;
}

/* "850 ms", "12.3 s", "4 min 5 s", "3 h 20 min", "2 d 5 h", into buf. */
static const char *ms_str(uint64_t ms, char *buf, size_t size)
{
	uint64_t sec = ms / 1000;

	if (ms < 1000)
		snprintf(buf, size, "%" PRIu64 " ms", ms);
	else if (sec < 60)
		snprintf(buf, size, "%" PRIu64 ".%" PRIu64 " s", sec,
			 ms % 1000 / 100);
	else if (sec < 3600)
		snprintf(buf, size, "%" PRIu64 " min %" PRIu64 " s", sec / 60,
			 sec % 60);
	else if (sec < 86400)
		snprintf(buf, size, "%" PRIu64 " h %" PRIu64 " min", sec / 3600,
			 sec % 3600 / 60);
	else
		snprintf(buf, size, "%" PRIu64 " d %" PRIu64 " h", sec / 86400,
			 sec % 86400 / 3600);
	return buf;
}

/* Whether the store holds an object under a key. */
enum presence {
	NOT_LOOKED,	/* no store lent (--no-objects), or no key */
	STORED,
	GONE,
};

/* HEAD key in f->store (the object's length in *len if len is not NULL):
 * 0, or the error of a store that cannot be read. */
static int look_up(struct nrs_fsck *f, const char *key, bool have_key,
		   enum presence *p, uint64_t *len)
{
	struct nrs_obj_meta meta;
	int err;

	*p = NOT_LOOKED;
	if (!have_key || (!f->store && !f->store_absent))
		return 0;
	err = f->store ? nrs_obj_head(f->store, key, &meta) : -ENOENT;
	if (err == -ENOENT) {
		*p = GONE;
		return 0;
	}
	if (err)
		return err;
	*p = STORED;
	if (len)
		*len = meta.length;
	return 0;
}

static const char *presence_str(enum presence p)
{
	switch (p) {
	case STORED:	return "; its object is still stored";
	case GONE:	return "; its object is already gone from the store";
	default:	return "";
	}
}

/*
 * G1: why no published state needs committed row o (s: its stream's index
 * in f->streams, or -1), into buf; NULL if one does.  A generation wholly
 * covered by a newer committed one is not among these: the daemon never
 * leaves one (compaction moves the generations it replaces to draining in
 * the transaction that publishes the new one), its GC would not drain it,
 * and the next mount reads only one of the two: F20 reports the overlap.
 */
static const char *unneeded_why(const struct nrs_fsck *f,
				const struct nrs_obj_row *o, ssize_t s,
				char *buf, size_t size)
{
	if (s < 0)
		return "its stream is gone";
	if (f->streams[s].unlinked)
		return "its stream is unlinked: once the next mount (or "
		       "--repair) forgets it (F19), GC drains it";
	if (o->end > f->streams[s].start)
		return NULL;
	snprintf(buf, size, "it lies wholly below the stream's start %" PRIu64,
		 f->streams[s].start);
	return buf;
}

/* F23: a committed row no published state needs (why). */
static int check_unneeded(struct nrs_fsck *f, const char *key, bool have_key,
			  const char *what, const char *why)
{
	enum presence p;
	int err = look_up(f, key, have_key, &p, NULL);

	if (err)
		return err;
	nrs_fsck_say(f, NRS_FSCK_PENDING, "F23 %s: no published state needs "
		     "it (%s): awaiting GC, which moves it to draining and "
		     "deletes it gc_grace_ms later%s", what, why,
		     presence_str(p));
	return 0;
}

/* F24: draining row o. */
static int check_draining(struct nrs_fsck *f, const struct nrs_obj_row *o,
			  const char *key, bool have_key, const char *what)
{
	uint64_t ms = age_ms(f, o->mtime_ns);
	char age[32], left[32];
	enum presence p;
	int err = look_up(f, key, have_key, &p, NULL);

	if (err)
		return err;
	ms_str(ms, age, sizeof(age));
	if (ms >= f->gc_grace_ms)
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F24 %s: awaiting GC since "
			     "%s ago, longer than the grace period (%" PRIu64
			     " ms), only because no daemon runs: the first GC "
			     "pass after the next mount deletes it%s", what, age,
			     f->gc_grace_ms, presence_str(p));
	else
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F24 %s: awaiting GC since "
			     "%s ago: deleted when its grace period (%" PRIu64
			     " ms) is over, in %s%s", what, age, f->gc_grace_ms,
			     ms_str(f->gc_grace_ms - ms, left, sizeof(left)),
			     presence_str(p));
	if (p == GONE)
		nrs_fsck_say(f, NRS_FSCK_INFO, "F24 %s: a crash came between "
			     "its delete and its retirement (lifecycle.c G3): "
			     "GC retires the row", what);
	return 0;
}

/* F25: a retired row: its object must be gone. */
static int check_retired(struct nrs_fsck *f, const char *key, bool have_key,
			 const char *what)
{
	enum presence p;
	uint64_t len = 0;
	int err = look_up(f, key, have_key, &p, &len);

	if (err)
		return err;
	if (p != STORED) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F25 %s: %s", what,
			     p == GONE ? "deleted by GC" : "not looked up");
		return 0;
	}
	f->strays++;
	ERR(f, "F25 %s: retired but still stored (%" PRIu64 " bytes): a GC "
	    "bug (lifecycle.c G2 deletes the object before it retires the "
	    "row), and nothing will delete it now: delete it by hand "
	    "(--repair deletes no object)", what, len);
	return 0;
}

/* A row of f->objs by its generation. */
struct gen_at {
	uint64_t gen;
	size_t i;
};

static int cmp_gen(const void *a, const void *b)
{
	const struct gen_at *x = a, *y = b;

	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

/* F26's listing: the rows by generation, to find the one a file's name
 * might be the key of. */
struct listing {
	struct nrs_fsck *f;
	struct gen_at *bygen;
};

/* Is name the key of a row (any state: a retired one's is F25's)? */
static bool is_named(const struct listing *l, const char *name)
{
	const char *g = strrchr(name, 'g');
	char key[NRS_OBJKEY_MAX];
	struct nrs_objhdr h;
	uint64_t gen;
	ssize_t i;

	/* The generation ends a key ("-g<hex>"); the whole key is compared. */
	if (!g || g == name || g[-1] != '-' ||
	    nrs_parse_x64(g + 1, strlen(g + 1), &gen))	/* parse.h N2 */
		return false;
	i = BSEARCH(l->bygen, l->f->nobjs, gen, gen);
	if (i < 0)
		return false;
	h = obj_hdr(&l->f->objs[l->bygen[i].i]);
	return nrs_objfmt_key(key, &h) > 0 && strcmp(key, name) == 0;
}

/* F26 for one file of the embedded store. */
static int check_file(void *ctx, const struct nrs_objfile *of)
{
	const struct listing *l = ctx;
	struct nrs_fsck *f = l->f;
	uint64_t ms = age_ms(f, of->mtime_ns);
	char age[32];

	if (of->is_reg && is_named(l, of->name))
		return 0;
	ms_str(ms, age, sizeof(age));
	if (ms < f->gc_grace_ms) {
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F26 objects/%s: no row of the"
			     " objects table names it, but it was written only %s"
			     " ago, within the grace period (%" PRIu64 " ms)",
			     of->name, age, f->gc_grace_ms);
		return 0;
	}
	f->strays++;
	ERR(f, "F26 objects/%s: an unreferenced object: no row of the objects "
	    "table names it%s, and it was written %s ago (a file of %" PRIu64
	    " bytes): nothing will delete it: look, then delete it by hand "
	    "(--repair deletes no object)", of->name, of->is_reg ? "" :
	    " (and it is not even a regular file)", age, of->size);
	return 0;
}

/* F26: every file of the embedded store is named by a row.  A bucket is
 * never listed (its unreferenced objects are found only through rows). */
static int check_unreferenced(struct nrs_fsck *f)
{
	struct listing l = { .f = f };
	int err;

	if (!f->store)
		return 0;
	l.bygen = malloc((f->nobjs + 1) * sizeof(*l.bygen));
	if (!l.bygen)
		return -ENOMEM;
	for (size_t i = 0; i < f->nobjs; i++)
		l.bygen[i] = (struct gen_at){ .gen = f->objs[i].gen, .i = i };
	if (f->nobjs > 1)
		qsort(l.bygen, f->nobjs, sizeof(*l.bygen), cmp_gen);
	err = nrs_objstore_dir_foreach(f->store, check_file, &l);
	free(l.bygen);
	if (err == -EOPNOTSUPP) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F26 the %s store is not listed:"
			     " objects no row names are not looked for",
			     f->store->ops->name);
		err = 0;
	}
	return err;
}

/* F20 (rows), F21 (through f->store), F22-F25, over every row; F26. */
static int check_objects(struct nrs_fsck *f, const struct ns *ns)
{
	char path[512], key[NRS_OBJKEY_MAX], what[900], why[100];

	for (size_t i = 0; i < f->nobjs; i++) {
		const struct nrs_obj_row *o = &f->objs[i];
		struct nrs_objhdr h = obj_hdr(o);
		ssize_t s = stream_at(f, o->stream_id);
		const char *state = obj_state_name(o->state), *unneeded;
		bool have_key = nrs_objfmt_key(key, &h) >= 0;
		int err = 0;

		if (!have_key)
			snprintf(key, sizeof(key), "generation %" PRIu64, o->gen);
		snprintf(what, sizeof(what), "object %s (stream %" PRIu64 " (%s)"
			 ", bytes [%" PRIu64 ", %" PRIu64 "), %s)", key,
			 o->stream_id, s < 0 ? "gone" : f->streams[s].unlinked ?
			 "unlinked" : path_of(f, ns, f->streams[s].ino, path,
					      sizeof(path)),
			 o->start, o->end, state ? state : "?");
		switch (o->state) {
		case NRS_OBJ_PREPARED:
			nrs_fsck_say(f, NRS_FSCK_PENDING, "F22 %s: an upload "
				     "intent: the next mount deletes the object "
				     "(if it was stored) and the row", what);
			continue;
		case NRS_OBJ_QUARANTINED:
			nrs_fsck_say(f, NRS_FSCK_INFO, "F22 %s: its key held "
				     "other bytes: it is never read or written "
				     "again", what);
			continue;
		case NRS_OBJ_DRAINING:
			err = check_draining(f, o, key, have_key, what);
			break;
		case NRS_OBJ_RETIRED:
			err = check_retired(f, key, have_key, what);
			break;
		case NRS_OBJ_COMMITTED:
			if (!nrs_recover_obj_is_possible(o)) {
				ERR(f, "F20 %s: an impossible row (gen %" PRIu64
				    ", %" PRIu64 " bytes): no materializer wrote"
				    " it", what, o->gen, o->length);
				continue;
			}
			unneeded = unneeded_why(f, o, s, why, sizeof(why));
			if (unneeded)
				err = check_unneeded(f, key, have_key, what,
						     unneeded);
			else if (f->store || f->store_absent)
				err = check_object(f, o, key, what);
			break;
		default:
			ERR(f, "F20 %s: unknown state %d", what, o->state);
			continue;
		}
		if (err)
			return err;
	}
	return check_unreferenced(f);
}

/* F27: the path of the inode that names stream id, or "?". */
static const char *stream_path(const struct nrs_fsck *f, const struct ns *ns,
			       uint64_t id, char *buf, size_t size)
{
	for (size_t i = 0; i < f->ninodes; i++)
		if (f->inodes[i].stream_id == id && S_ISREG(f->inodes[i].mode))
			return path_of(f, ns, f->inodes[i].ino, buf, size);
	return "?";
}

static int check_streams(struct nrs_fsck *f, const struct ns *ns)
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
			 path_of(f, ns, st->ino, path, sizeof(path)));
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

/* ---- F30: the sequences -------------------------------------------------- */

/* F30 for one sequence: it is an integer below INT64_MAX, and at least
 * max_id, which holder holds. */
static void check_seq(struct nrs_fsck *f, const char *table,
		      const struct nrs_meta_seq *q, uint64_t max_id,
		      const char *holder)
{
	int64_t v = q->integer ? q->v : 0;	/* as SQLite takes it */

	if (!q->integer)
		ERR(f, "F30 sqlite_sequence %s: not an integer: SQLite takes it "
		    "for 0", table);
	else if (v == INT64_MAX)
		ERR(f, "F30 sqlite_sequence %s: at %" PRId64 ", the largest "
		    "rowid: SQLite refuses every new row (creating fails "
		    "ENOSPC)", table, v);
	if (v < 0 || (uint64_t)v < max_id)
		ERR(f, "F30 sqlite_sequence %s: at %" PRId64 ", below id %"
		    PRIu64 " that %s holds: a new one may get an id already "
		    "used (meta_sqlite.c M3)", table, v, max_id, holder);
}

static void check_sequences(struct nrs_fsck *f)
{
	uint64_t max_sid = 0, max_oid = 0, max_ino = 0;

	if (!f->have_seqs)
		return;
	for (size_t i = 0; i < f->ninodes; i++)
		if (f->inodes[i].ino <= INT64_MAX && f->inodes[i].ino > max_ino)
			max_ino = f->inodes[i].ino;
	for (size_t s = 0; s < f->nstreams; s++)
		if (f->streams[s].id <= NRS_STREAM_ID_MAX &&	/* else F28 */
		    f->streams[s].id > max_sid)
			max_sid = f->streams[s].id;
	for (size_t o = 0; o < f->nobjs; o++)
		if (f->objs[o].stream_id <= NRS_STREAM_ID_MAX &&
		    f->objs[o].stream_id > max_oid)
			max_oid = f->objs[o].stream_id;
	check_seq(f, "inodes", &f->seq_inodes, max_ino, "an inodes row");
	if (max_oid > max_sid)
		check_seq(f, "streams", &f->seq_streams, max_oid,
			  "an objects row");
	else
		check_seq(f, "streams", &f->seq_streams, max_sid,
			  "a streams row");
}

/* ---- F14-F19: the namespace --------------------------------------------- */

/* M6, on the name as stored. */
static bool name_is_valid(const struct nrs_fsck_dirent *d)
{
	return d->len >= 1 && d->len <= NRS_NAME_MAX &&
	       strlen(d->name) == d->len && !strchr(d->name, '/') &&
	       strcmp(d->name, ".") != 0 && strcmp(d->name, "..") != 0;
}

static void check_dirents(struct nrs_fsck *f, struct ns *ns)
{
	for (size_t k = 0; k < f->ndirents; k++) {
		const struct nrs_fsck_dirent *d = &f->dirents[k];
		ssize_t p = inode_at(f, d->parent), i = inode_at(f, d->ino);
		const struct nrs_attr *a = i < 0 ? NULL : &f->inodes[i];

		if (!name_is_valid(d))
			ERR(f, "F15 dirent %" PRIu64 "/\"%s\": invalid name (%zu"
			    " bytes)", d->parent, d->name, d->len);
		if (p < 0 || !S_ISDIR(f->inodes[p].mode))
			ERR(f, "F15 dirent %" PRIu64 "/\"%s\": parent inode %"
			    PRIu64 " is %s", d->parent, d->name, d->parent,
			    p < 0 ? "missing" : "not a directory");
		if (!a) {
			ERR(f, "F15 dirent %" PRIu64 "/\"%s\": points at inode %"
			    PRIu64 ", which does not exist", d->parent, d->name,
			    d->ino);
			continue;
		}
		if (a->ino == NRS_ROOT_INO)
			ERR(f, "F14 dirent %" PRIu64 "/\"%s\" names the root",
			    d->parent, d->name);
		else if (a->nlink == 0 || a->parent != d->parent)
			ERR(f, "F15 dirent %" PRIu64 "/\"%s\": inode %" PRIu64
			    " has nlink %" PRIu32 " and parent %" PRIu64,
			    d->parent, d->name, a->ino, a->nlink, a->parent);
		if (ns->names[i]++ == 0)
			ns->name[i] = (ssize_t)k;
		else
			ERR(f, "F15 inode %" PRIu64 " has more than one name "
			    "(\"%s\" in %" PRIu64 ")", a->ino, d->name,
			    d->parent);
		if (p >= 0 && S_ISDIR(a->mode))
			ns->subdirs[p]++;
	}
}

/* F16: the parent chain of inode i reaches the root. */
static bool reaches_root(const struct nrs_fsck *f, const struct ns *ns,
			 size_t i)
{
	for (int depth = 0; depth < PATH_DEPTH_MAX; depth++) {
		const struct nrs_fsck_dirent *d;
		ssize_t p;

		if (f->inodes[i].ino == NRS_ROOT_INO)
			return true;
		if (ns->name[i] < 0)
			return false;
		d = &f->dirents[ns->name[i]];
		p = inode_at(f, d->parent);
		if (p < 0)
			return false;
		i = (size_t)p;
	}
	return false;
}

static void check_inodes(struct nrs_fsck *f, const struct ns *ns)
{
	char path[512];
	ssize_t r = inode_at(f, NRS_ROOT_INO);

	if (r < 0 || !S_ISDIR(f->inodes[r].mode) ||
	    f->inodes[r].parent != NRS_ROOT_INO)
		ERR(f, "F14 the root inode %d is %s", NRS_ROOT_INO, r < 0 ?
		    "missing" : "not a directory that is its own parent");
	for (size_t i = 0; i < f->ninodes; i++) {
		const struct nrs_attr *a = &f->inodes[i];
		bool dir = S_ISDIR(a->mode);
		ssize_t s = a->stream_id ? stream_at(f, a->stream_id) : -1;
		const struct nrs_stream_row *st = s < 0 ? NULL : &f->streams[s];

		if (!dir && !S_ISREG(a->mode)) {
			ERR(f, "F18 inode %" PRIu64 ": mode %o is neither a "
			    "directory nor a stream", a->ino, a->mode);
			continue;
		}
		if (a->nlink == 0) {
			if (dir)
				ERR(f, "F19 inode %" PRIu64 ": a directory with "
				    "nlink 0", a->ino);
			else {
				f->unlinked++;
				ERR(f, "F19 inode %" PRIu64 " (stream %" PRIu64
				    "): unlinked (nlink 0), left by a crash: "
				    "--repair or the next mount forgets it",
				    a->ino, a->stream_id);
			}
		} else if (a->ino != NRS_ROOT_INO && ns->names[i] == 0) {
			ERR(f, "F16 inode %" PRIu64 ": nlink %" PRIu32 " but no"
			    " name", a->ino, a->nlink);
		} else if (!reaches_root(f, ns, i)) {
			ERR(f, "F16 inode %" PRIu64 " (%s): its parent chain "
			    "does not reach the root", a->ino,
			    path_of(f, ns, a->ino, path, sizeof(path)));
		}
		if (a->nlink > 0 && (dir ? a->nlink != 2 + ns->subdirs[i]
					 : a->nlink != 1))
			ERR(f, "F17 inode %" PRIu64 " (%s): nlink %" PRIu32
			    ", expected %zu", a->ino,
			    path_of(f, ns, a->ino, path, sizeof(path)), a->nlink,
			    dir ? 2 + ns->subdirs[i] : (size_t)1);
		if (dir && a->stream_id)
			ERR(f, "F18 inode %" PRIu64 ": a directory with stream "
			    "%" PRIu64, a->ino, a->stream_id);
		else if (!dir && st && st->corrupt)
			;	/* F20 reports it */
		else if (!dir && (!st || st->ino != a->ino ||
				  st->unlinked != (a->nlink == 0)))
			ERR(f, "F18 inode %" PRIu64 " (%s): stream %" PRIu64 " %s",
			    a->ino, path_of(f, ns, a->ino, path, sizeof(path)),
			    a->stream_id, !st ? "does not exist" :
			    st->ino != a->ino ? "belongs to another inode" :
			    "disagrees about being unlinked");
	}
	for (size_t s = 0; s < f->nstreams; s++) {
		ssize_t i = inode_at(f, f->streams[s].ino);

		if (f->streams[s].corrupt)
			continue;	/* F20 */
		if (i < 0 || f->inodes[i].stream_id != f->streams[s].id)
			ERR(f, "F18 stream %" PRIu64 ": its inode %" PRIu64 " %s",
			    f->streams[s].id, f->streams[s].ino, i < 0 ?
			    "does not exist" : "names another stream");
	}
}

int nrs_fsck_check(struct nrs_fsck *f)
{
	struct ns ns = { 0 };
	int err = f->oom;

	f->chains_intact = true;
	if (err)
		return err;
	if (f->ninodes > 1)
		qsort(f->inodes, f->ninodes, sizeof(*f->inodes), cmp_ino);
	if (f->nstreams > 1)
		qsort(f->streams, f->nstreams, sizeof(*f->streams), cmp_sid);
	if (f->nrecs > 1)
		qsort(f->recs, f->nrecs, sizeof(*f->recs), cmp_lsn);
	if (f->nobjs > 1)
		qsort(f->objs, f->nobjs, sizeof(*f->objs), nrs_recover_obj_cmp);
	ns.names = calloc(f->ninodes + 1, sizeof(*ns.names));
	ns.name = malloc((f->ninodes + 1) * sizeof(*ns.name));
	ns.subdirs = calloc(f->ninodes + 1, sizeof(*ns.subdirs));
	if (!ns.names || !ns.name || !ns.subdirs) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < f->ninodes; i++)
		ns.name[i] = -1;
	check_wal(f);
	check_recs(f);
	check_sequences(f);
	check_dirents(f, &ns);
	check_inodes(f, &ns);
	err = check_streams(f, &ns) ?: check_pending(f, &ns) ?:
	      check_objects(f, &ns);
out:
	free(ns.names);
	free(ns.name);
	free(ns.subdirs);
	return err;
}
