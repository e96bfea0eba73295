/*
 * sqlite_obj.c - object generations in the SQLite store (table objects,
 * one row per generation).  The states and every move between them are
 * the table of objgen.c; here each move is one UPDATE ... WHERE state =
 * the state it leaves (GS2), and nrs_meta_obj_set_state takes only the
 * moves GS1 allows.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

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
	o->seg = col_u64(s, 9);
	o->off = col_u64(s, 10);
}

/* Under the lock, in a transaction: o's intent; sets its gen. */
static int obj_insert(struct sqlite_meta *m, struct nrs_obj_row *o)
{
	sqlite3_stmt *s;
	int ret;

	s = BIND(m, ST_OBJ_INSERT, o->stream_id, o->start, o->end, o->length);
	bind_bytes(s, 5, o->sha256, sizeof(o->sha256));
	sqlite3_bind_int(s, 6, NRS_OBJ_PREPARED);
	sqlite3_bind_int64(s, 7, o->ctime_ns);
	sqlite3_bind_int64(s, 8, (int64_t)o->seg);
	sqlite3_bind_int64(s, 9, (int64_t)o->off);
	ret = run(m, s);
	if (!ret) {
		o->gen = (uint64_t)sqlite3_last_insert_rowid(m->db);
		o->state = NRS_OBJ_PREPARED;
		o->mtime_ns = o->ctime_ns;
	}
	return ret;
}

int nrs_sq_obj_prepare_n(struct nrs_meta *base, struct nrs_obj_row *v,
			 size_t n)
{
	struct sqlite_meta *m = sqm(base);
	int ret;

	for (size_t i = 0; i < n; i++)
		if (v[i].end <= v[i].start)
			return -EINVAL;
	if (n == 0)
		return 0;
	ret = tx_begin(m, TX_DURABLE); /* I7: the intent */
	if (ret)
		return ret;
	for (size_t i = 0; !ret && i < n; i++)
		ret = obj_insert(m, &v[i]);
	return tx_end(m, ret);
}

int nrs_sq_obj_prepare(struct nrs_meta *base, struct nrs_obj_row *o)
{
	return nrs_sq_obj_prepare_n(base, o, 1);
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

int nrs_sq_obj_publish(struct nrs_meta *base, uint64_t gen,
		       const unsigned char sha256[32])
{
	struct sqlite_meta *m = sqm(base);

	/* durable: the WAL copy of the range may go next (materializer MZ5) */
	int ret = tx_begin(m, TX_DURABLE); /* I7 */

	if (ret)
		return ret;
	return tx_end(m, obj_publish(m, gen, sha256));
}

int nrs_sq_obj_publish_n(struct nrs_meta *base, const struct nrs_obj_row *v,
			 size_t n)
{
	struct sqlite_meta *m = sqm(base);
	int ret;

	if (n == 0)
		return 0;
	ret = tx_begin(m, TX_DURABLE); /* I7, as nrs_sq_obj_publish */
	if (ret)
		return ret;
	for (size_t i = 0; !ret && i < n; i++)
		ret = obj_publish(m, v[i].gen, v[i].sha256);
	return tx_end(m, ret);
}

int nrs_sq_obj_replace(struct nrs_meta *base, uint64_t gen,
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

int nrs_sq_obj_set_state(struct nrs_meta *base, uint64_t gen, int from, int to,
			 int64_t now_ns)
{
	struct sqlite_meta *m = sqm(base);
	int ret = nrs_meta_obj_transition(gen, from, to);	/* GS1 */

	if (ret)
		return ret;
	ret = tx_begin(m, TX_DURABLE);
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

int nrs_sq_obj_delete(struct nrs_meta *base, uint64_t gen)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_DURABLE);

	if (!ret)
		ret = tx_end(m, run(m, BIND(m, ST_OBJ_DELETE, gen)));
	return ret;
}

struct obj_list_ctx {
	int (*cb)(void *ctx, const struct nrs_obj_row *o);
	void *ctx;
};

static int obj_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct obj_list_ctx *l = p;
	struct nrs_obj_row o;

	(void)m;
	col_obj(s, &o);
	return l->cb(l->ctx, &o);
}

static int obj_list(struct sqlite_meta *m, sqlite3_stmt *s,
		    int (*cb)(void *ctx, const struct nrs_obj_row *o), void *ctx)
{
	struct obj_list_ctx l = { cb, ctx };

	return each_row(m, s, obj_row, &l);
}

int nrs_sq_obj_foreach(struct nrs_meta *base, uint64_t stream_id,
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

int nrs_sq_obj_foreach_state(struct nrs_meta *base, int state,
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
