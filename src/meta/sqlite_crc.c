/*
 * sqlite_crc.c - the checksum of every streams row: computed in C, given
 * to SQL as the function nrs_stream_crc(), verified at every read.
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
 *   CK1 Every statement that changes a covered column sets crc in the same
 *      statement, from the new values, through the SQL function
 *      nrs_stream_crc() that each connection registers (stream_crc()).
 *      No trigger, view or default uses it, so the sqlite3 shell can still
 *      read and write the file.
 *   CK2 Such a statement changes a row only if its stored crc matches the
 *      row as it is (WHERE ... AND crc = nrs_stream_crc(...)): a damaged
 *      row is never sealed with a checksum over its damage, the change
 *      fails -EUCLEAN.  The exception is unlink, which must succeed so the
 *      name can go: it marks the row unlinked and leaves a bad crc bad, so
 *      the row reads as damaged until nrs_meta_forget_inode deletes it.
 *   CK3 Every read of a row recomputes the checksum; a mismatch, or a
 *      covered column or crc that is not an integer, is logged as an error
 *      naming the stream and this database file.  nrs_meta_stream_get
 *      then fails -EUCLEAN; nrs_meta_stream_foreach passes the row on
 *      marked corrupt (only its id is known), so that the caller can keep
 *      the other streams (core_handle.c takes such a stream offline).
 *
 *   (CK4, structural damage, is checked at open: sqlite_open.c.)
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/crc32c.h"
#include "util/le.h"
#include "util/log.h"

/* The checksum of a streams row from its covered columns as stored. */
static uint32_t stream_crc(const int64_t v[CRC_FIELDS])
{
	unsigned char buf[CRC_FIELDS * 8];

	for (size_t i = 0; i < CRC_FIELDS; i++)
		nrs_le64_put(buf + 8 * i, (uint64_t)v[i]);
	return nrs_crc32c(0, buf, sizeof(buf));
}

/* CK1: nrs_stream_crc(id, ino, head, version, start, epoch, last_lsn,
 * profile, unlinked); NULL (which no stored crc equals) if an argument is
 * not an integer. */
void nrs_sq_sql_stream_crc(sqlite3_context *ctx, int argc,
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
 * CK3: the row s is on (STREAM_COLS) into *r, verified: 0, or -EUCLEAN
 * (logged) with *r filled as stored and r->corrupt set.
 */
int nrs_sq_col_stream(struct sqlite_meta *m, sqlite3_stmt *s,
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

/* -ENOENT, or -EUCLEAN (CK3: logged, *r as stored) */
int nrs_sq_stream_row_get(struct sqlite_meta *m, uint64_t id, struct nrs_stream_row *r)
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
 * After an UPDATE of stream id's covered columns (CK2): 0 if it changed
 * the row, else why not: -ENOENT, -EUCLEAN (the row fails its checksum),
 * or -ESTALE (the row is intact: a condition of the caller's failed).
 */
int nrs_sq_stream_updated(struct sqlite_meta *m, uint64_t id,
			  struct nrs_stream_row *cur)
{
	if (sqlite3_changes(m->db) == 1)
		return 0;
	return stream_get(m, id, cur) ?: -ESTALE;
}
