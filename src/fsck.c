/*
 * fsck.c - what nereusfs-fsck checks, over the metadata rows and WAL records
 * the tool gathered (fsck.h).  Pure: no I/O, so every check is unit-tested
 * on hand-made rows (tests/unit/test_fsck.c).
 *
 * The truth is the one recovery uses (recovery.c R1-R6, DESIGN.md 1 and 6):
 * published heads, and the commit chain that leads back from each head
 * through the WAL.  Every finding is one line "Fn where: what", where names
 * a stream (id and path), an inode, or a WAL segment file and byte range.
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
 *       start; a chain that ends (prev_lsn 0) ends at offset 0.  Else a
 *       committed range has no copy: reads of it fail (recovery R5).
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
 *   F20 Every stream row passes its checksum (meta_sqlite.c C3).  A row
 *       that fails is reported with the path of the inode that names the
 *       stream, and nothing else of it is checked: its head, version,
 *       start, epoch, inode and unlinked flag are unknown (the daemon
 *       keeps the stream offline).  No repair: only an operator can tell
 *       what the row held.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsck.h"

#define PATH_DEPTH_MAX	4096	/* deeper, or a loop: F16 */
#define PATH_SHOW_MAX	32	/* components a message shows */

void nrs_fsck_init(struct nrs_fsck *f, nrs_fsck_report_cb report, void *ctx)
{
	memset(f, 0, sizeof(*f));
	f->report = report;
	f->ctx = ctx;
}

void nrs_fsck_free(struct nrs_fsck *f)
{
	free(f->inodes);
	free(f->dirents);
	free(f->streams);
	free(f->recs);
	free(f->damage);
	nrs_fsck_init(f, f->report, f->ctx);
}

/* Room for one more element of size sz in *v (n used, *cap allocated). */
static int grow(void **v, size_t n, size_t *cap, size_t sz)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap ? 2 * *cap : 64;
	p = realloc(*v, ncap * sz);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = ncap;
	return 0;
}

#define PUSH(f, arr, n, cap, val) \
	(grow((void **)&(f)->arr, (f)->n, &(f)->cap, sizeof(*(f)->arr)) ?: \
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

/* F9-F12 for one linked stream; who is "stream N (/path)". */
static void check_chain(struct nrs_fsck *f, const struct nrs_stream_row *st,
			const char *who)
{
	uint64_t want = st->head, lsn = st->last_lsn, appends = 0;
	uint64_t later_epoch = UINT64_MAX;
	char sf[40];

	while (want > st->start && lsn != 0) {
		const struct nrs_wal_rec_info *ri = rec_of(f, lsn);
		const struct nrs_walrec *r = ri ? &ri->rec : NULL;

		if (!r) {
			ERR(f, "F9 %s: commit chain broken: LSN %" PRIu64 " is"
			    " not in the WAL: committed bytes [%" PRIu64 ", %"
			    PRIu64 ") cannot be reached", who, lsn, st->start, want);
			f->chains_intact = false;
			return;
		}
		seg_file(sf, ri->pos.seg);
		if (r->stream_id != st->id || r->base + r->len != want) {
			ERR(f, "F9 %s: commit chain broken: LSN %" PRIu64 " (%s"
			    " at %" PRIu64 ") holds stream %" PRIu64 " bytes [%"
			    PRIu64 ", %" PRIu64 "), but the %s is at %" PRIu64,
			    who, lsn, sf, ri->pos.off, r->stream_id, r->base,
			    r->base + r->len, want == st->head ? "head" :
			    "next commit", want);
			f->chains_intact = false;
			return;
		}
		if (!ri->data_ok) {
			ERR(f, "F10 %s: committed bytes [%" PRIu64 ", %" PRIu64
			    ") fail their CRC32C in %s at %" PRIu64 " (LSN %"
			    PRIu64 "): reads of them fail", who, r->base, want,
			    sf, ri->pos.off, lsn);
			f->chains_intact = false;
		}
		if (r->epoch > st->epoch)
			ERR(f, "F11 %s: LSN %" PRIu64 " was written under epoch %"
			    PRIu64 ", above the stream's epoch %" PRIu64, who,
			    lsn, r->epoch, st->epoch);
		else if (r->epoch > later_epoch)
			ERR(f, "F11 %s: LSN %" PRIu64 " has epoch %" PRIu64 ", "
			    "above the epoch %" PRIu64 " of the commit after it",
			    who, lsn, r->epoch, later_epoch);
		later_epoch = r->epoch;
		appends += r->n_appends;
		want = r->base;
		lsn = r->prev_lsn;
	}
	if (want > st->start) {
		ERR(f, "F9 %s: commit chain ends at offset %" PRIu64 ", above "
		    "the start %" PRIu64 ": committed bytes [%" PRIu64 ", %"
		    PRIu64 ") have no record", who, want, st->start, st->start,
		    want);
		f->chains_intact = false;
	} else if (want == 0 ? st->version != appends : st->version < appends) {
		ERR(f, "F12 %s: version %" PRIu64 ", but the commit chain holds"
		    " %" PRIu64 " appends", who, st->version, appends);
	}
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

		if (!c || c->corrupt || c->unlinked || ri->rec.len == 0 ||
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

/* F20: the path of the inode that names stream id, or "?". */
static const char *stream_path(const struct nrs_fsck *f, const struct ns *ns,
			       uint64_t id, char *buf, size_t size)
{
	for (size_t i = 0; i < f->ninodes; i++)
		if (f->inodes[i].stream_id == id && S_ISREG(f->inodes[i].mode))
			return path_of(f, ns, f->inodes[i].ino, buf, size);
	return "?";
}

static void check_streams(struct nrs_fsck *f, const struct ns *ns)
{
	char path[512], who[600];

	for (size_t s = 0; s < f->nstreams; s++) {
		const struct nrs_stream_row *st = &f->streams[s];
		bool ok = true;

		if (st->corrupt) {
			ERR(f, "F20 stream %" PRIu64 " (%s): its row in meta.db "
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
		if (ok)
			check_chain(f, st, who);
	}
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
	check_dirents(f, &ns);
	check_inodes(f, &ns);
	check_streams(f, &ns);
	err = check_pending(f, &ns);
out:
	free(ns.names);
	free(ns.name);
	free(ns.subdirs);
	return err;
}
