/*
 * sqlite_open.c - opening and closing the SQLite store: the connection
 * settings, the read-only open of the offline tools, the structural check
 * (CK4), the private mode of the database files (DM1 of fileio.h), and the
 * cached statements, all prepared once at open (their SQL is here).
 *
 * This rule belongs with the ROW CHECKSUM rules of sqlite_crc.c (CK1-CK3):
 *
 *   CK4 Inode, dirent and xattr rows have no checksum: a flipped byte there
 *      may change a mode, owner, time or name unseen.  Structural damage
 *      (pages, b-trees, record headers) is caught by PRAGMA quick_check at
 *      every read-write open, which refuses the open with -EUCLEAN
 *      (nereusfs-fsck runs the full integrity_check).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

static const char *const stmt_sql[ST_NR] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_BEGIN_READ] = "BEGIN",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_GETATTR] = "SELECT " ATTR_COLS " FROM inodes i WHERE i.ino = ?1",
	[ST_LOOKUP] = "SELECT " ATTR_COLS ", d.cookie FROM dirents d"
		" JOIN inodes i ON i.ino = d.ino"
		" WHERE d.parent = ?1 AND d.name = ?2",
	[ST_SETTINGS] = "SELECT parent, kind, stream_id, profile, ret_bytes,"
		" ret_ms FROM inodes WHERE ino = ?1",
	[ST_INODE_INSERT] = "INSERT INTO inodes(parent, kind, mode, uid, gid,"
		" nlink, atime_ns, mtime_ns, ctime_ns, stream_id, profile)"
		" VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?7, 0, ?8)",
	[ST_INODE_SET_STREAM] = "UPDATE inodes SET stream_id = ?2 WHERE ino = ?1",
	[ST_INODE_TOUCH] = "UPDATE inodes SET mtime_ns = ?2, ctime_ns = ?2"
		" WHERE ino = ?1",
	[ST_INODE_NLINK] = "UPDATE inodes SET nlink = nlink + ?2 WHERE ino = ?1",
	[ST_INODE_UNLINK] = "UPDATE inodes SET nlink = 0, parent = 0,"
		" ctime_ns = ?2 WHERE ino = ?1",
	[ST_INODE_MOVE] = "UPDATE inodes SET parent = ?2, ctime_ns = ?3"
		" WHERE ino = ?1",
	[ST_INODE_SETATTR] = "UPDATE inodes SET mode = ?2, uid = ?3, gid = ?4,"
		" atime_ns = ?5, mtime_ns = ?6, ctime_ns = ?7 WHERE ino = ?1",
	[ST_INODE_DELETE] = "DELETE FROM inodes WHERE ino = ?1",
	[ST_SET_PROFILE] = "UPDATE inodes SET profile = ?2 WHERE ino = ?1",
	[ST_SET_RET_BYTES] = "UPDATE inodes SET ret_bytes = ?2 WHERE ino = ?1",
	[ST_SET_RET_MS] = "UPDATE inodes SET ret_ms = ?2 WHERE ino = ?1",
	[ST_DIRENT_INSERT] = "INSERT INTO dirents(parent, name, ino)"
		" VALUES(?1, ?2, ?3)",
	[ST_DIRENT_DELETE] = "DELETE FROM dirents WHERE cookie = ?1",
	[ST_DIRENT_MOVE] = "UPDATE dirents SET parent = ?2, name = ?3"
		" WHERE cookie = ?1",
	[ST_DIR_HAS_ENTRY] = "SELECT 1 FROM dirents WHERE parent = ?1 LIMIT 1",
	[ST_READDIR] = "SELECT " ATTR_COLS ", d.cookie, d.name FROM dirents d"
		" JOIN inodes i ON i.ino = d.ino"
		" WHERE d.parent = ?1 AND d.cookie > ?2 ORDER BY d.cookie",
	[ST_STREAM_INSERT] = "INSERT INTO streams(ino, head, version, start,"
		" epoch, last_lsn, mtime_ns, profile, unlinked, crc)"
		" VALUES(?1, 0, 0, 0, 0, 0, ?2, ?3, 0, 0)",
	[ST_STREAM_SEAL] = "UPDATE streams SET crc = " ROW_CRC_NOW
		" WHERE id = ?1",
	[ST_STREAM_GET] = "SELECT " STREAM_COLS " FROM streams WHERE id = ?1",
	[ST_STREAM_UNLINK] = "UPDATE streams SET unlinked = 1, crc = CASE"
		" WHEN crc = " ROW_CRC_NOW " THEN " ROW_CRC("head", "version",
		"start", "epoch", "last_lsn", "profile", "1") " ELSE crc END"
		" WHERE id = ?1",
	[ST_STREAM_DELETE] = "DELETE FROM streams WHERE id = ?1",
	[ST_STREAM_SET_PROFILE] = "UPDATE streams SET profile = ?2, crc = "
		ROW_CRC("head", "version", "start", "epoch", "last_lsn", "?2",
		"unlinked") " WHERE id = ?1" ROW_INTACT,
	[ST_STREAM_SET_START] = "UPDATE streams SET start = ?2, crc = "
		ROW_CRC("head", "version", "?2", "epoch", "last_lsn", "profile",
		"unlinked") " WHERE id = ?1" ROW_INTACT,
	[ST_STREAM_LIST] = "SELECT " STREAM_COLS " FROM streams ORDER BY id",
	[ST_PUBLISH] = "UPDATE streams SET head = ?2, version = ?3, epoch = ?4,"
		" last_lsn = ?5, mtime_ns = ?6, crc = " ROW_CRC("?2", "?3",
		"start", "?4", "?5", "profile", "unlinked")
		" WHERE id = ?1 AND version = ?7" ROW_INTACT,
	[ST_STREAM_SET_MTIME] = "UPDATE streams SET mtime_ns = ?2 WHERE id = ?1",
	[ST_XATTR_GET] = "SELECT value FROM xattrs WHERE ino = ?1 AND name = ?2",
	[ST_XATTR_INSERT] = "INSERT INTO xattrs(ino, name, value)"
		" VALUES(?1, ?2, ?3) ON CONFLICT DO NOTHING",
	[ST_XATTR_UPDATE] = "UPDATE xattrs SET value = ?3"
		" WHERE ino = ?1 AND name = ?2",
	[ST_XATTR_UPSERT] = "INSERT INTO xattrs(ino, name, value)"
		" VALUES(?1, ?2, ?3) ON CONFLICT(ino, name)"
		" DO UPDATE SET value = excluded.value",
	[ST_XATTR_REMOVE] = "DELETE FROM xattrs WHERE ino = ?1 AND name = ?2",
	[ST_XATTR_TOTAL] = "SELECT coalesce(sum(length(name) + 1), 0)"
		" FROM xattrs WHERE ino = ?1",
	[ST_XATTR_USAGE] = "SELECT count(*),"
		" coalesce(sum(length(name) + length(value)), 0),"
		" count(CASE WHEN name = ?2 THEN 1 END),"
		" coalesce(sum(CASE WHEN name = ?2"
		" THEN length(name) + length(value) END), 0)"
		" FROM xattrs WHERE ino = ?1",
	[ST_XATTR_LIST] = "SELECT name FROM xattrs WHERE ino = ?1 ORDER BY name",
	[ST_XATTR_DROP] = "DELETE FROM xattrs WHERE ino = ?1",
	[ST_UNLINKED_LIST] = "SELECT ino FROM inodes WHERE nlink = 0 ORDER BY ino",
	[ST_COUNTS] = "SELECT kind, count(*) FROM inodes WHERE nlink > 0"
		" GROUP BY kind",
	[ST_INODE_LIST] = "SELECT " ATTR_COLS " FROM inodes i ORDER BY i.ino",
	[ST_DIRENT_LIST] = "SELECT parent, name, ino FROM dirents"
		" ORDER BY cookie",
	[ST_OBJ_INSERT] = "INSERT INTO objects(stream_id, start, end, length,"
		" sha256, state, ctime_ns, mtime_ns, seg, off)"
		" VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
	[ST_OBJ_STATE] = "UPDATE objects SET state = ?3, mtime_ns = ?4"
		" WHERE gen = ?1 AND state = ?2",
	[ST_OBJ_PUBLISH] = "UPDATE objects SET state = ?2, sha256 = ?3"
		" WHERE gen = ?1 AND state = ?4",
	[ST_OBJ_DELETE] = "DELETE FROM objects WHERE gen = ?1",
	[ST_OBJ_LIST] = "SELECT " OBJ_COLS " FROM objects ORDER BY gen",
	[ST_OBJ_LIST_STATE] = "SELECT " OBJ_COLS " FROM objects"
		" WHERE state = ?1 ORDER BY gen",
	[ST_OBJ_LIST_STREAM] = "SELECT " OBJ_COLS " FROM objects"
		" WHERE stream_id = ?1 ORDER BY gen",
};

static int configure(struct sqlite_meta *m)
{
	char mode[16];
	int ret;

	sqlite3_extended_result_codes(m->db, 1);
	sqlite3_busy_timeout(m->db, BUSY_TIMEOUT_MS);
	/* One daemon owns the database (it also holds DIR/lock): exclusive
	 * locking saves the file-lock calls SQLite makes per transaction
	 * (measured: publish 37 -> 27 us, getattr 4.2 -> 1.7 us) and needs
	 * no shared-memory index.  Offline tools open it once unmounted. */
	ret = exec(m, "PRAGMA locking_mode=EXCLUSIVE");
	if (ret)
		return ret;
	/* Every head publication commits the pages it changed to the -wal,
	 * each checksummed and copied whole: with 4 KiB pages that was most
	 * of the daemon's instructions per append.  1 KiB pages cut it (a
	 * streams row is under 100 bytes).  It applies only to a database
	 * not written yet: one made with other pages keeps them. */
	ret = exec(m, "PRAGMA page_size=1024");
	if (ret)
		return ret;
	ret = query1(m, "PRAGMA journal_mode=WAL", NULL, mode, sizeof(mode));
	if (ret)
		return ret;
	if (strcmp(mode, "wal") != 0)
		nrs_warn("meta: journal mode is %s, not wal: every commit syncs",
			 mode);
	/* Links are kept by this file (the root is its own parent and an
	 * unlinked inode outlives its dirent), so no foreign keys. */
	return exec(m, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF");
}

/*
 * Opening without writing a byte.  SQLite's read-only mode cannot read a
 * WAL-mode database without a -shm file (it creates one, and an empty
 * -wal) unless it locks nothing: so when the -wal is missing or empty the
 * file is opened immutable (the caller holds DIR/lock: nobody writes it);
 * when it holds commits not yet checkpointed (a crash), immutable would
 * ignore them, so the file is opened for writing but with exclusive
 * locking (no -shm), query_only, and no checkpoint on close.
 */
static int open_readonly(struct sqlite_meta *m, const char *path)
{
	char wal[4096], uri[3 * 4096 + 32], *u = uri;
	struct stat st;
	int rc;

	if (snprintf(wal, sizeof(wal), "%s-wal", path) >= (int)sizeof(wal))
		return -ENAMETOOLONG;
	if (access(path, F_OK) < 0)
		return -errno;
	if (stat(wal, &st) == 0 && st.st_size > 0) {
		rc = sqlite3_open_v2(path, &m->db, SQLITE_OPEN_READWRITE |
				     SQLITE_OPEN_NOMUTEX, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_db_config(m->db,
				SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
		return rc == SQLITE_OK ? exec(m, "PRAGMA query_only=1") :
			m->db ? sql_fail(m, rc, path) : -ENOMEM;
	}
	u += sprintf(u, "file:");
	for (const char *p = path; *p; p++)	/* URI-escape %, ? and # */
		u += sprintf(u, strchr("%?#", *p) ? "%%%02X" : "%c",
			     (unsigned char)*p);
	sprintf(u, "?immutable=1");
	rc = sqlite3_open_v2(uri, &m->db, SQLITE_OPEN_READONLY |
			     SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
	return rc == SQLITE_OK ? 0 : m->db ? sql_fail(m, rc, path) : -ENOMEM;
}

/* A read-only connection: the schema must already be ours. */
static int configure_readonly(struct sqlite_meta *m)
{
	int64_t version = 0, tables = 0;
	int ret;

	sqlite3_extended_result_codes(m->db, 1);
	sqlite3_busy_timeout(m->db, BUSY_TIMEOUT_MS);
	ret = exec(m, "PRAGMA locking_mode=EXCLUSIVE") ?:
		query1(m, "PRAGMA user_version", &version, NULL, 0) ?:
		query1(m, "SELECT count(*) FROM sqlite_master", &tables, NULL, 0);
	if (ret)
		return ret;
	if (version == 0) {
		nrs_err("meta: not a nereusfs database (%s)",
			tables ? "tables, no version" : "empty");
		return -EUCLEAN;
	}
	if (version < SCHEMA_VERSION) {
		nrs_err("meta: %s has schema version %lld, older than %d: a"
			" read-only open cannot upgrade it; mount it once with"
			" this nereusfs (the upgrade is one transaction)", m->path,
			(long long)version, SCHEMA_VERSION);
		return -EPROTO;
	}
	if (version != SCHEMA_VERSION) {
		nrs_err("meta: schema version %lld is not %d: written by"
			" another nereusfs version", (long long)version,
			SCHEMA_VERSION);
		return -EPROTO;
	}
	return 0;
}

/*
 * CK4: PRAGMA quick_check, at a read-write open: structural damage
 * refuses the open (-EUCLEAN), each problem logged.  It reads the whole
 * file, once per mount.
 */
static int quick_check_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const char *text = (const char *)sqlite3_column_text(s, 0);
	int *problems = p;

	if (text && strcmp(text, "ok") == 0)
		return 0;
	nrs_err("meta: %s: quick_check: %s", m->path,
		text ? text : "(no text)");
	(*problems)++;
	return 0;
}

static int quick_check(struct sqlite_meta *m)
{
	static const char sql[] = "PRAGMA quick_check(10)";
	sqlite3_stmt *s;
	int rc, ret, problems = 0;

	rc = sqlite3_prepare_v2(m->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(m, rc, sql);
	/* a failed step is logged; SQLITE_CORRUPT is -EUCLEAN */
	ret = each_row(m, s, quick_check_row, &problems);
	sqlite3_finalize(s);
	if (problems)
		ret = -EUCLEAN;
	if (ret == -EUCLEAN)
		nrs_err("meta: %s is damaged (SQLite's quick_check): refusing"
			" to use it; nereusfs-fsck(8) lists what it finds",
			m->path);
	return ret;
}

/*
 * DM1 of fileio.h: the database file is created 0600 here, before SQLite
 * opens it (SQLite would create it 0644 less the umask), and SQLite
 * creates its -wal and -shm with the mode of the database file.  A
 * database an older version left readable by others loses those bits,
 * and so do the -wal and -shm beside it.
 */
static int create_private(const char *path)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	char p[4096];

	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		struct stat st;
		int fd, err = 0;

		if (snprintf(p, sizeof(p), "%s%s", path, sfx[i]) >=
		    (int)sizeof(p))
			return -ENAMETOOLONG;
		fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW |
			  (i == 0 ? O_CREAT : 0), 0600);
		if (fd < 0 && i > 0 && errno == ENOENT)
			continue;	/* SQLite makes it from the database's */
		if (fd < 0)
			return -errno;
		if (fstat(fd, &st) < 0)
			err = -errno;
		else if ((st.st_mode & 077) &&
			 fchmod(fd, st.st_mode & 0700) < 0)
			err = -errno;
		close(fd);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Before SQLite's first use in the process (every connection is opened
 * here or later by sqlite_ckpt.c): no memory statistics, which nothing
 * reads and which take a global mutex around every allocation SQLite
 * makes -- a few per statement, so several per head published.  If SQLite
 * was initialized already (a test that opened a file itself), it refuses,
 * harmlessly.
 */
static void sqlite_setup(void)
{
	(void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int meta_open(const char *path, bool readonly, struct nrs_meta **out)
{
	static pthread_once_t setup = PTHREAD_ONCE_INIT;
	pthread_mutexattr_t ma;
	struct sqlite_meta *m;
	int i, rc, ret;

	pthread_once(&setup, sqlite_setup);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->space_fd = -1;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
	ret = -pthread_mutex_init(&m->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	if (ret)
		goto out_free;
	m->ret_gen = 1;			/* MT8: memo entries of gen 0 are dropped */
	m->path = strdup(path);
	if (!m->path) {
		ret = -ENOMEM;
		goto out_destroy_lock;
	}
	if (readonly) {
		ret = open_readonly(m, path);
		if (ret)
			goto out_close_db;
	} else {
		ret = create_private(path);	/* DM1 */
		if (ret) {
			nrs_err("meta: cannot create %s: %s", path,
				strerror(-ret));
			goto out_close_db;
		}
		rc = sqlite3_open_v2(path, &m->db, SQLITE_OPEN_READWRITE |
				     SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
				     NULL);
		if (rc != SQLITE_OK) {
			ret = m->db ? sql_fail(m, rc, path) : -ENOMEM;
			goto out_close_db; /* closes the handle of a failed open */
		}
	}
	rc = sqlite3_create_function_v2(m->db, "nrs_stream_crc",
					(int)CRC_FIELDS,
					SQLITE_UTF8 | SQLITE_DETERMINISTIC |
					SQLITE_DIRECTONLY, NULL, nrs_sq_sql_stream_crc,
					NULL, NULL, NULL);	/* CK1 */
	if (rc != SQLITE_OK)
		ret = sql_fail(m, rc, "nrs_stream_crc");
	else
		ret = readonly ? configure_readonly(m) :
			configure(m) ?: quick_check(m) ?: schema_open(m);
	for (i = 0; !ret && i < ST_NR; i++) {
		rc = sqlite3_prepare_v3(m->db, stmt_sql[i], -1,
					SQLITE_PREPARE_PERSISTENT, &m->st[i],
					NULL);
		if (rc != SQLITE_OK)
			ret = sql_fail(m, rc, stmt_sql[i]);
	}
	if (ret)
		goto out_finalize;
	m->base.ops = &nrs_sq_ops;
	*out = &m->base;
	return 0;

out_finalize:
	for (i = 0; i < ST_NR; i++)
		sqlite3_finalize(m->st[i]);
out_close_db:
	sqlite3_close(m->db);
out_destroy_lock:
	pthread_mutex_destroy(&m->lock);	/* initialised before the db */
out_free:
	free(m->path);
	free(m);
	return ret;
}

int nrs_meta_open(const char *path, struct nrs_meta **out)
{
	return meta_open(path, false, out);
}

int nrs_meta_open_readonly(const char *path, struct nrs_meta **out)
{
	return meta_open(path, true, out);
}

void nrs_sq_close(struct nrs_meta *base)
{
	struct sqlite_meta *m = sqm(base);
	int i, rc;

	for (i = 0; i < ST_NR; i++)
		sqlite3_finalize(m->st[i]);
	rc = sqlite3_close(m->db);
	if (rc != SQLITE_OK)
		nrs_err("meta: close: %s", sqlite3_errstr(rc));
	pthread_mutex_destroy(&m->lock);
	free(m->memo);
	if (m->space_fd >= 0)
		close(m->space_fd);
	free(m->path);
	free(m);
}
