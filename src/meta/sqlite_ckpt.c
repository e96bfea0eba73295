/*
 * sqlite_ckpt.c - the SQLite store as bytes, for the checkpoints of
 * bg/checkpoint.c: a consistent copy of the whole database taken while the
 * daemon runs (nrs_meta_snapshot), and the inverse, such bytes installed as
 * the database of an empty data directory (nrs_meta_install).
 *
 * The copy is SQLite's online backup into an in-memory database, then
 * sqlite3_serialize: the bytes are a database file, the same pages the
 * store holds, except that the header's file format bytes (offsets 18
 * and 19) say rollback journal, not WAL, so that the bytes can be opened
 * in memory to be checked; the open that follows an install sets WAL
 * mode again.
 *
 *   SN1 A snapshot holds m->lock for SNAP_STEP_BYTES of pages at a time and
 *      lets it go between steps, so appends' head publication waits at
 *      most one step, not the whole copy.  Every call of the store is one
 *      whole transaction under m->lock and none is open between two steps,
 *      so the connection the backup reads is the one that writes: SQLite
 *      writes each page a transaction changes into the copy too (the
 *      backup is "updated" by its own connection, never restarted), and
 *      the copy finished is the database as of the last step: one state
 *      between two calls, never half of one.
 *   SN2 An install never replaces a database: the bytes are verified
 *      first (a SQLite file, PRAGMA integrity_check "ok", user_version
 *      from 1 up to our SCHEMA_VERSION: -EUCLEAN / -EPROTO otherwise; 0 is
 *      not ours, -EUCLEAN), written to a temporary file beside path and
 *      fsynced, then linked to path, which fails -EEXIST if path (or its
 *      -wal) exists, and the directory is fsynced.  A crash leaves path
 *      whole or absent (the temporary name is removed by the next
 *      install).
 *   SN3 Bytes of an older schema (a checkpoint the previous release
 *      wrote) are upgraded before they are written: opened in memory and
 *      put through the upgrade a read-write open runs (sqlite_schema.c
 *      nrs_sq_schema_open, one transaction: all or nothing), copied out
 *      and verified again as SN2 says, now at SCHEMA_VERSION.  A failed
 *      upgrade writes nothing.  So what is installed is always of our
 *      schema, before anything reads it: the META records a recovery
 *      replays next (stream/recovery_meta.c RM1) apply to the upgraded tables,
 *      and a change recorded against an older table applies to the newer
 *      one or is refused, never skipped (sqlite_log.c ML3).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meta/sqlite_priv.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/log.h"

/* SN1: 256 KiB of pages per hold of the lock, whatever the page size (a
 * new database has 1 KiB pages, an older one 4 KiB: sqlite_open.c).
 * test_snapshot prints it: a database of 10,000 streams, 1.4 MiB, was 6
 * steps of at most 0.25-0.4 ms, 6-10 ms in all, on the shared test
 * machine, with 4 KiB pages. */
#define SNAP_STEP_BYTES	(256 * 1024)

/* Steps SQLite may answer "busy" (another connection holds a lock: none
 * should, the store's locking is exclusive) before the copy gives up. */
#define SNAP_BUSY_MAX	1000

/* One backup step under m->lock: the SQLite result code. */
static int snap_step(struct sqlite_meta *m, sqlite3_backup *b, int pages,
		     struct nrs_meta_snap_stats *st)
{
	uint64_t t0, dt;
	int rc;

	if (pthread_mutex_lock(&m->lock) != 0)
		return SQLITE_MISUSE;	/* called back from a callback */
	t0 = nrs_now_mono_ns();
	rc = sqlite3_backup_step(b, pages);
	dt = nrs_now_mono_ns() - t0;
	pthread_mutex_unlock(&m->lock);
	st->steps++;
	if (dt > st->max_hold_ns)
		st->max_hold_ns = dt;
	return rc;
}

/* The in-memory copy of m (SN1) into dst. */
static int snap_copy(struct sqlite_meta *m, sqlite3 *dst,
		     struct nrs_meta_snap_stats *st)
{
	char sql[64];
	int64_t psize = 0;
	sqlite3_backup *b;
	int rc, ret;

	pthread_mutex_lock(&m->lock);
	ret = query1(m, "PRAGMA page_size", &psize, NULL, 0);
	pthread_mutex_unlock(&m->lock);
	if (ret)
		return ret;
	if (psize < 512 || psize > 65536)	/* SQLite's own bounds */
		return -EUCLEAN;
	/* an in-memory destination must have the source's page size */
	snprintf(sql, sizeof(sql), "PRAGMA page_size=%lld", (long long)psize);
	rc = sqlite3_exec(dst, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return -ENOMEM;
	b = sqlite3_backup_init(dst, "main", m->db, "main");
	if (!b) {
		nrs_err("meta: snapshot: %s", sqlite3_errmsg(dst));
		return -ENOMEM;
	}
	for (int busy = 0;; ) {
		rc = snap_step(m, b, (int)(SNAP_STEP_BYTES / psize), st);
		if (rc == SQLITE_OK)
			continue;
		if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) ||
		    ++busy > SNAP_BUSY_MAX)
			break;
		usleep(1000);
	}
	st->pages = (uint64_t)sqlite3_backup_pagecount(b);
	sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE) {
		nrs_err("meta: snapshot of %s: %s (sqlite %d)", m->path,
			sqlite3_errstr(rc), rc);
		return rc == SQLITE_NOMEM ? -ENOMEM :
		       (rc & 0xff) == SQLITE_CORRUPT ? -EUCLEAN :
		       rc == SQLITE_BUSY || rc == SQLITE_LOCKED ? -EBUSY :
		       rc == SQLITE_MISUSE ? -EDEADLK : -EIO;
	}
	return 0;
}

int nrs_sq_snapshot(struct nrs_meta *base, void **buf, size_t *len,
		    struct nrs_meta_snap_stats *stats)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_meta_snap_stats st = { 0 };
	uint64_t t0 = nrs_now_mono_ns();
	sqlite3_int64 size = 0;
	unsigned char *ser;
	sqlite3 *dst = NULL;
	void *copy;
	int rc, ret;

	rc = sqlite3_open_v2(":memory:", &dst, SQLITE_OPEN_READWRITE |
			     SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_close(dst);
		return -ENOMEM;
	}
	ret = snap_copy(m, dst, &st);
	if (ret)
		goto out;
	ser = sqlite3_serialize(dst, "main", &size, 0);
	if (!ser || size <= 0) {
		sqlite3_free(ser);
		ret = -ENOMEM;
		goto out;
	}
	copy = malloc((size_t)size);
	if (copy) {
		memcpy(copy, ser, (size_t)size);
		if (size >= 100)	/* rollback journal, see the top */
			((unsigned char *)copy)[18] =
				((unsigned char *)copy)[19] = 1;
	}
	sqlite3_free(ser);
	if (!copy) {
		ret = -ENOMEM;
		goto out;
	}
	st.bytes = (uint64_t)size;
	st.total_ns = nrs_now_mono_ns() - t0;
	*buf = copy;
	*len = (size_t)size;
	if (stats)
		*stats = st;
out:
	sqlite3_close(dst);
	return ret;
}

/* SN2: the checks of bytes about to become a database; *version is
 * their schema. */
static int verify_bytes(const void *buf, size_t len, int64_t *version)
{
	static const char magic[16] = "SQLite format 3";
	unsigned char *p = (unsigned char *)buf;	/* read only below */
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc, ret = 0, problems = 0;

	*version = -1;
	if (len < 512 || len % 512 || memcmp(buf, magic, sizeof(magic))) {
		nrs_err("meta: install: %zu bytes that are no SQLite database",
			len);
		return -EUCLEAN;
	}
	rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE |
			     SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_deserialize(db, "main", p, (sqlite3_int64)len,
					 (sqlite3_int64)len,
					 SQLITE_DESERIALIZE_READONLY);
	if (rc != SQLITE_OK) {
		ret = rc == SQLITE_NOMEM ? -ENOMEM : -EUCLEAN;
		goto out;
	}
	rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(10)", -1, &s, NULL);
	if (rc == SQLITE_OK)
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			const char *t = (const char *)sqlite3_column_text(s, 0);

			if (t && strcmp(t, "ok") == 0)
				continue;
			nrs_err("meta: install: integrity_check: %s",
				t ? t : "?");
			problems++;
		}
	sqlite3_finalize(s);
	s = NULL;
	if (problems || (rc != SQLITE_DONE && rc != SQLITE_OK)) {
		nrs_err("meta: install: the database is damaged (%s): refused",
			problems ? "integrity_check" : sqlite3_errmsg(db));
		ret = -EUCLEAN;
		goto out;
	}
	rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL);
	if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
		*version = sqlite3_column_int64(s, 0);
	if (*version < 1 || *version > SCHEMA_VERSION) {
		nrs_err("meta: install: schema version %lld, not 1 to %d:"
			" refused", (long long)*version, SCHEMA_VERSION);
		ret = *version == 0 || *version == -1 ? -EUCLEAN : -EPROTO;
	}
out:
	sqlite3_finalize(s);
	sqlite3_close(db);
	return ret;
}

/* SN3: the bytes of an older schema, upgraded in memory: *out (malloc'd)
 * is the upgraded database, or nothing and -errno. */
static int upgrade_bytes(const void *buf, size_t len, void **out,
			 size_t *out_len)
{
	struct sqlite_meta t = { .path = (char *)"the checkpoint" };
	sqlite3_int64 size = 0;
	unsigned char *img, *ser = NULL;
	int rc, ret;

	img = sqlite3_malloc64(len);
	if (!img)
		return -ENOMEM;
	memcpy(img, buf, len);
	rc = sqlite3_open_v2(":memory:", &t.db, SQLITE_OPEN_READWRITE |
			     SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK)
		sqlite3_free(img);
	else				/* frees img, also when it fails */
		rc = sqlite3_deserialize(t.db, "main", img, (sqlite3_int64)len,
					 (sqlite3_int64)len,
					 SQLITE_DESERIALIZE_FREEONCLOSE |
					 SQLITE_DESERIALIZE_RESIZEABLE);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function_v2(t.db, "nrs_stream_crc",
			(int)CRC_FIELDS, SQLITE_UTF8 | SQLITE_DETERMINISTIC |
			SQLITE_DIRECTONLY, NULL, nrs_sq_sql_stream_crc, NULL,
			NULL, NULL);		/* CK1, for 1 -> 2 */
	if (rc != SQLITE_OK) {
		ret = rc == SQLITE_NOMEM ? -ENOMEM : -EUCLEAN;
		goto out;
	}
	sqlite3_extended_result_codes(t.db, 1);
	ret = schema_open(&t);			/* SN3: the open's upgrade */
	if (!ret)
		ser = sqlite3_serialize(t.db, "main", &size, 0);
	if (!ret && (!ser || size < 100 || (size_t)size % 512))
		ret = -ENOMEM;
	if (!ret)
		*out = malloc((size_t)size);
	if (!ret && !*out)
		ret = -ENOMEM;
	if (!ret) {
		memcpy(*out, ser, (size_t)size);
		((unsigned char *)*out)[18] = ((unsigned char *)*out)[19] = 1;
		*out_len = (size_t)size;
	}
out:
	sqlite3_free(ser);
	sqlite3_close(t.db);
	if (ret)
		nrs_err("meta: install: the checkpoint's schema cannot be"
			" upgraded (%s): refused", strerror(-ret));
	return ret;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fsync_parent(const char *path)
{
	char *dup = strdup(path);
	int ret;

	if (!dup)
		return -ENOMEM;
	ret = nrs_fsync_dir(dirname(dup));
	free(dup);
	return ret;
}

int nrs_meta_install(const char *path, const void *buf, size_t len)
{
	char tmp[4096], wal[4096];
	int64_t version = -1;
	void *up = NULL;
	int fd, ret;

	if (snprintf(tmp, sizeof(tmp), "%s.install", path) >= (int)sizeof(tmp) ||
	    snprintf(wal, sizeof(wal), "%s-wal", path) >= (int)sizeof(wal))
		return -ENAMETOOLONG;
	if (access(path, F_OK) == 0 || access(wal, F_OK) == 0) {
		nrs_err("meta: install: %s exists: never replaced", path);
		return -EEXIST;
	}
	ret = verify_bytes(buf, len, &version);
	if (!ret && version < SCHEMA_VERSION) {		/* SN3 */
		ret = upgrade_bytes(buf, len, &up, &len) ?:
			verify_bytes(up, len, &version);
		buf = up;
		if (!ret && version != SCHEMA_VERSION)
			ret = -EPROTO;
	}
	if (ret)
		goto out;
	(void)unlink(tmp);		/* a crashed install's */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		  0600);			/* DM1 */
	if (fd < 0) {
		ret = -errno;
		goto out;
	}
	ret = write_all(fd, buf, len);
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (!ret && link(tmp, path) < 0)	/* SN2: never over path */
		ret = -errno;
	(void)unlink(tmp);
	if (!ret)
		ret = fsync_parent(path);
	if (ret)
		nrs_err("meta: install %s: %s", path, strerror(-ret));
out:
	free(up);
	return ret;
}
