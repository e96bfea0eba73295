/*
 * meta_sqlite.c - the metadata store of meta.h on SQLite: namespace, stream
 * heads, per-inode settings and user xattrs of one host, as the table
 * struct nrs_meta_ops (sqlite_ops, at the end) that nrs_meta_open fills
 * in.  This is the only file that includes sqlite3.h; SQLite result
 * codes become negative errnos here (sql_errno()).
 *
 * SCHEMA (PRAGMA user_version = 3)
 *
 *   inodes   ino INTEGER PRIMARY KEY AUTOINCREMENT
 *            parent      containing directory; the root's is itself (1);
 *                        0 once unlinked
 *            kind        1 directory, 2 stream (S_IFMT of mode agrees)
 *            mode uid gid nlink atime_ns mtime_ns ctime_ns
 *            stream_id   0 for a directory
 *            profile     enum nrs_profile, NULL = unset (directories only)
 *            ret_bytes, ret_ms   retention, NULL = unset (inherit)
 *   dirents  cookie INTEGER PRIMARY KEY AUTOINCREMENT, parent, name BLOB,
 *            ino; UNIQUE(parent, name); index (parent, cookie) for readdir
 *   streams  id INTEGER PRIMARY KEY AUTOINCREMENT, ino, head, version,
 *            start, epoch, last_lsn, mtime_ns, profile, unlinked (0/1),
 *            crc (the row checksum, below; schema 2)
 *   xattrs   (ino, name BLOB) PRIMARY KEY, value BLOB (may be empty)
 *   objects  gen INTEGER PRIMARY KEY AUTOINCREMENT (the generation),
 *            stream_id, start, end (the logical range it holds), length
 *            (object bytes), sha256 BLOB(32), state (enum nrs_obj_state),
 *            ctime_ns (the intent), mtime_ns (the last state change);
 *            indexes (stream_id, gen), (state, gen).  Schema 3.
 *
 * Unsigned 64-bit values are stored as the int64 with the same bits; SQL
 * only tests them for equality, C does every ordering comparison (the one
 * ordered column in SQL, cookie, stays far below 2^63).
 * A database with a user_version above ours was written by a newer nereusfs
 * and is refused with -EPROTO; one with user_version 0 that already has
 * tables is not ours and is refused with -EUCLEAN.  An older one is
 * upgraded by a read-write open, in the transaction that checks the
 * version (all or nothing); a read-only open refuses it with -EPROTO.
 *   1 -> 2  ALTER TABLE streams ADD COLUMN crc, then every row's crc is
 *           computed from the row as it is (schema 1 had no checksum, so
 *           damage done before the upgrade cannot be told apart).
 *   2 -> 3  CREATE TABLE objects and its indexes.
 *
 * ROW CHECKSUM (schema 2)
 *
 * SQLite has no page checksums: a flipped bit inside a record is a valid
 * record holding another value, and a head that silently moves loses or
 * invents committed bytes (I1, I4).  So every streams row carries
 *
 *   crc = CRC32C (crc32c.h) of 72 bytes: id, ino, head, version, start,
 *         epoch, last_lsn, profile, unlinked, in this order, each the
 *         stored integer as 8 bytes little-endian
 *
 * stored as an INTEGER in [0, 2^32).  mtime_ns is left out on purpose: a
 * wrong timestamp misleads no reader, and a row that fails its checksum
 * takes its whole stream offline.
 *
 *   C1 Every statement that changes a covered column sets crc in the same
 *      statement, from the new values, through the SQL function
 *      nrs_stream_crc() that each connection registers (stream_crc()).
 *      No trigger, view or default uses it, so the sqlite3 shell can still
 *      read and write the file.
 *   C2 Such a statement changes a row only if its stored crc matches the
 *      row as it is (WHERE ... AND crc = nrs_stream_crc(...)): a damaged
 *      row is never sealed with a checksum over its damage, the change
 *      fails -EUCLEAN.  The exception is unlink, which must succeed so the
 *      name can go: it marks the row unlinked and leaves a bad crc bad, so
 *      the row reads as damaged until nrs_meta_forget_inode deletes it.
 *   C3 Every read of a row recomputes the checksum; a mismatch, or a
 *      covered column or crc that is not an integer, is logged as an error
 *      naming the stream and this database file.  nrs_meta_stream_get
 *      then fails -EUCLEAN; nrs_meta_stream_foreach passes the row on
 *      marked corrupt (only its id is known), so that the caller can keep
 *      the other streams (core.c takes such a stream offline).
 *   C4 Inode, dirent and xattr rows have no checksum: a flipped byte there
 *      may change a mode, owner, time or name unseen.  Structural damage
 *      (pages, b-trees, record headers) is caught by PRAGMA quick_check at
 *      every read-write open, which refuses the open with -EUCLEAN
 *      (nereusfs-fsck runs the full integrity_check).
 *
 * INVARIANTS
 *
 *   M1 Every name is one dirents row.  A directory's nlink is 2 + its
 *      subdirectories; a named stream's nlink is 1.
 *   M2 An inode with nlink 0 is a stream without a name: parent 0, its
 *      streams row unlinked = 1.  It stays until nrs_meta_forget_inode (open
 *      handles, or a crash while they were open).  Directories have no such
 *      afterlife: rmdir deletes the row at once.
 *   M3 ino, cookie and stream id come from AUTOINCREMENT sequences and are
 *      never reused, even after their row is deleted.  sqlite_sequence is
 *      seeded at creation so the first stored inode is 16 (NRS_FIRST_INO)
 *      and the first cookie 3 ("." and ".." are 1 and 2); streams start at 1.
 *      A damaged (lowered) streams sequence could issue an old id again,
 *      and recovery would then hand the old stream's WAL records to the
 *      new one: at every mount recovery raises it above every id the WAL
 *      and the objects table name (nrs_meta_stream_seq_raise, RD4).
 *   M4 Every linked inode's parent chain ends at the root: rename refuses to
 *      move a directory into its own subtree.  Walks stop after MAX_DEPTH
 *      steps and report -EUCLEAN (only corruption makes a cycle).
 *   M5 A stream inode's profile is never NULL and equals streams.profile:
 *      the placement is fixed at creation from the nearest ancestor that has
 *      one.  Retention instead stays NULL and is looked up through the
 *      ancestors (M8), so a directory's policy reaches streams that
 *      already exist.
 *   M6 A name is 1..NRS_NAME_MAX bytes, no '/' or NUL, not "." or "..";
 *      any other byte (newline, invalid UTF-8) is allowed.  Names are BLOBs
 *      compared bytewise.
 *   M7 A cookie belongs to its dirents row: rename moves the row and keeps
 *      it, so a listing resumed from any cookie stays correct.  (A listing
 *      of the new directory already past that cookie misses the entry;
 *      POSIX leaves renames during a readdir unspecified.)
 *   M8 The effective retention of an inode (its own value, else its
 *      nearest ancestor's, M5) is memoised per inode in memory, each entry
 *      tagged with ret_gen.  ret_gen moves at every change that can change
 *      the value of a whole subtree: a retention set on a directory, a
 *      directory renamed.  A change that concerns one stream only (a
 *      retention set on it, its rename, unlink or forget) drops that
 *      stream's entry.  So a get when nothing changed reads no inode,
 *      whatever the depth (the retention pass asks for every stream every
 *      second: 40 streams 30,000 directories deep used to stall every
 *      append for a second); after a change, a get walks up only to the
 *      nearest memoised ancestor and memoises every inode on its way, so
 *      each directory is read once per change, not once per stream below
 *      it.  A walk holds m->lock for at most WALK_CHUNK inodes at a time;
 *      one that a change overtook while the lock was released (ret_epoch
 *      moved) returns what it found and memoises nothing.
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
 * epoch, forget) has no other durable copy, so those transactions, and a
 * publish asked to be durable, run under synchronous=FULL, which syncs the
 * -wal at COMMIT before the call returns (frames of earlier unsynced
 * commits are synced with it).  The level cannot change inside a
 * transaction, so it is switched before BEGIN and back after the end.
 * Every call is one transaction: a crash leaves all of it or none of it.
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
 * SPACE
 *
 * SQLite needs free space for every transaction, deletes included (its
 * -wal file takes the changed pages first).  So growth stops before the
 * disk is full, and what frees space can always run:
 *
 *   MS1 A call that grows the store -- a new inode and name (mkdir,
 *      create) or a user.* xattr set that adds bytes to its inode -- first
 *      checks that the file system keeps m->reserve bytes free after it
 *      (nrs_fs_room, the one check the local WAL's A5 uses too; the core
 *      sets twice wal_reserve, so a user filling the disk through
 *      metadata stops while appends can still use wal_reserve's worth);
 *      else -ENOSPC before anything is written.  Removals and in-place
 *      changes (unlink, rmdir, removexattr, a set that adds no bytes,
 *      trim, epoch, settings, setattr, rename, publish) are never refused
 *      for space: they may use the reserve, so space can always be freed
 *      through the mount, also after a remount on a full disk.
 *   MS2 Per inode at most NRS_XATTR_COUNT_MAX user.* names and
 *      NRS_XATTR_BYTES_MAX bytes of names plus values (meta.h): a set
 *      that adds a name or bytes past either is -ENOSPC; one that adds
 *      nothing always passes (an inode over the bounds can shrink).
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "meta/meta.h"
#include "util/crc32c.h"
#include "util/failpoint.h"
#include "util/fileio.h"
#include "util/grow.h"
#include "util/log.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE	(1 << 0)
#endif

#define SCHEMA_VERSION	3
#define KIND_DIR	1
#define KIND_STREAM	2
#define MAX_DEPTH	65536	/* M4 */
#define WALK_CHUNK	1024	/* M8: inodes read per hold of the lock */
#define MEMO_MAX	(1u << 21)	/* M8: most slots of the memo */
#define BUSY_TIMEOUT_MS	5000

enum stmt_id {
	ST_BEGIN, ST_BEGIN_READ, ST_COMMIT, ST_ROLLBACK,
	ST_GETATTR, ST_LOOKUP, ST_SETTINGS,
	ST_INODE_INSERT, ST_INODE_SET_STREAM, ST_INODE_TOUCH, ST_INODE_NLINK,
	ST_INODE_UNLINK, ST_INODE_MOVE, ST_INODE_SETATTR, ST_INODE_DELETE,
	ST_SET_PROFILE, ST_SET_RET_BYTES, ST_SET_RET_MS,
	ST_DIRENT_INSERT, ST_DIRENT_DELETE, ST_DIRENT_MOVE, ST_DIR_HAS_ENTRY,
	ST_READDIR,
	ST_STREAM_INSERT, ST_STREAM_SEAL, ST_STREAM_GET, ST_STREAM_UNLINK,
	ST_STREAM_DELETE,
	ST_STREAM_SET_PROFILE, ST_STREAM_SET_START, ST_STREAM_SET_EPOCH,
	ST_STREAM_LIST, ST_PUBLISH, ST_STREAM_SET_MTIME,
	ST_XATTR_GET, ST_XATTR_INSERT, ST_XATTR_UPDATE, ST_XATTR_UPSERT,
	ST_XATTR_REMOVE, ST_XATTR_TOTAL, ST_XATTR_USAGE, ST_XATTR_LIST, ST_XATTR_DROP,
	ST_UNLINKED_LIST, ST_COUNTS, ST_INODE_LIST, ST_DIRENT_LIST,
	ST_OBJ_INSERT, ST_OBJ_STATE, ST_OBJ_PUBLISH, ST_OBJ_DELETE, ST_OBJ_LIST,
	ST_OBJ_LIST_STREAM, ST_OBJ_LIST_STATE,
	ST_NR
};

/* A stream's mtime is its last commit (or utimens), kept in its streams
 * row so that a publish writes one row; its ctime is never older. */
#define STREAM_MTIME "(SELECT s.mtime_ns FROM streams s WHERE s.id = i.stream_id)"
#define ATTR_COLS "i.ino, i.parent, i.mode, i.uid, i.gid, i.nlink, " \
	"i.atime_ns, COALESCE(" STREAM_MTIME ", i.mtime_ns), " \
	"MAX(i.ctime_ns, COALESCE(" STREAM_MTIME ", i.ctime_ns)), i.stream_id"
#define NR_ATTR_COLS 10
#define OBJ_COLS "gen, stream_id, start, end, length, sha256, state, ctime_ns, mtime_ns"
#define STREAM_COLS "id, ino, head, version, start, epoch, last_lsn, " \
	"mtime_ns, profile, unlinked, crc"
#define STREAM_COL_CRC	10
/* The columns of STREAM_COLS the checksum covers, in checksum order. */
static const int crc_cols[] = { 0, 1, 2, 3, 4, 5, 6, 8, 9 };
#define CRC_FIELDS	(sizeof(crc_cols) / sizeof(crc_cols[0]))

/* C1: the checksum of a row whose covered columns become the arguments
 * (column names for the values kept, parameters for the new ones). */
#define ROW_CRC(head, version, start, epoch, lsn, profile, unlinked) \
	"nrs_stream_crc(id, ino, " head ", " version ", " start ", " epoch \
	", " lsn ", " profile ", " unlinked ")"
#define ROW_CRC_NOW ROW_CRC("head", "version", "start", "epoch", \
	"last_lsn", "profile", "unlinked")
/* C2: the row is as its checksum says. */
#define ROW_INTACT " AND crc = " ROW_CRC_NOW

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
	[ST_STREAM_SET_EPOCH] = "UPDATE streams SET epoch = ?2, crc = "
		ROW_CRC("head", "version", "start", "?2", "last_lsn", "profile",
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
		" sha256, state, ctime_ns, mtime_ns)"
		" VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
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

/* Schema 3: object generations (added to an older database too). */
#define OBJECTS_SQL \
	"CREATE TABLE objects(" \
	" gen INTEGER PRIMARY KEY AUTOINCREMENT, stream_id INTEGER NOT NULL," \
	" start INTEGER NOT NULL, end INTEGER NOT NULL," \
	" length INTEGER NOT NULL, sha256 BLOB NOT NULL," \
	" state INTEGER NOT NULL, ctime_ns INTEGER NOT NULL," \
	" mtime_ns INTEGER NOT NULL);" \
	"CREATE INDEX objects_by_stream ON objects(stream_id, gen);" \
	"CREATE INDEX objects_by_state ON objects(state, gen);"

static const char schema_sql[] =
	"CREATE TABLE inodes("
	" ino INTEGER PRIMARY KEY AUTOINCREMENT,"
	" parent INTEGER NOT NULL, kind INTEGER NOT NULL,"
	" mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
	" nlink INTEGER NOT NULL, atime_ns INTEGER NOT NULL,"
	" mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,"
	" stream_id INTEGER NOT NULL DEFAULT 0,"
	" profile INTEGER, ret_bytes INTEGER, ret_ms INTEGER);"
	"CREATE INDEX inodes_unlinked ON inodes(ino) WHERE nlink = 0;"
	"CREATE TABLE dirents("
	" cookie INTEGER PRIMARY KEY AUTOINCREMENT,"
	" parent INTEGER NOT NULL, name BLOB NOT NULL, ino INTEGER NOT NULL,"
	" UNIQUE(parent, name));"
	"CREATE INDEX dirents_by_cookie ON dirents(parent, cookie);"
	"CREATE TABLE streams("
	" id INTEGER PRIMARY KEY AUTOINCREMENT, ino INTEGER NOT NULL,"
	" head INTEGER NOT NULL, version INTEGER NOT NULL,"
	" start INTEGER NOT NULL, epoch INTEGER NOT NULL,"
	" last_lsn INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"
	" profile INTEGER NOT NULL, unlinked INTEGER NOT NULL,"
	" crc INTEGER NOT NULL DEFAULT 0);"	/* as the 1 -> 2 upgrade adds it */
	"CREATE TABLE xattrs("
	" ino INTEGER NOT NULL, name BLOB NOT NULL, value BLOB NOT NULL,"
	" PRIMARY KEY(ino, name)) WITHOUT ROWID;"
	OBJECTS_SQL;

/* M8: one inode's effective retention, valid while gen == ret_gen. */
struct ret_ent {
	uint64_t ino;			/* 0: a free slot */
	uint64_t gen;			/* 0: dropped */
	uint64_t v[2];			/* indexed by enum nrs_retention */
};

struct sqlite_meta {
	struct nrs_meta base;		/* first: the ops of meta.h */
	char *path;			/* the database file, for messages */
	pthread_mutex_t lock;		/* held for each whole call */
	sqlite3 *db;			/* protected by lock */
	sqlite3_stmt *st[ST_NR];	/* protected by lock */
	int tx;				/* protected by lock: enum tx_kind */
	bool synced;			/* protected by lock: FULL is on */
	uint64_t ret_gen;		/* protected by lock: M8, from 1 */
	uint64_t ret_epoch;		/* protected by lock: M8, any drop */
	struct ret_ent *memo;		/* protected by lock: open addressing */
	size_t memo_cap, memo_n;	/* protected by lock; cap a power of 2 */
	atomic_uint_fast64_t chain_steps;	/* inodes read by M8 walks */
	int space_fd;			/* the database file, for MS1; -1 */
	uint64_t reserve;		/* MS1: free bytes growth leaves */
};

/* The store behind a struct nrs_meta of these ops. */
static inline struct sqlite_meta *sqm(struct nrs_meta *base)
{
	return (struct sqlite_meta *)base;	/* base is the first member */
}

static const struct nrs_meta_ops sqlite_ops;

/* TX_NONE: one statement, no transaction needed; TX_READ: a snapshot for
 * several; TX_WRITE: unsynced commit; TX_DURABLE: synced commit. */
enum tx_kind { TX_NONE, TX_READ, TX_WRITE, TX_DURABLE };

/* What the ancestor walks need of an inode. */
struct settings {
	uint64_t parent, stream_id;
	int kind;
	int profile;			/* NRS_PROFILE_UNSET when NULL */
	bool has_ret[2];
	uint64_t ret[2];		/* indexed by enum nrs_retention */
};

/* ---- SQLite plumbing ------------------------------------------------- */

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

static int sql_fail(struct sqlite_meta *m, int rc, const char *what)
{
	nrs_err("meta: %.80s: %s (sqlite %d)", what, sqlite3_errmsg(m->db), rc);
	return sql_errno(m, rc);
}

/* Step a statement that returns no row, then reset it (after logging: a
 * reset may replace the error message). */
static int run(struct sqlite_meta *m, sqlite3_stmt *s)
{
	int rc = sqlite3_step(s), ret = 0;

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		ret = sql_fail(m, rc, sqlite3_sql(s));
	sqlite3_reset(s);
	return ret;
}

/* Step a query: 1 with s on a row (the caller reads it, then resets s),
 * 0 when there is none, or -errno; s is reset unless the result is 1. */
static int row(struct sqlite_meta *m, sqlite3_stmt *s)
{
	int rc = sqlite3_step(s), ret = 0;

	if (rc == SQLITE_ROW)
		return 1;
	if (rc != SQLITE_DONE)
		ret = sql_fail(m, rc, sqlite3_sql(s));
	sqlite3_reset(s);
	return ret;
}

/* Bind integers to ?1..?n of a cached statement; unsigned values keep
 * their bits. */
static sqlite3_stmt *bind_ints(struct sqlite_meta *m, enum stmt_id id,
			       const int64_t *v, size_t n)
{
	sqlite3_stmt *s = m->st[id];
	size_t i;

	for (i = 0; i < n; i++)
		sqlite3_bind_int64(s, (int)i + 1, v[i]);
	return s;
}

#define BIND(m, id, ...) bind_ints(m, id, (const int64_t[]){ __VA_ARGS__ }, \
	sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))

static void bind_bytes(sqlite3_stmt *s, int i, const void *p, size_t len)
{
	/* A NULL pointer would bind SQL NULL, not an empty blob. */
	sqlite3_bind_blob(s, i, len ? p : "", (int)len, SQLITE_STATIC);
}

static uint64_t col_u64(sqlite3_stmt *s, int i)
{
	return (uint64_t)sqlite3_column_int64(s, i);
}

static void col_attr(sqlite3_stmt *s, struct nrs_attr *a)
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

/* ---- row checksums (ROW CHECKSUM above) ------------------------------ */

/* The checksum of a streams row from its covered columns as stored. */
static uint32_t stream_crc(const int64_t v[CRC_FIELDS])
{
	unsigned char buf[CRC_FIELDS * 8];

	for (size_t i = 0; i < CRC_FIELDS; i++)
		for (int b = 0; b < 8; b++)
			buf[8 * i + (size_t)b] =
				(unsigned char)((uint64_t)v[i] >> (8 * b));
	return nrs_crc32c(0, buf, sizeof(buf));
}

/* C1: nrs_stream_crc(id, ino, head, version, start, epoch, last_lsn,
 * profile, unlinked); NULL (which no stored crc equals) if an argument is
 * not an integer. */
static void sql_stream_crc(sqlite3_context *ctx, int argc,
			   sqlite3_value **argv)
{
	int64_t v[CRC_FIELDS];

	for (size_t i = 0; i < CRC_FIELDS; i++) {
		if ((size_t)argc != CRC_FIELDS ||
		    sqlite3_value_type(argv[i]) != SQLITE_INTEGER) {
			sqlite3_result_null(ctx);
			return;
		}
		v[i] = sqlite3_value_int64(argv[i]);
	}
	sqlite3_result_int64(ctx, stream_crc(v));
}

/*
 * C3: the row s is on (STREAM_COLS) into *r, verified: 0, or -EUCLEAN
 * (logged) with *r filled as stored and r->corrupt set.
 */
static int col_stream(struct sqlite_meta *m, sqlite3_stmt *s,
		      struct nrs_stream_row *r)
{
	bool ints = true, has_crc;
	int64_t v[CRC_FIELDS];
	char stored[24] = "none";
	uint32_t crc;

	for (size_t i = 0; i < CRC_FIELDS; i++) {
		ints &= sqlite3_column_type(s, crc_cols[i]) == SQLITE_INTEGER;
		v[i] = sqlite3_column_int64(s, crc_cols[i]);
	}
	r->id = col_u64(s, 0);
	r->ino = col_u64(s, 1);
	r->head = col_u64(s, 2);
	r->version = col_u64(s, 3);
	r->start = col_u64(s, 4);
	r->epoch = col_u64(s, 5);
	r->last_lsn = col_u64(s, 6);
	r->mtime_ns = sqlite3_column_int64(s, 7);
	r->profile = sqlite3_column_int(s, 8);
	r->unlinked = sqlite3_column_int(s, 9) != 0;
	crc = stream_crc(v);
	has_crc = sqlite3_column_type(s, STREAM_COL_CRC) == SQLITE_INTEGER;
	if (has_crc)
		snprintf(stored, sizeof(stored), "%lld",
			 (long long)sqlite3_column_int64(s, STREAM_COL_CRC));
	r->corrupt = !ints || !has_crc ||
		sqlite3_column_int64(s, STREAM_COL_CRC) != (int64_t)crc;
	if (!r->corrupt)
		return 0;
	nrs_err("meta: stream %llu: its row in %s fails its checksum (stored"
		" %s, computed %lu%s): corrupt metadata; its head, version,"
		" start and epoch are unknown", (unsigned long long)r->id,
		m->path, stored, (unsigned long)crc,
		ints ? "" : ", a column is not an integer");
	return -EUCLEAN;
}

static int exec(struct sqlite_meta *m, const char *sql)
{
	int rc = sqlite3_exec(m->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sql_fail(m, rc, sql);
}

/* Not a cached statement: this pragma acts when it is prepared, and it is
 * refused inside a transaction. */
static int set_sync(struct sqlite_meta *m, bool full)
{
	int ret = exec(m, full ? "PRAGMA synchronous=FULL" :
		       "PRAGMA synchronous=NORMAL");

	if (!ret)
		m->synced = full;
	return ret;
}

/* Take the lock and open the call's transaction; undone by tx_end. */
static int tx_begin(struct sqlite_meta *m, enum tx_kind kind)
{
	int ret = -pthread_mutex_lock(&m->lock);

	if (ret == -EDEADLK)
		nrs_err("meta: a callback called back into the store");
	if (ret)
		return ret;
	m->tx = kind;
	if (kind == TX_DURABLE)
		ret = set_sync(m, true);
	if (!ret && kind != TX_NONE)
		ret = run(m, m->st[kind == TX_READ ? ST_BEGIN_READ : ST_BEGIN]);
	if (ret) {
		if (m->synced)
			set_sync(m, false);
		pthread_mutex_unlock(&m->lock);
	}
	return ret;
}

/* Commit when ret is 0, else roll back; release the lock.  Returns ret or
 * the commit's error. */
static int tx_end(struct sqlite_meta *m, int ret)
{
	sqlite3_stmt *s = NULL;

	if (ret == 0 && m->tx != TX_NONE)
		ret = run(m, m->st[ST_COMMIT]);
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

/* ---- helpers run under the lock --------------------------------------- */

/* M6: 0, -EINVAL (a name no entry may have) or -ENAMETOOLONG. */
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

static int attr_get(struct sqlite_meta *m, uint64_t ino, struct nrs_attr *a)
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

static int settings_get(struct sqlite_meta *m, uint64_t ino, struct settings *o)
{
	sqlite3_stmt *s = BIND(m, ST_SETTINGS, ino);
	int ret = row(m, s), i;

	if (ret <= 0)
		return ret ? ret : -ENOENT;
	o->parent = col_u64(s, 0);
	o->kind = sqlite3_column_int(s, 1);
	o->stream_id = col_u64(s, 2);
	o->profile = sqlite3_column_int(s, 3);	/* NULL reads as 0, UNSET */
	for (i = 0; i < 2; i++) {
		o->has_ret[i] = sqlite3_column_type(s, 4 + i) != SQLITE_NULL;
		o->ret[i] = col_u64(s, 4 + i);
	}
	sqlite3_reset(s);
	return 0;
}

enum walk_stop { WALK_PROFILE, WALK_INODE };

/*
 * Walk from ino up to the root, ino itself first, to the first inode that
 * has an own profile or is inode arg: 1 when found
 * (*st is its settings), 0 when not, -EUCLEAN on a loop (M4), or -errno.
 */
static int walk_up(struct sqlite_meta *m, uint64_t ino, enum walk_stop what,
		   uint64_t arg, struct settings *st)
{
	uint64_t cur = ino;
	int depth, ret;

	for (depth = 0; cur != 0 && depth < MAX_DEPTH; depth++) {
		ret = settings_get(m, cur, st);
		if (ret)
			return ret;
		if (what == WALK_PROFILE ? st->profile != NRS_PROFILE_UNSET :
		    cur == arg)
			return 1;
		cur = cur == NRS_ROOT_INO ? 0 : st->parent;
	}
	if (cur == 0)
		return 0;
	nrs_err("meta: parent chain from inode %llu loops (corrupt database)",
		(unsigned long long)ino);
	return -EUCLEAN;
}

/* ---- M8: the memo of effective retention (under the lock) ------------ */

/* The first slot to probe for ino in a table of cap (a power of 2). */
static size_t memo_hash(uint64_t ino, size_t cap)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static size_t memo_slot(const struct sqlite_meta *m, uint64_t ino)
{
	return memo_hash(ino, m->memo_cap);
}

static struct ret_ent *memo_at(struct sqlite_meta *m, uint64_t ino)
{
	size_t i;

	if (!m->memo_cap)
		return NULL;
	for (i = memo_slot(m, ino); m->memo[i].ino; i = (i + 1) & (m->memo_cap - 1))
		if (m->memo[i].ino == ino)
			return &m->memo[i];
	return NULL;
}

static const struct ret_ent *memo_find(struct sqlite_meta *m, uint64_t ino)
{
	const struct ret_ent *e = memo_at(m, ino);

	return e && e->gen == m->ret_gen ? e : NULL;
}

/* Room for one more entry: the live ones move into a table of at least
 * four times their number (at most MEMO_MAX slots; past that the memo
 * starts over).  A failed allocation keeps the old table, or none. */
static void memo_make_room(struct sqlite_meta *m)
{
	size_t live = 0, cap, i, j;
	struct ret_ent *t;

	if (m->memo_cap && (m->memo_n + 1) * 2 <= m->memo_cap)
		return;
	for (i = 0; i < m->memo_cap; i++)
		live += m->memo[i].ino && m->memo[i].gen == m->ret_gen;
	for (cap = 1024; cap < (live + 1) * 4 && cap < MEMO_MAX; cap *= 2)
		;
	if ((live + 1) * 2 > cap)
		live = 0;		/* full of live entries: start over */
	t = calloc(cap, sizeof(*t));
	if (!t)
		return;
	for (i = 0; live && i < m->memo_cap; i++) {
		const struct ret_ent *e = &m->memo[i];

		if (!e->ino || e->gen != m->ret_gen)
			continue;
		for (j = memo_hash(e->ino, cap); t[j].ino; j = (j + 1) & (cap - 1))
			;
		t[j] = *e;
	}
	free(m->memo);
	m->memo = t;
	m->memo_cap = cap;
	m->memo_n = live;
}

static void memo_put(struct sqlite_meta *m, uint64_t ino, const uint64_t v[2])
{
	struct ret_ent *e = memo_at(m, ino);

	if (!e) {
		size_t i;

		memo_make_room(m);
		if (!m->memo_cap || (m->memo_n + 1) * 2 > m->memo_cap)
			return;		/* no memory: the next get walks again */
		for (i = memo_slot(m, ino); m->memo[i].ino;
		     i = (i + 1) & (m->memo_cap - 1))
			;
		e = &m->memo[i];
		e->ino = ino;
		m->memo_n++;
	}
	e->gen = m->ret_gen;
	e->v[0] = v[0];
	e->v[1] = v[1];
}

/* M8: a change that concerns ino alone (a stream). */
static void memo_drop(struct sqlite_meta *m, uint64_t ino)
{
	struct ret_ent *e = memo_at(m, ino);

	if (e)
		e->gen = 0;
	m->ret_epoch++;
}

/* M8: a change that may concern every inode below one directory. */
static void memo_drop_all(struct sqlite_meta *m)
{
	m->ret_gen++;
	m->ret_epoch++;
}

/* One inode of an M8 walk, as read. */
struct chain_link {
	uint64_t ino;
	bool has[2];
	uint64_t ret[2];
};

/*
 * M8: the effective retention of ino into v.  Takes m->lock itself, for
 * WALK_CHUNK inodes at a time.  0, -ENOENT, -EUCLEAN (a loop, M4),
 * -EAGAIN (changes went on all through a walk that long), or -errno.
 */
static int effective_retention(struct sqlite_meta *m, uint64_t ino, uint64_t v[2])
{
	struct chain_link *c = NULL;
	size_t n = 0, cap = 0;
	uint64_t cur = ino, epoch, base[2] = { 0, 0 };
	const struct ret_ent *e;
	struct settings st;
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	epoch = m->ret_epoch;
	for (;;) {
		if (n && n % WALK_CHUNK == 0) {	/* let the others in */
			tx_end(m, 0);
			ret = tx_begin(m, TX_NONE);
			if (ret)
				goto out_free;
		}
		e = memo_find(m, cur);
		if (e) {
			base[0] = e->v[0];
			base[1] = e->v[1];
			break;
		}
		if (n == MAX_DEPTH) {
			ret = m->ret_epoch != epoch ? -EAGAIN : -EUCLEAN;
			if (ret == -EUCLEAN)
				nrs_err("meta: parent chain from inode %llu loops"
					" (corrupt database)",
					(unsigned long long)ino);
			goto out_unlock;
		}
		ret = nrs_grow((void **)&c, &cap, n + 1, sizeof(*c)) ?:
		      settings_get(m, cur, &st);
		if (ret)
			goto out_unlock;
		atomic_fetch_add_explicit(&m->chain_steps, 1,
					  memory_order_relaxed);
		c[n].ino = cur;
		for (int w = 0; w < 2; w++) {
			c[n].has[w] = st.has_ret[w];
			c[n].ret[w] = st.ret[w];
		}
		n++;
		if (cur == NRS_ROOT_INO || st.parent == 0)
			break;		/* the top, or an unlinked stream */
		cur = st.parent;
	}
	while (n-- > 0) {		/* down again, memoising each */
		for (int w = 0; w < 2; w++)
			if (c[n].has[w])
				base[w] = c[n].ret[w];
		if (m->ret_epoch == epoch)
			memo_put(m, c[n].ino, base);
	}
	v[0] = base[0];
	v[1] = base[1];
out_unlock:
	tx_end(m, 0);
out_free:
	free(c);
	return ret;
}

static int touch(struct sqlite_meta *m, uint64_t ino, int64_t now_ns)
{
	return run(m, BIND(m, ST_INODE_TOUCH, ino, now_ns));
}

/* M2: the name (dirent cookie) of stream a goes; the inode stays. */
static int unlink_stream(struct sqlite_meta *m, const struct nrs_attr *a,
			 uint64_t cookie, int64_t now_ns)
{
	int ret = run(m, BIND(m, ST_DIRENT_DELETE, cookie));

	memo_drop(m, a->ino);		/* M8: its parent is 0 from now on */
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

/* -ENOENT, or -EUCLEAN (C3: logged, *r as stored) */
static int stream_get(struct sqlite_meta *m, uint64_t id, struct nrs_stream_row *r)
{
	sqlite3_stmt *s = BIND(m, ST_STREAM_GET, id);
	int ret = row(m, s);

	if (ret <= 0)
		return ret ? ret : -ENOENT;
	ret = col_stream(m, s, r);
	sqlite3_reset(s);
	return ret;
}

/*
 * After an UPDATE of stream id's covered columns (C2): 0 if it changed
 * the row, else why not: -ENOENT, -EUCLEAN (the row fails its checksum),
 * or -ESTALE (the row is intact: a condition of the caller's failed).
 */
static int stream_updated(struct sqlite_meta *m, uint64_t id,
			  struct nrs_stream_row *cur)
{
	if (sqlite3_changes(m->db) == 1)
		return 0;
	return stream_get(m, id, cur) ?: -ESTALE;
}

/* ---- open and close --------------------------------------------------- */

/* One value of a statement run once at open: an integer, or text. */
static int query1(struct sqlite_meta *m, const char *sql, int64_t *v,
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

/* Schema and root, inside the transaction of schema_open. */
static int schema_create(struct sqlite_meta *m)
{
	struct timespec ts;
	long long now;
	char sql[512];

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
	snprintf(sql, sizeof(sql), "INSERT INTO inodes(ino, parent, kind, mode,"
		 " uid, gid, nlink, atime_ns, mtime_ns, ctime_ns)"
		 " VALUES(%d, %d, %d, %d, %u, %u, 2, %lld, %lld, %lld);"
		 /* M3 */
		 "UPDATE sqlite_sequence SET seq = %d WHERE name = 'inodes';"
		 "INSERT INTO sqlite_sequence(name, seq) VALUES('dirents', 2);"
		 "PRAGMA user_version = %d;", NRS_ROOT_INO, NRS_ROOT_INO,
		 KIND_DIR, S_IFDIR | 0755, (unsigned)geteuid(),
		 (unsigned)getegid(), now, now, now, NRS_FIRST_INO - 1,
		 SCHEMA_VERSION);
	return exec(m, schema_sql) ?: exec(m, sql);
}

/* The upgrades (SCHEMA above), inside the transaction of schema_open. */
static int schema_upgrade(struct sqlite_meta *m, int64_t from)
{
	char sql[64];
	int ret = 0, rows = 0;

	if (from < 2) {			/* 1 -> 2: row checksums */
		ret = exec(m, "ALTER TABLE streams ADD COLUMN"
			   " crc INTEGER NOT NULL DEFAULT 0") ?:
			exec(m, "UPDATE streams SET crc = " ROW_CRC_NOW);
		rows = sqlite3_changes(m->db);
	}
	if (!ret && from < 3)		/* 2 -> 3: object generations */
		ret = exec(m, OBJECTS_SQL);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
	ret = ret ?: exec(m, sql);
	if (!ret)
		nrs_info("meta: %s upgraded from schema %lld to %d (checksums"
			 " for %d stream rows)", m->path, (long long)from,
			 SCHEMA_VERSION, rows);
	return ret;
}

static int schema_open(struct sqlite_meta *m)
{
	int64_t version = 0, tables = 0;
	int ret;

	ret = set_sync(m, true);
	if (ret)
		return ret;
	ret = exec(m, "BEGIN IMMEDIATE");
	if (ret)
		goto out_sync;
	ret = query1(m, "PRAGMA user_version", &version, NULL, 0) ?:
		query1(m, "SELECT count(*) FROM sqlite_master", &tables, NULL, 0);
	if (ret)
		goto out_rollback;
	if (version > SCHEMA_VERSION || version < 0) {
		nrs_err("meta: schema version %lld is not %d: written by"
			" another nereusfs version", (long long)version,
			SCHEMA_VERSION);
		ret = -EPROTO;
	} else if (version == 0 && tables > 0) {
		nrs_err("meta: not a nereusfs database (tables, no version)");
		ret = -EUCLEAN;
	} else if (version == 0) {
		ret = schema_create(m);
	} else if (version < SCHEMA_VERSION) {
		ret = schema_upgrade(m, version);
	}
	if (!ret)
		ret = exec(m, "COMMIT");
	if (!ret)
		return set_sync(m, false);
out_rollback:
	if (!sqlite3_get_autocommit(m->db))
		sqlite3_exec(m->db, "ROLLBACK", NULL, NULL, NULL);
out_sync:
	set_sync(m, false);
	return ret;
}

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
 * C4: PRAGMA quick_check, at a read-write open: structural damage
 * refuses the open (-EUCLEAN), each problem logged.  It reads the whole
 * file, once per mount.
 */
static int quick_check(struct sqlite_meta *m)
{
	static const char sql[] = "PRAGMA quick_check(10)";
	sqlite3_stmt *s;
	int rc, ret = 0, problems = 0;

	rc = sqlite3_prepare_v2(m->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(m, rc, sql);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(s, 0);

		if (text && strcmp(text, "ok") == 0)
			continue;
		nrs_err("meta: %s: quick_check: %s", m->path,
			text ? text : "(no text)");
		problems++;
	}
	if (rc != SQLITE_DONE)
		ret = sql_fail(m, rc, sql);	/* CORRUPT: -EUCLEAN */
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

static int meta_open(const char *path, bool readonly, struct nrs_meta **out)
{
	pthread_mutexattr_t ma;
	struct sqlite_meta *m;
	int i, rc, ret;

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
	m->ret_gen = 1;			/* M8: memo entries of gen 0 are dropped */
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
					SQLITE_DIRECTONLY, NULL, sql_stream_crc,
					NULL, NULL, NULL);	/* C1 */
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
	m->base.ops = &sqlite_ops;
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

static void sq_close(struct nrs_meta *base)
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

static int sq_set_reserve(struct nrs_meta *base, uint64_t reserve)
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

/*
 * MS1: room for a transaction that adds about need bytes (plus the pages
 * SQLite rewrites around them).  Under m->lock.
 */
#define GROWTH_PAGES	(2 * 4096)
static int room(struct sqlite_meta *m, uint64_t need)
{
	if (m->space_fd < 0)
		return 0;
	return nrs_fs_room(m->space_fd, m->reserve, need + GROWTH_PAGES);
}

/* ---- namespace -------------------------------------------------------- */

static int sq_getattr(struct nrs_meta *base, uint64_t ino, struct nrs_attr *out)
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

static int sq_lookup(struct nrs_meta *base, uint64_t parent, const char *name,
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
	if (!dir) {				/* M5 */
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
		sqlite3_bind_null(s, 8);	/* M5: no own profile */
	ret = run(m, s);
	if (ret)
		return ret;
	a->ino = (uint64_t)sqlite3_last_insert_rowid(m->db);
	if (!dir) {
		ret = run(m, BIND(m, ST_STREAM_INSERT, a->ino, now_ns, profile));
		if (ret)
			return ret;
		a->stream_id = (uint64_t)sqlite3_last_insert_rowid(m->db);
		ret = run(m, BIND(m, ST_STREAM_SEAL, a->stream_id)) ?:	/* C1 */
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
	if (!ret && dir)			/* M1 */
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
	int ret = tx_begin(m, TX_DURABLE);

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

static int sq_mkdir(struct nrs_meta *base, uint64_t parent, const char *name,
		    uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		    struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	return make_tx(m, parent, name, true, mode, uid, gid, now_ns, out, NULL);
}

static int sq_create(struct nrs_meta *base, uint64_t parent, const char *name,
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

static int sq_unlink(struct nrs_meta *base, uint64_t parent, const char *name,
		     int64_t now_ns, struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	uint64_t cookie;
	int ret = tx_begin(m, TX_DURABLE);

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

static int sq_rmdir(struct nrs_meta *base, uint64_t parent, const char *name,
		    int64_t now_ns)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	uint64_t cookie;
	int ret = tx_begin(m, TX_DURABLE);

	if (ret)
		return ret;
	ret = find_entry(m, parent, name, &a, &cookie);
	if (!ret && !S_ISDIR(a.mode))
		ret = -ENOTDIR;
	else if (!ret && a.ino == NRS_ROOT_INO)	/* only if corrupt */
		ret = -EBUSY;
	if (!ret)				/* M1 */
		ret = drop_dir(m, &a, cookie) ?:
			run(m, BIND(m, ST_INODE_NLINK, parent, -1)) ?:
			touch(m, parent, now_ns);
	return tx_end(m, ret);
}

/* Checks in the order Linux makes them; the entry being replaced goes
 * first, then the name moves (M7) and the link counts follow (M1). */
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
	if (src_dir) {			/* M4 */
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
	/* M8: a subtree moves, or one stream */
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

static int sq_rename(struct nrs_meta *base, uint64_t parent, const char *name,
		     uint64_t newparent, const char *newname, unsigned int flags,
		     int64_t now_ns, uint64_t *replaced)
{
	struct sqlite_meta *m = sqm(base);
	uint64_t rep;
	int ret = tx_begin(m, TX_DURABLE);

	if (!ret)
		ret = tx_end(m, do_rename(m, parent, name, newparent, newname,
					  flags, now_ns, &rep));
	if (!ret && replaced)
		*replaced = rep;
	return ret;
}

static int sq_setattr(struct nrs_meta *base, uint64_t ino,
		      const struct nrs_attr *in, int mask, int64_t now_ns,
		      struct nrs_attr *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_DURABLE);

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

/* Rows are read one at a time from the statement; nothing is buffered. */
static int sq_readdir(struct nrs_meta *base, uint64_t ino, uint64_t after,
		      nrs_meta_dirent_cb cb, void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	char name[NRS_NAME_MAX + 1];
	struct nrs_attr a = { 0 };
	sqlite3_stmt *s;
	size_t len;
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	ret = dir_check(m, ino);
	if (ret || after >= INT64_MAX)	/* no cookie is that large */
		return tx_end(m, ret);
	s = BIND(m, ST_READDIR, ino, after);
	while ((ret = row(m, s)) > 0) {
		len = (size_t)sqlite3_column_bytes(s, NR_ATTR_COLS + 1);
		if (len == 0 || len > NRS_NAME_MAX) {
			nrs_err("meta: directory %llu holds a name of %zu"
				" bytes", (unsigned long long)ino, len);
			ret = -EUCLEAN;
			break;
		}
		memcpy(name, sqlite3_column_blob(s, NR_ATTR_COLS + 1), len);
		name[len] = '\0';
		col_attr(s, &a);
		ret = cb(ctx, name, &a, col_u64(s, NR_ATTR_COLS));
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return tx_end(m, ret < 0 ? ret : 0);	/* > 0: the callback stopped */
}

/* ---- xattrs ----------------------------------------------------------- */

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

static ssize_t sq_xattr_get(struct nrs_meta *base, uint64_t ino, const char *name,
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

static int sq_xattr_set(struct nrs_meta *base, uint64_t ino, const char *name,
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
		ret = tx_begin(m, TX_DURABLE);
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

static int sq_xattr_remove(struct nrs_meta *base, uint64_t ino, const char *name)
{
	struct sqlite_meta *m = sqm(base);
	size_t nlen;
	int ret = xname_check(name, &nlen) ?: tx_begin(m, TX_DURABLE);

	if (ret)
		return ret;
	ret = run(m, bind_xattr(m, ST_XATTR_REMOVE, ino, name, nlen));
	if (!ret && sqlite3_changes(m->db) != 1)
		ret = or_enoent(m, ino, -ENODATA);
	return tx_end(m, ret);
}

/* The total length first, so that buf is written only when all fits. */
static ssize_t do_xattr_list(struct sqlite_meta *m, uint64_t ino, char *buf,
			     size_t size)
{
	sqlite3_stmt *s = BIND(m, ST_XATTR_TOTAL, ino);
	size_t total, off = 0, len;
	int ret = or_enoent(m, ino, 0) ?: row(m, s);

	if (ret <= 0)
		return ret ? ret : -EIO;
	total = col_u64(s, 0);
	sqlite3_reset(s);
	if (size == 0 || total > size)
		return size == 0 ? (ssize_t)total : -ERANGE;
	s = BIND(m, ST_XATTR_LIST, ino);
	while ((ret = row(m, s)) > 0) {
		len = (size_t)sqlite3_column_bytes(s, 0);
		if (off + len + 1 > total) {	/* same snapshot: cannot */
			sqlite3_reset(s);
			return -EUCLEAN;
		}
		memcpy(buf + off, sqlite3_column_blob(s, 0), len);
		buf[off + len] = '\0';
		off += len + 1;
	}
	return ret ? ret : (ssize_t)off;
}

static ssize_t sq_xattr_list(struct nrs_meta *base, uint64_t ino, char *buf,
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

/* ---- settings --------------------------------------------------------- */

static int sq_get_profile(struct nrs_meta *base, uint64_t ino, int *profile)
{
	struct sqlite_meta *m = sqm(base);
	struct settings st = { 0 };
	int ret = tx_begin(m, TX_NONE);

	if (!ret)
		ret = tx_end(m, settings_get(m, ino, &st));
	if (!ret)
		*profile = st.profile;
	return ret;
}

static int sq_set_profile(struct nrs_meta *base, uint64_t ino, int profile)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_stream_row cur;
	struct settings st;
	int ret;

	if (profile != NRS_PROFILE_LOCAL_WAL && profile != NRS_PROFILE_OBJECT_WAL)
		return -EINVAL;
	ret = tx_begin(m, TX_DURABLE);
	if (ret)
		return ret;
	ret = settings_get(m, ino, &st) ?:
		run(m, BIND(m, ST_SET_PROFILE, ino, profile));
	if (!ret && st.kind == KIND_STREAM)	/* M5 */
		ret = run(m, BIND(m, ST_STREAM_SET_PROFILE, st.stream_id,
				  profile)) ?:
			stream_updated(m, st.stream_id, &cur);
	return tx_end(m, ret);
}

static int sq_get_retention(struct nrs_meta *base, uint64_t ino, int which,
			    uint64_t *value)
{
	struct sqlite_meta *m = sqm(base);
	uint64_t v[2];
	int ret;

	if (which != NRS_RET_BYTES && which != NRS_RET_MS)
		return -EINVAL;
	ret = effective_retention(m, ino, v);	/* M8 */
	if (!ret)
		*value = v[which];
	return ret;
}

static int sq_set_retention(struct nrs_meta *base, uint64_t ino, int which,
			    uint64_t value)
{
	struct sqlite_meta *m = sqm(base);
	struct settings st;
	int ret;

	if (which != NRS_RET_BYTES && which != NRS_RET_MS)
		return -EINVAL;
	ret = tx_begin(m, TX_DURABLE);
	if (ret)
		return ret;
	ret = settings_get(m, ino, &st) ?: run(m, BIND(m, which == NRS_RET_BYTES ?
			ST_SET_RET_BYTES : ST_SET_RET_MS, ino, value));
	if (!ret)	/* M8: a stream's own value, or a directory's subtree */
		st.kind == KIND_STREAM ? memo_drop(m, ino) : memo_drop_all(m);
	return tx_end(m, ret);
}

static uint64_t sq_chain_steps(struct nrs_meta *base)
{
	struct sqlite_meta *m = sqm(base);
	return atomic_load_explicit(&m->chain_steps, memory_order_relaxed);
}

static int sq_retention_is_set(struct nrs_meta *base, uint64_t ino, int which,
			       bool *set)
{
	struct sqlite_meta *m = sqm(base);
	struct settings st;
	int ret;

	if (which != NRS_RET_BYTES && which != NRS_RET_MS)
		return -EINVAL;
	ret = tx_begin(m, TX_NONE);
	if (!ret)
		ret = tx_end(m, settings_get(m, ino, &st));
	if (!ret)
		*set = st.has_ret[which];
	return ret;
}

/* ---- streams ---------------------------------------------------------- */

/* start: raise only, never past the head.  epoch: strictly raise. */
static int stream_raise(struct sqlite_meta *m, uint64_t id, enum stmt_id st,
			uint64_t v)
{
	struct nrs_stream_row r = { 0 };
	int ret = tx_begin(m, TX_DURABLE);

	if (ret)
		return ret;
	ret = stream_get(m, id, &r);
	if (!ret && st == ST_STREAM_SET_START && (v < r.start || v > r.head))
		ret = -EINVAL;
	if (!ret && st == ST_STREAM_SET_EPOCH && v <= r.epoch)
		ret = -EINVAL;
	if (!ret)
		ret = run(m, BIND(m, st, id, v)) ?: stream_updated(m, id, &r);
	return tx_end(m, ret);
}

static int sq_set_start(struct nrs_meta *base, uint64_t stream_id, uint64_t start)
{
	struct sqlite_meta *m = sqm(base);
	return stream_raise(m, stream_id, ST_STREAM_SET_START, start);
}

static int sq_set_epoch(struct nrs_meta *base, uint64_t stream_id, uint64_t epoch)
{
	struct sqlite_meta *m = sqm(base);
	return stream_raise(m, stream_id, ST_STREAM_SET_EPOCH, epoch);
}

static int sq_stream_get(struct nrs_meta *base, uint64_t stream_id,
			 struct nrs_stream_row *out)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_stream_row r = { 0 };
	int ret = tx_begin(m, TX_NONE);

	if (!ret)
		ret = tx_end(m, stream_get(m, stream_id, &r));
	if (!ret)
		*out = r;
	return ret;
}

static int sq_stream_foreach(struct nrs_meta *base, nrs_meta_stream_cb cb,
			     void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s = m->st[ST_STREAM_LIST];
	struct nrs_stream_row r = { 0 };
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		col_stream(m, s, &r);		/* C3: passed on, marked */
		ret = cb(ctx, &r);
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return tx_end(m, ret < 0 ? ret : 0);	/* > 0: the callback stopped */
}

/* One CAS per update; the first lost one drops the whole batch. */
static int do_publish(struct sqlite_meta *m, const struct nrs_head_update *u,
		      size_t n)
{
	struct nrs_stream_row cur = { 0 };
	size_t i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = run(m, BIND(m, ST_PUBLISH, u[i].id, u[i].head,
				  u[i].version, u[i].epoch, u[i].last_lsn,
				  u[i].mtime_ns, u[i].old_version));
		if (ret)
			return ret;
		ret = stream_updated(m, u[i].id, &cur);
		if (ret && ret != -ESTALE && ret != -ENOENT)
			return ret;		/* -EUCLEAN: C2 */
		if (ret) {
			if (ret == -ENOENT)
				cur.version = UINT64_MAX;
			nrs_err("meta: publish: stream %llu expected at version"
				" %llu, found %lld: lost CAS, batch not published",
				(unsigned long long)u[i].id,
				(unsigned long long)u[i].old_version,
				(long long)cur.version);	/* -1: none */
			return -ESTALE;
		}
	}
	return 0;
}

static int sq_publish(struct nrs_meta *base, const struct nrs_head_update *u,
		      size_t n, bool durable)
{
	struct sqlite_meta *m = sqm(base);
	int ret;

	if (n == 0)
		return 0;
	ret = tx_begin(m, durable ? TX_DURABLE : TX_WRITE);
	if (ret)
		return ret;
	ret = do_publish(m, u, n);
	if (!ret)
		ret = nrs_failpoint(NRS_FP_META_BEFORE_COMMIT);
	ret = tx_end(m, ret);
	if (!ret)
		ret = nrs_failpoint(NRS_FP_META_AFTER_COMMIT);
	return ret;
}

static int sq_forget_inode(struct nrs_meta *base, uint64_t ino)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_DURABLE);

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
	memo_drop(m, ino);		/* M8 */
	return tx_end(m, ret);
}

static int sq_unlinked_foreach(struct nrs_meta *base,
			       int (*cb)(void *ctx, uint64_t ino), void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s = m->st[ST_UNLINKED_LIST];
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		ret = cb(ctx, col_u64(s, 0));
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return tx_end(m, ret < 0 ? ret : 0);	/* > 0: the callback stopped */
}

/* ---- object generations -------------------------------------------- */

static void col_obj(sqlite3_stmt *s, struct nrs_obj_row *o)
{
	const void *sha = sqlite3_column_blob(s, 5);

	o->gen = col_u64(s, 0);
	o->stream_id = col_u64(s, 1);
	o->start = col_u64(s, 2);
	o->end = col_u64(s, 3);
	o->length = col_u64(s, 4);
	memset(o->sha256, 0, sizeof(o->sha256));
	if (sha && sqlite3_column_bytes(s, 5) == (int)sizeof(o->sha256))
		memcpy(o->sha256, sha, sizeof(o->sha256));
	o->state = sqlite3_column_int(s, 6);
	o->ctime_ns = sqlite3_column_int64(s, 7);
	o->mtime_ns = sqlite3_column_int64(s, 8);
}

static int sq_obj_prepare(struct nrs_meta *base, struct nrs_obj_row *o)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s;
	int ret;

	if (o->end <= o->start)
		return -EINVAL;
	ret = tx_begin(m, TX_DURABLE);
	if (ret)
		return ret;
	s = BIND(m, ST_OBJ_INSERT, o->stream_id, o->start, o->end, o->length);
	bind_bytes(s, 5, o->sha256, sizeof(o->sha256));
	sqlite3_bind_int(s, 6, NRS_OBJ_PREPARED);
	sqlite3_bind_int64(s, 7, o->ctime_ns);
	ret = run(m, s);
	if (!ret) {
		o->gen = (uint64_t)sqlite3_last_insert_rowid(m->db);
		o->state = NRS_OBJ_PREPARED;
		o->mtime_ns = o->ctime_ns;
	}
	return tx_end(m, ret);
}

/* Under the lock, in a transaction: gen prepared -> committed. */
static int obj_publish(struct sqlite_meta *m, uint64_t gen,
		       const unsigned char sha256[32])
{
	sqlite3_stmt *s = BIND(m, ST_OBJ_PUBLISH, gen, NRS_OBJ_COMMITTED);
	int ret;

	bind_bytes(s, 3, sha256, 32);
	sqlite3_bind_int(s, 4, NRS_OBJ_PREPARED);
	ret = run(m, s);
	if (!ret && sqlite3_changes(m->db) != 1) {
		ret = -ESTALE;
		nrs_err("meta: object generation %llu is not prepared",
			(unsigned long long)gen);
	}
	return ret;
}

static int sq_obj_publish(struct nrs_meta *base, uint64_t gen,
			  const unsigned char sha256[32])
{
	struct sqlite_meta *m = sqm(base);
	/* durable: the WAL copy of the range may go next (materializer M5) */
	int ret = tx_begin(m, TX_DURABLE); /* I7 */

	if (ret)
		return ret;
	return tx_end(m, obj_publish(m, gen, sha256));
}

static int sq_obj_replace(struct nrs_meta *base, uint64_t gen,
			  const unsigned char sha256[32], const uint64_t *olds,
			  size_t nolds, int64_t now_ns)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_DURABLE);

	if (ret)
		return ret;
	ret = obj_publish(m, gen, sha256);
	for (size_t i = 0; !ret && i < nolds; i++) {
		ret = run(m, BIND(m, ST_OBJ_STATE, olds[i], NRS_OBJ_COMMITTED,
				  NRS_OBJ_DRAINING, now_ns));
		if (!ret && sqlite3_changes(m->db) != 1) {
			ret = -ESTALE;
			nrs_err("meta: object generation %llu is not committed",
				(unsigned long long)olds[i]);
		}
	}
	return tx_end(m, ret);
}

static int sq_obj_set_state(struct nrs_meta *base, uint64_t gen, int from, int to,
			    int64_t now_ns)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_DURABLE);

	if (ret)
		return ret;
	ret = run(m, BIND(m, ST_OBJ_STATE, gen, from, to, now_ns));
	if (!ret && sqlite3_changes(m->db) != 1) {
		ret = -ESTALE;
		nrs_err("meta: object generation %llu is not in state %d",
			(unsigned long long)gen, from);
	}
	return tx_end(m, ret);
}

static int sq_obj_delete(struct nrs_meta *base, uint64_t gen)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_DURABLE);

	if (!ret)
		ret = tx_end(m, run(m, BIND(m, ST_OBJ_DELETE, gen)));
	return ret;
}

static int obj_list(struct sqlite_meta *m, sqlite3_stmt *s,
		    int (*cb)(void *ctx, const struct nrs_obj_row *o), void *ctx)
{
	struct nrs_obj_row o;
	int ret;

	while ((ret = row(m, s)) > 0) {
		col_obj(s, &o);
		ret = cb(ctx, &o);
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return ret < 0 ? ret : 0;
}

static int sq_obj_foreach(struct nrs_meta *base, uint64_t stream_id,
			  int (*cb)(void *ctx, const struct nrs_obj_row *o),
			  void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	return tx_end(m, obj_list(m, stream_id ?
				  BIND(m, ST_OBJ_LIST_STREAM, stream_id) :
				  m->st[ST_OBJ_LIST], cb, ctx));
}

static int sq_obj_foreach_state(struct nrs_meta *base, int state,
				int (*cb)(void *ctx, const struct nrs_obj_row *o),
				void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	return tx_end(m, obj_list(m, BIND(m, ST_OBJ_LIST_STATE, state), cb,
				  ctx));
}

static int sq_counts(struct nrs_meta *base, uint64_t *dirs, uint64_t *streams)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s = m->st[ST_COUNTS];
	uint64_t n[3] = { 0, 0, 0 };
	int kind, ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		kind = sqlite3_column_int(s, 0);
		if (kind == KIND_DIR || kind == KIND_STREAM)
			n[kind] = col_u64(s, 1);
	}
	ret = tx_end(m, ret);
	if (!ret) {
		*dirs = n[KIND_DIR];
		*streams = n[KIND_STREAM];
	}
	return ret;
}

/* ---- offline tools ---------------------------------------------------- */

/* A snapshot transaction and a statement sql prepared in it, which the
 * caller finalizes before tx_end(); 0, or -errno and no transaction. */
static int read_prepare(struct sqlite_meta *m, const char *sql, sqlite3_stmt **s)
{
	int rc, ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	rc = sqlite3_prepare_v2(m->db, sql, -1, s, NULL);
	return rc == SQLITE_OK ? 0 : tx_end(m, sql_fail(m, rc, sql));
}

static int sq_integrity_check(struct nrs_meta *base,
			      int (*cb)(void *ctx, const char *problem),
			      void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s;
	const char *text;
	int ret = read_prepare(m, "PRAGMA integrity_check", &s);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		text = (const char *)sqlite3_column_text(s, 0);
		if (text && strcmp(text, "ok") != 0)
			ret = cb(ctx, text);
		if (ret)
			break;
	}
	sqlite3_finalize(s);
	return tx_end(m, ret < 0 ? ret : 0);
}

static int sq_stream_seq_raise(struct nrs_meta *base, uint64_t id)
{
	struct sqlite_meta *m = sqm(base);
	static const char *const sql[] = {
		"UPDATE sqlite_sequence SET seq = max(?1, (SELECT"
		" coalesce(max(stream_id), 0) FROM objects)) WHERE name ="
		" 'streams' AND typeof(seq) = 'integer' AND seq < max(?1,"
		" (SELECT coalesce(max(stream_id), 0) FROM objects))",
		"INSERT INTO sqlite_sequence(name, seq) SELECT 'streams',"
		" max(?1, (SELECT coalesce(max(stream_id), 0) FROM objects))"
		" WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name ="
		" 'streams')",
	};
	int ret;

	if (id > NRS_STREAM_ID_MAX)
		return -EINVAL;
	ret = tx_begin(m, TX_DURABLE);
	for (size_t i = 0; !ret && i < sizeof(sql) / sizeof(sql[0]); i++) {
		sqlite3_stmt *s;
		int rc = sqlite3_prepare_v2(m->db, sql[i], -1, &s, NULL);

		if (rc != SQLITE_OK) {
			ret = sql_fail(m, rc, sql[i]);
			break;
		}
		sqlite3_bind_int64(s, 1, (int64_t)id);
		ret = run(m, s);
		sqlite3_finalize(s);
	}
	return tx_end(m, ret);
}

static int sq_sequences(struct nrs_meta *base, struct nrs_meta_seq *inodes,
			struct nrs_meta_seq *streams)
{
	struct sqlite_meta *m = sqm(base);
	static const char sql[] =
		"SELECT name, seq, typeof(seq) = 'integer' FROM sqlite_sequence"
		" WHERE name IN ('inodes', 'streams')";
	struct nrs_meta_seq in = { 0, true }, st = { 0, true };
	sqlite3_stmt *s;
	int ret = read_prepare(m, sql, &s);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		const char *name = (const char *)sqlite3_column_text(s, 0);
		struct nrs_meta_seq *q = name && strcmp(name, "inodes") == 0 ?
					 &in : &st;

		q->v = sqlite3_column_int64(s, 1);
		q->integer = sqlite3_column_int(s, 2) != 0;
	}
	sqlite3_finalize(s);
	ret = tx_end(m, ret);
	if (!ret) {
		*inodes = in;
		*streams = st;
	}
	return ret;
}

static int sq_inode_foreach(struct nrs_meta *base,
			    int (*cb)(void *ctx, const struct nrs_attr *a),
			    void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s = m->st[ST_INODE_LIST];
	struct nrs_attr a = { 0 };
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		col_attr(s, &a);
		ret = cb(ctx, &a);
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return tx_end(m, ret < 0 ? ret : 0);
}

static int sq_dirent_foreach(struct nrs_meta *base, nrs_meta_rawdirent_cb cb,
			     void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	sqlite3_stmt *s = m->st[ST_DIRENT_LIST];
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	while ((ret = row(m, s)) > 0) {
		const void *name = sqlite3_column_blob(s, 1);
		size_t len = (size_t)sqlite3_column_bytes(s, 1);

		ret = cb(ctx, col_u64(s, 0), name ? name : "", len,
			 col_u64(s, 2));
		if (ret)
			break;
	}
	sqlite3_reset(s);
	return tx_end(m, ret < 0 ? ret : 0);
}

static const struct nrs_meta_ops sqlite_ops = {
	.close = sq_close,
	.set_reserve = sq_set_reserve,
	.getattr = sq_getattr,
	.lookup = sq_lookup,
	.mkdir = sq_mkdir,
	.create = sq_create,
	.unlink = sq_unlink,
	.rmdir = sq_rmdir,
	.rename = sq_rename,
	.setattr = sq_setattr,
	.readdir = sq_readdir,
	.xattr_get = sq_xattr_get,
	.xattr_set = sq_xattr_set,
	.xattr_remove = sq_xattr_remove,
	.xattr_list = sq_xattr_list,
	.get_profile = sq_get_profile,
	.set_profile = sq_set_profile,
	.get_retention = sq_get_retention,
	.set_retention = sq_set_retention,
	.chain_steps = sq_chain_steps,
	.retention_is_set = sq_retention_is_set,
	.set_start = sq_set_start,
	.set_epoch = sq_set_epoch,
	.stream_get = sq_stream_get,
	.stream_foreach = sq_stream_foreach,
	.publish = sq_publish,
	.forget_inode = sq_forget_inode,
	.unlinked_foreach = sq_unlinked_foreach,
	.obj_prepare = sq_obj_prepare,
	.obj_publish = sq_obj_publish,
	.obj_replace = sq_obj_replace,
	.obj_set_state = sq_obj_set_state,
	.obj_delete = sq_obj_delete,
	.obj_foreach = sq_obj_foreach,
	.obj_foreach_state = sq_obj_foreach_state,
	.counts = sq_counts,
	.integrity_check = sq_integrity_check,
	.stream_seq_raise = sq_stream_seq_raise,
	.sequences = sq_sequences,
	.inode_foreach = sq_inode_foreach,
	.dirent_foreach = sq_dirent_foreach,
};
