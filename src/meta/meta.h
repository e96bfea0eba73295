/*
 * meta.h - the metadata store: namespace, stream heads, settings, xattrs,
 * object generations.
 *
 * An interface with implementations: struct nrs_meta_ops below has one
 * member per operation and the nrs_meta_* functions dispatch through
 * m->ops (meta.c).  The first implementation is SQLite (one host; the
 * files sqlite*.c of src/meta/, which own the schema and are the only
 * ones that include sqlite3.h).  A second is planned for several hosts sharing
 * a namespace: ZooKeeper, each stream head a znode whose setData is
 * versioned, each batch a multi.  nrs_meta_open() and
 * nrs_meta_open_readonly() make the SQLite store; a second store gets its
 * own constructor that fills the same table.  Nothing outside src/meta/
 * knows which store it holds.
 *
 * THE CONTRACT every store keeps (the callers rely on nothing else)
 *
 *   MC1 Atomic.  Every operation is all or nothing: when it fails, no
 *       record it would have changed is changed, also across a crash of
 *       the process or of the host (SQLite: one transaction; ZooKeeper:
 *       one multi, whose every setData and delete carries the version of
 *       the znode it read, so that a concurrent change fails the whole
 *       multi and the operation is retried or reported).  Out parameters
 *       are written only on success.
 *   MC2 Linearizable.  Operations of all callers (threads, and hosts
 *       for a shared store) take effect in one order consistent with
 *       real time: a read that starts after a write returned sees it
 *       (ZooKeeper: a sync() before a read that must see other hosts'
 *       writes; each host's own writes are seen in order).
 *   MC3 Durable.  Namespace changes, settings, xattrs, start,
 *       forget and object generation changes are durable when the call
 *       returns.  nrs_meta_publish is durable only when asked: the WAL
 *       already holds every acknowledged append and recovery re-publishes
 *       it (DESIGN.md 6); a store for which every write is durable
 *       (ZooKeeper) ignores the flag.
 *   MC4 The head CAS.  A stream's version is a number the commit
 *       pipeline raises (by the appends it publishes, not by one); a
 *       struct nrs_head_update applies only if the stored version is
 *       old_version, and then sets head, version, epoch, last_lsn and
 *       mtime together.  Other fields of the stream (start, profile,
 *       unlinked) are not part of the comparison and survive a publish
 *       unchanged.  A store that has a version of its own (a znode
 *       version, bumped by every setData) keeps the head fields in a record
 *       that only publish writes, and remembers which record version holds
 *       which stream version; setData(path, data, that version) is then
 *       the CAS.  A lost CAS is -ESTALE and changes nothing.
 *   MC5 A batch.  nrs_meta_publish of n updates is one atomic unit: if
 *       any update's CAS fails (or its row is damaged), none applies
 *       (ZooKeeper: one multi of n versioned setData).  Updates of one
 *       batch name distinct streams.  Likewise nrs_meta_obj_replace is one
 *       unit (one generation published, the ones it replaces draining).
 *   MC6 Identities.  Inode numbers, dirent cookies, stream ids and object
 *       generations are issued increasing and never reused, even after
 *       their record is deleted (ZooKeeper: sequential znodes or a counter
 *       bumped by a versioned setData); nrs_meta_stream_seq_raise moves the
 *       stream id sequence past an id in use.  1 is the root, 2..15 are
 *       reserved, stored inodes start at NRS_FIRST_INO.
 *   MC7 Object generations move only along the state machine drawn in
 *       objgen.c: a store changes a row's state with a compare-and-set on
 *       the state it leaves (-ESTALE), and nrs_meta_obj_set_state first
 *       asks nrs_meta_obj_transition() (-EINVAL for a move the table does
 *       not list, objgen.c GS1, GS2).
 *   MC8 Callbacks of the listing operations run while the store is held
 *       (a lock, a snapshot): they must not call the store (-EDEADLK where
 *       it can be detected); a non-zero return stops the listing, and a
 *       negative one is its result.
 *   MC9 Damage is reported, never repaired silently: a record that fails
 *       its check is -EUCLEAN (logged with what names it), the others keep
 *       working (a stream row, sqlite_crc.c CK1-CK4); a store whose
 *       structure is damaged is not opened (-EUCLEAN).
 *
 * ERRNOS every store uses with the same meaning: -ENOENT (no such inode,
 * name, stream or row), -EEXIST, -ENOTDIR, -EISDIR, -ENOTEMPTY,
 * -ENAMETOOLONG, -EINVAL (an argument no state makes valid), -ESTALE (a
 * CAS or a state precondition lost: the caller's view is old), -EUCLEAN
 * (damaged metadata), -ENOSPC (sqlite.c MS1, sqlite_xattr.c MS2), -EROFS
 * (a read-only open), -EPROTO (another schema or format version), -EIO
 * (the store failed; logged), -EBUSY (held by another, or in use),
 * -EAGAIN (ask again later), -ENOMEM.  A store translates its own codes
 * (SQLite result codes, ZooKeeper's ZBADVERSION = -ESTALE, ZNONODE =
 * -ENOENT, ZNODEEXISTS = -EEXIST, ZCONNECTIONLOSS = -EIO after retries)
 * into these, in its own files.
 *
 * Inode numbers: 1 is the root directory; 2..15 are reserved for virtual
 * files of the FUSE layer; stored inodes start at 16.  Neither inode numbers
 * nor stream ids are ever reused.
 */
#ifndef NRS_META_H
#define NRS_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NRS_ROOT_INO		1
#define NRS_FIRST_INO		16
#define NRS_NAME_MAX		255
#define NRS_XATTR_VALUE_MAX	65536	/* durable user.* value limit */
#define NRS_XATTR_NAME_MAX	255
/*
 * Per inode (sqlite_xattr.c MS2): at most this many durable user.* names, and
 * this many bytes of names plus values; a set past either is -ENOSPC, as
 * ext4 answers when an inode's xattr space is full.  128 names of at most
 * 255 bytes keep listxattr within the kernel's 64 KiB list limit.
 */
#define NRS_XATTR_COUNT_MAX	128
#define NRS_XATTR_BYTES_MAX	(256u << 10)

enum nrs_profile {
	NRS_PROFILE_UNSET = 0,	/* directories only: nothing to pass down */
	NRS_PROFILE_LOCAL_WAL = 1,
	NRS_PROFILE_OBJECT_WAL = 2,
};

enum nrs_retention {
	NRS_RET_BYTES = 0,
	NRS_RET_MS = 1,
};

struct nrs_attr {
	uint64_t ino;
	uint64_t parent;	/* containing directory; 0 once unlinked */
	uint32_t mode;		/* S_IFDIR or S_IFREG plus permission bits */
	uint32_t uid, gid;
	uint32_t nlink;		/* dirs: 2 + subdirs; streams: 1, 0 unlinked */
	int64_t atime_ns, mtime_ns, ctime_ns;
	uint64_t stream_id;	/* 0 for directories */
};

/* Stream ids are SQLite rowids (1 and up, never above INT64_MAX); a head
 * is a file size (an off_t).  A row beyond them is damage (recovery.h RD1);
 * no append takes a head past NRS_HEAD_MAX (pipeline.c PL1). */
#define NRS_STREAM_ID_MAX	((uint64_t)INT64_MAX)
#define NRS_HEAD_MAX		((uint64_t)INT64_MAX)

struct nrs_stream_row {
	uint64_t id;
	uint64_t ino;
	uint64_t head, version, start, epoch, last_lsn;
	int64_t mtime_ns;	/* last commit */
	int profile;		/* enum nrs_profile, never UNSET */
	bool unlinked;
	bool corrupt;		/* the row fails its checksum: nothing but id
				 * is known (nrs_meta_stream_foreach only) */
};

/* One stream's head CAS: from version old_version to the new values. */
struct nrs_head_update {
	uint64_t id;
	uint64_t old_version;
	uint64_t head, version, epoch, last_lsn;
	int64_t mtime_ns;
};

/* setattr mask bits: NRS_SET_* */
#include "meta/attrmask.h"

struct nrs_meta;

/* Open or create the database at path.  Creates the root (mode 0755, uid
 * and gid of the caller) on first open; upgrades an older schema.
 * -EUCLEAN: not our database, or its structure is damaged (SQLite's
 * quick_check); -EPROTO: written by a newer version. */
int nrs_meta_open(const char *path, struct nrs_meta **out);
/* Close of NULL is a no-op. */
void nrs_meta_close(struct nrs_meta *m);
/*
 * The metadata reserve (sqlite.c MS1): a call that grows the store
 * (mkdir, create, a user.* xattr set that adds bytes) fails -ENOSPC unless
 * the file system holding the database keeps reserve bytes free after it.
 * Calls that remove or change in place are never refused for space.
 * 0 (the default) is no reserve.  -errno if the database file cannot be
 * opened for the check.
 */
int nrs_meta_set_reserve(struct nrs_meta *m, uint64_t reserve);

/* -ENOENT */
int nrs_meta_getattr(struct nrs_meta *m, uint64_t ino, struct nrs_attr *out);
/* -ENOENT, -ENOTDIR (parent is a stream) */
int nrs_meta_lookup(struct nrs_meta *m, uint64_t parent, const char *name,
		    struct nrs_attr *out);
/* -EEXIST, -ENOENT, -ENOTDIR, -ENAMETOOLONG, -ENOSPC (MS1) */
int nrs_meta_mkdir(struct nrs_meta *m, uint64_t parent, const char *name,
		   uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		   struct nrs_attr *out);
/*
 * Create a stream (mode gets S_IFREG).  Its profile is the nearest set
 * profile of its ancestors, else local-wal.  Errors as mkdir.
 */
int nrs_meta_create(struct nrs_meta *m, uint64_t parent, const char *name,
		    uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		    struct nrs_attr *out, struct nrs_stream_row *srow);
/*
 * Remove the name of a stream: the dirent goes, the inode's nlink and
 * parent become 0 and its stream is marked unlinked; the inode row stays
 * until nrs_meta_forget_inode.  *out is the inode as it is now.
 * -ENOENT, -EISDIR.
 */
int nrs_meta_unlink(struct nrs_meta *m, uint64_t parent, const char *name,
		    int64_t now_ns, struct nrs_attr *out);
/* -ENOENT, -ENOTDIR, -ENOTEMPTY */
int nrs_meta_rmdir(struct nrs_meta *m, uint64_t parent, const char *name,
		   int64_t now_ns);
/*
 * POSIX rename (flags: 0 or RENAME_NOREPLACE; RENAME_EXCHANGE is -EINVAL).
 * Replacing a stream unlinks it as nrs_meta_unlink does, and *replaced is
 * its inode number (0 if nothing was replaced).  -ENOENT, -EEXIST
 * (NOREPLACE), -ENOTDIR, -EISDIR, -ENOTEMPTY, -EINVAL (a directory into its
 * own subtree).  Renaming onto itself is a no-op.
 */
int nrs_meta_rename(struct nrs_meta *m, uint64_t parent, const char *name,
		    uint64_t newparent, const char *newname, unsigned int flags,
		    int64_t now_ns, uint64_t *replaced);
/* Change the fields named by mask from a; ctime becomes now.  -ENOENT.
 * NRS_SET_KILLPRIV clears bits of the stored mode in the same
 * transaction (after NRS_SET_MODE, if both). */
int nrs_meta_setattr(struct nrs_meta *m, uint64_t ino, const struct nrs_attr *a,
		     int mask, int64_t now_ns, struct nrs_attr *out);

/* Return non-zero to stop the listing; a negative value is then returned
 * by the listing.  Callbacks (here and below) run under the store's lock
 * and must not call the store (-EDEADLK). */
typedef int (*nrs_meta_dirent_cb)(void *ctx, const char *name,
				  const struct nrs_attr *a, uint64_t cookie);
/*
 * List directory ino: entries with cookie > after, cookie ascending.
 * Cookies are stable, >= 3 (1 and 2 are left for "." and "..").
 * -ENOENT, -ENOTDIR.
 */
int nrs_meta_readdir(struct nrs_meta *m, uint64_t ino, uint64_t after,
		     nrs_meta_dirent_cb cb, void *ctx);

/* Durable user.* xattrs (any name; the caller filters reserved ones). */
/* Returns the value length (copies it when size > 0); -ENODATA, -ERANGE */
ssize_t nrs_meta_xattr_get(struct nrs_meta *m, uint64_t ino, const char *name,
			   void *buf, size_t size);
/* flags: 0, XATTR_CREATE (-EEXIST), XATTR_REPLACE (-ENODATA); -E2BIG;
 * -ENOSPC past the per-inode bounds (MS2) or the reserve (MS1) */
int nrs_meta_xattr_set(struct nrs_meta *m, uint64_t ino, const char *name,
		       const void *value, size_t size, int flags);
/* -ENODATA */
int nrs_meta_xattr_remove(struct nrs_meta *m, uint64_t ino, const char *name);
/* NUL-separated names, sorted; returns total length (copies when size > 0);
 * -ERANGE */
ssize_t nrs_meta_xattr_list(struct nrs_meta *m, uint64_t ino, char *buf,
			    size_t size);

/* Own profile of an inode (UNSET for a dir that has none). */
int nrs_meta_get_profile(struct nrs_meta *m, uint64_t ino, int *profile);
/* The profile that governs ino: its own, else the nearest ancestor's,
 * else LOCAL_WAL -- what a stream created in directory ino would get (MT5).
 * One walk up, in one call.  -ENOENT, -EUCLEAN (the parent chain loops). */
int nrs_meta_effective_profile(struct nrs_meta *m, uint64_t ino, int *profile);
/* -ENOENT, -EINVAL, -EUCLEAN (a stream whose row is damaged) */
int nrs_meta_set_profile(struct nrs_meta *m, uint64_t ino, int profile);
/*
 * Retention: value 0 means keep forever.  get returns the effective value:
 * the inode's own if set, else the nearest ancestor's, else 0 (-EAGAIN:
 * changes kept overtaking a very deep walk; ask again later).
 */
int nrs_meta_get_retention(struct nrs_meta *m, uint64_t ino, int which,
			   uint64_t *value);
int nrs_meta_set_retention(struct nrs_meta *m, uint64_t ino, int which,
			   uint64_t value);
/* Inodes read so far to resolve inherited retention (sqlite_settings.c MT8):
 * flat while nothing changes, however deep the streams are. */
uint64_t nrs_meta_chain_steps(struct nrs_meta *m);
/* Whether inode ino has its own retention value which (not inherited). */
int nrs_meta_retention_is_set(struct nrs_meta *m, uint64_t ino, int which,
			      bool *set);

/* Raise a stream's start offset (durable).  -ENOENT, -EINVAL if below
 * the current start or above the head, -EUCLEAN (damaged row). */
int nrs_meta_set_start(struct nrs_meta *m, uint64_t stream_id, uint64_t start);
/* -ENOENT, -EUCLEAN (the row fails its checksum) */
int nrs_meta_stream_get(struct nrs_meta *m, uint64_t stream_id,
			struct nrs_stream_row *out);

/* Return non-zero to stop. */
typedef int (*nrs_meta_stream_cb)(void *ctx, const struct nrs_stream_row *s);
/* Every stream row, unlinked ones included, id ascending; a row that
 * fails its checksum comes with corrupt set (and is logged). */
int nrs_meta_stream_foreach(struct nrs_meta *m, nrs_meta_stream_cb cb,
			    void *ctx);

/*
 * Publish heads in one transaction: for each update, UPDATE ... WHERE id = ?
 * AND version = old_version; the stream's mtime (and so its inode's mtime
 * and ctime as getattr reports them) becomes mtime_ns: one row written per
 * stream.  If any row does not match, nothing is changed and the result is
 * -ESTALE (a lost CAS), or -EUCLEAN if it fails its checksum.  durable:
 * sync before returning.
 */
int nrs_meta_publish(struct nrs_meta *m, const struct nrs_head_update *u,
		     size_t n, bool durable);

/* Delete an unlinked inode (nlink 0), its xattrs and its stream row.
 * -ENOENT; -EBUSY if it still has a name. */
int nrs_meta_forget_inode(struct nrs_meta *m, uint64_t ino);
/* Inodes with nlink 0 (left by a crash while a handle was open). */
int nrs_meta_unlinked_foreach(struct nrs_meta *m,
			      int (*cb)(void *ctx, uint64_t ino), void *ctx);

/* ---- object generations (DESIGN.md 1 event 4, 6) --------------------- */

/*
 * A segment object of a stream, one row per generation (objfmt.h).  States
 * move prepared -> committed -> draining -> retired (DESIGN.md 6; the
 * whole state machine, and who moves a row, is the table of objgen.c):
 *  - prepared: an intent recorded (durably) before the upload; never read.
 *    After a crash, prepared rows name the objects that may exist unpublished
 *    (orphans): they are found here, never by listing the bucket.
 *  - committed: published; the index serves [start, end) from it.
 *  - draining, retired: superseded (stream lifecycle, GC).
 *  - quarantined: the store held other bytes under its key; the key is never
 *    written again (a new generation gets a new key).
 * Where its bytes are (schema 5): seg 0, a copied object under the key
 * objfmt.h derives from stream_id and gen (off 0); seg >= 1, an adopted
 * generation (README "Write once on the embedded store"): one WAL record
 * at byte off of the embedded store's file nrs_objfmt_adopt_key(seg), the
 * WAL segment seg linked in, and start, end and length describe that one
 * record.
 */
enum nrs_obj_state {
	NRS_OBJ_PREPARED = 1,
	NRS_OBJ_COMMITTED = 2,
	NRS_OBJ_DRAINING = 3,
	NRS_OBJ_RETIRED = 4,
	NRS_OBJ_QUARANTINED = 5,
};

struct nrs_obj_row {
	uint64_t gen;			/* >= 1, never reused */
	uint64_t stream_id, start, end;
	uint64_t length;		/* bytes of the whole object */
	uint64_t seg, off;		/* 0 0: copied; seg >= 1: adopted */
	unsigned char sha256[32];
	int state;			/* enum nrs_obj_state */
	int64_t ctime_ns;		/* when the intent was recorded */
	int64_t mtime_ns;		/* when the state last changed */
};

/* Record an intent (state prepared, durable); sets o->gen. */
int nrs_meta_obj_prepare(struct nrs_meta *m, struct nrs_obj_row *o);
/* The intents of v[0..n) in one durable transaction (all or none); sets
 * each gen (ascending).  -EINVAL (nothing recorded) if any range is empty;
 * n 0 is 0. */
int nrs_meta_obj_prepare_n(struct nrs_meta *m, struct nrs_obj_row *v,
			   size_t n);
/* Every one of gens[0..n) prepared -> committed, with the SHA-256 of its
 * row in v... : in one durable transaction, all or none (-ESTALE, nothing
 * changed, if any is not prepared). */
int nrs_meta_obj_publish_n(struct nrs_meta *m, const struct nrs_obj_row *v,
			   size_t n);
/* MZ4 of mat_object.c: prepared -> committed with the object's SHA-256,
 * durable.  -ESTALE if gen is not prepared. */
int nrs_meta_obj_publish(struct nrs_meta *m, uint64_t gen,
			 const unsigned char sha256[32]);
/* Compaction: in one durable transaction, gen goes prepared -> committed
 * (with its SHA-256) and every one of olds committed -> draining at now_ns.
 * -ESTALE (nothing changed) if any is not in the state it leaves. */
int nrs_meta_obj_replace(struct nrs_meta *m, uint64_t gen,
			 const unsigned char sha256[32], const uint64_t *olds,
			 size_t nolds, int64_t now_ns);
/* Move gen from state from to state to at now_ns (durable): committed ->
 * draining, draining -> retired, prepared -> quarantined (objgen.c).
 * -EINVAL (logged, nothing changed) for any other pair (GS1); -ESTALE if
 * gen is not in state from (or there is no such row, GS2). */
int nrs_meta_obj_set_state(struct nrs_meta *m, uint64_t gen, int from, int to,
			   int64_t now_ns);
/* "prepared", ... (a static string), NULL for a number that is no state. */
const char *nrs_meta_obj_state_name(int state);
/* For the stores (objgen.c GS1): 0 if nrs_meta_obj_set_state may move a
 * row from state from to state to, else -EINVAL, logged naming gen. */
int nrs_meta_obj_transition(uint64_t gen, int from, int to);
/* Forget a row (durable); 0 also if it is gone. */
int nrs_meta_obj_delete(struct nrs_meta *m, uint64_t gen);
/* Every row (stream_id 0) or a stream's, gen ascending; stop as above. */
int nrs_meta_obj_foreach(struct nrs_meta *m, uint64_t stream_id,
			 int (*cb)(void *ctx, const struct nrs_obj_row *o),
			 void *ctx);

/* Every row in one state, gen ascending; stop as above. */
int nrs_meta_obj_foreach_state(struct nrs_meta *m, int state,
			       int (*cb)(void *ctx, const struct nrs_obj_row *o),
			       void *ctx);

/*
 * The rows of stream_id (0: every stream) in state (0: any), gen ascending,
 * as an array of *n rows in *out (NULL when there are none), which the
 * caller frees; both are written only on success.  0, -ENOMEM, or the
 * errors of the foreach calls above.
 */
int nrs_meta_obj_rows(struct nrs_meta *m, uint64_t stream_id, int state,
		      struct nrs_obj_row **out, size_t *n);

/* Counts for /.nereus/status. */
int nrs_meta_counts(struct nrs_meta *m, uint64_t *dirs, uint64_t *streams);

/* ---- offline tools (nereusfs-fsck) ---------------------------------- */

/*
 * Open an existing database for reading only: nothing is created or
 * written, not even a -shm file.  -ENOENT if it is missing, -EPROTO for
 * another schema version (an older one too: it cannot be upgraded here),
 * -EUCLEAN for a file that is not ours.  Only the
 * read calls work on it (others fail -EROFS).
 */
int nrs_meta_open_readonly(const char *path, struct nrs_meta **out);
/* PRAGMA integrity_check: cb gets each problem SQLite lists (the text is
 * valid during the call).  0 when the check ran, whatever it found. */
int nrs_meta_integrity_check(struct nrs_meta *m,
			     int (*cb)(void *ctx, const char *problem),
			     void *ctx);
/* An AUTOINCREMENT sequence (sqlite_schema.c MT3) as stored in
 * sqlite_sequence: a missing row reads as 0, as SQLite takes it. */
struct nrs_meta_seq {
	int64_t v;
	bool integer;		/* false: not an integer (SQLite reads 0) */
};
/*
 * MT3, kept against a damaged sqlite_sequence: no stream created from now
 * on gets an id at or below id, nor one an objects row names (durable).
 * A sequence that is not an integer is left as fsck (F30) reports it.
 * 0 or -errno; -EINVAL if id is above NRS_STREAM_ID_MAX.
 */
int nrs_meta_stream_seq_raise(struct nrs_meta *m, uint64_t id);
/* The sequences of the inodes and streams tables; 0 or -errno. */
int nrs_meta_sequences(struct nrs_meta *m, struct nrs_meta_seq *inodes,
		       struct nrs_meta_seq *streams);
/* Every inode row, linked or not, ino ascending. */
int nrs_meta_inode_foreach(struct nrs_meta *m,
			   int (*cb)(void *ctx, const struct nrs_attr *a),
			   void *ctx);
/* Every dirents row as stored: the name is len bytes (not checked against
 * sqlite_ns.c MT6, not NUL-terminated), valid during the call. */
typedef int (*nrs_meta_rawdirent_cb)(void *ctx, uint64_t parent,
				     const void *name, size_t len,
				     uint64_t ino);
int nrs_meta_dirent_foreach(struct nrs_meta *m, nrs_meta_rawdirent_cb cb,
			    void *ctx);

/* ---- checkpoints (bg/checkpoint.c) --------------------------------- */

/* What a snapshot cost (test_snapshot prints it). */
struct nrs_meta_snap_stats {
	uint64_t bytes;		/* of the copy */
	uint64_t pages;		/* database pages copied */
	uint64_t steps;		/* holds of the store's lock */
	uint64_t max_hold_ns;	/* the longest of them: what a publish
				 * waited at most */
	uint64_t total_ns;	/* the whole copy */
};
/*
 * A consistent copy of the whole store as bytes, taken while the store is
 * in use: one state between two calls of the store (SQLite: a database
 * file; sqlite_ckpt.c SN1), never blocking the other calls for more than
 * a short step.  *buf (malloc'd, the caller frees it), *len and *stats
 * (NULL ok) are written on success.  -ENOMEM, -EIO, -EUCLEAN.
 */
int nrs_meta_snapshot(struct nrs_meta *m, void **buf, size_t *len,
		      struct nrs_meta_snap_stats *stats);
/*
 * The inverse for the SQLite store (sqlite_ckpt.c SN2): bytes of
 * nrs_meta_snapshot become the database at path, which must not exist
 * (-EEXIST, nothing written).  The bytes are verified first: -EUCLEAN
 * (not a database, or its integrity_check fails), -EPROTO (another schema
 * version); else -errno of the file system.  nrs_meta_open(path) follows.
 */
int nrs_meta_install(const char *path, const void *buf, size_t len);

/* ---- the change log (sqlite_log.c) --------------------------------- */

/*
 * THE CHANGE LOG.  Each change of the namespace, of attributes, xattrs,
 * settings or a stream's start (the calls marked "logged" in the store:
 * every one that has no other durable copy, all but the reads, publish and
 * the object generations) gets the next meta sequence number, kept in the
 * store in the change's own transaction, so a snapshot (nrs_meta_snapshot)
 * says which changes it holds (nrs_meta_log_seq).  While a sink is set,
 * each such change is handed to it after its commit, as the change (an
 * opaque byte string: SQLite's session changeset) and its number, in
 * number order, under the store's lock (the sink must not call the store;
 * it may queue).  A change that changes no row takes no number.
 * nrs_meta_log_apply makes a change handed out on one store on a copy of
 * it (a restored checkpoint):
 *   0        applied: the copy now holds seq;
 *   1        the copy already holds seq: nothing done (a replay that
 *            runs again is harmless);
 *   -EUCLEAN seq is beyond the next one (a change is missing), or the
 *            change is not one this store wrote, or does not fit the copy
 *            (sqlite_log.c ML2); nothing done, and logged;
 *   -ENOTSUP the SQLite library has no session extension.
 * nrs_meta_log_set returns -ENOTSUP for that too (checked at run time).
 */
typedef void (*nrs_meta_log_fn)(void *ctx, uint64_t seq, const void *change,
				size_t len);
int nrs_meta_log_set(struct nrs_meta *m, nrs_meta_log_fn fn, void *ctx);
int nrs_meta_log_seq(struct nrs_meta *m, uint64_t *seq);
int nrs_meta_log_apply(struct nrs_meta *m, uint64_t seq, const void *change,
		       size_t len);

/* ---- the operations table ------------------------------------------- */

/*
 * One member per operation, each with the meaning, the arguments and the
 * errors of the nrs_meta_* function of the same name above (the wrappers
 * in meta.c only dispatch).  Every member is required.  A store's handle begins with a
 * struct nrs_meta whose ops point at its table.
 */
struct nrs_meta_ops {
	void (*close)(struct nrs_meta *m);
	int (*set_reserve)(struct nrs_meta *m, uint64_t reserve);

	int (*getattr)(struct nrs_meta *m, uint64_t ino, struct nrs_attr *out);
	int (*lookup)(struct nrs_meta *m, uint64_t parent, const char *name,
		      struct nrs_attr *out);
	int (*mkdir)(struct nrs_meta *m, uint64_t parent, const char *name,
		     uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		     struct nrs_attr *out);
	int (*create)(struct nrs_meta *m, uint64_t parent, const char *name,
		      uint32_t mode, uint32_t uid, uint32_t gid, int64_t now_ns,
		      struct nrs_attr *out, struct nrs_stream_row *srow);
	int (*unlink)(struct nrs_meta *m, uint64_t parent, const char *name,
		      int64_t now_ns, struct nrs_attr *out);
	int (*rmdir)(struct nrs_meta *m, uint64_t parent, const char *name,
		     int64_t now_ns);
	int (*rename)(struct nrs_meta *m, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname,
		      unsigned int flags, int64_t now_ns, uint64_t *replaced);
	int (*setattr)(struct nrs_meta *m, uint64_t ino,
		       const struct nrs_attr *a, int mask, int64_t now_ns,
		       struct nrs_attr *out);
	int (*readdir)(struct nrs_meta *m, uint64_t ino, uint64_t after,
		       nrs_meta_dirent_cb cb, void *ctx);
	int (*forget_inode)(struct nrs_meta *m, uint64_t ino);
	int (*unlinked_foreach)(struct nrs_meta *m,
				int (*cb)(void *ctx, uint64_t ino), void *ctx);
	int (*counts)(struct nrs_meta *m, uint64_t *dirs, uint64_t *streams);

	ssize_t (*xattr_get)(struct nrs_meta *m, uint64_t ino,
			     const char *name, void *buf, size_t size);
	int (*xattr_set)(struct nrs_meta *m, uint64_t ino, const char *name,
			 const void *value, size_t size, int flags);
	int (*xattr_remove)(struct nrs_meta *m, uint64_t ino,
			    const char *name);
	ssize_t (*xattr_list)(struct nrs_meta *m, uint64_t ino, char *buf,
			      size_t size);

	int (*get_profile)(struct nrs_meta *m, uint64_t ino, int *profile);
	int (*effective_profile)(struct nrs_meta *m, uint64_t ino,
				 int *profile);
	int (*set_profile)(struct nrs_meta *m, uint64_t ino, int profile);
	int (*get_retention)(struct nrs_meta *m, uint64_t ino, int which,
			     uint64_t *value);
	int (*set_retention)(struct nrs_meta *m, uint64_t ino, int which,
			     uint64_t value);
	uint64_t (*chain_steps)(struct nrs_meta *m);
	int (*retention_is_set)(struct nrs_meta *m, uint64_t ino, int which,
				bool *set);

	int (*set_start)(struct nrs_meta *m, uint64_t stream_id,
			 uint64_t start);
	int (*stream_get)(struct nrs_meta *m, uint64_t stream_id,
			  struct nrs_stream_row *out);
	int (*stream_foreach)(struct nrs_meta *m, nrs_meta_stream_cb cb,
			      void *ctx);
	int (*publish)(struct nrs_meta *m, const struct nrs_head_update *u,
		       size_t n, bool durable);	/* MC4, MC5 */

	int (*obj_prepare)(struct nrs_meta *m, struct nrs_obj_row *o);
	int (*obj_publish)(struct nrs_meta *m, uint64_t gen,
			   const unsigned char sha256[32]);
	int (*obj_prepare_n)(struct nrs_meta *m, struct nrs_obj_row *v,
			     size_t n);
	int (*obj_publish_n)(struct nrs_meta *m, const struct nrs_obj_row *v,
			     size_t n);
	int (*obj_replace)(struct nrs_meta *m, uint64_t gen,
			   const unsigned char sha256[32],
			   const uint64_t *olds, size_t nolds, int64_t now_ns);
	int (*obj_set_state)(struct nrs_meta *m, uint64_t gen, int from,
			     int to, int64_t now_ns);	/* MC7 */
	int (*obj_delete)(struct nrs_meta *m, uint64_t gen);
	int (*obj_foreach)(struct nrs_meta *m, uint64_t stream_id,
			   int (*cb)(void *ctx, const struct nrs_obj_row *o),
			   void *ctx);
	int (*obj_foreach_state)(struct nrs_meta *m, int state,
				 int (*cb)(void *ctx,
					   const struct nrs_obj_row *o),
				 void *ctx);

	int (*integrity_check)(struct nrs_meta *m,
			       int (*cb)(void *ctx, const char *problem),
			       void *ctx);
	int (*stream_seq_raise)(struct nrs_meta *m, uint64_t id);
	int (*sequences)(struct nrs_meta *m, struct nrs_meta_seq *inodes,
			 struct nrs_meta_seq *streams);
	int (*inode_foreach)(struct nrs_meta *m,
			     int (*cb)(void *ctx, const struct nrs_attr *a),
			     void *ctx);
	int (*dirent_foreach)(struct nrs_meta *m, nrs_meta_rawdirent_cb cb,
			      void *ctx);

	int (*snapshot)(struct nrs_meta *m, void **buf, size_t *len,
			struct nrs_meta_snap_stats *stats);
	int (*log_set)(struct nrs_meta *m, nrs_meta_log_fn fn, void *ctx);
	int (*log_seq)(struct nrs_meta *m, uint64_t *seq);
	int (*log_apply)(struct nrs_meta *m, uint64_t seq, const void *change,
			 size_t len);
};

/* The head of every store's handle (the rest is the store's). */
struct nrs_meta {
	const struct nrs_meta_ops *ops;
};

#endif
