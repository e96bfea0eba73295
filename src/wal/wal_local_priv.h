/*
 * wal_local_priv.h - private to src/wal/: the local WAL's state and the
 * functions its four files share.
 *
 *   wal_local.c       the provider: reads, sync_all (WA8), stats, open and
 *                     close, the operations table
 *   wal_local_append.c  the append path: write, sync, cut, rotation
 *                     (WA0-WA7)
 *   wal_local_seg.c   segment management: names, header, the segment
 *                     table, the directory, reclamation and sealing (WD1, WD2)
 *   wal_local_scan.c  the recovery scan (WS1-WS9)
 *
 * The LOCKING rules are in wal_local.c's top comment, the append
 * protocol in wal_local_append.c's (the directory and segment format in
 * wal_local_seg.c's).
 */
#ifndef NRS_WAL_LOCAL_PRIV_H
#define NRS_WAL_LOCAL_PRIV_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wal/wal.h"

#define SEG_HDR		64
#define SEG_NAME_MAX	NRS_WAL_SEG_NAME_MAX
/* WA7: zeros ahead only while batches are at most this small; wal_local.c
 * starts the running average there */
#define ZERO_BATCH_MAX	(256u << 10)
#ifdef IOV_MAX
#define WAL_IOV_MAX	IOV_MAX
#else
#define WAL_IOV_MAX	1024
#endif

struct seg {
	uint64_t no;
	int fd;			/* -1 until first used; then open until close */
	uint64_t size;		/* file size as last known */
	bool sync_failed;	/* WA4 */
};

struct wal_local {
	struct nrs_wal base;
	char *dir;
	int dirfd;
	uint64_t seg_size;
	uint64_t reserve;		/* bytes of free space left to others */
	uint64_t budget;		/* WA6: most bytes in segments, 0: none */
	bool read_only;		/* WS8 */
	void (*damage)(void *ctx, const struct nrs_wal_damage *d);
	void *damage_ctx;

	pthread_mutex_t lock;
	struct seg *segs;	/* protected by lock; sorted by no */
	size_t nsegs, cap;	/* protected by lock */
	uint64_t cur_no;	/* protected by lock; 0 = no current segment */
	bool broken;		/* protected by lock */
	bool must_rotate;	/* protected by lock (WA4) */
	pthread_mutex_t sync_lock;	/* WA4 */

	/* The writing thread's (and scan's) own state. */
	bool scanned, appended;
	uint64_t next_no;
	int cur_fd;		/* also in segs[]: closed by close only */
	uint64_t cur_end;
	uint64_t zeroed;	/* WA7: bytes [cur_end, zeroed) are zeros */
	uint64_t avg_batch;	/* WA7: running average of batch bytes */
	struct iovec *iovwin;	/* WAL_IOV_MAX entries for pwritev */
};

/* wal_local_seg.c */
/* Format segment no's header into h (SEG_HDR bytes). */
void wl_seg_hdr_encode(unsigned char *h, uint64_t no);
/* Whether h (SEG_HDR bytes) is a valid header of segment no. */
bool wl_seg_hdr_ok(const unsigned char *h, uint64_t no);
/* Index of segment no in the table, or -1.  Caller holds w->lock. */
ssize_t wl_seg_find(const struct wal_local *w, uint64_t no);
/* Insert a segment not yet in the table.  Caller holds w->lock. */
int wl_seg_insert(struct wal_local *w, uint64_t no, int fd, uint64_t size);
void wl_seg_set_size(struct wal_local *w, uint64_t no, uint64_t size);
/* The fd of segment no, opened on first use, and its size (may be NULL);
 * -ENOENT if it is not in the table. */
int wl_seg_fd(struct wal_local *w, uint64_t no, int *out, uint64_t *size);
int wl_fsync_dir(struct wal_local *w);
/* ftruncate fd to size, and fdatasync it if sync: 0 or -errno. */
int wl_truncate_fd(int fd, uint64_t size, bool sync);
/* mkdir -p, fsyncing the parent of every directory it creates. */
int wl_mkdir_p(const char *path);
/* Fill the table from the directory listing (no file is read). */
int wl_list_segments(struct wal_local *w);
int wl_reclaim(struct nrs_wal *base, uint64_t below, uint64_t *bytes);
int wl_seal(struct nrs_wal *base, uint64_t seg);

/* wal_local_append.c: the operations write, sync and cut (wal.h) */
int wl_write(struct nrs_wal *base, const struct iovec *iov, int iovcnt,
	     struct nrs_wal_pos *pos);
int wl_sync(struct nrs_wal *base, struct nrs_wal_pos end);
int wl_cut(struct nrs_wal *base, struct nrs_wal_pos pos, int why);
/* WA1: start segment next_no and make it current (the writing thread). */
int wl_rotate(struct wal_local *w);
/* WA7: cut the current segment back to the end of its last batch (the
 * writing thread, or close); synced if sync. */
void wl_cut_back(struct wal_local *w, bool sync);

/* wal_local_scan.c */
int wl_scan(struct nrs_wal *base, nrs_wal_scan_cb cb, void *ctx);

#endif
