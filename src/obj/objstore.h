/*
 * objstore.h - the object store provider interface (DESIGN.md sections 1
 * event 4, 6 and 7).
 *
 * An object store holds immutable objects under string keys.  It knows
 * nothing of streams: the materializer (materializer.c) chooses keys, and
 * the object format (objfmt.h) gives the bytes their meaning.  Providers:
 *  - the embedded directory store (objstore_dir.c), the default: objects are
 *    files under DATA/objects;
 *  - S3 (objstore_s3.c and the objstore_s3_*.c it names), http or https,
 *    path or virtual-hosted style, signed V4 by libcurl (s3_curl.c and
 *    its module, the only code that includes curl/curl.h) or, for old
 *    servers, V2 by libs3 (objstore_s3_v2.c, the only file that includes
 *    libs3.h).
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
 * CONDITIONAL PUT (put_cond, nrs_obj_put_cond): the one write that may
 * replace an object with other bytes, for the few keys that are rewritten
 * (the owner record, owner/owner.c).
 *  OC1 A conditional put is a compare-and-set: with if_match NULL it
 *      stores only if the key is absent (If-None-Match: *), else only if
 *      the stored object's etag is if_match (If-Match); a store that
 *      cannot promise that has no put_cond (-EOPNOTSUPP).  Failures of
 * the condition have errnos of their own, never retried:
 *   -EEXIST   if_match NULL and an object is there;
 *   -ESTALE   the stored object's etag is not if_match;
 *   -ENOENT   if_match given and no object is there.
 * A server may also ignore the headers (s3rver does): put_cond then
 * overwrites.  nrs_obj_cond_supported() finds that out before anyone
 * relies on it.  The etag is the store's name for one content: the
 * embedded store's is the hex SHA-256 of the bytes, S3's what it sends
 * in ETag (quotes removed).  Other errors are put()'s, uncertain as its
 * are (the caller reads the record back to see which bytes won).
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
#include <errno.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/metrics.h"	/* struct nrs_objstore_errors */

#define NRS_SHA256_LEN	32
#define NRS_MD5_LEN	16
#define NRS_OBJKEY_MAX	256	/* longest key, NUL included */
#define NRS_ETAG_MAX	80	/* longest etag kept, NUL included */

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
	char etag[NRS_ETAG_MAX];	/* the store's etag, quotes removed;
					 * "": the store gave none */
};

/*
 * A streaming GET's receiver (get_stream): n bytes of the body at pos,
 * relative to the range's start, as they arrive.  Within one attempt the
 * bytes come in order; when a provider sends the request again, pos starts
 * over from 0 (the same bytes: objects are immutable).  Returns 0, or a
 * negative errno that aborts the GET, which then returns it.
 */
typedef int (*nrs_obj_sink_fn)(void *arg, uint64_t pos, const void *buf,
			       size_t n);

struct nrs_objstore_ops {
	const char *name;	/* "dir" or "s3" */
	bool wants_md5;		/* put() sends the MD5 (Content-MD5); false:
				 * it ignores it, and callers may pass NULL
				 * rather than compute one */
	int (*put)(struct nrs_objstore *s, const char *key, const void *buf,
		   size_t len, const unsigned char md5[NRS_MD5_LEN],
		   const unsigned char sha256[NRS_SHA256_LEN]);
	/* OC1 (above): store buf under key only if the key is absent
	 * (if_match NULL) or holds the object of etag if_match; the stored
	 * object's etag into etag.  NULL: the store has no conditional
	 * writes (nrs_obj_put_cond fails -EOPNOTSUPP). */
	int (*put_cond)(struct nrs_objstore *s, const char *key,
			const void *buf, size_t len,
			const unsigned char md5[NRS_MD5_LEN],
			const unsigned char sha256[NRS_SHA256_LEN],
			const char *if_match, char etag[NRS_ETAG_MAX]);
	/* -ENOENT if there is no object under key. */
	int (*head)(struct nrs_objstore *s, const char *key,
		    struct nrs_obj_meta *out);
	/* Read up to len bytes at off (a range GET); returns the bytes read,
	 * short only at the end of the object; -ENOENT. */
	ssize_t (*get)(struct nrs_objstore *s, const char *key, uint64_t off,
		       void *buf, size_t len);
	/* get() whose body goes to sink as it arrives, never buffered
	 * whole; the same result.  NULL: nrs_obj_get_stream() calls get()
	 * into a buffer and hands that to sink. */
	ssize_t (*get_stream)(struct nrs_objstore *s, const char *key,
			      uint64_t off, size_t len, nrs_obj_sink_fn sink,
			      void *arg);
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

/* OC1: a conditional put (see the top of this file); etag is written
 * only on success.  -EOPNOTSUPP for a store without one. */
static inline int nrs_obj_put_cond(struct nrs_objstore *s, const char *key,
				   const void *buf, size_t len,
				   const unsigned char md5[NRS_MD5_LEN],
				   const unsigned char sha256[NRS_SHA256_LEN],
				   const char *if_match,
				   char etag[NRS_ETAG_MAX])
{
	if (!s->ops->put_cond)
		return -EOPNOTSUPP;
	return s->ops->put_cond(s, key, buf, len, md5, sha256, if_match, etag);
}

/*
 * OC2: does s keep the conditions of put_cond?  Puts a small object under
 * a new random key "owner-probe/<16 hex>" with If-None-Match twice: the
 * second must be refused (-EEXIST); then deletes it.  1: yes; 0: the
 * store ignores them (the second put succeeded) or has none; a negative
 * errno when the store did not answer (try again later).  Logged.
 */
int nrs_obj_cond_supported(struct nrs_objstore *s);

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

/* A range GET whose body is handed to sink as it arrives (ops get_stream;
 * see nrs_obj_sink_fn).  Returns the bytes read (short only at the end of
 * the object), a store error, or the sink's error. */
ssize_t nrs_obj_get_stream(struct nrs_objstore *s, const char *key,
			   uint64_t off, size_t len, nrs_obj_sink_fn sink,
			   void *arg);
/* The same with get() into one buffer of len bytes, handed to sink whole:
 * for a store (or a path of one) that cannot stream. */
ssize_t nrs_obj_get_buffered(struct nrs_objstore *s, const char *key,
			     uint64_t off, size_t len, nrs_obj_sink_fn sink,
			     void *arg);

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
 * OB1 What HEAD after a PUT proves (DESIGN.md 6, the uncertain PUT rule):
 * the exact length and SHA-256 sent, nothing less.  The one rule of proof
 * of every writer of objects (materializer, object WAL).
 */
enum nrs_put_verdict {
	NRS_PUT_PROVEN,		/* exact length and SHA-256: accepted */
	NRS_PUT_AGAIN,		/* not there: PUT the same bytes again */
	NRS_PUT_LATER,		/* the store did not answer: retry later */
	NRS_PUT_QUARANTINE,	/* other bytes under the key: never
				 * overwrite; a new generation gets a new key */
};

/* head_err and got: the result of nrs_obj_head() for the key. */
enum nrs_put_verdict nrs_put_decide(int head_err, const struct nrs_obj_meta *got,
				    uint64_t len,
				    const unsigned char sha256[NRS_SHA256_LEN]);

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

/*
 * Adopt the regular file at path as the object key of the embedded store
 * s, in place (objstore_dir_adopt.c OD6: link(2), the key's directories
 * fsynced).  The object is the file from byte 64 on: get(key, X - 64) reads
 * the file's byte X, and head() proves nothing of it.  0 (also when key
 * already names that very file); -EXDEV if path is on another file system
 * (copy instead); -EEXIST if key names another file; -EINVAL for a bad key
 * or a path that is no regular file; -EOPNOTSUPP for a store that is not
 * the embedded one; -EROFS if s is read only; or the errno of a call.
 */
int nrs_objstore_dir_adopt(struct nrs_objstore *s, const char *key,
			   const char *path);
/* The file bytes before an adopted file's object bytes: get(key, X -
 * NRS_OBJ_ADOPT_HDR) is its byte X (the store's header, the segment's). */
#define NRS_OBJ_ADOPT_HDR	64
/*
 * get() of [off, off + len) of an adopted file key by the reader of a WAL
 * record in it, who wants its bytes up to object offset until and no
 * further (objstore_dir_adopt.c OD10: the kernel reads [off, until) ahead
 * and nothing past it), or NRS_OBJ_SLICE_ALL: on to the bytes after it
 * (the kernel's readahead, as get()).  The bytes read (short only at the
 * object's end), or get()'s errors.  A store that is not the embedded
 * one: its get().
 */
#define NRS_OBJ_SLICE_ALL	UINT64_MAX
ssize_t nrs_objstore_dir_get_slice(struct nrs_objstore *s, const char *key,
				   uint64_t off, void *buf, size_t len,
				   uint64_t until);
/*
 * Free the object bytes [off, off + len) of key (file bytes 64 + off on),
 * keeping its size (OD7): 0; -EBUSY while the file has another name (the
 * WAL's), nothing freed; -EINVAL for a range past the end; -ENOENT;
 * -EOPNOTSUPP (no embedded store, or a file system without holes); -EROFS.
 */
int nrs_objstore_dir_punch(struct nrs_objstore *s, const char *key,
			   uint64_t off, uint64_t len);
/*
 * Make the holes punched in key durable (OD9: fdatasync of the file): 0;
 * -ENOENT; -EOPNOTSUPP (no embedded store); -EROFS; or the errno of the
 * sync.  One call covers every punch of the file before it.
 */
int nrs_objstore_dir_punch_sync(struct nrs_objstore *s, const char *key);
/*
 * The size in bytes of adopted file key and its number of names (2 while
 * the WAL's name of the segment is there, OD7) into *size and *links:
 * 0, -EOPNOTSUPP (no embedded store), -ENOENT, or the errno of stat.
 */
int nrs_objstore_dir_adopted_stat(struct nrs_objstore *s, const char *key,
				  uint64_t *size, uint64_t *links);

/*
 * The highest segment number adopted under w/ in the embedded store s
 * (objstore_dir_adopt.c OD8) into *max, 0 if none.  0, -EOPNOTSUPP (not
 * the embedded store), or the errno of reading the directory.
 */
int nrs_objstore_dir_adopted_max(struct nrs_objstore *s, uint64_t *max);

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

enum nrs_s3_style { NRS_S3_PATH = 0, NRS_S3_VIRTUAL };
enum nrs_s3_sig { NRS_S3_V4 = 0, NRS_S3_V2 };

struct nrs_s3_opts {
	const char *url;	/* http[s]://HOST[:PORT]/BUCKET */
	const char *access_key, *secret_key;
	const char *session_token;	/* x-amz-security-token; NULL: none */
	const char *ca_file;	/* NULL: the system's CA store */
	const char *region;	/* NULL: the region an AWS host name names,
				 * else us-east-1; given, it wins */
	enum nrs_s3_style style;	/* path (default) or virtual-hosted */
	enum nrs_s3_sig signature;	/* V4 (default, libcurl) or V2 (libs3) */
	int timeout_ms;		/* per operation, retries included; 0: 30000 */
};

/*
 * One -o option of the S3 store into o: name "s3_region" (value kept by
 * pointer, checked at open), "s3_style" ("path" or "virtual") or
 * "s3_signature" ("v4" or "v2").  -EINVAL for another value, -ENOENT for
 * another name; nothing is logged (the caller says what was wrong).
 */
int nrs_s3_opt_parse(struct nrs_s3_opts *o, const char *name,
		     const char *value);

/*
 * S3: with signature V4 through libcurl (s3_curl.c), with V2 through
 * libs3 (path style only).  -EINVAL for a URL that is not
 * http[s]://HOST[:PORT]/BUCKET (bucket only, no further path), a bad
 * region, or V2 with virtual-hosted style.  Opening makes no request.
 */
int nrs_objstore_s3_open(const struct nrs_s3_opts *o,
			 struct nrs_objstore **out);

/*
 * Credentials (DESIGN.md 7): from file (if not NULL), which must be a
 * regular file not readable or writable by group or others (-EPERM
 * otherwise, logged) holding lines "AWS_ACCESS_KEY_ID=...",
 * "AWS_SECRET_ACCESS_KEY=..." and optionally "AWS_SESSION_TOKEN=...";
 * else from those environment variables.  -ENOENT if the two keys are not
 * found.  The caller frees *access, *secret and *token (NULL: none).
 */
int nrs_s3_credentials(const char *file, char **access, char **secret,
		       char **token);

/*
 * nrs_objstore_s3_open() of o with the credentials of nrs_s3_credentials(
 * cred_file) (o's own keys are ignored); the secrets are wiped from
 * memory before it returns.  With V4 and a cred_file, the file is read
 * again when it changes or the store refuses its keys (objstore_s3.c
 * SC1).  Then a probe (objstore_s3_open.c PROBE): a
 * definite refusal (credentials, region, bucket) closes the store and
 * fails -EACCES or -ENXIO (no such bucket), logged with what to fix; a store
 * that does not answer is a warning and the store is returned.  What goes
 * wrong is logged; the other errors are those of the two (-ENOENT: no
 * credentials, -EINVAL: a bad URL).
 */
int nrs_objstore_s3_open_url(const struct nrs_s3_opts *o,
			     const char *cred_file, struct nrs_objstore **out);

/*
 * Errors of an S3 store by class (s3_curl.h enum nrs_s3_class), each with
 * its name, and the requests sent again; 0 for another store.  For
 * /.nereus/metrics (the struct is metrics.h's).
 */
void nrs_objstore_s3_errors(struct nrs_objstore *s,
			    struct nrs_objstore_errors *out);
/* The name of class i (0 <= i < NRS_S3_CLASSES). */
const char *nrs_objstore_s3_class_name(unsigned int i);

#endif
