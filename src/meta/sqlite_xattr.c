/*
 * sqlite_xattr.c - durable user.* xattrs in the SQLite store (table
 * xattrs: one row per name, the value a BLOB).  MS1, the reserve that
 * every growth checks, is in sqlite.c.
 *
 *   MS2 Per inode at most NRS_XATTR_COUNT_MAX user.* names and
 *      NRS_XATTR_BYTES_MAX bytes of names plus values (meta.h): a set
 *      that adds a name or bytes past either is -ENOSPC; one that adds
 *      nothing always passes (an inode over the bounds can shrink).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "meta/sqlite_priv.h"

/* As Linux: an empty or too long name is -ERANGE. */
static int xname_check(const char *name, size_t *len)
{
	size_t n = strnlen(name, NRS_XATTR_NAME_MAX + 1);

	if (n == 0 || n > NRS_XATTR_NAME_MAX)
		return -ERANGE;
	*len = n;
	return 0;
}

/* -ENOENT when inode ino does not exist, else err. */
static int or_enoent(struct sqlite_meta *m, uint64_t ino, int err)
{
	struct nrs_attr a = { 0 };

	return attr_get(m, ino, &a) ?: err;
}

/* Bind (ino, name) to a cached xattr statement. */
static sqlite3_stmt *bind_xattr(struct sqlite_meta *m, enum stmt_id id,
				uint64_t ino, const char *name, size_t nlen)
{
	sqlite3_stmt *s = BIND(m, id, ino);

	bind_bytes(s, 2, name, nlen);
	return s;
}

ssize_t nrs_sq_xattr_get(struct nrs_meta *base, uint64_t ino, const char *name,
			 void *buf, size_t size)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s;
	size_t nlen, len = 0;
	int ret = xname_check(name, &nlen) ?: tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	s = bind_xattr(m, ST_XATTR_GET, ino, name, nlen);
	ret = row(m, s);
	if (ret == 0)
		ret = or_enoent(m, ino, -ENODATA);
	if (ret > 0) {
		len = (size_t)sqlite3_column_bytes(s, 0);
		if (size > 0 && len > size)
			ret = -ERANGE;
		else if (size > 0 && len > 0)
			memcpy(buf, sqlite3_column_blob(s, 0), len);
		sqlite3_reset(s);
	}
	ret = tx_end(m, ret > 0 ? 0 : ret);
	return ret ? ret : (ssize_t)len;
}

/*
 * The flags against what exists, then MS2 and MS1 for what the set adds.
 * Under m->lock, in the set's transaction.
 */
static int xattr_room(struct sqlite_meta *m, uint64_t ino, const char *name,
		      size_t nlen, size_t size, int flags)
{
	sqlite3_stmt *s = bind_xattr(m, ST_XATTR_USAGE, ino, name, nlen);
	uint64_t count, total, old, now;
	bool exists;
	int ret = row(m, s);

	if (ret <= 0)
		return ret ? ret : -EIO;
	count = col_u64(s, 0);
	total = col_u64(s, 1);
	exists = col_u64(s, 2) > 0;
	old = col_u64(s, 3);
	sqlite3_reset(s);
	if (flags == XATTR_CREATE && exists)
		return -EEXIST;
	if (flags == XATTR_REPLACE && !exists)
		return -ENODATA;
	if (old > total)
		return -EUCLEAN;	/* one snapshot: cannot */
	now = total - old + nlen + size;	/* both bounded: no wrap */
	if (!exists && count >= NRS_XATTR_COUNT_MAX)
		return -ENOSPC;		/* MS2 */
	if (now <= total)
		return 0;		/* adds nothing: always (MS1, MS2) */
	if (now > NRS_XATTR_BYTES_MAX)
		return -ENOSPC;		/* MS2 */
	return room(m, now - total);	/* MS1 */
}

int nrs_sq_xattr_set(struct nrs_meta *base, uint64_t ino, const char *name,
		     const void *value, size_t size, int flags)
{
	struct sqlite_meta *m = sqm(base);
	enum stmt_id id = flags == XATTR_CREATE ? ST_XATTR_INSERT :
		flags == XATTR_REPLACE ? ST_XATTR_UPDATE : ST_XATTR_UPSERT;
	sqlite3_stmt *s;
	size_t nlen;
	int ret;

	if (flags != 0 && flags != XATTR_CREATE && flags != XATTR_REPLACE)
		return -EINVAL;
	ret = xname_check(name, &nlen);
	if (!ret && size > NRS_XATTR_VALUE_MAX)
		ret = -E2BIG;
	if (!ret)
		ret = tx_begin(m, TX_LOGGED);
	if (ret)
		return ret;
	ret = or_enoent(m, ino, 0) ?: xattr_room(m, ino, name, nlen, size, flags);
	if (!ret) {
		s = bind_xattr(m, id, ino, name, nlen);
		bind_bytes(s, 3, value, size);
		ret = run(m, s);
	}
	if (!ret && sqlite3_changes(m->db) != 1)
		ret = flags == XATTR_CREATE ? -EEXIST : -ENODATA;
	return tx_end(m, ret);
}

int nrs_sq_xattr_remove(struct nrs_meta *base, uint64_t ino, const char *name)
{
	struct sqlite_meta *m = sqm(base);
	size_t nlen;
	int ret = xname_check(name, &nlen) ?: tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = run(m, bind_xattr(m, ST_XATTR_REMOVE, ino, name, nlen));
	if (!ret && sqlite3_changes(m->db) != 1)
		ret = or_enoent(m, ino, -ENODATA);
	return tx_end(m, ret);
}

struct xlist {
	char *buf;
	size_t off, total;
};

static int xlist_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	struct xlist *x = p;
	size_t len = (size_t)sqlite3_column_bytes(s, 0);

	(void)m;
	if (x->off + len + 1 > x->total)	/* same snapshot: cannot */
		return -EUCLEAN;
	memcpy(x->buf + x->off, sqlite3_column_blob(s, 0), len);
	x->buf[x->off + len] = '\0';
	x->off += len + 1;
	return 0;
}

/* The total length first, so that buf is written only when all fits. */
static ssize_t do_xattr_list(struct sqlite_meta *m, uint64_t ino, char *buf,
			     size_t size)
{
	sqlite3_stmt *s = BIND(m, ST_XATTR_TOTAL, ino);
	struct xlist x = { buf, 0, 0 };
	int ret = or_enoent(m, ino, 0) ?: row(m, s);

	if (ret <= 0)
		return ret ? ret : -EIO;
	x.total = col_u64(s, 0);
	sqlite3_reset(s);
	if (size == 0 || x.total > size)
		return size == 0 ? (ssize_t)x.total : -ERANGE;
	ret = each_row(m, BIND(m, ST_XATTR_LIST, ino), xlist_row, &x);
	return ret ? ret : (ssize_t)x.off;
}

ssize_t nrs_sq_xattr_list(struct nrs_meta *base, uint64_t ino, char *buf,
			  size_t size)
{
	struct sqlite_meta *m = sqm(base);
	ssize_t len = 0;
	int ret = tx_begin(m, TX_READ);

	if (!ret) {
		len = do_xattr_list(m, ino, buf, size);
		ret = tx_end(m, len < 0 ? (int)len : 0);
	}
	return ret ? ret : len;
}
