/*
 * wal_local_append.c - the local WAL's append path: write, sync and cut
 * of batches, rotation to a new segment, the undo of a failed batch, the
 * reserve and budget checks, and the zeros written ahead of small
 * batches.  The provider's other operations are in wal_local.c (its top
 * comment has the LOCKING rules), segments in wal_local_seg.c.
 *
 * APPEND PROTOCOL (one writing thread, one syncing thread)
 *
 *   WA0 write() is refused (-EINVAL) before a successful scan(), and for
 *       an empty batch or one that is not a multiple of 8 bytes (records
 *       are padded to 8 so that WS4 can search at 8-byte steps).
 *   WA1 A batch goes whole into one segment, the current one.  There is
 *       no current segment after scan(), after a failed fdatasync (WA4), or
 *       when current size + batch > segment_size and the segment already
 *       holds a record: then rotate first, to segment max + 1: create it
 *       O_CREAT|O_EXCL, write its header, fdatasync it, fsync DIR.  A
 *       segment that existed before this open is never appended to.  A
 *       batch larger than segment_size fills a segment alone.  seal()
 *       rotates the same way, with no batch (WD2).
 *   WA2 write(): the batch is written at the tracked end with pwritev (in
 *       windows of about 1 MiB, whose writeback a batch larger than that
 *       starts at once with sync_file_range, so the disk works while the
 *       rest is copied; repeated for short writes), and its position
 *       returned.  sync(end): one fdatasync of end's segment; only then is
 *       the batch durable.  The writing thread may write the next batch
 *       while another thread syncs this one.
 *   WA3 On a failed write, and on cut() after a failed sync: ftruncate
 *       the segment back to the batch's start (and every later segment,
 *       which then holds only batches written after it, back to its
 *       header), then fdatasync.  If that worked, the batches have left no
 *       trace.  If not, the WAL is broken: the error is logged and every
 *       later write fails -EIO (a later scan may then return records of
 *       the failed batches, which DESIGN.md I3 allows: the commit pipeline
 *       decides whether their intents continue a head).
 *   WA4 After a failed fdatasync the kernel may have dropped dirty pages
 *       and will not report it again, so the segment is never written
 *       again (the next write rotates), and every later sync of it fails
 *       too.  One fdatasync of the appended segments runs at a time
 *       (sync_lock): a failure reported to one call is never hidden from
 *       another that started while it ran.
 *   WA5 An append that would leave less than the configured reserve of
 *       free space on the file system fails -ENOSPC before writing: that
 *       space is the metadata store's, which must still publish the heads
 *       of records the WAL holds.  The default reserve scales with the
 *       file system (nrs_wal_reserve_scaled): 5%, at least 4 MiB, at most
 *       64 MiB, so that a small one is not all reserve; the daemon warns
 *       at mount when the reserve leaves no room (core.c).
 *       The check is nrs_fs_room (fileio.h), the one the metadata
 *       store's growth check uses too (meta_sqlite.c MS1).
 *   WA6 An append that would bring the bytes held in segments past the
 *       configured budget fails -ENOSPC before writing (backpressure while
 *       the object store cannot take the committed bytes, wal.h).
 *
 *   WA7 Zero ahead.  Appending past the end of a file makes every fdatasync
 *       commit the file's new size too (a journal commit on ext4 and xfs),
 *       which costs a lone small append about as much again as its data.
 *       So while batches are small -- this one, and the running average of
 *       the recent ones (1/8 weight each), at most ZERO_BATCH_MAX bytes -- a
 *       batch that reaches past the zeroed end first extends the segment
 *       with zeros to ZERO_AHEAD bytes beyond itself (within segment_size),
 *       written before the batch and made durable by the same fdatasync;
 *       the small batches that follow overwrite allocated blocks inside the
 *       file, and their fdatasync writes data alone.  Large batches are
 *       bound by bandwidth, not by that commit: they extend the file as
 *       they go, and zeros ahead of them would double their writes (the
 *       average keeps the small tail of a large write() that the kernel
 *       split in two from writing them).  A failed zero write is ignored:
 *       it leaves zeros or nothing past the batch.  Undo (WA3) and rotation
 *       (WA1) cut the file back to the end of its last batch; close does
 *       too.  Rotation and close sync the cut: the old segment may live on
 *       as an adopted object (write once) after the WAL lets go of its
 *       name, and then nothing else would ever sync its size (a clean
 *       unmount must leave nothing unsynced: t0401).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/failpoint.h"
#include "util/fileio.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_local_priv.h"

#define WRITE_WINDOW	(1u << 20)	/* see pwritev_full */
#define ZERO_AHEAD	(1u << 20)	/* WA7 */
#define ZERO_BLOCK	(64u << 10)

/*
 * Write the first limit bytes of iov[0..iovcnt) back to back at off: WA2's
 * loop (limit is below the batch's size only for the failpoint wal.write's
 * short write).  The batch goes in windows of about WRITE_WINDOW bytes;
 * when it is larger than one window, the writeback of each window starts
 * as soon as it is in the page cache, so that the disk works while the
 * next window is copied (the fdatasync that follows then waits for less).
 */
static int pwritev_full(struct wal_local *w, int fd, const struct iovec *iov,
			int iovcnt, uint64_t off, size_t limit)
{
	size_t skip = 0;	/* bytes of iov[i] already written */
	size_t total = 0;
	int i = 0;

	for (int k = 0; k < iovcnt; k++)
		total += iov[k].iov_len;
	while (i < iovcnt && limit > 0) {
		size_t want = 0;
		ssize_t n;
		int cnt = 0;

		for (; cnt < WAL_IOV_MAX && i + cnt < iovcnt &&
		       want < WRITE_WINDOW + skip; cnt++) {
			w->iovwin[cnt] = iov[i + cnt];
			want += iov[i + cnt].iov_len;
		}
		w->iovwin[0].iov_base = (char *)w->iovwin[0].iov_base + skip;
		w->iovwin[0].iov_len -= skip;
		want -= skip;
		while (want > limit) {		/* clip the window to limit */
			size_t cut = want - limit;
			struct iovec *last = &w->iovwin[cnt - 1];

			if (cut >= last->iov_len && cnt > 1) {
				want -= last->iov_len;
				cnt--;
			} else {
				last->iov_len -= cut;
				want = limit;
			}
		}
		if (want == 0) {
			i += cnt;
			skip = 0;
			continue;
		}
		n = pwritev(fd, w->iovwin, cnt, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		/* a hint: an error here is the fdatasync's to report */
		if (total > WRITE_WINDOW)
			(void)sync_file_range(fd, (off_t)off, n, SYNC_FILE_RANGE_WRITE);
		off += (uint64_t)n;
		limit -= (size_t)n;
		for (size_t left = (size_t)n; left > 0;) {
			size_t rest = iov[i].iov_len - skip;

			if (left < rest) {
				skip += left;
				break;
			}
			left -= rest;
			i++;
			skip = 0;
		}
	}
	return 0;
}
/*
 * WA7: cut the current segment back to the end of its last batch, dropping
 * the zeros written ahead; synced if asked (close), else left to WS9.
 */
void wl_cut_back(struct wal_local *w, bool sync)
{
	int rc;

	if (w->cur_fd < 0 || w->zeroed <= w->cur_end)
		return;
	rc = wl_truncate_fd(w->cur_fd, w->cur_end, sync);
	if (rc == 0)
		w->zeroed = w->cur_end;
	else
		nrs_warn("local WAL %s: cutting segment %016" PRIx64 " back to "
			 "%" PRIu64 ": %s", w->dir, w->cur_no, w->cur_end,
			 strerror(-rc));
}

/* WA1: start segment next_no and make it current. */
int wl_rotate(struct wal_local *w)
{
	unsigned char hdr[SEG_HDR];
	char name[SEG_NAME_MAX];
	uint64_t no = w->next_no;
	ssize_t n;
	int fd, rc;

	nrs_wal_local_seg_name(name, no);
	fd = openat(w->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		nrs_err("local WAL %s: create %s: %s", w->dir, name,
			strerror(-rc));
		if (rc == -EEXIST)
			w->next_no = no + 1;	/* not ours: never touch it */
		return rc;
	}
	w->next_no = no + 1;	/* never reuse a number, even on failure */
	wl_cut_back(w, true);	/* WA7: the old segment's zeros, for good */
	wl_seg_hdr_encode(hdr, no);
	n = pwrite(fd, hdr, SEG_HDR, 0);
	if (n != SEG_HDR) {
		rc = n < 0 ? -errno : -EIO;
		goto out_unlink;
	}
	if (fdatasync(fd) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	rc = wl_fsync_dir(w);
	if (rc < 0)
		goto out_unlink;
	pthread_mutex_lock(&w->lock);
	rc = wl_seg_insert(w, no, fd, SEG_HDR);
	if (rc == 0) {
		w->cur_no = no;
		w->must_rotate = false;
	}
	pthread_mutex_unlock(&w->lock);
	if (rc < 0)
		goto out_unlink;
	w->cur_fd = fd;
	w->cur_end = SEG_HDR;
	w->zeroed = SEG_HDR;
	return 0;

out_unlink:
	nrs_err("local WAL %s: starting segment %s: %s", w->dir, name,
		strerror(-rc));
	close(fd);
	/* Best effort: a leftover header-only or torn file holds no record. */
	if (unlinkat(w->dirfd, name, 0) == 0)
		(void)fsync(w->dirfd);
	return rc;
}

/* ftruncate segment no to size and fdatasync it; 0 or -errno. */
static int truncate_sync(struct wal_local *w, uint64_t no, uint64_t size)
{
	int fd, rc;

	rc = wl_seg_fd(w, no, &fd, NULL);
	if (rc == 0)
		rc = wl_truncate_fd(fd, size, true);
	if (rc == 0)
		wl_seg_set_size(w, no, size);
	return rc;
}

/*
 * WA3: drop everything written at or after pos, given up because of err
 * (the writing thread, holding nothing).  Segments after pos.seg hold only
 * batches written after it: back to their header.
 */
static int cut_to(struct wal_local *w, struct nrs_wal_pos pos, int err)
{
	uint64_t no = pos.seg;
	int rc = 0;

	pthread_mutex_lock(&w->sync_lock);
	for (;;) {	/* the later segments, in ascending order */
		ssize_t i;

		pthread_mutex_lock(&w->lock);
		i = wl_seg_find(w, no);
		no = i >= 0 && (size_t)i + 1 < w->nsegs ? w->segs[i + 1].no : 0;
		pthread_mutex_unlock(&w->lock);
		if (no == 0)
			break;
		rc = truncate_sync(w, no, SEG_HDR);
		if (rc < 0)
			break;
	}
	if (rc == 0)
		rc = truncate_sync(w, pos.seg, pos.off);
	pthread_mutex_unlock(&w->sync_lock);
	if (rc < 0) {
		nrs_err("local WAL %s: append to segment %016" PRIx64 " failed "
			"(%s) and truncating it back to %" PRIu64 " failed (%s): "
			"WAL broken, refusing all appends", w->dir, pos.seg,
			strerror(-err), pos.off, strerror(-rc));
		pthread_mutex_lock(&w->lock);
		w->broken = true;
		pthread_mutex_unlock(&w->lock);
		return rc;
	}
	if (pos.seg == w->cur_no) {
		w->cur_end = pos.off;
		w->zeroed = pos.off;
	} else if (w->cur_fd >= 0) {
		w->cur_end = SEG_HDR;
		w->zeroed = SEG_HDR;
	}
	nrs_err("local WAL %s: append to segment %016" PRIx64 " at %" PRIu64
		" failed: %s (undone)", w->dir, pos.seg, pos.off, strerror(-err));
	return 0;
}

/*
 * WA5: the reserve.  An append that would leave less than w->reserve bytes
 * free fails -ENOSPC before it writes: the space is the metadata store's,
 * which must publish the heads of what the WAL already holds (else those
 * records stay durable but unpublished, and the pipeline fails).
 */
static int check_reserve(struct wal_local *w, size_t total)
{
	return nrs_fs_room(w->dirfd, w->reserve, total);
}

/* WA6: the budget, against the bytes the segment table holds. */
static int check_budget(struct wal_local *w, size_t total)
{
	uint64_t held = 0;

	if (w->budget == 0)
		return 0;
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nsegs; i++)
		held += w->segs[i].size;
	pthread_mutex_unlock(&w->lock);
	return held >= w->budget || w->budget - held < total ? -ENOSPC : 0;
}

/*
 * WA7: zeros after a small batch that will end at `end`, up to ZERO_AHEAD
 * beyond it.  Failures are ignored: the file then holds zeros, or nothing,
 * past the batch (WS9), and the next small batch tries again.
 */
static void zero_ahead(struct wal_local *w, uint64_t end, size_t total)
{
	static const unsigned char zero_block[ZERO_BLOCK];
	struct iovec iov[ZERO_AHEAD / ZERO_BLOCK];
	uint64_t from = w->zeroed, to;
	int n = 0, rc;

	w->avg_batch = w->avg_batch - w->avg_batch / 8 + total / 8;
	if (total > ZERO_BATCH_MAX || w->avg_batch > ZERO_BATCH_MAX ||
	    end <= w->zeroed)
		return;
	if (from < end)
		from = end;
	to = end + ZERO_AHEAD < w->seg_size ? end + ZERO_AHEAD : w->seg_size;
	if (from >= to)
		return;
	for (uint64_t left = to - from; left > 0; n++) {
		iov[n].iov_base = (void *)zero_block;
		iov[n].iov_len = left < ZERO_BLOCK ? (size_t)left : ZERO_BLOCK;
		left -= iov[n].iov_len;
	}
	rc = pwritev_full(w, w->cur_fd, iov, n, from, (size_t)(to - from));
	if (rc < 0)
		nrs_debug("local WAL %s: writing zeros ahead at %" PRIu64 ": %s",
			  w->dir, from, strerror(-rc));
	else
		w->zeroed = to;
}

int wl_write(struct nrs_wal *base, const struct iovec *iov,
	     int iovcnt, struct nrs_wal_pos *pos)
{
	struct wal_local *w = (struct wal_local *)base;
	uint64_t start;
	size_t total = 0;
	bool broken, must_rotate;
	int rc;

	if (w->read_only)
		return -EROFS;
	if (!w->scanned || iovcnt <= 0 || !iov || !pos)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	broken = w->broken;
	must_rotate = w->must_rotate;
	pthread_mutex_unlock(&w->lock);
	if (broken)
		return -EIO;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > (size_t)INT64_MAX - total)
			return -EFBIG;
		total += iov[i].iov_len;
	}
	if (total == 0 || total % NRS_WALREC_ALIGN != 0)
		return -EINVAL;
	w->appended = true;

	rc = check_reserve(w, total);
	if (rc == 0)
		rc = check_budget(w, total);
	if (rc < 0)
		return rc;
	if (w->cur_fd < 0 || must_rotate ||
	    total > (uint64_t)INT64_MAX - w->cur_end ||
	    (w->cur_end > SEG_HDR && w->cur_end + total > w->seg_size)) {
		rc = wl_rotate(w);
		if (rc < 0)
			return rc;
	}
	start = w->cur_end;
	zero_ahead(w, start + total, total);
	rc = nrs_failpoint(NRS_FP_WAL_BEFORE_WRITE);
	if (rc == 0) {
		size_t len = total;	/* all, or what wal.write lets through */

		rc = nrs_failpoint_write(NRS_FP_WAL_WRITE, &len);
		if (len > 0) {
			int wr = pwritev_full(w, w->cur_fd, iov, iovcnt, start,
					      len);

			if (wr < 0)
				rc = wr;
		}
	}
	if (rc == 0)
		rc = nrs_failpoint(NRS_FP_WAL_AFTER_WRITE);
	pos->seg = w->cur_no;
	pos->off = start;
	if (rc < 0) {
		(void)cut_to(w, *pos, rc);
		return rc;
	}
	w->cur_end = start + total;
	if (w->zeroed < w->cur_end)
		w->zeroed = w->cur_end;
	wl_seg_set_size(w, w->cur_no, w->cur_end);
	return 0;
}

/* WA2, WA4 */
int wl_sync(struct nrs_wal *base, struct nrs_wal_pos end)
{
	struct wal_local *w = (struct wal_local *)base;
	ssize_t i;
	int fd, rc;

	if (w->read_only)
		return -EROFS;
	pthread_mutex_lock(&w->sync_lock);
	rc = wl_seg_fd(w, end.seg, &fd, NULL);
	if (rc == 0)
		rc = nrs_failpoint(NRS_FP_WAL_BEFORE_SYNC);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	if (rc == 0)
		rc = nrs_failpoint(NRS_FP_WAL_AFTER_SYNC);
	pthread_mutex_lock(&w->lock);
	i = wl_seg_find(w, end.seg);
	if (rc < 0 && i >= 0) {
		w->segs[i].sync_failed = true;
		if (end.seg == w->cur_no)
			w->must_rotate = true;
	} else if (i >= 0 && w->segs[i].sync_failed) {
		rc = -EIO;	/* an earlier fdatasync of it failed */
	}
	pthread_mutex_unlock(&w->lock);
	pthread_mutex_unlock(&w->sync_lock);
	if (rc < 0)
		nrs_err("local WAL %s: sync of segment %016" PRIx64 " up to %"
			PRIu64 " failed: %s", w->dir, end.seg, end.off,
			strerror(-rc));
	return rc;
}

int wl_cut(struct nrs_wal *base, struct nrs_wal_pos pos, int why)
{
	struct wal_local *w = (struct wal_local *)base;

	if (w->read_only)
		return -EROFS;
	if (!w->scanned || pos.off < SEG_HDR)
		return -EINVAL;
	return cut_to(w, pos, why);
}


uint64_t nrs_wal_reserve_scaled(uint64_t max, uint64_t fs_bytes)
{
	uint64_t r = fs_bytes / 20;		/* WA5: 5% */

	if (r < NRS_WAL_RESERVE_FLOOR)
		r = NRS_WAL_RESERVE_FLOOR;
	return r < max ? r : max;
}
