/*
 * fsck_priv.h - what the files of src/fsck/ share; private to the folder.
 *
 * nrs_fsck_check (fsck.c) sorts f->inodes by ino, f->streams by id,
 * f->recs by LSN and f->objs as recovery does (nrs_recover_obj_cmp) before
 * it runs any check: the look-ups below rely on that order.  It also
 * fills a struct ns, the namespace per inode, in nrs_fsck_check_dirents
 * before any other check reads it.
 */
#ifndef NRS_FSCK_PRIV_H
#define NRS_FSCK_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fsck/fsck.h"

#define ERR(f, ...)	nrs_fsck_say(f, NRS_FSCK_ERROR, __VA_ARGS__)

/* Binary search of arr[0..n), sorted by field: the index of an element
 * whose field is key, or -1. */
#define BSEARCH(arr, n, field, key) ({					\
	ssize_t lo_ = 0, hi_ = (ssize_t)(n), at_ = -1;			\
	while (lo_ < hi_) {						\
		ssize_t mid_ = lo_ + (hi_ - lo_) / 2;			\
		if ((arr)[mid_].field == (key)) { at_ = mid_; break; }	\
		if ((arr)[mid_].field < (key)) lo_ = mid_ + 1;		\
		else hi_ = mid_;					\
	}								\
	at_; })

static inline ssize_t inode_at(const struct nrs_fsck *f, uint64_t ino)
{
	return BSEARCH(f->inodes, f->ninodes, ino, ino);
}

static inline ssize_t stream_at(const struct nrs_fsck *f, uint64_t id)
{
	return BSEARCH(f->streams, f->nstreams, id, id);
}

static inline const struct nrs_wal_rec_info *
rec_of(const struct nrs_fsck *f, uint64_t lsn)
{
	ssize_t i = BSEARCH(f->recs, f->nrecs, rec.lsn, lsn);

	return i < 0 ? NULL : &f->recs[i];
}

/* Per inode (same index as f->inodes), from the dirents. */
struct ns {
	size_t *names;		/* dirents naming it */
	ssize_t *name;		/* one of them, -1 if none */
	size_t *subdirs;	/* its entries that are directories */
};

/* "/a/b" for inode ino, from its names, in buf (fsck.c). */
const char *nrs_fsck_path_of(const struct nrs_fsck *f, const struct ns *ns,
			     uint64_t ino, char *buf, size_t size);

/* fsck_stream.c */
void nrs_fsck_check_wal(struct nrs_fsck *f);			/* F3-F6 */
void nrs_fsck_check_recs(struct nrs_fsck *f);			/* F29 */
int nrs_fsck_check_streams(struct nrs_fsck *f, const struct ns *ns);
int nrs_fsck_check_pending(struct nrs_fsck *f, const struct ns *ns);
/* fsck_obj.c: F21-F26 */
int nrs_fsck_check_objects(struct nrs_fsck *f, const struct ns *ns);
/* fsck_ns.c */
void nrs_fsck_check_sequences(struct nrs_fsck *f);		/* F30 */
void nrs_fsck_check_change_log(struct nrs_fsck *f);		/* F31 */
void nrs_fsck_check_dirents(struct nrs_fsck *f, struct ns *ns);
void nrs_fsck_check_inodes(struct nrs_fsck *f, const struct ns *ns);

#endif
