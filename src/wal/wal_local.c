/*
 * wal_local.c - the local WAL provider: records in append-only segment files
 * in one directory, made durable with fdatasync (the local-wal profile,
 * DESIGN.md section 5).  This file: reads, sync_all, stats, open and
 * close, and the operations table; the append path (WA0-WA7) is in
 * wal_local_append.c, segment management (names, header, table,
 * reclamation) in wal_local_seg.c, the recovery scan in wal_local_scan.c.
 *
 * The provider stores opaque batches of records (walrec.c formats them) and
 * never decides what is visible (DESIGN.md section 1).  Its jobs are: make a
 * batch durable or leave no trace of it (I3), read bytes back, and on
 * start-up hand every intact record to the caller in log order and cut the
 * torn tail a crash left.
 *
 * The append protocol (WA0-WA7): see wal_local_append.c; the directory,
 * the segment format and reclamation (WD1, WD2): wal_local_seg.c; the
 * start-up scan (WS1-WS9): wal_local_scan.c.
 *
 * DURABILITY OF WHAT IS THERE
 *
 *   WA8 sync_all() fdatasyncs every segment in the table (the current one
 *       cut back to its last batch first, WA7) and then fsyncs DIR.  A scan
 *       reads what the page cache holds, which after a process crash
 *       includes batches written but never synced (a kill between WA2's
 *       write and its sync): recovery calls sync_all() before it publishes
 *       any of them (recovery.c RC4, DESIGN.md I7), and a clean close calls
 *       it so that nothing of the log is left unsynced.  A segment whose
 *       fdatasync failed (WA4) is not synced again: whatever it holds below
 *       the failed batches an earlier sync made durable, and those batches
 *       were cut by a synced truncate (WA3) -- if that failed, the WAL is
 *       broken and sync_all() fails -EIO.
 *
 * LOCKING
 *
 * The segment table (number, fd, size, sync_failed), the broken and
 * must_rotate flags are protected by w->lock, held only for lookups and
 * updates, never across I/O; sync_lock is held across every fdatasync of
 * a segment's records (WA4) and never taken under w->lock.  A segment's
 * fd, once in the table, stays open until close, so a reader may pread on an
 * fd it looked up after dropping the lock.  The append state (cur_*,
 * next_no) belongs to the writing thread; scan() runs alone.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_local_priv.h"

#define DEFAULT_SEG_SIZE (64ull << 20)

static ssize_t local_read(struct nrs_wal *base, struct nrs_wal_pos pos,
			  void *buf, size_t len)
{
	struct wal_local *w = (struct wal_local *)base;
	uint64_t end;
	int fd, rc;

	if (pos.off > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	if (len > (uint64_t)INT64_MAX - pos.off)
		len = (size_t)((uint64_t)INT64_MAX - pos.off);
	rc = wl_seg_fd(w, pos.seg, &fd, &end);
	if (rc < 0)
		return rc;
	/* never the zeros past the last record (WA7): short at its end */
	if (pos.off >= end)
		return 0;
	if (len > end - pos.off)
		len = (size_t)(end - pos.off);
	return nrs_pread_full(fd, buf, len, pos.off);
}

/* WA8 */
static int local_sync_all(struct nrs_wal *base)
{
	struct wal_local *w = (struct wal_local *)base;
	bool broken_now;
	int rc = 0;

	if (w->read_only)
		return -EROFS;
	pthread_mutex_lock(&w->lock);
	broken_now = w->broken;
	pthread_mutex_unlock(&w->lock);
	if (broken_now)
		return -EIO;
	wl_cut_back(w, false);
	pthread_mutex_lock(&w->sync_lock);
	for (size_t i = 0;; i++) {
		char name[SEG_NAME_MAX];
		uint64_t no;
		bool failed;
		int fd;

		pthread_mutex_lock(&w->lock);
		if (i >= w->nsegs) {
			pthread_mutex_unlock(&w->lock);
			break;
		}
		no = w->segs[i].no;
		failed = w->segs[i].sync_failed;
		pthread_mutex_unlock(&w->lock);
		if (failed)
			continue;	/* see WA8 */
		nrs_wal_local_seg_name(name, no);
		rc = wl_seg_fd(w, no, &fd, NULL);
		if (rc == 0 && fdatasync(fd) < 0)
			rc = -errno;
		if (rc < 0) {
			nrs_err("local WAL %s: sync of segment %s: %s", w->dir,
				name, strerror(-rc));
			break;
		}
	}
	pthread_mutex_unlock(&w->sync_lock);
	return rc < 0 ? rc : wl_fsync_dir(w);
}

static void local_stats(struct nrs_wal *base, struct nrs_wal_stats *out)
{
	struct wal_local *w = (struct wal_local *)base;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nsegs; i++)
		out->bytes += w->segs[i].size;
	out->segments = w->nsegs;
	out->cur_seg = w->cur_no;
	for (size_t i = 0; i < w->nsegs; i++)
		if (w->segs[i].no > out->last_seg)
			out->last_seg = w->segs[i].no;
	for (size_t i = 0; i < w->nsegs; i++)
		if (w->cur_no && w->segs[i].no == w->cur_no &&
		    w->segs[i].size > SEG_HDR)
			out->cur_bytes = w->segs[i].size - SEG_HDR;
	out->broken = w->broken;
	pthread_mutex_unlock(&w->lock);
}

static void local_close(struct nrs_wal *base)
{
	struct wal_local *w = (struct wal_local *)base;

	if (!w->broken)		/* the next scan finds the records alone */
		wl_cut_back(w, true);

	for (size_t i = 0; i < w->nsegs; i++)
		if (w->segs[i].fd >= 0)
			close(w->segs[i].fd);
	if (w->dirfd >= 0)
		close(w->dirfd);
	pthread_mutex_destroy(&w->sync_lock);
	pthread_mutex_destroy(&w->lock);
	free(w->segs);
	free(w->iovwin);
	free(w->dir);
	free(w);
}

static const struct nrs_wal_ops local_ops = {
	.name = "local",
	.write = wl_write,
	.sync = wl_sync,
	.cut = wl_cut,
	.read = local_read,
	.scan = wl_scan,
	.sync_all = local_sync_all,
	.stats = local_stats,
	.reclaim = wl_reclaim,
	.seal = wl_seal,
	.close = local_close,
};

int nrs_wal_local_seg_path(struct nrs_wal *base, uint64_t seg, char *buf,
			   size_t size)
{
	struct wal_local *w = (struct wal_local *)base;
	char name[SEG_NAME_MAX];
	int n;

	if (!base || base->ops != &local_ops || seg == 0)
		return -EINVAL;
	nrs_wal_local_seg_name(name, seg);
	n = snprintf(buf, size, "%s/%s", w->dir, name);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int nrs_wal_local_open(const char *dir, const struct nrs_wal_local_opts *o,
		       struct nrs_wal **out)
{
	struct wal_local *w;
	int rc;

	if (!dir || !*dir || !out)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->base.ops = &local_ops;
	w->dirfd = -1;
	w->cur_fd = -1;
	w->next_no = o && o->first_seg > 1 ? o->first_seg : 1;
	w->avg_batch = ZERO_BATCH_MAX;	/* WA7: small batches must show first */
	w->seg_size = o && o->segment_size ? o->segment_size : DEFAULT_SEG_SIZE;
	w->reserve = o ? o->reserve : 0;
	w->budget = o ? o->budget : 0;
	if (o) {
		w->read_only = o->read_only;
		w->damage = o->damage;
		w->damage_ctx = o->damage_ctx;
	}
	rc = pthread_mutex_init(&w->lock, NULL);
	if (rc != 0) {
		free(w);
		return -rc;
	}
	rc = pthread_mutex_init(&w->sync_lock, NULL);
	if (rc != 0) {
		pthread_mutex_destroy(&w->lock);
		free(w);
		return -rc;
	}
	w->dir = strdup(dir);
	w->iovwin = calloc(WAL_IOV_MAX, sizeof(*w->iovwin));
	if (!w->dir || !w->iovwin) {
		rc = -ENOMEM;
		goto out_close;
	}
	rc = w->read_only ? 0 : wl_mkdir_p(dir);
	if (rc < 0) {
		nrs_err("local WAL %s: create directory: %s", dir, strerror(-rc));
		goto out_close;
	}
	w->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->dirfd < 0) {
		rc = -errno;
		nrs_err("local WAL %s: open directory: %s", dir, strerror(-rc));
		goto out_close;
	}
	rc = wl_list_segments(w);
	if (rc < 0) {
		nrs_err("local WAL %s: list segments: %s", dir, strerror(-rc));
		goto out_close;
	}
	*out = &w->base;
	return 0;

out_close:
	local_close(&w->base);
	return rc;
}
