/*
 * sqlite_stream.c - the streams rows of the SQLite store: reading them,
 * raising start and epoch, and publishing heads, the compare-and-set of
 * meta.h MC4 (UPDATE ... WHERE version = old_version) in batches of one
 * transaction (MC5).  Every change keeps the row checksum (sqlite_crc.c
 * CK1, CK2).
 *
 * A publication of one head that need not be synced is its UPDATE alone,
 * in autocommit: one statement is atomic by itself, and BEGIN and COMMIT
 * around it cost about 2k instructions more per batch (callgrind, a lone
 * writer).  Several heads, or a synced publication (a fence's), take an
 * explicit transaction (MC5; the synchronous level is set outside it).
 * The failpoint meta.before_commit, a COMMIT that failed, then fires
 * before the UPDATE: either way nothing changed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/failpoint.h"
#include "util/log.h"

/* start: raise only, never past the head.  (The epoch moves with the
 * head: nrs_meta_publish.) */
int nrs_sq_set_start(struct nrs_meta *base, uint64_t stream_id, uint64_t start)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_stream_row r = { 0 };
	int ret = tx_begin(m, TX_LOGGED);

	if (ret)
		return ret;
	ret = stream_get(m, stream_id, &r);
	if (!ret && (start < r.start || start > r.head))
		ret = -EINVAL;
	if (!ret)
		ret = run(m, BIND(m, ST_STREAM_SET_START, stream_id, start)) ?:
			stream_updated(m, stream_id, &r);
	return tx_end(m, ret);
}

int nrs_sq_stream_get(struct nrs_meta *base, uint64_t stream_id,
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

struct stream_list_ctx {
	nrs_meta_stream_cb cb;
	void *ctx;
};

static int stream_row(struct sqlite_meta *m, sqlite3_stmt *s, void *p)
{
	const struct stream_list_ctx *l = p;
	struct nrs_stream_row r = { 0 };

	col_stream(m, s, &r);		/* CK3: passed on, marked */
	return l->cb(l->ctx, &r);
}

int nrs_sq_stream_foreach(struct nrs_meta *base, nrs_meta_stream_cb cb,
			  void *ctx)
{
	struct sqlite_meta *m = sqm(base);
	struct stream_list_ctx l = { cb, ctx };
	int ret = tx_begin(m, TX_NONE);

	if (ret)
		return ret;
	return tx_end(m, each_row(m, m->st[ST_STREAM_LIST], stream_row, &l));
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
			return ret;		/* -EUCLEAN: CK2 */
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

int nrs_sq_publish(struct nrs_meta *base, const struct nrs_head_update *u,
		   size_t n, bool durable)
{
	struct sqlite_meta *m = sqm(base);
	int ret;

	if (n == 0)
		return 0;
	if (n == 1 && !durable) {
		/* one statement, which commits itself (above) */
		ret = nrs_failpoint(NRS_FP_META_BEFORE_COMMIT) ?:
			tx_begin(m, TX_NONE);
		if (!ret)
			ret = tx_end(m, do_publish(m, u, n));
	} else {
		ret = tx_begin(m, durable ? TX_DURABLE : TX_WRITE);
		if (ret)
			return ret;
		ret = do_publish(m, u, n);
		if (!ret)
			ret = nrs_failpoint(NRS_FP_META_BEFORE_COMMIT);
		ret = tx_end(m, ret);
	}
	if (!ret)
		ret = nrs_failpoint(NRS_FP_META_AFTER_COMMIT);
	return ret;
}
