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
/* fsck_adopt.c: F21, F25, F26 for adopted generations (row seg >= 1) */
struct nrs_fsck_segs {		/* sorted segment numbers */
	uint64_t *named;	/* of every adopted row */
	uint64_t *live;		/* of the prepared, committed, draining */
	uint64_t *wal;		/* of the local WAL's records */
	size_t nnamed, nlive, nwal;
};
int nrs_fsck_segs_build(const struct nrs_fsck *f, struct nrs_fsck_segs *s);
void nrs_fsck_segs_free(struct nrs_fsck_segs *s);
/* Does a prepared, committed or draining row name seg (F32, OW18)? */
bool nrs_fsck_segs_live(const struct nrs_fsck_segs *s, uint64_t seg);
/* F21 for committed adopted row o (key its file's): 0 when judged, else
 * the error of a store that cannot be read, or -ENOMEM. */
int nrs_fsck_check_adopted(struct nrs_fsck *f, const struct nrs_obj_row *o,
			   const char *key, const char *what);
/* Is adopted file key stored (*stored)?  0, or the store's error. */
int nrs_fsck_adopted_presence(struct nrs_fsck *f, const char *key,
			      bool *stored);
/* F25 for retired adopted row o. */
int nrs_fsck_check_retired_adopted(struct nrs_fsck *f,
				   const struct nrs_fsck_segs *s,
				   const struct nrs_obj_row *o,
				   const char *key, const char *what);
/* F26: true if of is an adopted file that is named, or pending (said);
 * false if it is for the general F26 check. */
bool nrs_fsck_adopted_file(struct nrs_fsck *f, const struct nrs_fsck_segs *s,
			   const struct nrs_objfile *of);

/* fsck_ns.c */
void nrs_fsck_check_sequences(struct nrs_fsck *f);		/* F30 */
void nrs_fsck_check_change_log(struct nrs_fsck *f);		/* F31 */
void nrs_fsck_check_dirents(struct nrs_fsck *f, struct ns *ns);
void nrs_fsck_check_inodes(struct nrs_fsck *f, const struct ns *ns);

#endif
