/*
 * fsck.c - what nereusfs-fsck checks, over the metadata rows and WAL records
 * the tool gathered (fsck.h).  No I/O but the look-ups, reads and listing
 * of objects through the store the caller lends (F21, F23-F26), so every
 * check is unit-tested on hand-made rows or a data directory built with the
 * real modules (tests/unit/test_fsck.c).
 *
 * The truth is the one recovery uses (recovery.c RC1-RC6, DESIGN.md 1 and 6):
 * published heads, the committed object generations, and the commit chain
 * that leads back from each head through the WAL down to where the objects
 * end (recovery.h: the same rules, shared).  Every finding is one line
 * "Fn where: what", where names a stream (id and path), an inode, a WAL
 * segment file and byte range, or an object (generation, range, key).
 *
 * FILES, by what each check reads (fsck_priv.h is what they share):
 *
 *   fsck.c         the rows the tool gathers (nrs_fsck_add_*), the report,
 *                  and nrs_fsck_check, which sorts the rows and runs the
 *                  checks of the other three in turn
 *   fsck_stream.c  the WAL and every stream row: F3-F13, F20, F27-F29
 *   fsck_obj.c     every objects row, and the store: F21-F26, F32
 *   fsck_adopt.c   the same for the generations adopted in place (a row
 *                  with seg >= 1, objects/w/ in the store): F20, F21, F25,
 *                  F26 of write once
 *   fsck_ns.c      the namespace, the sequences and the change log:
 *                  F14-F19, F30, F31
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
 *       fails is damaged (wal_local_scan.c WS2-WS4).
 *   F5  The last segment has no torn tail and is not torn at creation: a
 *       crash artefact that the next mount (or --repair) cuts (WS1, WS5).
 *   F6  An LSN names one commit intent: copies of a record agree.
 *   F7  A stream's start <= head.
 *   F8  head > 0 requires last_lsn > 0 and 1 <= version <= head (versions
 *       count appends, each at least one byte); head 0 requires version 0.
 *   F9  The commit chain: walking back from last_lsn by prev_lsn, every
 *       record is in the WAL, belongs to the stream and ends where the
 *       next one begins (the newest at the head), until it reaches the
 *       floor max(start, materialized) -- below it the objects hold the
 *       bytes and the WAL segments may be gone (recovery RC5, F20); a chain
 *       that ends (prev_lsn 0) ends at offset 0.  Else a committed range
 *       has no copy: reads of it fail, and the finding names exactly the
 *       range recovery RC5b cannot rebuild from the floor upwards (or
 *       cannot tell, when two records continue the chain at one base).
 *   F10 Every record of the chain passes its payload CRCs (DESIGN.md I6).
 *   F11 Epochs along the chain never decrease and never exceed the
 *       stream's epoch (a fenced writer cannot publish).
 *   F12 version == the appends of the chain when it reaches offset 0, and
 *       >= them when earlier records were trimmed away.
 *   F13 Records past a head that continue it exactly (recovery RC3) are
 *       "pending": the next mount publishes them.  Not an error.  A
 *       fence (a record of no bytes, recovery RC9) that continues it with
 *       an epoch above the stream's is pending too: the next mount
 *       publishes its epoch (head and version stay).
 *   F14 The root (inode 1) exists, is a directory, is its own parent and
 *       has no name.
 *   F15 Every dirent has a valid name (sqlite_ns.c MT6), its parent is an
 *       existing directory, its inode exists, is linked and records that
 *       parent; an inode has one name (MT1: no hard links).
 *   F16 Every linked inode but the root has a name, and its parent chain
 *       reaches the root (MT4).
 *   F17 A directory's nlink is 2 + its subdirectories; a named stream's 1.
 *   F18 Inodes and streams agree: mode is a directory or a regular file;
 *       a directory has no stream; a stream inode's stream row exists,
 *       names it back and is marked unlinked exactly when nlink is 0; every
 *       stream row belongs to such an inode.
 *   F19 No inode has nlink 0: one left by a crash (MT2) is forgotten by the
 *       next mount (or --repair); a directory never has nlink 0.
 *   F20 Committed object generations (meta.h), taken per stream as
 *       recovery RC5 takes them (recovery.h): each row is possible (a
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
 *       caller lends a store (not --no-objects).  An adopted generation
 *       (seg >= 1) is one WAL record in the file objects/w/<seg>, checked
 *       as a WAL record (fsck_adopt.c F21).
 *   F22 Prepared rows are pending upload intents whose objects (if stored)
 *       and rows the next mount deletes (materializer.c MZ6), not an error;
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
 *       than the grace period ago, else pending; a w/<seg> file, by
 *       fsck_adopt.c's F26 and F25 for adopted files.  A bucket is not listed:
 *       unreferenced objects in S3 are found only through their rows.
 *   F27 Every stream row passes its checksum (sqlite_crc.c CK3).  A row
 *       that fails is reported with the path of the inode that names the
 *       stream, and nothing else of it is checked: its head, version,
 *       start, epoch, inode and unlinked flag are unknown (the daemon
 *       keeps the stream offline).  No repair: only an operator can tell
 *       what the row held.
 *   F28 Every stream row's id, head and last LSN are in range (recovery.h
 *       RD1: an id in [1, 2^63), a head and a last LSN below 2^63).  A row
 *       out of range is damage the daemon keeps offline, as it does a row
 *       that fails F7 or F8; nothing else of it is checked.
 *   F30 The AUTOINCREMENT sequences (sqlite_schema.c MT3): sqlite_sequence
 *       holds an integer for inodes and streams, below INT64_MAX (there
 *       SQLite refuses every new row: no inode or stream can be created),
 *       and at least every id its table holds, and the streams one every
 *       stream id an objects row holds (SQLite never lets it fall below
 *       an id it issued; one below would give a new stream the id of an
 *       old one, whose object rows it would then take for its own).
 *   F29 Every WAL record's LSN is at most NRS_WALREC_LSN_MAX and its end
 *       at most NRS_HEAD_MAX (recovery.h RD2).  Another is damage, an orphan
 *       the daemon ignores: never pending (F13), never a link of a chain.
 *   F31 The change log (meta.h, THE CHANGE LOG): no META record of the
 *       WAL carries a change number above the store's last logged one (a
 *       change commits before its record is written, sqlite_log.c ML1:
 *       one above means the database lost changes the bucket holds), and
 *       every META record's payload passes its CRCs (a recovery from the
 *       bucket that needs a damaged one stops, recovery_meta.c RM1).
 *   F32 No WAL object of the object WAL is stored below the floor its
 *       state file records (wal_object_gc.c OW7 moves the floor, then
 *       deletes what is under it): one still there is a DELETE that
 *       failed or a crash between the two, which no scan reads.  The
 *       next mount deletes those its gc record owes (wal_object_gc.c
 *       OWG3); one a damaged record named is an orphan nothing will
 *       delete.  A warning (the exit status is kept: no byte anyone
 *       needs is wrong or missing), with the count and the keys (the
 *       first 16, escaped), to delete by hand once a mount has run.
 *       Found by listing the embedded store (as F26; a bucket is not
 *       listed, which F32 says with -v).  The markers and seals of runs
 *       (wal_object_seal.c) are kept by design and are not reported;
 *       WAL objects at or above the floor are F3-F6's, and neither is
 *       F26's.
 */#include "config.h"

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
#include "fsck/fsck_priv.h"
#include "stream/recovery.h"
#include "util/grow.h"
#include "util/parse.h"
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

	if (ri->rec.kind == NRS_WALREC_META) {	/* walrec.c WV4 */
		f->meta_recs++;
		if (!ri->data_ok && f->meta_damaged++ == 0)	/* F31 */
			f->meta_damaged_pos = ri->pos;
		if (ri->data_ok && ri->rec.base > f->meta_seq_max) {
			f->meta_seq_max = ri->rec.base;
			f->meta_seq_max_pos = ri->pos;
		}
		return 0;
	}
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
	else if (sev == NRS_FSCK_WARNING)
		f->warnings++;
	if (f->report)
		f->report(f->ctx, sev, line);
}

/* ---- sorting and paths ------------------------------------------------ */

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

/* "/a/b" for inode ino, from its names; "?" where the chain breaks,
 * "..." where it is too long to show. */
const char *nrs_fsck_path_of(const struct nrs_fsck *f, const struct ns *ns,
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
	nrs_fsck_check_wal(f);
	nrs_fsck_check_recs(f);
	nrs_fsck_check_sequences(f);
	nrs_fsck_check_change_log(f);
	nrs_fsck_check_dirents(f, &ns);
	nrs_fsck_check_inodes(f, &ns);
	err = nrs_fsck_check_streams(f, &ns) ?:
	      nrs_fsck_check_pending(f, &ns) ?:
	      nrs_fsck_check_objects(f, &ns);
out:
	free(ns.names);
	free(ns.name);
	free(ns.subdirs);
	return err;
}
