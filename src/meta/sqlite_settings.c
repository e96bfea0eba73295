/*
 * sqlite_settings.c - per-inode settings of the SQLite store: the profile
 * (fixed per stream at creation, MT5) and retention (inherited through the
 * ancestors and memoised, MT8), and the ancestor walk both use.
 *
 *   MT5 A stream inode's profile is never NULL and equals streams.profile:
 *      the placement is fixed at creation from the nearest ancestor that has
 *      one.  Retention instead stays NULL and is looked up through the
 *      ancestors (MT8), so a directory's policy reaches streams that
 *      already exist.
 *
 *   MT8 The effective retention of an inode (its own value, else its
 *      nearest ancestor's, MT5) is memoised per inode in memory, each entry
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
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/sqlite_priv.h"
#include "util/grow.h"
#include "util/log.h"

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

/*
 * Walk from ino up to the root, ino itself first, to the first inode that
 * has an own profile or is inode arg: 1 when found
 * (*st is its settings), 0 when not, -EUCLEAN on a loop (MT4), or -errno.
 */
int nrs_sq_walk_up(struct sqlite_meta *m, uint64_t ino, enum walk_stop what,
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

/* MT8: a change that concerns ino alone (a stream). */
void nrs_sq_memo_drop(struct sqlite_meta *m, uint64_t ino)
{
	struct ret_ent *e = memo_at(m, ino);

	if (e)
		e->gen = 0;
	m->ret_epoch++;
}

/* MT8: a change that may concern every inode below one directory. */
void nrs_sq_memo_drop_all(struct sqlite_meta *m)
{
	m->ret_gen++;
	m->ret_epoch++;
}

/* One inode of an MT8 walk, as read. */
struct chain_link {
	uint64_t ino;
	bool has[2];
	uint64_t ret[2];
};

/*
 * MT8: the effective retention of ino into v.  Takes m->lock itself, for
 * WALK_CHUNK inodes at a time.  0, -ENOENT, -EUCLEAN (a loop, MT4),
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

int nrs_sq_get_profile(struct nrs_meta *base, uint64_t ino, int *profile)
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

int nrs_sq_effective_profile(struct nrs_meta *base, uint64_t ino,
			     int *profile)
{
	struct sqlite_meta *m = sqm(base);
	struct settings st = { 0 };
	int ret = tx_begin(m, TX_NONE), found = 0;

	if (!ret) {
		found = nrs_sq_walk_up(m, ino, WALK_PROFILE, 0, &st);
		ret = tx_end(m, found < 0 ? found : 0);
	}
	if (!ret)
		*profile = found ? st.profile : NRS_PROFILE_LOCAL_WAL;
	return ret;
}

int nrs_sq_set_profile(struct nrs_meta *base, uint64_t ino, int profile)
{
	struct sqlite_meta *m = sqm(base);
	struct nrs_stream_row cur;
	struct settings st;
	int ret;

	if (profile != NRS_PROFILE_LOCAL_WAL && profile != NRS_PROFILE_OBJECT_WAL)
		return -EINVAL;
	ret = tx_begin(m, TX_LOGGED);
	if (ret)
		return ret;
	ret = settings_get(m, ino, &st) ?:
		run(m, BIND(m, ST_SET_PROFILE, ino, profile));
	if (!ret && st.kind == KIND_STREAM)	/* MT5 */
		ret = run(m, BIND(m, ST_STREAM_SET_PROFILE, st.stream_id,
				  profile)) ?:
			stream_updated(m, st.stream_id, &cur);
	return tx_end(m, ret);
}

int nrs_sq_get_retention(struct nrs_meta *base, uint64_t ino, int which,
			 uint64_t *value)
{
	struct sqlite_meta *m = sqm(base);
	uint64_t v[2];
	int ret;

	if (which != NRS_RET_BYTES && which != NRS_RET_MS)
		return -EINVAL;
	ret = effective_retention(m, ino, v);	/* MT8 */
	if (!ret)
		*value = v[which];
	return ret;
}

int nrs_sq_set_retention(struct nrs_meta *base, uint64_t ino, int which,
			 uint64_t value)
{
	struct sqlite_meta *m = sqm(base);
	struct settings st;
	int ret;

	if (which != NRS_RET_BYTES && which != NRS_RET_MS)
		return -EINVAL;
	ret = tx_begin(m, TX_LOGGED);
	if (ret)
		return ret;
	ret = settings_get(m, ino, &st) ?: run(m, BIND(m, which == NRS_RET_BYTES ?
			ST_SET_RET_BYTES : ST_SET_RET_MS, ino, value));
	if (!ret)	/* MT8: a stream's own value, or a directory's subtree */
		st.kind == KIND_STREAM ? memo_drop(m, ino) : memo_drop_all(m);
	return tx_end(m, ret);
}

uint64_t nrs_sq_chain_steps(struct nrs_meta *base)
{
	struct sqlite_meta *m = sqm(base);

	return atomic_load_explicit(&m->chain_steps, memory_order_relaxed);
}

int nrs_sq_retention_is_set(struct nrs_meta *base, uint64_t ino, int which,
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
