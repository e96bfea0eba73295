/*
 * sqlite.c - the metadata store of meta.h on SQLite (one host), and its
 * plumbing: SQLite result codes into errnos, the statement helpers, the
 * transaction of every call, the space check, and the operations table
 * (nrs_sq_ops) that nrs_meta_open hands out.
 *
 * The store is cut by concern, every file with the rules it keeps:
 *   sqlite_priv.h     the handle, the statement ids, helpers shared
 *   sqlite_open.c     open and close, the cached statements, CK4, DM1
 *   sqlite_schema.c   the SCHEMA and its upgrades, MT3
 *   sqlite_crc.c      the ROW CHECKSUM of streams rows, CK1-CK3
 *   sqlite_ns.c       the namespace: inodes and dirents, MT1 MT2 MT4 MT6 MT7
 *   sqlite_xattr.c    user xattrs, MS2
 *   sqlite_settings.c profile and retention, MT5 MT8
 *   sqlite_stream.c   stream rows: start, epoch, the head CAS (publish)
 *   sqlite_obj.c      object generations (their states: ../objgen.c)
 *   sqlite_tools.c    what nereusfs-fsck reads and repairs
 *   sqlite_ckpt.c     the store as bytes for checkpoints, SN1 SN2
 *   sqlite_log.c      the change log (session changesets), ML1 ML2
 * Only these files include sqlite3.h.
 *
 * DURABILITY
 *
 * The journal is WAL and the connection default is synchronous=NORMAL: a
 * commit is appended to the -wal file without fsync.  A power loss may drop
 * the newest commits, never corrupt the database.  That is what head
 * publication wants: nrs_meta_publish runs after every group commit, when
 * the appended bytes and their commit intents are already durable in the
 * local WAL (or the bucket); if power loss drops a published head, recovery
 * (DESIGN.md 6) re-publishes the intents that continue the last surviving
 * head.  An fsync here would put a second sync on every append's path for
 * nothing.  Everything else (namespace, attributes, settings, xattrs, start,
 * forget) has no other durable copy, so those transactions, and a
 * publish asked to be durable, run under synchronous=FULL, which syncs the
 * -wal at COMMIT before the call returns (frames of earlier unsynced
 * commits are synced with it).  The level cannot change inside a
 * transaction, so it is switched before BEGIN and back after the end.
 * Every call is one transaction: a crash leaves all of it or none of it.
 *
 *
 * LOCKING
 *
 * m->lock (error checking) is held for the whole of every call, callbacks
 * included: a callback must not call back into the store.  A callback
 * stops a listing by returning non-zero; a negative value is then the
 * listing's result.  If it does, that
 * call fails with -EDEADLK instead of hanging; collect what you need and act
 * after the listing returns.  The connection is opened NOMUTEX because the
 * lock already serialises it.  tx_begin() takes the lock and opens the
 * call's transaction, tx_end() commits or rolls back and releases it.  All
 * statements are prepared once at open (the hot ones: getattr, lookup,
 * publish, xattr get), bound and stepped under the lock and reset after
 * use; an error path also resets any statement left busy.
 *
 *
 * SPACE
 *
 * SQLite needs free space for every transaction, deletes included (its
 * -wal file takes the changed pages first).  So growth stops before the
 * disk is full, and what frees space can always run:
 *
 *   MS1 A call that grows the store -- a new inode and name (mkdir,
 *      create) or a user.* xattr set that adds bytes to its inode -- first
 *      checks that the file system keeps m->reserve bytes free after it
 *      (nrs_fs_room, the one check the local WAL's WA5 uses too; the core
 *      sets twice wal_reserve, so a user filling the disk through
 *      metadata stops while appends can still use wal_reserve's worth);
 *      else -ENOSPC before anything is written.  Removals and in-place
 *      changes (unlink, rmdir, removexattr, a set that adds no bytes,
 *      trim, epoch, settings, setattr, rename, publish) are never refused
 *      for space: they may use the reserve, so space can always be freed
 *      through the mount, also after a remount on a full disk.
 *
 * ERRORS
 *
 * SQLITE_FULL -ENOSPC, SQLITE_IOERR_* -EIO, CORRUPT and NOTADB -EUCLEAN,
 * BUSY and LOCKED -EBUSY, NOMEM -ENOMEM, CONSTRAINT -EEXIST, CANTOPEN the
 * errno of the failed open, anything else -EIO; every one is logged with
 * sqlite3_errmsg().  Creating a name no entry may have (empty, ".", "..",
 * with '/') is -EINVAL; looking one up, removing or renaming it is -ENOENT;
 * over NRS_NAME_MAX bytes is -ENAMETOOLONG either way.  An empty or over
 * long xattr name is -ERANGE, as on Linux.  Bind calls are not checked:
 * with a valid index and SQLITE_STATIC data they cannot fail.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meta/sqlite_priv.h"
#include "util/fileio.h"
#include "util/log.h"

static int sql_errno(struct sqlite_meta *m, int rc)
{
	int e;

	switch (rc & 0xff) {
	case SQLITE_FULL:	return -ENOSPC;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:	return -EUCLEAN;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:	return -EBUSY;
	case SQLITE_NOMEM:	return -ENOMEM;
	case SQLITE_CONSTRAINT:	return -EEXIST;
	case SQLITE_READONLY:	return -EROFS;
	case SQLITE_PERM:	return -EACCES;
	case SQLITE_CANTOPEN:
		e = sqlite3_system_errno(m->db);
		return e > 0 ? -e : -EIO;
	default:		return -EIO;	/* SQLITE_IOERR_* and the rest */
	}
}

int nrs_sq_sql_fail(struct sqlite_meta *m, int rc, const char *what)
{
	nrs_err("meta: %.80s: %s (sqlite %d)", what, sqlite3_errmsg(m->db), rc);
	return sql_errno(m, rc);
}

/* Step a statement that returns no row, then reset it (after logging: a
 * reset may replace the error message). */
int nrs_sq_run(struct sqlite_meta *m, sqlite3_stmt *s)
{
	int rc = sqlite3_step(s), ret = 0;

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		ret = sql_fail(m, rc, sqlite3_sql(s));
	sqlite3_reset(s);
	return ret;
}

/* Step a query: 1 with s on a row (the caller reads it, then resets s),
 * 0 when there is none, or -errno; s is reset unless the result is 1. */
int nrs_sq_row(struct sqlite_meta *m, sqlite3_stmt *s)
{
	int rc = sqlite3_step(s), ret = 0;

	if (rc == SQLITE_ROW)
		return 1;
	if (rc != SQLITE_DONE)
		ret = sql_fail(m, rc, sqlite3_sql(s));
	sqlite3_reset(s);
	return ret;
}

/*
 * The row loop of every listing: step s and hand each row to
 * each(m, s, ctx) until the rows run out or each returns non-zero.  s is
 * reset in every case (a statement prepared for the call may then be
 * finalized).  0 when the rows ran out or each stopped the loop with a
 * positive value (MC8 of meta.h), else each's negative value or the
 * -errno of the step.
 */
int nrs_sq_each_row(struct sqlite_meta *m, sqlite3_stmt *s,
		    int (*each)(struct sqlite_meta *m, sqlite3_stmt *s,
				void *ctx),
		    void *ctx)
{
	int ret;

	while ((ret = row(m, s)) > 0) {
		ret = each(m, s, ctx);
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return ret < 0 ? ret : 0;
}

int nrs_sq_exec(struct sqlite_meta *m, const char *sql)
{
	int rc = sqlite3_exec(m->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sql_fail(m, rc, sql);
}

/* Not a cached statement: this pragma acts when it is prepared, and it is
 * refused inside a transaction. */
int nrs_sq_set_sync(struct sqlite_meta *m, bool full)
{
	int ret = exec(m, full ? "PRAGMA synchronous=FULL" :
		       "PRAGMA synchronous=NORMAL");

	if (!ret)
		m->synced = full;
	return ret;
}

/* Take the lock and open the call's transaction; undone by tx_end. */
int nrs_sq_tx_begin(struct sqlite_meta *m, enum tx_kind kind)
{
	int ret = -pthread_mutex_lock(&m->lock);

	if (ret == -EDEADLK)
		nrs_err("meta: a callback called back into the store");
	if (ret)
		return ret;
	m->tx = kind;
	if (kind == TX_DURABLE || kind == TX_LOGGED)
		ret = set_sync(m, true);
	if (!ret && kind != TX_NONE)
		ret = run(m, m->st[kind == TX_READ ? ST_BEGIN_READ : ST_BEGIN]);
	if (!ret && kind == TX_LOGGED)
		ret = nrs_sq_log_begin(m);
	if (ret) {
		if (!sqlite3_get_autocommit(m->db))
			run(m, m->st[ST_ROLLBACK]);
		if (m->synced)
			set_sync(m, false);
		pthread_mutex_unlock(&m->lock);
	}
	return ret;
}

/* Commit when ret is 0, else roll back; release the lock.  Returns ret or
 * the commit's error. */
int nrs_sq_tx_end(struct sqlite_meta *m, int ret)
{
	sqlite3_stmt *s = NULL;
	void *change = NULL;
	size_t len = 0;
	uint64_t seq = 0;

	if (ret == 0 && m->sess)
		ret = nrs_sq_log_end(m, &change, &len, &seq);
	nrs_sq_log_drop(m);
	if (ret == 0 && m->tx != TX_NONE)
		ret = run(m, m->st[ST_COMMIT]);
	if (ret == 0 && change && m->log_fn)
		m->log_fn(m->log_ctx, seq, change, len);	/* ML1 */
	nrs_sq_log_free(change);
	if (ret) {
		while ((s = sqlite3_next_stmt(m->db, s)) != NULL)
			if (sqlite3_stmt_busy(s))
				sqlite3_reset(s);
		/* SQLite may have rolled back already (IOERR, FULL, ...). */
		if (!sqlite3_get_autocommit(m->db))
			run(m, m->st[ST_ROLLBACK]);
	}
	if (m->synced && set_sync(m, false))
		nrs_warn("meta: left at synchronous=FULL (slower, still correct)");
	pthread_mutex_unlock(&m->lock);
	return ret;
}

/* One value of a statement run once at open: an integer, or text. */
int nrs_sq_query1(struct sqlite_meta *m, const char *sql, int64_t *v,
		  char *text, size_t size)
{
	sqlite3_stmt *s;
	int rc, ret = 0;

	rc = sqlite3_prepare_v2(m->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(m, rc, sql);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW)
		ret = sql_fail(m, rc, sql);
	else if (v)
		*v = sqlite3_column_int64(s, 0);
	else
		snprintf(text, size, "%s", sqlite3_column_text(s, 0) ?
			 (const char *)sqlite3_column_text(s, 0) : "");
	sqlite3_finalize(s);
	return ret;
}

/*
 * MS1: room for a transaction that adds about need bytes (plus the pages
 * SQLite rewrites around them).  Under m->lock.
 */
#define GROWTH_PAGES	(2 * 4096)
int nrs_sq_room(struct sqlite_meta *m, uint64_t need)
{
	if (m->space_fd < 0)
		return 0;
	return nrs_fs_room(m->space_fd, m->reserve, need + GROWTH_PAGES);
}

int nrs_sq_set_reserve(struct nrs_meta *base, uint64_t reserve)
{
	struct sqlite_meta *m = sqm(base);
	int fd = -1;

	if (reserve > 0 && m->space_fd < 0) {
		fd = open(m->path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
	}
	pthread_mutex_lock(&m->lock);
	if (fd >= 0)
		m->space_fd = fd;
	m->reserve = reserve;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

const struct nrs_meta_ops nrs_sq_ops = {
	.close = nrs_sq_close,
	.set_reserve = nrs_sq_set_reserve,
	.getattr = nrs_sq_getattr,
	.lookup = nrs_sq_lookup,
	.mkdir = nrs_sq_mkdir,
	.create = nrs_sq_create,
	.unlink = nrs_sq_unlink,
	.rmdir = nrs_sq_rmdir,
	.rename = nrs_sq_rename,
	.setattr = nrs_sq_setattr,
	.readdir = nrs_sq_readdir,
	.xattr_get = nrs_sq_xattr_get,
	.xattr_set = nrs_sq_xattr_set,
	.xattr_remove = nrs_sq_xattr_remove,
	.xattr_list = nrs_sq_xattr_list,
	.get_profile = nrs_sq_get_profile,
	.effective_profile = nrs_sq_effective_profile,
	.set_profile = nrs_sq_set_profile,
	.get_retention = nrs_sq_get_retention,
	.set_retention = nrs_sq_set_retention,
	.chain_steps = nrs_sq_chain_steps,
	.retention_is_set = nrs_sq_retention_is_set,
	.set_start = nrs_sq_set_start,
	.stream_get = nrs_sq_stream_get,
	.stream_foreach = nrs_sq_stream_foreach,
	.publish = nrs_sq_publish,
	.forget_inode = nrs_sq_forget_inode,
	.unlinked_foreach = nrs_sq_unlinked_foreach,
	.obj_prepare = nrs_sq_obj_prepare,
	.obj_publish = nrs_sq_obj_publish,
	.obj_prepare_n = nrs_sq_obj_prepare_n,
	.obj_publish_n = nrs_sq_obj_publish_n,
	.obj_replace = nrs_sq_obj_replace,
	.obj_set_state = nrs_sq_obj_set_state,
	.obj_delete = nrs_sq_obj_delete,
	.obj_foreach = nrs_sq_obj_foreach,
	.obj_foreach_state = nrs_sq_obj_foreach_state,
	.counts = nrs_sq_counts,
	.integrity_check = nrs_sq_integrity_check,
	.stream_seq_raise = nrs_sq_stream_seq_raise,
	.sequences = nrs_sq_sequences,
	.inode_foreach = nrs_sq_inode_foreach,
	.dirent_foreach = nrs_sq_dirent_foreach,
	.snapshot = nrs_sq_snapshot,
	.log_set = nrs_sq_log_set,
	.log_seq = nrs_sq_log_seq,
	.log_apply = nrs_sq_log_apply,
};
