/*
 * sqlite_tools.c - what the offline tools (nereusfs-fsck) read and repair
 * in the SQLite store: SQLite's integrity_check, the AUTOINCREMENT
 * sequences (MT3 of sqlite_schema.c), every inode and dirent row as
 * stored.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

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

struct problem_ctx {
	int (*cb)(void *ctx, const char *problem);
	void *ctx;
};

static int problem_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct problem_ctx *c = p;
	const char *text = (const char *)sqlite3_column_text(s, 0);

	(void)m;
	return text && strcmp(text, "ok") != 0 ? c->cb(c->ctx, text) : 0;
}

int nrs_sq_integrity_check(struct nrs_meta *base,
			   int (*cb)(void *ctx, const char *problem),
			   void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct problem_ctx c = { cb, ctx };
	sqlite3_stmt *s;
	int ret = read_prepare(m, "PRAGMA integrity_check", &s);

	if (ret)
		return ret;
	ret = each_row(m, s, problem_row, &c);
	sqlite3_finalize(s);
	return tx_end(m, ret);
}

int nrs_sq_stream_seq_raise(struct nrs_meta *base, uint64_t id)
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

/* seq[0] the inodes sequence, seq[1] the streams one. */
static int seq_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	struct nrs_meta_seq *seq = p;
	const char *name = (const char *)sqlite3_column_text(s, 0);
	struct nrs_meta_seq *q = &seq[name && strcmp(name, "inodes") == 0 ?
				      0 : 1];

	(void)m;
	q->v = sqlite3_column_int64(s, 1);
	q->integer = sqlite3_column_int(s, 2) != 0;
	return 0;
}

int nrs_sq_sequences(struct nrs_meta *base, struct nrs_meta_seq *inodes,
		     struct nrs_meta_seq *streams)
{
	struct sqlite_meta *m = sqm(base);
	static const char sql[] =
		"SELECT name, seq, typeof(seq) = 'integer' FROM sqlite_sequence"
		" WHERE name IN ('inodes', 'streams')";
	struct nrs_meta_seq seq[2] = { { 0, true }, { 0, true } };
	sqlite3_stmt *s;
	int ret = read_prepare(m, sql, &s);

	if (ret)
		return ret;
	ret = each_row(m, s, seq_row, seq);
	sqlite3_finalize(s);
	ret = tx_end(m, ret);
	if (!ret) {
		*inodes = seq[0];
		*streams = seq[1];
	}
	return ret;
}

struct inode_ctx {
	int (*cb)(void *ctx, const struct nrs_attr *a);
	void *ctx;
};

static int inode_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct inode_ctx *c = p;
	struct nrs_attr a = { 0 };

	(void)m;
	col_attr(s, &a);
	return c->cb(c->ctx, &a);
}

int nrs_sq_inode_foreach(struct nrs_meta *base,
			 int (*cb)(void *ctx, const struct nrs_attr *a),
			 void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct inode_ctx c = { cb, ctx };
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	return tx_end(m, each_row(m, m->st[ST_INODE_LIST], inode_row, &c));
}

struct dirent_ctx {
	nrs_meta_rawdirent_cb cb;
	void *ctx;
};

static int dirent_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct dirent_ctx *c = p;
	const void *name = sqlite3_column_blob(s, 1);
	size_t len = (size_t)sqlite3_column_bytes(s, 1);

	(void)m;
	return c->cb(c->ctx, col_u64(s, 0), name ? name : "", len,
		     col_u64(s, 2));
}

int nrs_sq_dirent_foreach(struct nrs_meta *base, nrs_meta_rawdirent_cb cb,
			  void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct dirent_ctx c = { cb, ctx };
	int ret = tx_begin(m, TX_READ);

	if (ret)
		return ret;
	return tx_end(m, each_row(m, m->st[ST_DIRENT_LIST], dirent_row, &c));
}
