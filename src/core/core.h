/*
 * core.h - the stream core: the protocol-free API the FUSE front translates
 * to (DESIGN.md section 8).  Namespace, streams, appends, reads, xattrs and
 * the virtual /.nereus directory.  No FUSE type appears here.
 *
 * Every function returns 0 (or a byte count) or a negative errno, and is
 * safe to call from any number of threads.  Inode numbers are the FUSE
 * ones: 1 is the root.  struct stat results are filled completely.
 */
#ifndef NRS_CORE_H
#define NRS_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#define NRS_CTL_NAME		".nereus"
#define NRS_INO_CTL		2	/* /.nereus */
#define NRS_INO_METRICS		3	/* /.nereus/metrics */
#define NRS_INO_STATUS		4	/* /.nereus/status */

#define NRS_MAX_WRITE		(1u << 20)	/* one write() = one append */

#include "meta/attrmask.h"	/* setattr masks */
#include "obj/objstore.h"	/* struct nrs_s3_opts */

struct nrs_core;
struct nrs_handle;

struct nrs_core_opts {
	const char *data_dir;
	uint64_t wal_segment_size;	/* 0: default */
	uint64_t wal_reserve;		/* free bytes left to the metadata store */
	bool wal_reserve_auto;		/* wal_reserve is the default: scale it
					 * down on a small file system (wal.h,
					 * nrs_wal_reserve_scaled) */
	uint64_t wal_budget;		/* most WAL bytes on disk; 0: none */
	size_t max_batch_bytes;		/* 0: default */
	bool no_commit_lead;		/* appends never commit in the FUSE
					 * thread (pipeline.h) */
	/* object store: S3 if s3_url, else the directory DATA/objects */
	const char *s3_url;		/* http[s]://HOST[:PORT]/BUCKET */
	const char *s3_credentials;	/* a 0600 file, or NULL: environment */
	const char *s3_ca_file;		/* NULL: the system's CA store */
	struct nrs_s3_opts s3;		/* region, style, signature (its url
					 * and keys are not used) */
	uint64_t cache_size;		/* memory block cache; 0: default */
	const char *disk_cache;		/* disk block cache directory, or NULL */
	uint64_t disk_cache_size;	/* 0: default */
	/* materializer (materializer.h; 0: defaults) */
	uint64_t mat_min_bytes, mat_max_age_ms, object_size;
	unsigned int mat_threads;
	uint64_t gc_grace_ms;		/* lifecycle.c G2, wal_object_gc.c OWG1;
					 * 0: default */
	uint64_t compact_size;		/* compaction.c CP1; 0: default,
					 * UINT64_MAX: off */
	const char *objects_dir;	/* the embedded store's directory;
					 * NULL: DATA/objects */
	bool write_once;		/* -o write_once=auto: adopt large WAL
					 * records in place (core_obj.c CO2) */
	/* the object WAL (wal.h nrs_wal_object_opts; 0: defaults) */
	unsigned int owal_inflight;
	uint64_t owal_timeout_ms, owal_bytes, owal_linger_ms;
	bool owal_linger_set;		/* owal_linger_ms given (0 allowed) */
	/* metadata checkpoints (bg/checkpoint.h): 0 default, UINT64_MAX off */
	uint64_t ckpt_ms, ckpt_bytes;
	/* the owner record of the bucket (core_owner.c CW1) */
	uint64_t owner_lease_ms;	/* 0: NRS_OWNER_LEASE_DEFAULT_MS */
	bool recover;			/* take the bucket over if another
					 * daemon owns it; an empty data
					 * directory: rebuild it from the
					 * bucket (core_recover.c) */
};

/* Invalidate cached file data of ino from byte off to the end. */
typedef void (*nrs_inval_fn)(void *ctx, uint64_t ino, uint64_t off);

/*
 * Open the data directory (created if missing), take its lock, recover
 * (DESIGN.md section 6) and start the commit pipeline.  -EBUSY when another
 * daemon holds the directory.
 */
int nrs_core_new(const struct nrs_core_opts *o, struct nrs_core **out);
/* Complete pending appends, stop, release everything (NULL ok). */
void nrs_core_free(struct nrs_core *c);
/*
 * The clean close (core.c U1): nrs_core_free, and before the data
 * directory's lock is released, every byte and name the daemon left in it
 * is made durable.  0, or -errno if some of it may not be (logged).  NULL
 * ok (0).
 */
int nrs_core_close(struct nrs_core *c);
/*
 * The owner of the bucket (owner.h; core_owner.c), for the object WAL:
 * nrs_owner_may_ack() before it acknowledges.  Valid until
 * nrs_core_free; NULL before the object store is open.
 */
struct nrs_owner *nrs_core_owner(struct nrs_core *c);
/* Has another daemon taken the bucket (CW2: appends fail ESTALE)? */
bool nrs_core_is_fenced(struct nrs_core *c);

/* Set before the first append (the FUSE layer's page cache invalidation). */
void nrs_core_set_inval(struct nrs_core *c, nrs_inval_fn fn, void *ctx);

int nrs_core_getattr(struct nrs_core *c, uint64_t ino, struct stat *out);
int nrs_core_lookup(struct nrs_core *c, uint64_t parent, const char *name,
		    struct stat *out);
int nrs_core_mkdir(struct nrs_core *c, uint64_t parent, const char *name,
		   uint32_t mode, uint32_t uid, uint32_t gid, struct stat *out);
int nrs_core_unlink(struct nrs_core *c, uint64_t parent, const char *name);
int nrs_core_rmdir(struct nrs_core *c, uint64_t parent, const char *name);
int nrs_core_rename(struct nrs_core *c, uint64_t parent, const char *name,
		    uint64_t newparent, const char *newname, unsigned int flags);
/* in holds the new values of the fields named by mask. */
int nrs_core_setattr(struct nrs_core *c, uint64_t ino, const struct stat *in,
		     int mask, struct stat *out);

/* Return non-zero to stop.  next is the offset to resume after this one. */
typedef int (*nrs_core_dirent_cb)(void *ctx, const char *name,
				  const struct stat *st, uint64_t next);
/* List directory ino from offset off (0 = the beginning). */
int nrs_core_readdir(struct nrs_core *c, uint64_t ino, uint64_t off,
		     nrs_core_dirent_cb cb, void *ctx);

/* Create a stream and open it (flags as open(2)). */
int nrs_core_create(struct nrs_core *c, uint64_t parent, const char *name,
		    uint32_t mode, uint32_t uid, uint32_t gid, int flags,
		    struct stat *out, struct nrs_handle **h);
/*
 * Open a stream or a virtual file.  O_TRUNC on a non-empty stream: -EPERM;
 * on an empty one by a caller not privileged (without CAP_FSETID), it
 * clears the set-id bits first (core_append.c K1).
 */
int nrs_core_open(struct nrs_core *c, uint64_t ino, int flags,
		  bool privileged, struct nrs_handle **h);
/* Writes must bypass the kernel page cache for this handle. */
bool nrs_core_handle_direct(const struct nrs_handle *h);
void nrs_core_release(struct nrs_core *c, struct nrs_handle *h);

ssize_t nrs_core_read(struct nrs_core *c, struct nrs_handle *h, void *buf,
		      size_t size, uint64_t off);

/* Called once with the bytes appended (len) or a negative errno. */
typedef void (*nrs_append_done)(void *cookie, int err, size_t len);
/*
 * Append len bytes (copied before return).  at_head (a write with
 * O_APPEND): at the head, wherever it is; otherwise a conditional append,
 * only if off is the head when ordered (-ESPIPE).  A caller that is not
 * privileged (has no CAP_FSETID) clears the stream's set-id bits first
 * (core_append.c K1).  Returns 0 when done will be called (possibly
 * already), or a negative errno and done is not called.
 */
int nrs_core_append(struct nrs_core *c, struct nrs_handle *h, const void *buf,
		    size_t len, uint64_t off, bool at_head, bool privileged,
		    nrs_append_done done, void *cookie);

/* ---- adapters (core_adapter.c): the ioctls of include/nereusfs.h ---- */

/*
 * Decode one restricted ioctl of nereusfs.h: in (in_len bytes) is the
 * caller's argument, out (out_size bytes) receives the result.  Returns
 * the bytes written to out, or a negative errno; -ENOTTY for an unknown
 * cmd or a handle that is not a stream.
 */
ssize_t nrs_core_ioctl(struct nrs_core *c, struct nrs_handle *h,
		       unsigned int cmd, const void *in, size_t in_len,
		       void *out, size_t out_size);

ssize_t nrs_core_getxattr(struct nrs_core *c, uint64_t ino, const char *name,
			  void *buf, size_t size);
int nrs_core_setxattr(struct nrs_core *c, uint64_t ino, const char *name,
		      const void *value, size_t size, int flags);
ssize_t nrs_core_listxattr(struct nrs_core *c, uint64_t ino, char *buf,
			   size_t size);
int nrs_core_removexattr(struct nrs_core *c, uint64_t ino, const char *name);

/* Space of the file system holding the data directory. */
int nrs_core_statfs(struct nrs_core *c, struct statvfs *out);

#endif
