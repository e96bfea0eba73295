/*
 * sqlite_log.c - the change log of the SQLite store (meta.h THE CHANGE
 * LOG): every logged call's transaction is recorded by a SQLite session,
 * numbered in the table metalog (sqlite_schema.c, schema 4) and handed to
 * the sink as its changeset; a copy of the store (a restored checkpoint)
 * replays those changesets in number order.
 *
 * Why changesets and not logical operations: the change is the rows the
 * call wrote, whatever the call was (create, rename over a name, a setattr
 * that touches three columns, a profile set on a directory), so replay
 * needs no second implementation of each operation, gives the same inode
 * numbers, stream ids and times as the original, and an operation added
 * later is logged with no new record format.  SQLite checks on replay that
 * each changed row is as it was before the change (the old values in the
 * changeset); a mismatch is divergence, never papered over (ML2).
 *
 * The session extension is in Debian's and most distributions' libsqlite3;
 * its prototypes are behind the two defines below, so this is the one file
 * that sets them.  configure checks that the library has the symbols;
 * nrs_meta_log_set checks at run time that it was built with them on.
 *
 *  ML1 The number and the change are one transaction.  A logged call's
 *      session records the rows it changes in inodes, dirents, streams,
 *      xattrs; if it changed any, metalog.seq is raised by one in the same
 *      transaction, the changeset taken (it holds that metalog change
 *      too), and only after COMMIT is it handed to the sink, under the
 *      lock, so the sink sees changes in number order, each once.  A
 *      snapshot of the store therefore holds exactly the changes up to
 *      its metalog.seq.  object rows (materialization) and
 *      sqlite_sequence are not logged: a checkpoint brings the first, and
 *      an insert with its ino or id raises the second on replay.
 *  ML2 A replay applies change seq only onto a copy that holds seq - 1:
 *      one it holds already is skipped (1), a gap is -EUCLEAN (a change is
 *      missing: stop, never apply the later ones), and so is a change
 *      whose rows do not match the copy (a conflict), a malformed one, or
 *      one that does not move metalog to seq -- except that a streams
 *      row's head, version, last LSN and mtime move by publication, which
 *      is not logged: a streams row that differs is taken as the change
 *      says, and the row checksum of every streams row the change wrote is
 *      computed again from the row as it then is (sqlite_crc.c CK1).  All
 *      of a replayed change, or none of it, in one transaction with its
 *      number, so a replay killed at any point runs again to the same
 *      state.
 *  ML3 A change applies to the tables it was recorded against, or is
 *      refused (-EUCLEAN), never skipped: SQLite leaves out, with no error,
 *      the rows of a table that does not fit the change (missing, fewer
 *      columns than the change has, the primary key elsewhere), and
 *      metalog would still move.  So before a change is applied, every
 *      table it names must be one of the logged ones and fit: columns at
 *      least as many as the change's, the primary key where it has it.  A
 *      change recorded before an upgrade (a checkpoint of an older schema,
 *      sqlite_ckpt.c SN3, then the META records its daemon wrote) fits the
 *      upgraded tables, since the upgrades only add tables and add
 *      columns at the end (sqlite_schema.c); one from a newer schema, with
 *      columns ours lack, is refused.
 */
#include "config.h"

#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/log.h"

static const char *const logged[] = { "inodes", "dirents", "streams",
				      "xattrs", "metalog" };

static bool have_sessions(void)
{
	return sqlite3_compileoption_used("ENABLE_SESSION") &&
	       sqlite3_compileoption_used("ENABLE_PREUPDATE_HOOK");
}

int nrs_sq_log_begin(struct sqlite_meta *m)
{
	sqlite3_session *s = NULL;
	int rc;

	if (!m->log_fn)
		return 0;
	rc = sqlite3session_create(m->db, "main", &s);
	for (size_t i = 0; rc == SQLITE_OK && i < sizeof(logged) /
						  sizeof(logged[0]); i++)
		rc = sqlite3session_attach(s, logged[i]);
	if (rc != SQLITE_OK) {
		if (s)
			sqlite3session_delete(s);
		return sql_fail(m, rc, "session");
	}
	m->sess = s;
	return 0;
}

/* ML1: before COMMIT, inside the call's transaction. */
int nrs_sq_log_end(struct sqlite_meta *m, void **change, size_t *len,
		   uint64_t *seq)
{
	sqlite3_session *s = m->sess;
	void *p = NULL;
	int64_t v = 0;
	int n = 0, rc, ret;

	if (sqlite3session_isempty(s))
		return 0;				/* no row changed */
	ret = exec(m, "UPDATE metalog SET seq = seq + 1 WHERE id = 1") ?:
	      query1(m, "SELECT seq FROM metalog WHERE id = 1", &v, NULL, 0);
	if (ret)
		return ret;
	rc = sqlite3session_changeset(s, &n, &p);
	if (rc != SQLITE_OK || n <= 0) {
		sqlite3_free(p);
		return rc != SQLITE_OK ? sql_fail(m, rc, "changeset") : -EIO;
	}
	*change = p;
	*len = (size_t)n;
	*seq = (uint64_t)v;
	return 0;
}

void nrs_sq_log_drop(struct sqlite_meta *m)
{
	if (m->sess)
		sqlite3session_delete(m->sess);
	m->sess = NULL;
}

void nrs_sq_log_free(void *change)
{
	sqlite3_free(change);
}

int nrs_sq_log_set(struct nrs_meta *base, nrs_meta_log_fn fn, void *ctx)
{
	struct sqlite_meta *m = sqm(base);

	if (fn && !have_sessions()) {
		nrs_err("meta: this SQLite (%s) has no session extension: the"
			" change log needs one built with SQLITE_ENABLE_SESSION"
			" and SQLITE_ENABLE_PREUPDATE_HOOK", sqlite3_libversion());
		return -ENOTSUP;
	}
	pthread_mutex_lock(&m->lock);
	m->log_fn = fn;
	m->log_ctx = fn ? ctx : NULL;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int held_seq(struct sqlite_meta *m, uint64_t *seq)
{
	int64_t v = 0;
	int ret = query1(m, "SELECT seq FROM metalog WHERE id = 1", &v, NULL,
			 0);

	if (!ret)
		*seq = (uint64_t)v;
	return ret;
}

int nrs_sq_log_seq(struct nrs_meta *base, uint64_t *seq)
{
	struct sqlite_meta *m = sqm(base);
	int ret = tx_begin(m, TX_READ);

	return ret ? ret : tx_end(m, held_seq(m, seq));
}

struct apply {
	struct sqlite_meta *m;
	uint64_t seq;
	int conflicts;
};

/* ML2: only a streams row's unlogged columns may differ. */
static int on_conflict(void *p, int why, sqlite3_changeset_iter *it)
{
	struct apply *a = p;
	const char *tab = "?";
	int ncol = 0, op = 0;

	sqlite3changeset_op(it, &tab, &ncol, &op, NULL);
	if (why == SQLITE_CHANGESET_DATA && strcmp(tab, "streams") == 0)
		return SQLITE_CHANGESET_REPLACE;
	if (a->conflicts++ == 0)
		nrs_err("meta: change %" PRIu64 " does not fit this store: a"
			" row of %s is not as the change found it (conflict"
			" %d, op %d): the store and the log diverged", a->seq,
			tab, why, op);
	return SQLITE_CHANGESET_ABORT;
}

/* ML2: the row checksum of each streams row the change inserted or
 * updated, from the row as it now is. */
static int fix_crcs(struct sqlite_meta *m, const void *change, size_t len)
{
	sqlite3_changeset_iter *it = NULL;
	sqlite3_stmt *s = NULL;
	int rc, ret = 0;

	rc = sqlite3changeset_start(&it, (int)len, (void *)change);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(m->db, "UPDATE streams SET crc = "
					ROW_CRC_NOW " WHERE id = ?1", -1, &s,
					NULL);
	while (rc == SQLITE_OK && !ret &&
	       (rc = sqlite3changeset_next(it)) == SQLITE_ROW) {
		const char *tab;
		sqlite3_value *v = NULL;
		int ncol, op;

		rc = sqlite3changeset_op(it, &tab, &ncol, &op, NULL);
		if (rc != SQLITE_OK || strcmp(tab, "streams") != 0 ||
		    op == SQLITE_DELETE)
			continue;
		rc = op == SQLITE_INSERT ? sqlite3changeset_new(it, 0, &v) :
					   sqlite3changeset_old(it, 0, &v);
		if (rc != SQLITE_OK || !v)
			break;
		sqlite3_bind_int64(s, 1, sqlite3_value_int64(v));
		ret = run(m, s);
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	if (s)
		sqlite3_finalize(s);
	if (it)
		sqlite3changeset_finalize(it);
	return ret ? ret : rc != SQLITE_OK ? -EUCLEAN : 0;
}

/* ML3: tab, one of the logged tables, as the change has it: ncol columns,
 * pk[i] non-zero for those of the primary key. */
static int table_fits(struct sqlite_meta *m, const char *tab, int ncol,
		      const unsigned char *pk)
{
	sqlite3_stmt *s = NULL;
	int rc, n = 0, fits = 0;

	for (size_t i = 0; i < sizeof(logged) / sizeof(logged[0]); i++)
		fits |= strcmp(tab, logged[i]) == 0;
	if (!fits)
		return 0;
	rc = sqlite3_prepare_v2(m->db, "SELECT pk FROM pragma_table_info(?1)"
				" ORDER BY cid", -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(m, rc, "pragma_table_info");
	sqlite3_bind_text(s, 1, tab, -1, SQLITE_STATIC);
	while (fits && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		bool key = sqlite3_column_int(s, 0) != 0;

		fits = n < ncol ? key == (pk[n] != 0) : !key;
		n++;
	}
	sqlite3_finalize(s);
	return fits && n >= ncol;
}

/* ML3: every table of the change fits the store's. */
static int change_fits(struct sqlite_meta *m, uint64_t seq,
		       const void *change, size_t len)
{
	sqlite3_changeset_iter *it = NULL;
	char last[32] = "";
	int rc, ret = 0;

	rc = sqlite3changeset_start(&it, (int)len, (void *)change);
	while (rc == SQLITE_OK && ret == 0 &&
	       (rc = sqlite3changeset_next(it)) == SQLITE_ROW) {
		const char *tab = NULL;
		unsigned char *pk = NULL;
		int ncol = 0, op = 0;

		rc = sqlite3changeset_op(it, &tab, &ncol, &op, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3changeset_pk(it, &pk, &ncol);
		if (rc != SQLITE_OK || strcmp(tab, last) == 0)
			continue;
		ret = table_fits(m, tab, ncol, pk);
		if (ret == 0)
			nrs_err("meta: change %" PRIu64 " was recorded against"
				" a table %.31s of %d columns that is not this"
				" store's: refused (another schema?)", seq, tab,
				ncol);
		ret = ret < 0 ? ret : ret == 0 ? -EUCLEAN : 0;
		snprintf(last, sizeof(last), "%s", tab);
	}
	if (it)
		sqlite3changeset_finalize(it);
	if (ret)
		return ret;
	return rc == SQLITE_DONE || rc == SQLITE_OK ? 0 : -EUCLEAN;
}

static int apply_locked(struct sqlite_meta *m, uint64_t seq,
			const void *change, size_t len)
{
	struct apply a = { m, seq, 0 };
	uint64_t held = 0;
	int rc, ret = held_seq(m, &held);

	if (ret)
		return ret;
	if (seq <= held)
		return 1;				/* ML2: done */
	if (seq != held + 1) {
		nrs_err("meta: change %" PRIu64 " follows change %" PRIu64
			": the changes between are missing from the log",
			seq, held);
		return -EUCLEAN;
	}
	ret = change_fits(m, seq, change, len);		/* ML3 */
	if (ret)
		return ret;
	rc = sqlite3changeset_apply(m->db, (int)len, (void *)change, NULL,
				    on_conflict, &a);
	if (rc != SQLITE_OK) {
		if (!a.conflicts)
			nrs_err("meta: change %" PRIu64 " cannot be applied: %s",
				seq, sqlite3_errstr(rc));
		return -EUCLEAN;
	}
	ret = fix_crcs(m, change, len) ?: held_seq(m, &held);
	if (!ret && held != seq) {
		nrs_err("meta: change %" PRIu64 " is not one of this store's"
			" logged changes (it leaves the log at %" PRIu64 ")",
			seq, held);
		ret = -EUCLEAN;
	}
	memo_drop_all(m);
	return ret;
}

int nrs_sq_log_apply(struct nrs_meta *base, uint64_t seq, const void *change,
		     size_t len)
{
	struct sqlite_meta *m = sqm(base);
	int ret;

	if (!have_sessions())
		return -ENOTSUP;
	if (!change || len == 0 || len > INT32_MAX)
		return -EUCLEAN;
	ret = tx_begin(m, TX_DURABLE);
	if (ret)
		return ret;
	ret = apply_locked(m, seq, change, len);
	if (ret == 1)
		return tx_end(m, 0) ?: 1;
	return tx_end(m, ret);
}
