/*
 * sqlite_priv.h - private to the SQLite store of src/meta/ (the files
 * sqlite*.c; sqlite.c lists them): the handle, the ids of the cached
 * statements and the column lists they share, and the helpers more than
 * one file calls.  Everything here runs under m->lock (LOCKING in
 * sqlite.c) unless it says otherwise.
 *
 * The shared helpers are external symbols with the prefix nrs_sq_; the
 * files call them by their short names (the defines below), so that a
 * statement reads the same in every file.
 */
#ifndef NRS_META_SQLITE_PRIV_H
#define NRS_META_SQLITE_PRIV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include <sqlite3.h>

#include "meta/meta.h"

#define SCHEMA_VERSION	5
#define KIND_DIR	1
#define KIND_STREAM	2
#define MAX_DEPTH	65536	/* MT4 */
#define WALK_CHUNK	1024	/* MT8: inodes read per hold of the lock */
#define MEMO_MAX	(1u << 21)	/* MT8: most slots of the memo */
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
	ST_STREAM_SET_PROFILE, ST_STREAM_SET_START,
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
#define OBJ_COLS "gen, stream_id, start, end, length, sha256, state, " \
	"ctime_ns, mtime_ns, seg, off"
#define STREAM_COLS "id, ino, head, version, start, epoch, last_lsn, " \
	"mtime_ns, profile, unlinked, crc"
#define STREAM_COL_CRC	10
/* The columns of STREAM_COLS the checksum covers, in checksum order. */
static const int crc_cols[] = { 0, 1, 2, 3, 4, 5, 6, 8, 9 };
#define CRC_FIELDS	(sizeof(crc_cols) / sizeof(crc_cols[0]))

/* CK1: the checksum of a row whose covered columns become the arguments
 * (column names for the values kept, parameters for the new ones). */
#define ROW_CRC(head, version, start, epoch, lsn, profile, unlinked) \
	"nrs_stream_crc(id, ino, " head ", " version ", " start ", " epoch \
	", " lsn ", " profile ", " unlinked ")"
#define ROW_CRC_NOW ROW_CRC("head", "version", "start", "epoch", \
	"last_lsn", "profile", "unlinked")
/* CK2: the row is as its checksum says. */
#define ROW_INTACT " AND crc = " ROW_CRC_NOW

/* MT8: one inode's effective retention, valid while gen == ret_gen. */
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
	uint64_t ret_gen;		/* protected by lock: MT8, from 1 */
	uint64_t ret_epoch;		/* protected by lock: MT8, any drop */
	struct ret_ent *memo;		/* protected by lock: open addressing */
	size_t memo_cap, memo_n;	/* protected by lock; cap a power of 2 */
	atomic_uint_fast64_t chain_steps;	/* inodes read by MT8 walks */
	int space_fd;			/* the database file, for MS1; -1 */
	uint64_t reserve;		/* MS1: free bytes growth leaves */
	nrs_meta_log_fn log_fn;		/* protected by lock: the sink, or NULL */
	void *log_ctx;
	void *sess;			/* protected by lock: the session of
					 * a TX_LOGGED call (sqlite_log.c) */
};

/* TX_NONE: one statement, no transaction needed; TX_READ: a snapshot for
 * several; TX_WRITE: unsynced commit; TX_DURABLE: synced commit;
 * TX_LOGGED: synced commit of a change the change log numbers and hands
 * out (meta.h THE CHANGE LOG, sqlite_log.c). */
enum tx_kind { TX_NONE, TX_READ, TX_WRITE, TX_DURABLE, TX_LOGGED };

/* What the ancestor walks need of an inode. */
struct settings {
	uint64_t parent, stream_id;
	int kind;
	int profile;			/* NRS_PROFILE_UNSET when NULL */
	bool has_ret[2];
	uint64_t ret[2];		/* indexed by enum nrs_retention */
};

enum walk_stop { WALK_PROFILE, WALK_INODE };

/* The store behind a struct nrs_meta of nrs_sq_ops. */
static inline struct sqlite_meta *sqm(struct nrs_meta *base)
{
	return (struct sqlite_meta *)base;	/* base is the first member */
}

/* Bind integers to ?1..?n of a cached statement; unsigned values keep
 * their bits. */
static inline sqlite3_stmt *bind_ints(struct sqlite_meta *m,
				      enum stmt_id id, const int64_t *v,
				      size_t n)
{
	sqlite3_stmt *s = m->st[id];
	size_t i;

	for (i = 0; i < n; i++)
		sqlite3_bind_int64(s, (int)i + 1, v[i]);
	return s;
}

#define BIND(m, id, ...) bind_ints(m, id, (const int64_t[]){ __VA_ARGS__ }, \
	sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))

static inline void bind_bytes(sqlite3_stmt *s, int i, const void *p, size_t len)
{
	/* A NULL pointer would bind SQL NULL, not an empty blob. */
	sqlite3_bind_blob(s, i, len ? p : "", (int)len, SQLITE_STATIC);
}

static inline uint64_t col_u64(sqlite3_stmt *s, int i)
{
	return (uint64_t)sqlite3_column_int64(s, i);
}

/* The short names of the shared helpers (see the top). */
#define sql_fail(...)            nrs_sq_sql_fail(__VA_ARGS__)
#define run(...)                 nrs_sq_run(__VA_ARGS__)
#define row(...)                 nrs_sq_row(__VA_ARGS__)
#define exec(...)                nrs_sq_exec(__VA_ARGS__)
#define set_sync(...)            nrs_sq_set_sync(__VA_ARGS__)
#define tx_begin(...)            nrs_sq_tx_begin(__VA_ARGS__)
#define tx_end(...)              nrs_sq_tx_end(__VA_ARGS__)
#define query1(...)              nrs_sq_query1(__VA_ARGS__)
#define each_row(...)            nrs_sq_each_row(__VA_ARGS__)
#define room(...)                nrs_sq_room(__VA_ARGS__)
#define col_attr(...)            nrs_sq_col_attr(__VA_ARGS__)
#define attr_get(...)            nrs_sq_attr_get(__VA_ARGS__)
#define walk_up(...)             nrs_sq_walk_up(__VA_ARGS__)
#define memo_drop(...)           nrs_sq_memo_drop(__VA_ARGS__)
#define memo_drop_all(...)       nrs_sq_memo_drop_all(__VA_ARGS__)
#define stream_get(...)          nrs_sq_stream_row_get(__VA_ARGS__)
#define stream_updated(...)      nrs_sq_stream_updated(__VA_ARGS__)
#define col_stream(...)          nrs_sq_col_stream(__VA_ARGS__)
#define schema_open(...)         nrs_sq_schema_open(__VA_ARGS__)

/* sqlite.c */
int nrs_sq_sql_fail(struct sqlite_meta *m, int rc, const char *what);
int nrs_sq_run(struct sqlite_meta *m, sqlite3_stmt *s);
int nrs_sq_row(struct sqlite_meta *m, sqlite3_stmt *s);
int nrs_sq_each_row(struct sqlite_meta *m, sqlite3_stmt *s,
		    int (*each)(struct sqlite_meta *m, sqlite3_stmt *s,
				void *ctx),
		    void *ctx);
int nrs_sq_exec(struct sqlite_meta *m, const char *sql);
int nrs_sq_set_sync(struct sqlite_meta *m, bool full);
int nrs_sq_tx_begin(struct sqlite_meta *m, enum tx_kind kind);
int nrs_sq_tx_end(struct sqlite_meta *m, int ret);
int nrs_sq_query1(struct sqlite_meta *m, const char *sql, int64_t *v,
		  char *text, size_t size);
int nrs_sq_room(struct sqlite_meta *m, uint64_t need);
int nrs_sq_set_reserve(struct nrs_meta *base, uint64_t reserve);

/* sqlite_open.c */
void nrs_sq_close(struct nrs_meta *base);

/* sqlite_schema.c */
int nrs_sq_schema_open(struct sqlite_meta *m);

/* sqlite_crc.c */
void nrs_sq_sql_stream_crc(sqlite3_context *ctx, int argc,
			   sqlite3_value **argv);
int nrs_sq_col_stream(struct sqlite_meta *m, sqlite3_stmt *s,
		      struct nrs_stream_row *r);
int nrs_sq_stream_row_get(struct sqlite_meta *m, uint64_t id, struct nrs_stream_row *r);
int nrs_sq_stream_updated(struct sqlite_meta *m, uint64_t id,
			  struct nrs_stream_row *cur);

/* sqlite_ns.c */
void nrs_sq_col_attr(sqlite3_stmt *s, struct nrs_attr *a);
int nrs_sq_attr_get(struct sqlite_meta *m, uint64_t ino, struct nrs_attr *a);
int nrs_sq_getattr(struct nrs_meta *base, uint64_t ino, struct nrs_attr *out);
int nrs_sq_lookup(struct nrs_meta *base, uint64_t parent, const char *name,
		  struct nrs_attr *out);
int nrs_sq_mkdir(struct nrs_meta *base, uint64_t parent, const char *name,
		 uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		 struct nrs_attr *out);
int nrs_sq_create(struct nrs_meta *base, uint64_t parent, const char *name,
		  uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		  struct nrs_attr *out, struct nrs_stream_row *srow);
int nrs_sq_unlink(struct nrs_meta *base, uint64_t parent, const char *name,
		  int64_t now_ns, struct nrs_attr *out);
int nrs_sq_rmdir(struct nrs_meta *base, uint64_t parent, const char *name,
		 int64_t now_ns);
int nrs_sq_rename(struct nrs_meta *base, uint64_t parent, const char *name,
		  uint64_t newparent, const char *newname, unsigned int flags,
		  int64_t now_ns, uint64_t *replaced);
int nrs_sq_setattr(struct nrs_meta *base, uint64_t ino,
		   const struct nrs_attr *in, int mask, int64_t now_ns,
		   struct nrs_attr *out);
int nrs_sq_readdir(struct nrs_meta *base, uint64_t ino, uint64_t after,
		   nrs_meta_dirent_cb cb, void *ctx);
int nrs_sq_forget_inode(struct nrs_meta *base, uint64_t ino);
int nrs_sq_unlinked_foreach(struct nrs_meta *base,
			    int (*cb)(void *ctx, uint64_t ino), void *ctx);
int nrs_sq_counts(struct nrs_meta *base, uint64_t *dirs, uint64_t *streams);

/* sqlite_xattr.c */
ssize_t nrs_sq_xattr_get(struct nrs_meta *base, uint64_t ino, const char *name,
			 void *buf, size_t size);
int nrs_sq_xattr_set(struct nrs_meta *base, uint64_t ino, const char *name,
		     const void *value, size_t size, int flags);
int nrs_sq_xattr_remove(struct nrs_meta *base, uint64_t ino, const char *name);
ssize_t nrs_sq_xattr_list(struct nrs_meta *base, uint64_t ino, char *buf,
			  size_t size);

/* sqlite_settings.c */
int nrs_sq_walk_up(struct sqlite_meta *m, uint64_t ino, enum walk_stop what,
		   uint64_t arg, struct settings *st);
void nrs_sq_memo_drop(struct sqlite_meta *m, uint64_t ino);
void nrs_sq_memo_drop_all(struct sqlite_meta *m);
int nrs_sq_get_profile(struct nrs_meta *base, uint64_t ino, int *profile);
int nrs_sq_effective_profile(struct nrs_meta *base, uint64_t ino,
			     int *profile);
int nrs_sq_set_profile(struct nrs_meta *base, uint64_t ino, int profile);
int nrs_sq_get_retention(struct nrs_meta *base, uint64_t ino, int which,
			 uint64_t *value);
int nrs_sq_set_retention(struct nrs_meta *base, uint64_t ino, int which,
			 uint64_t value);
uint64_t nrs_sq_chain_steps(struct nrs_meta *base);
int nrs_sq_retention_is_set(struct nrs_meta *base, uint64_t ino, int which,
			    bool *set);

/* sqlite_stream.c */
int nrs_sq_set_start(struct nrs_meta *base, uint64_t stream_id, uint64_t start);
int nrs_sq_stream_get(struct nrs_meta *base, uint64_t stream_id,
		      struct nrs_stream_row *out);
int nrs_sq_stream_foreach(struct nrs_meta *base, nrs_meta_stream_cb cb,
			  void *ctx);
int nrs_sq_publish(struct nrs_meta *base, const struct nrs_head_update *u,
		   size_t n, bool durable);

/* sqlite_obj.c */
int nrs_sq_obj_prepare(struct nrs_meta *base, struct nrs_obj_row *o);
int nrs_sq_obj_prepare_n(struct nrs_meta *base, struct nrs_obj_row *v,
			 size_t n);
int nrs_sq_obj_publish_n(struct nrs_meta *base, const struct nrs_obj_row *v,
			 size_t n);
int nrs_sq_obj_publish(struct nrs_meta *base, uint64_t gen,
		       const unsigned char sha256[32]);
int nrs_sq_obj_replace(struct nrs_meta *base, uint64_t gen,
		       const unsigned char sha256[32], const uint64_t *olds,
		       size_t nolds, int64_t now_ns);
int nrs_sq_obj_set_state(struct nrs_meta *base, uint64_t gen, int from, int to,
			 int64_t now_ns);
int nrs_sq_obj_delete(struct nrs_meta *base, uint64_t gen);
int nrs_sq_obj_foreach(struct nrs_meta *base, uint64_t stream_id,
		       int (*cb)(void *ctx, const struct nrs_obj_row *o),
		       void *ctx);
int nrs_sq_obj_foreach_state(struct nrs_meta *base, int state,
			     int (*cb)(void *ctx, const struct nrs_obj_row *o),
			     void *ctx);

/* sqlite_tools.c */
int nrs_sq_integrity_check(struct nrs_meta *base,
			   int (*cb)(void *ctx, const char *problem),
			   void *ctx);
int nrs_sq_stream_seq_raise(struct nrs_meta *base, uint64_t id);
int nrs_sq_sequences(struct nrs_meta *base, struct nrs_meta_seq *inodes,
		     struct nrs_meta_seq *streams);
int nrs_sq_inode_foreach(struct nrs_meta *base,
			 int (*cb)(void *ctx, const struct nrs_attr *a),
			 void *ctx);
int nrs_sq_dirent_foreach(struct nrs_meta *base, nrs_meta_rawdirent_cb cb,
			  void *ctx);

/* sqlite_ckpt.c */
int nrs_sq_snapshot(struct nrs_meta *base, void **buf, size_t *len,
		    struct nrs_meta_snap_stats *stats);

/* sqlite_log.c: the change log; begin and end run inside tx_begin and
 * tx_end of a TX_LOGGED call. */
int nrs_sq_log_begin(struct sqlite_meta *m);
int nrs_sq_log_end(struct sqlite_meta *m, void **change, size_t *len,
		   uint64_t *seq);
void nrs_sq_log_drop(struct sqlite_meta *m);
void nrs_sq_log_free(void *change);
int nrs_sq_log_set(struct nrs_meta *base, nrs_meta_log_fn fn, void *ctx);
int nrs_sq_log_seq(struct nrs_meta *base, uint64_t *seq);
int nrs_sq_log_apply(struct nrs_meta *base, uint64_t seq, const void *change,
		     size_t len);

/* sqlite.c: the table nrs_meta_open hands out */
extern const struct nrs_meta_ops nrs_sq_ops;

#endif
