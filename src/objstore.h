/*
 * objstore.h - the object store provider interface (DESIGN.md sections 1
 * event 4, 6 and 7).
 *
 * An object store holds immutable objects under string keys.  It knows
 * nothing of streams: the materializer (materializer.c) chooses keys, and
 * the object format (objfmt.h) gives the bytes their meaning.  Providers:
 *  - the embedded directory store (objstore_dir.c), the default: objects are
 *    files under DATA/objects;
 *  - S3 through libs3 (objstore_s3.c), path-style, http or https; the only
 *    file that includes libs3.h.
 *
 * Rules every provider keeps:
 *  - put() stores all of the bytes or none of them under the key: a reader
 *    never sees a partial object.  The SHA-256 given to put() is stored with
 *    the object where head() returns it (S3 user metadata x-amz-meta-sha256)
 *    and the MD5 is sent as Content-MD5 so the server refuses a body
 *    damaged on the way.  A provider whose bytes do not travel (ops
 *    wants_md5 false) ignores the MD5, which may then be NULL; one that
 *    wants it sends no Content-MD5 for a NULL one.
 *  - A failed put() (error, timeout, lost response) is *uncertain*: the
 *    object may or may not exist afterwards.  The caller resolves it by
 *    proof (head(): exact length and SHA-256), never by hope (DESIGN.md 6).
 *  - Nothing here lists a bucket: a listing is never a correctness input.
 *    (The one listing, of the embedded store's directory, exists for
 *    nereusfs-fsck to find files no row names.)
 *  - Every call is thread safe and may run concurrently with every other.
 *
 * Errors are negative errnos: -ENOENT (no such object), -EIO (the store
 * answered with an error, or a body was cut short), -ETIMEDOUT,
 * -ECONNREFUSED / -EHOSTUNREACH (no answer: the store is unavailable),
 * -EACCES (credentials refused), -ENOMEM.  Callers treat every error of
 * put() and delete() as retryable after a backoff.
 */
#ifndef NRS_OBJSTORE_H
#define NRS_OBJSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NRS_SHA256_LEN	32
#define NRS_MD5_LEN	16
#define NRS_OBJKEY_MAX	256	/* longest key, NUL included */

struct nrs_objstore;

/*
 * Is key a valid object key: 1 to NRS_OBJKEY_MAX - 1 characters from
 * [A-Za-z0-9._-], in components separated by single '/', no component
 * empty or starting with '.' (so no "." or "..", no leading or trailing
 * '/')?  Every provider refuses any other key with -EINVAL, so a key one
 * store takes every store takes, and the embedded store can keep names
 * starting with '.' for itself (objstore.c).
 */
bool nrs_objkey_is_valid(const char *key);

/* What head() proves about a stored object. */
struct nrs_obj_meta {
	uint64_t length;
	bool has_sha256;	/* false: stored without (or with a bad)
				 * x-amz-meta-sha256; never proof */
	unsigned char sha256[NRS_SHA256_LEN];
};

struct nrs_objstore_ops {
	const char *name;	/* "dir" or "s3" */
	bool wants_md5;		/* put() sends the MD5 (Content-MD5); false:
				 * it ignores it, and callers may pass NULL
				 * rather than compute one */
	int (*put)(struct nrs_objstore *s, const char *key, const void *buf,
		   size_t len, const unsigned char md5[NRS_MD5_LEN],
		   const unsigned char sha256[NRS_SHA256_LEN]);
	/* -ENOENT if there is no object under key. */
	int (*head)(struct nrs_objstore *s, const char *key,
		    struct nrs_obj_meta *out);
	/* Read up to len bytes at off (a range GET); returns the bytes read,
	 * short only at the end of the object; -ENOENT. */
	ssize_t (*get)(struct nrs_objstore *s, const char *key, uint64_t off,
		       void *buf, size_t len);
	/* Remove the object; 0 also if it did not exist. */
	int (*del)(struct nrs_objstore *s, const char *key);
	void (*close)(struct nrs_objstore *s);
};

struct nrs_objstore {
	const struct nrs_objstore_ops *ops;
};

static inline int nrs_obj_put(struct nrs_objstore *s, const char *key,
			      const void *buf, size_t len,
			      const unsigned char md5[NRS_MD5_LEN],
			      const unsigned char sha256[NRS_SHA256_LEN])
{
	return s->ops->put(s, key, buf, len, md5, sha256);
}

/* Does put() use the MD5 it is given?  (Computing one costs about as
 * much as the SHA-256 does: the embedded store never looks at it.) */
static inline bool nrs_obj_wants_md5(const struct nrs_objstore *s)
{
	return s->ops->wants_md5;
}

static inline int nrs_obj_head(struct nrs_objstore *s, const char *key,
			       struct nrs_obj_meta *out)
{
	return s->ops->head(s, key, out);
}

static inline ssize_t nrs_obj_get(struct nrs_objstore *s, const char *key,
				  uint64_t off, void *buf, size_t len)
{
	return s->ops->get(s, key, off, buf, len);
}

static inline int nrs_obj_del(struct nrs_objstore *s, const char *key)
{
	return s->ops->del(s, key);
}

/* Close of NULL is a no-op. */
static inline void nrs_obj_close(struct nrs_objstore *s)
{
	if (s)
		s->ops->close(s);
}

/*
 * The embedded store: objects are files under dir (created if missing),
 * one file per key ('/' in a key makes subdirectories).  put() writes a
 * temporary file, fsyncs it and renames it into place (then fsyncs the
 * directory), so an object is whole or absent after a crash.
 */
int nrs_objstore_dir_open(const char *dir, struct nrs_objstore **out);
/*
 * The embedded store for reading only (nereusfs-fsck): nothing under dir is
 * created, removed or written, so head() and get() work and put() and del()
 * fail with -EROFS.  -ENOENT if dir does not exist (not logged).
 */
int nrs_objstore_dir_open_readonly(const char *dir, struct nrs_objstore **out);

/* One entry of the embedded store's directory (nrs_objstore_dir_foreach). */
struct nrs_objfile {
	const char *name;	/* its path below DIR, '/'-separated: an object's
				 * key, or whatever else someone left there */
	bool is_reg;		/* a regular file (else a symlink, fifo, ...) */
	uint64_t size;		/* bytes of the file (an object's + a header) */
	int64_t mtime_ns;	/* its last write (a put writes it once) */
};

/*
 * For nereusfs-fsck only, never the daemon (a listing is never a correctness
 * input, see above): cb gets every entry below the embedded store s that is
 * not a directory, in no particular order; names with a component starting
 * with '.' (the store's own .tmp, or anything else no key can name) are
 * skipped, symlinks are not followed.  of and its name are valid during the
 * call; a non-zero return of cb stops the listing and is returned.
 * -EOPNOTSUPP if s is not an embedded store (a bucket is never listed),
 * -ENAMETOOLONG for a path longer than PATH_MAX below DIR, or the error of
 * a directory that cannot be read.
 */
int nrs_objstore_dir_foreach(struct nrs_objstore *s,
			     int (*cb)(void *ctx, const struct nrs_objfile *of),
			     void *ctx);

struct nrs_s3_opts {
	const char *url;	/* http[s]://HOST[:PORT]/BUCKET */
	const char *access_key, *secret_key;
	const char *ca_file;	/* NULL: the system's CA store */
	int timeout_ms;		/* per request; 0: 30000 */
};

/*
 * S3 through libs3, path-style requests.  -EINVAL for a URL that is not
 * http[s]://HOST[:PORT]/BUCKET (bucket only, no further path).  Opening
 * makes no request.
 */
int nrs_objstore_s3_open(const struct nrs_s3_opts *o,
			 struct nrs_objstore **out);

/*
 * Credentials (DESIGN.md 7): from file (if not NULL), which must be a
 * regular file not readable or writable by group or others (-EPERM
 * otherwise, logged) holding lines "AWS_ACCESS_KEY_ID=..." and
 * "AWS_SECRET_ACCESS_KEY=..."; else from those environment variables.
 * -ENOENT if none are found.  The caller frees *access and *secret.
 */
int nrs_s3_credentials(const char *file, char **access, char **secret);

/*
 * nrs_objstore_s3_open() with the credentials of nrs_s3_credentials(
 * cred_file) and ca_file (NULL: the system's CA store); the secret is wiped
 * from memory before it returns.  What goes wrong is logged; the errors
 * are those of the two (-ENOENT: no credentials, -EINVAL: a bad URL).
 */
int nrs_objstore_s3_open_url(const char *url, const char *cred_file,
			     const char *ca_file, struct nrs_objstore **out);

#endif
