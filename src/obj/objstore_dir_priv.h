/*
 * objstore_dir_priv.h - what the embedded store's files share
 * (objstore_dir.c: the store, its puts, reads and deletions;
 * objstore_dir_adopt.c: files adopted in place and their holes).  Not for
 * anyone else: the store is reached through objstore.h.
 */
#ifndef NRS_OBJSTORE_DIR_PRIV_H
#define NRS_OBJSTORE_DIR_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "obj/objstore.h"

struct dir_store {
	struct nrs_objstore base;
	char *dir;		/* for log lines */
	int rootfd;		/* DIR; both fds are fixed from open to close */
	int tmpfd;		/* DIR/.tmp; -1 when opened read only */
};

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

#endif
