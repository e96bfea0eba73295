/*
 * sqlite_ns.c - the namespace of the SQLite store: inodes and dirents
 * (getattr, lookup, mkdir, create, unlink, rmdir, rename, setattr,
 * readdir), the afterlife of unlinked streams and the inode counts.
 *
 * INVARIANTS (MT3 is in sqlite_schema.c, MT5 and MT8 in sqlite_settings.c)
 *
 *   MT1 Every name is one dirents row.  A directory's nlink is 2 + its
 *      subdirectories; a named stream's nlink is 1.
 *   MT2 An inode with nlink 0 is a stream without a name: parent 0, its
 *      streams row unlinked = 1.  It stays until nrs_meta_forget_inode (open
 *      handles, or a crash while they were open).  Directories have no such
 *      afterlife: rmdir deletes the row at once.
 *
 *   MT4 Every linked inode's parent chain ends at the root: rename refuses to
 *      move a directory into its own subtree.  Walks stop after MAX_DEPTH
 *      steps and report -EUCLEAN (only corruption makes a cycle).
 *
 *   MT6 A name is 1..NRS_NAME_MAX bytes, no '/' or NUL, not "." or "..";
 *      any other byte (newline, invalid UTF-8) is allowed.  Names are BLOBs
 *      compared bytewise.
 *
 *   MT7 A cookie belongs to its dirents row: rename moves the row and keeps
 *      it, so a listing resumed from any cookie stays correct.  (A listing
 *      of the new directory already past that cookie misses the entry;
 *      POSIX leaves renames during a readdir unspecified.)
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE	(1 << 0)
#endif

void nrs_sq_col_attr(sqlite3_stmt *s, struct nrs_attr *a)
{
	a->ino = col_u64(s, 0);
	a->parent = col_u64(s, 1);
	a->mode = (uint32_t)col_u64(s, 2);
	a->uid = (uint32_t)col_u64(s, 3);
	a->gid = (uint32_t)col_u64(s, 4);
	a->nlink = (uint32_t)col_u64(s, 5);
	a->atime_ns = sqlite3_column_int64(s, 6);
	a->mtime_ns = sqlite3_column_int64(s, 7);
	a->ctime_ns = sqlite3_column_int64(s, 8);
	a->stream_id = col_u64(s, 9);
}

/* MT6: 0, -EINVAL (a name no entry may have) or -ENAMETOOLONG. */
static int name_check(const char *name, size_t *len)
{
	size_t n = strnlen(name, NRS_NAME_MAX + 1);

	if (n > NRS_NAME_MAX)
		return -ENAMETOOLONG;
	if (n == 0 || memchr(name, '/', n) || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0)
		return -EINVAL;
	*len = n;
	return 0;
}

/* For a name that should exist: one that cannot is simply not there. */
static int name_check_existing(const char *name, size_t *len)
{
	int ret = name_check(name, len);

	return ret == -EINVAL ? -ENOENT : ret;
}

int nrs_sq_attr_get(struct sqlite_meta *m, uint64_t ino, struct nrs_attr *a)
{
	sqlite3_stmt *s = BIND(m, ST_GETATTR, ino);
	int ret = row(m, s);

	if (ret <= 0)
		return ret ? ret : -ENOENT;
	col_attr(s, a);
	sqlite3_reset(s);
	return 0;
}

/* 0 if ino is a directory, -ENOTDIR if a stream, -ENOENT if nothing. */
static int dir_check(struct sqlite_meta *m, uint64_t ino)
{
	struct nrs_attr a = { 0 };
	int ret = attr_get(m, ino, &a);

	return ret ? ret : S_ISDIR(a.mode) ? 0 : -ENOTDIR;
}

/* Entry name of directory parent: 0, -ENOENT or -errno.  a and cookie may
 * be NULL. */
static int dirent_find(struct sqlite_meta *m, uint64_t parent, const char *name,
		       size_t len, struct nrs_attr *a, uint64_t *cookie)
{
	sqlite3_stmt *s = BIND(m, ST_LOOKUP, parent);
	int ret;

	bind_bytes(s, 2, name, len);
	ret = row(m, s);
	if (ret <= 0)
		return ret ? ret : -ENOENT;
	if (a)
		col_attr(s, a);
	if (cookie)
		*cookie = col_u64(s, NR_ATTR_COLS);
	sqlite3_reset(s);
	return 0;
}

static int touch(struct sqlite_meta *m, uint64_t ino, int64_t now_ns)
{
	return run(m, BIND(m, ST_INODE_TOUCH, ino, now_ns));
}

/* MT2: the name (dirent cookie) of stream a goes; the inode stays. */
static int unlink_stream(struct sqlite_meta *m, const struct nrs_attr *a,
			 uint64_t cookie, int64_t now_ns)
{
	int ret = run(m, BIND(m, ST_DIRENT_DELETE, cookie));

	memo_drop(m, a->ino);		/* MT8: its parent is 0 from now on */
	if (!ret)
		ret = run(m, BIND(m, ST_INODE_UNLINK, a->ino, now_ns));
	if (!ret)
		ret = run(m, BIND(m, ST_STREAM_UNLINK, a->stream_id));
	return ret;
}

/* Delete the directory a (name cookie) if empty, with its xattrs. */
static int drop_dir(struct sqlite_meta *m, const struct nrs_attr *a,
		    uint64_t cookie)
{
	sqlite3_stmt *s = BIND(m, ST_DIR_HAS_ENTRY, a->ino);
	int ret = row(m, s);

	if (ret > 0) {
		sqlite3_reset(s);
		return -ENOTEMPTY;
	}
	if (!ret)
		ret = run(m, BIND(m, ST_DIRENT_DELETE, cookie));
	if (!ret)
		ret = run(m, BIND(m, ST_XATTR_DROP, a->ino));
	if (!ret)
		ret = run(m, BIND(m, ST_INODE_DELETE, a->ino));
	return ret;
}

int nrs_sq_getattr(struct nrs_meta *base, uint64_t ino, struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_NONE);

	if (!ret)
		ret = tx_end(m, attr_get(m, ino, &a));
	if (!ret)
		*out = a;
	return ret;
}

int nrs_sq_lookup(struct nrs_meta *base, uint64_t parent, const char *name,
		  struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	size_t len;
	int ret = name_check_existing(name, &len) ?: tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	ret = dirent_find(m, parent, name, len, &a, NULL);
	if (ret == -ENOENT)		/* not there, or no directory */
		ret = dir_check(m, parent) ?: -ENOENT;
	ret = tx_end(m, ret);
	if (!ret)
		*out = a;
	return ret;
}

static int do_make(struct sqlite_meta *m, uint64_t parent, const char *name,
		   bool dir, uint32_t mode, uint32_t uid, uint32_t gid,
		   int64_t now_ns, struct nrs_attr *a, struct nrs_stream_row *sr)
{
	struct settings st;
	sqlite3_stmt *s;
	int profile = NRS_PROFILE_UNSET, ret;
	size_t len;

	ret = name_check(name, &len) ?: dir_check(m, parent);
	if (ret)
		return ret;
	ret = dirent_find(m, parent, name, len, NULL, NULL);
	if (ret != -ENOENT)
		return ret ? ret : -EEXIST;
	if (!dir) {				/* MT5 */
		ret = walk_up(m, parent, WALK_PROFILE, 0, &st);
		if (ret < 0)
			return ret;
		profile = ret ? st.profile : NRS_PROFILE_LOCAL_WAL;
	}
	memset(a, 0, sizeof(*a));
	a->parent = parent;
	a->mode = (dir ? S_IFDIR : S_IFREG) | (mode & 07777);
	a->uid = uid;
	a->gid = gid;
	a->nlink = dir ? 2 : 1;
	a->atime_ns = a->mtime_ns = a->ctime_ns = now_ns;
	s = BIND(m, ST_INODE_INSERT, parent, dir ? KIND_DIR : KIND_STREAM,
		 a->mode, uid, gid, a->nlink, now_ns, profile);
	if (dir)
		sqlite3_bind_null(s, 8);	/* MT5: no own profile */
	ret = run(m, s);
	if (ret)
		return ret;
	a->ino = (uint64_t)sqlite3_last_insert_rowid(m->db);
	if (!dir) {
		ret = run(m, BIND(m, ST_STREAM_INSERT, a->ino, now_ns, profile));
		if (ret)
			return ret;
		a->stream_id = (uint64_t)sqlite3_last_insert_rowid(m->db);
		ret = run(m, BIND(m, ST_STREAM_SEAL, a->stream_id)) ?:	/* CK1 */
			run(m, BIND(m, ST_INODE_SET_STREAM, a->ino,
				    a->stream_id));
		memset(sr, 0, sizeof(*sr));
		sr->id = a->stream_id;
		sr->ino = a->ino;
		sr->mtime_ns = now_ns;
		sr->profile = profile;
	}
	s = BIND(m, ST_DIRENT_INSERT, parent, 0, a->ino);	/* ?2: name */
	bind_bytes(s, 2, name, len);
	if (!ret)
		ret = run(m, s);
	if (!ret && dir)			/* MT1 */
		ret = run(m, BIND(m, ST_INODE_NLINK, parent, 1));
	return ret ?: touch(m, parent, now_ns);
}

static int make_tx(struct sqlite_meta *m, uint64_t parent, const char *name,
		   bool dir, uint32_t mode, uint32_t uid, uint32_t gid,
		   int64_t now_ns, struct nrs_attr *out,
		   struct nrs_stream_row *srow)
{
	struct nrs_attr a = { 0 };
	struct nrs_stream_row sr = { 0 };
	int ret = tx_begin(m, TX_LOGGED);

	if (!ret)			/* MS1: a new inode, a new name */
		ret = tx_end(m, room(m, strnlen(name, NRS_NAME_MAX + 1)) ?:
			     do_make(m, parent, name, dir, mode, uid, gid,
				     now_ns, &a, &sr));
	if (!ret && out)
		*out = a;
	if (!ret && srow)
		*srow = sr;
	return ret;
}

int nrs_sq_mkdir(struct nrs_meta *base, uint64_t parent, const char *name,
		 uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		 struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);

	return make_tx(m, parent, name, true, mode, uid, gid, now_ns, out, NULL);
}

int nrs_sq_create(struct nrs_meta *base, uint64_t parent, const char *name,
		  uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		  struct nrs_attr *out, struct nrs_stream_row *srow)
{
	struct sqlite_meta *m = sqm(base);

	return make_tx(m, parent, name, false, mode, uid, gid, now_ns, out,
		       srow);
}

/* An existing entry, for unlink, rmdir and rename. */
static int find_entry(struct sqlite_meta *m, uint64_t parent, const char *name,
		      struct nrs_attr *a, uint64_t *cookie)
{
	size_t len;

	return name_check_existing(name, &len) ?: dir_check(m, parent) ?:
		dirent_find(m, parent, name, len, a, cookie);
}

int nrs_sq_unlink(struct nrs_meta *base, uint64_t parent, const char *name,
		  int64_t now_ns, struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	uint64_t cookie;
	int ret = tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = find_entry(m, parent, name, &a, &cookie);
	if (!ret && S_ISDIR(a.mode))
		ret = -EISDIR;
	if (!ret)
		ret = unlink_stream(m, &a, cookie, now_ns) ?:
			touch(m, parent, now_ns) ?: attr_get(m, a.ino, &a);
	ret = tx_end(m, ret);
	if (!ret && out)
		*out = a;
	return ret;
}

int nrs_sq_rmdir(struct nrs_meta *base, uint64_t parent, const char *name,
		 int64_t now_ns)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	uint64_t cookie;
	int ret = tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = find_entry(m, parent, name, &a, &cookie);
	if (!ret && !S_ISDIR(a.mode))
		ret = -ENOTDIR;
	else if (!ret && a.ino == NRS_ROOT_INO)	/* only if corrupt */
		ret = -EBUSY;
	if (!ret)				/* MT1 */
		ret = drop_dir(m, &a, cookie) ?:
			run(m, BIND(m, ST_INODE_NLINK, parent, -1)) ?:
			touch(m, parent, now_ns);
	return tx_end(m, ret);
}

/* Checks in the order Linux makes them; the entry being replaced goes
 * first, then the name moves (MT7) and the link counts follow (MT1). */
static int do_rename(struct sqlite_meta *m, uint64_t parent, const char *name,
		     uint64_t newparent, const char *newname,
		     unsigned int flags, int64_t now_ns, uint64_t *replaced)
{
	struct nrs_attr src, dst;
	struct settings st;
	uint64_t cookie, dcookie;
	sqlite3_stmt *s;
	size_t newlen;
	bool src_dir;
	int ret;

	*replaced = 0;
	if (flags & ~(unsigned int)RENAME_NOREPLACE)
		return -EINVAL;		/* RENAME_EXCHANGE, RENAME_WHITEOUT */
	ret = name_check(newname, &newlen) ?:
		find_entry(m, parent, name, &src, &cookie) ?:
		dir_check(m, newparent);
	if (ret)
		return ret;
	ret = dirent_find(m, newparent, newname, newlen, &dst, &dcookie);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	if (!ret && dst.ino == src.ino)
		return 0;
	src_dir = S_ISDIR(src.mode);
	if (!ret && src_dir != S_ISDIR(dst.mode))
		return src_dir ? -ENOTDIR : -EISDIR;
	if (src_dir) {			/* MT4 */
		int below = walk_up(m, newparent, WALK_INODE, src.ino, &st);

		if (below)
			return below > 0 ? -EINVAL : below;
	}
	if (!ret && src_dir) {
		ret = drop_dir(m, &dst, dcookie) ?:
			run(m, BIND(m, ST_INODE_NLINK, newparent, -1));
	} else if (!ret) {
		ret = unlink_stream(m, &dst, dcookie, now_ns);
		*replaced = dst.ino;
	} else {
		ret = 0;		/* nothing to replace */
	}
	if (ret)
		return ret;
	/* MT8: a subtree moves, or one stream */
	src_dir ? memo_drop_all(m) : memo_drop(m, src.ino);
	s = BIND(m, ST_DIRENT_MOVE, cookie, newparent);
	bind_bytes(s, 3, newname, newlen);
	ret = run(m, s) ?:
		run(m, BIND(m, ST_INODE_MOVE, src.ino, newparent, now_ns));
	if (!ret && src_dir && parent != newparent)
		ret = run(m, BIND(m, ST_INODE_NLINK, parent, -1)) ?:
			run(m, BIND(m, ST_INODE_NLINK, newparent, 1));
	if (!ret && newparent != parent)
		ret = touch(m, newparent, now_ns);
	return ret ?: touch(m, parent, now_ns);
}

int nrs_sq_rename(struct nrs_meta *base, uint64_t parent, const char *name,
		  uint64_t newparent, const char *newname, unsigned int flags,
		  int64_t now_ns, uint64_t *replaced)
{
	struct sqlite_meta *m = sqm(base);
	uint64_t rep;
	int ret = tx_begin(m, TX_LOGGED);

	if (!ret)
		ret = tx_end(m, do_rename(m, parent, name, newparent, newname,
					  flags, now_ns, &rep));
	if (!ret && replaced)
		*replaced = rep;
	return ret;
}

int nrs_sq_setattr(struct nrs_meta *base, uint64_t ino,
		   const struct nrs_attr *in, int mask, int64_t now_ns,
		   struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = attr_get(m, ino, &a);
	if (!ret) {
		if (mask & NRS_SET_MODE)
			a.mode = (a.mode & S_IFMT) | (in->mode & 07777);
		if (mask & NRS_SET_KILLPRIV)
			a.mode = nrs_mode_killpriv(a.mode);
		if (mask & NRS_SET_UID)
			a.uid = in->uid;
		if (mask & NRS_SET_GID)
			a.gid = in->gid;
		if (mask & NRS_SET_ATIME)
			a.atime_ns = in->atime_ns;
		if (mask & NRS_SET_MTIME)
			a.mtime_ns = in->mtime_ns;
		a.ctime_ns = now_ns;
		ret = run(m, BIND(m, ST_INODE_SETATTR, ino, a.mode, a.uid,
				  a.gid, a.atime_ns, a.mtime_ns, a.ctime_ns));
		if (!ret && a.stream_id && (mask & NRS_SET_MTIME))
			ret = run(m, BIND(m, ST_STREAM_SET_MTIME, a.stream_id,
					  a.mtime_ns));
	}
	ret = tx_end(m, ret);
	if (!ret && out)
		*out = a;
	return ret;
}

struct readdir_ctx {
	uint64_t ino;
	nrs_meta_dirent_cb cb;
	void *ctx;
};

static int readdir_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct readdir_ctx *r = p;
	char name[NRS_NAME_MAX + 1];
	struct nrs_attr a = { 0 };
	size_t len = (size_t)sqlite3_column_bytes(s, NR_ATTR_COLS + 1);

	(void)m;
	if (len == 0 || len > NRS_NAME_MAX) {
		nrs_err("meta: directory %llu holds a name of %zu bytes",
			(unsigned long long)r->ino, len);
		return -EUCLEAN;
	}
	memcpy(name, sqlite3_column_blob(s, NR_ATTR_COLS + 1), len);
	name[len] = '\0';
	col_attr(s, &a);
	return r->cb(r->ctx, name, &a, col_u64(s, NR_ATTR_COLS));
}

/* Rows are read one at a time from the statement; nothing is buffered. */
int nrs_sq_readdir(struct nrs_meta *base, uint64_t ino, uint64_t after,
		   nrs_meta_dirent_cb cb, void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct readdir_ctx r = { ino, cb, ctx };
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	ret = dir_check(m, ino);
	if (ret || after >= INT64_MAX)	/* no cookie is that large */
		return tx_end(m, ret);
	return tx_end(m, each_row(m, BIND(m, ST_READDIR, ino, after),
				  readdir_row, &r));
}

int nrs_sq_forget_inode(struct nrs_meta *base, uint64_t ino)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = attr_get(m, ino, &a);
	if (!ret && a.nlink != 0)
		ret = -EBUSY;
	if (!ret)
		ret = run(m, BIND(m, ST_XATTR_DROP, ino));
	if (!ret && a.stream_id != 0)
		ret = run(m, BIND(m, ST_STREAM_DELETE, a.stream_id));
	if (!ret)
		ret = run(m, BIND(m, ST_INODE_DELETE, ino));
	memo_drop(m, ino);		/* MT8 */
	return tx_end(m, ret);
}

struct unlinked_ctx {
	int (*cb)(void *ctx, uint64_t ino);
	void *ctx;
};

static int unlinked_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct unlinked_ctx *u = p;

	(void)m;
	return u->cb(u->ctx, col_u64(s, 0));
}

int nrs_sq_unlinked_foreach(struct nrs_meta *base,
			    int (*cb)(void *ctx, uint64_t ino), void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct unlinked_ctx u = { cb, ctx };
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	return tx_end(m, each_row(m, m->st[ST_UNLINKED_LIST], unlinked_row,
				  &u));
}

/* n[kind] is the count of that kind. */
static int counts_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	uint64_t *n = p;
	int kind = sqlite3_column_int(s, 0);

	(void)m;
	if (kind == KIND_DIR || kind == KIND_STREAM)
		n[kind] = col_u64(s, 1);
	return 0;
}

int nrs_sq_counts(struct nrs_meta *base, uint64_t *dirs, uint64_t *streams)
{
	struct sqlite_meta *m = sqm(base);
	uint64_t n[3] = { 0, 0, 0 };
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	ret = tx_end(m, each_row(m, m->st[ST_COUNTS], counts_row, n));
	if (!ret) {
		*dirs = n[KIND_DIR];
		*streams = n[KIND_STREAM];
	}
	return ret;
}
