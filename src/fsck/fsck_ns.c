/*
 * fsck_ns.c - nereusfs-fsck's checks of the namespace and of the
 * sequences (fsck.c lists them): the root, every dirent and inode and the
 * streams they name (F14-F19), and SQLite's AUTOINCREMENT sequences
 * (F30), and the change log against the WAL's META records (F31).
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

#define PATH_DEPTH_MAX	4096	/* deeper, or a loop: F16 */

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
		    "used (sqlite_schema.c MT3)", table, v, max_id, holder);
}

void nrs_fsck_check_sequences(struct nrs_fsck *f)
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

/* ---- F31: the change log ------------------------------------------------ */

/* META records are written by the object WAL only (core_metalog.c). */
void nrs_fsck_check_change_log(struct nrs_fsck *f)
{
	char key[NRS_OBJKEY_MAX];

	if (f->meta_damaged) {
		nrs_wal_object_key(key, f->meta_damaged_pos.seg);
		ERR(f, "F31 %s:%" PRIu64 ": a META record's payload fails its "
		    "CRCs (%" PRIu64 " such record%s): a recovery from the "
		    "bucket that needs the change stops there", key,
		    f->meta_damaged_pos.off, f->meta_damaged,
		    f->meta_damaged == 1 ? "" : "s");
	}
	if (f->have_log_seq && f->meta_seq_max > f->log_seq) {
		nrs_wal_object_key(key, f->meta_seq_max_pos.seg);
		ERR(f, "F31 %s:%" PRIu64 ": the META record of change %" PRIu64
		    ", but the database's change log ends at %" PRIu64 ": the "
		    "database lost changes the bucket holds (a change commits "
		    "before its record is written, sqlite_log.c ML1); a "
		    "recovery from the bucket brings them back", key,
		    f->meta_seq_max_pos.off, f->meta_seq_max, f->log_seq);
	}
}

/* ---- F14-F19: the namespace --------------------------------------------- */

/* MT6, on the name as stored. */
static bool name_is_valid(const struct nrs_fsck_dirent *d)
{
	return d->len >= 1 && d->len <= NRS_NAME_MAX &&
	       strlen(d->name) == d->len && !strchr(d->name, '/') &&
	       strcmp(d->name, ".") != 0 && strcmp(d->name, "..") != 0;
}

void nrs_fsck_check_dirents(struct nrs_fsck *f, struct ns *ns)
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

void nrs_fsck_check_inodes(struct nrs_fsck *f, const struct ns *ns)
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
			    nrs_fsck_path_of(f, ns, a->ino, path,
					     sizeof(path)));
		}
		if (a->nlink > 0 && (dir ? a->nlink != 2 + ns->subdirs[i]
					 : a->nlink != 1))
			ERR(f, "F17 inode %" PRIu64 " (%s): nlink %" PRIu32
			    ", expected %zu", a->ino,
			    nrs_fsck_path_of(f, ns, a->ino, path, sizeof(path)),
			    a->nlink, dir ? 2 + ns->subdirs[i] : (size_t)1);
		if (dir && a->stream_id)
			ERR(f, "F18 inode %" PRIu64 ": a directory with stream "
			    "%" PRIu64, a->ino, a->stream_id);
		else if (!dir && st && st->corrupt)
			;	/* F20 reports it */
		else if (!dir && (!st || st->ino != a->ino ||
				  st->unlinked != (a->nlink == 0)))
			ERR(f, "F18 inode %" PRIu64 " (%s): stream %" PRIu64 " %s",
			    a->ino,
			    nrs_fsck_path_of(f, ns, a->ino, path, sizeof(path)),
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
