/*
 * objstore_dir_priv.h - what the embedded store's files share
 * (objstore_dir.c: the store, its object file format, head, get, open and
 * close; objstore_dir_put.c: its puts, OD1-OD5; objstore_dir_list.c: its
 * deletions and the listing for fsck; objstore_dir_adopt.c: files adopted
 * in place and their holes).  Not for anyone else: the store is reached
 * through objstore.h.
 */
#ifndef NRS_OBJSTORE_DIR_PRIV_H
#define NRS_OBJSTORE_DIR_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "obj/objstore.h"

#define OBJ_HDR		64	/* bytes of header before an object's bytes */

struct dir_store {
	struct nrs_objstore base;
	char *dir;		/* for log lines */
	int rootfd;		/* DIR; both fds are fixed from open to close */
	int tmpfd;		/* DIR/.tmp; -1 when opened read only */
};

/* s, known to be the embedded store, as one (no check: nrs_dirstore_of). */
static inline struct dir_store *dir_of(struct nrs_objstore *s)
{
	return (struct dir_store *)s;
}

/* s as the embedded store, or NULL if s is another store. */
struct dir_store *nrs_dirstore_of(struct nrs_objstore *s);
/*
 * OD2-OD3 for a file that exists as name in the directory srcfd: make the
 * key's missing directories, link (noreplace: OD4) or rename it to the
 * key, then fsync the key's directory and every one above it up to DIR.
 * 0 or a negative errno (-EEXIST from a link onto a name in use).
 */
int nrs_dirstore_place(struct dir_store *d, int srcfd, const char *name,
		       const char *key, bool noreplace);

/*
 * Open the object file under key (in d) for reading: a descriptor the
 * caller closes, the object's byte count in *len (the file's size less
 * the 64 header bytes).  -EINVAL for a bad key, -ENOENT when key names no
 * regular file, or the errno of a call.
 */
int nrs_dirstore_open_read(struct dir_store *d, const char *key,
			   uint64_t *len);
/* Read len bytes at object offset off (0 at or past its size, the
 * object's byte count) from fd, as nrs_dirstore_open_read gave it, close
 * it, and log a failure: get()'s end, for the plain and the adopted
 * slice read.  The bytes read, or a negative errno. */
ssize_t nrs_dirstore_read_close(struct dir_store *d, const char *key, int fd,
				uint64_t size, uint64_t off, void *buf,
				size_t len);

/* The object file header (objstore_dir.c) of an object of len bytes whose
 * SHA-256 is sha256 (NULL: none given). */
void nrs_dirstore_hdr_encode(unsigned char h[OBJ_HDR], uint64_t len,
			     const unsigned char *sha256);
/* The etag (hex, NUL-terminated) of an object whose SHA-256 is sha. */
void nrs_dirstore_etag_of(char out[NRS_ETAG_MAX], const unsigned char *sha);
/* fsync the directory path (relative to base, or absolute). */
int nrs_dirstore_fsync_at(int base, const char *path);
/* Make every missing directory of path (relative to base, or absolute),
 * mode 0700, fsyncing the parent of each one made. */
int nrs_dirstore_mkdirs_at(int base, const char *path);

/* The operations of the store (objstore.h), for its ops tables:
 * head and get in objstore_dir.c, put and put_cond in objstore_dir_put.c,
 * del in objstore_dir_list.c. */
int nrs_dirstore_head(struct nrs_objstore *s, const char *key,
		      struct nrs_obj_meta *out);
int nrs_dirstore_put(struct nrs_objstore *s, const char *key,
		     const void *buf, size_t len,
		     const unsigned char md5[NRS_MD5_LEN],
		     const unsigned char sha256[NRS_SHA256_LEN]);
int nrs_dirstore_put_cond(struct nrs_objstore *s, const char *key,
			  const void *buf, size_t len,
			  const unsigned char md5[NRS_MD5_LEN],
			  const unsigned char sha256[NRS_SHA256_LEN],
			  const char *if_match, char etag[NRS_ETAG_MAX]);
int nrs_dirstore_del(struct nrs_objstore *s, const char *key);

#endif
