/*
 * sqlite_schema.c - the tables of the SQLite store, created at the first
 * open and upgraded from older versions, in the transaction that checks
 * the version.
 *
 * SCHEMA (PRAGMA user_version = 5)
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
 *            seg, off (schema 5, default 0): where the bytes are, meta.h
 *            struct nrs_obj_row (0 0 a copied object; seg >= 1 the
 *            record at off of the adopted WAL segment seg).
 *   metalog  one row (id 1): seq, the meta sequence number of the last
 *            logged change the store holds (meta.h THE CHANGE LOG;
 *            sqlite_log.c), 0 at creation.  Schema 4.
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
 *   3 -> 4  CREATE TABLE metalog, its row at seq 0.
 *   4 -> 5  ALTER TABLE objects ADD COLUMN seg, off (NOT NULL DEFAULT 0:
 *           every older row is a copied object).
 *
 *
 *   MT3 ino, cookie and stream id come from AUTOINCREMENT sequences and are
 *      never reused, even after their row is deleted.  sqlite_sequence is
 *      seeded at creation so the first stored inode is 16 (NRS_FIRST_INO)
 *      and the first cookie 3 ("." and ".." are 1 and 2); streams start at 1.
 *      A damaged (lowered) streams sequence could issue an old id again,
 *      and recovery would then hand the old stream's WAL records to the
 *      new one: at every mount recovery raises it above every id the WAL
 *      and the objects table name (nrs_meta_stream_seq_raise, RD4).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

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

/* Schema 5: where an object's bytes are (as the 4 -> 5 upgrade adds them). */
#define OBJECTS_SEG_SQL \
	"ALTER TABLE objects ADD COLUMN seg INTEGER NOT NULL DEFAULT 0;" \
	"ALTER TABLE objects ADD COLUMN off INTEGER NOT NULL DEFAULT 0;"

/* Schema 4: the change log's sequence number (sqlite_log.c). */
#define METALOG_SQL \
	"CREATE TABLE metalog(id INTEGER PRIMARY KEY CHECK(id = 1)," \
	" seq INTEGER NOT NULL);" \
	"INSERT INTO metalog(id, seq) VALUES(1, 0);"

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
	OBJECTS_SQL
	OBJECTS_SEG_SQL
	METALOG_SQL;

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
		 /* MT3 */
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
	if (!ret && from < 4)		/* 3 -> 4: the change log */
		ret = exec(m, METALOG_SQL);
	if (!ret && from < 5)		/* 4 -> 5: adopted generations */
		ret = exec(m, OBJECTS_SEG_SQL);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
	ret = ret ?: exec(m, sql);
	if (!ret)
		nrs_info("meta: %s upgraded from schema %lld to %d (checksums"
			 " for %d stream rows)", m->path, (long long)from,
			 SCHEMA_VERSION, rows);
	return ret;
}

int nrs_sq_schema_open(struct sqlite_meta *m)
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
