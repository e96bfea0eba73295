/*
 * wal_local.c - the local WAL provider: records in append-only segment files
 * in one directory, made durable with fdatasync (the local-wal profile,
 * DESIGN.md section 5).
 *
 * The provider stores opaque batches of records (walrec.c formats them) and
 * never decides what is visible (DESIGN.md section 1).  Its jobs are: make a
 * batch durable or leave no trace of it (I3), read bytes back, and on
 * start-up hand every intact record to the caller in log order and cut the
 * torn tail a crash left.
 *
 * DIRECTORY
 *
 * Segments are DIR/NNNNNNNNNNNNNNNN.seg, the segment number in 16 lower-case
 * hex digits.  Numbers start at 1 and increase; gaps are allowed (a rotation
 * that failed after creating its file unlinks it and does not reuse the
 * number).  Other names in DIR are ignored.  Log order is segment number,
 * then byte offset.
 *
 * SEGMENT FORMAT (integers little-endian)
 *
 *     0   u8   magic[8]   "NRSWALSG"
 *     8   u32  version    1
 *    12   u32  hdr_len    64
 *    16   u64  segno      must equal the number in the file name
 *    24   i64  created    nanoseconds since the Unix epoch (informational)
 *    32   u8   reserved[28], zero
 *    60   u32  crc        CRC32C of bytes 0..59
 *    64   records back to back, each walrec.c's total_len bytes (so every
 *         record starts at a multiple of 8), up to the end of the file.
 *
 * A segment has no trailer and no record count: its valid end is found by
 * scanning.  Bytes after the last record are zero (A7) up to the end of the
 * file, except after a crash (a torn tail) or a failed append whose undo
 * failed.  A segment that stops being current (rotation, close) is cut back
 * to the end of its last record.
 *
 * APPEND PROTOCOL (one writing thread, one syncing thread)
 *
 *   A0  write() is refused (-EINVAL) before a successful scan(), and for
 *       an empty batch or one that is not a multiple of 8 bytes (records
 *       are padded to 8 so that R4 can search at 8-byte steps).
 *   A1  A batch goes whole into one segment, the current one.  There is
 *       no current segment after scan(), after a failed fdatasync (A4), or
 *       when current size + batch > segment_size and the segment already
 *       holds a record: then rotate first, to segment max + 1: create it
 *       O_CREAT|O_EXCL, write its header, fdatasync it, fsync DIR.  A
 *       segment that existed before this open is never appended to.  A
 *       batch larger than segment_size fills a segment alone.  seal()
 *       rotates the same way, with no batch (D2).
 *   A2  write(): the batch is written at the tracked end with pwritev (in
 *       windows of about 1 MiB, whose writeback a batch larger than that
 *       starts at once with sync_file_range, so the disk works while the
 *       rest is copied; repeated for short writes), and its position
 *       returned.  sync(end): one fdatasync of end's segment; only then is
 *       the batch durable.  The writing thread may write the next batch
 *       while another thread syncs this one.
 *   A3  On a failed write, and on cut() after a failed sync: ftruncate
 *       the segment back to the batch's start (and every later segment,
 *       which then holds only batches written after it, back to its
 *       header), then fdatasync.  If that worked, the batches have left no
 *       trace.  If not, the WAL is broken: the error is logged and every
 *       later write fails -EIO (a later scan may then return records of
 *       the failed batches, which DESIGN.md I3 allows: the commit pipeline
 *       decides whether their intents continue a head).
 *   A4  After a failed fdatasync the kernel may have dropped dirty pages
 *       and will not report it again, so the segment is never written
 *       again (the next write rotates), and every later sync of it fails
 *       too.  One fdatasync of the appended segments runs at a time
 *       (sync_lock): a failure reported to one call is never hidden from
 *       another that started while it ran.
 *   A5  An append that would leave less than the configured reserve of
 *       free space on the file system fails -ENOSPC before writing: that
 *       space is the metadata store's, which must still publish the heads
 *       of records the WAL holds.  The default reserve scales with the
 *       file system (nrs_wal_reserve_scaled): 5%, at least 4 MiB, at most
 *       64 MiB, so that a small one is not all reserve; the daemon warns
 *       at mount when the reserve leaves no room (core.c).
 *       The check is nrs_fs_room (fileio.h), the one the metadata
 *       store's growth check uses too (meta_sqlite.c MS1).
 *   A6  An append that would bring the bytes held in segments past the
 *       configured budget fails -ENOSPC before writing (backpressure while
 *       the object store cannot take the committed bytes, wal.h).
 *
 *   A7  Zero ahead.  Appending past the end of a file makes every fdatasync
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
 *       it leaves zeros or nothing past the batch.  Undo (A3) and rotation
 *       (A1) cut the file back to the end of its last batch; close does
 *       too, and syncs it.
 *
 * RECLAMATION
 *
 *   D1  reclaim(below) unlinks every segment numbered below `below` except
 *       the current one, then fsyncs DIR once.  The caller guarantees that
 *       no record in them is needed (published elsewhere, trimmed or
 *       unlinked) and that no reader still reads them; their fds are closed.
 *       A crash part way leaves some of them, which the next reclaim
 *       removes; recovery ignores records a head does not reach (I3).
 *   D2  Sealing an idle segment (issue 12).  D1 never removes the current
 *       segment, so on an idle mount the space of its dead records (every
 *       stream that had a record in it unlinked, trimmed past it, or
 *       materialized) would never come back: up to segment_size bytes,
 *       forever.  seal(seg) rotates (A1) to a new, empty segment when seg
 *       is current and holds a record; D1 then removes seg by the
 *       caller's rules, like any older segment.  Sealing deletes nothing
 *       and only moves the next write, so a seal of a segment that still
 *       holds a live record costs a rotation, never a byte.  The caller
 *       (pipeline.c P6) seals only while no batch is in flight: under the
 *       commit role, with every batch synced and indexed.  An empty
 *       current segment is never sealed, so an idle mount rotates once,
 *       then stays put.  The alternative, punching holes in the current
 *       segment, would make every scanner (recovery, fsck) tell punched
 *       zeros from damage inside a segment; a new segment costs a 64-byte
 *       header and keeps R1-R9 as they are.  The bound that follows: on
 *       an idle mount, within materialize_age_ms + gc_grace_ms + about a
 *       second of the last append, unlink or trim, the segments hold at
 *       most one 64-byte header beyond the records of live bytes not yet
 *       materialized (README, nereusfs(8)).
 *
 * DURABILITY OF WHAT IS THERE
 *
 *   A8  sync_all() fdatasyncs every segment in the table (the current one
 *       cut back to its last batch first, A7) and then fsyncs DIR.  A scan
 *       reads what the page cache holds, which after a process crash
 *       includes batches written but never synced (a kill between A2's
 *       write and its sync): recovery calls sync_all() before it publishes
 *       any of them (recovery.c R4, DESIGN.md I7), and a clean close calls
 *       it so that nothing of the log is left unsynced.  A segment whose
 *       fdatasync failed (A4) is not synced again: whatever it holds below
 *       the failed batches an earlier sync made durable, and those batches
 *       were cut by a synced truncate (A3) -- if that failed, the WAL is
 *       broken and sync_all() fails -EIO.
 *
 * RECOVERY (scan: before the first append; again only before one)
 *
 *   R1  A last segment of at most 64 bytes with a bad header is a torn
 *       creation (A1 interrupted): it holds no record and is unlinked, then
 *       DIR is fsynced.
 *   R2  Any other segment with a bad header is logged and skipped whole.
 *   R3  From offset 64, a record is taken when its header decodes with a
 *       valid CRC and the whole record lies within the file; it is "whole"
 *       when every chunk CRC matches too.  Whole records are passed to the
 *       callback at once.  A record with a bad chunk is held back and passed
 *       (data_ok false) only once a whole record follows it, or at the end
 *       of a segment that is not the last.
 *   R4  Where no header verifies, the scan searches forward at 8-byte steps
 *       for the next position where R3 takes a record, and logs the bytes
 *       skipped as corruption.  A verified header whose record runs past
 *       the end of the file is not searched: only its own (torn) payload
 *       lies after it, and a record image stored in a payload must never be
 *       taken for a record.  (Inside a range whose header is damaged such an
 *       image cannot be told from a real record; R3's CRCs are all there is.)
 *   R5  In the last segment, everything after the last whole record that
 *       is bad (garbage, a record running past the end of the file, records
 *       with bad chunks) is a torn tail: the file is truncated to the end of
 *       the last whole record (64 if none) and fdatasynced, and "cut torn
 *       tail" is logged with the byte count.  A second scan then returns the
 *       same records and cuts nothing.
 *   R6  In any other segment nothing is cut: damage there is corruption,
 *       logged, not a crash artefact.
 *   R7  The callback's nonzero return stops the scan and is returned.  A
 *       scan that did not return 0 leaves the WAL unscanned (append -EINVAL).
 *   R8  Every damaged range of R1, R2, R4, R5 and every bad chunk of R3 is
 *       also passed to the opts' damage callback, if any.  A WAL opened
 *       read_only (nereusfs-fsck) does everything above except the writes:
 *       R1 and R5 report what they would remove and leave the file as it
 *       is, and the records of the torn tail are dropped as after a cut, so
 *       a checker sees exactly what recovery would.
 *   R9  Where no header verifies and every byte from there to the end of
 *       the file is zero, the segment's records end there: that is space
 *       A7 wrote ahead (a crash kept it from being cut back), not damage,
 *       and never reported.  In the last segment it is cut off (with the
 *       torn bytes before it, if R5 cuts; else alone, logged as info);
 *       elsewhere it stays.  Zeros followed by anything else are searched
 *       and reported as R4 says.
 *
 * LOCKING
 *
 * The segment table (number, fd, size, sync_failed), the broken and
 * must_rotate flags are protected by w->lock, held only for lookups and
 * updates, never across I/O; sync_lock is held across every fdatasync of
 * a segment's records (A4) and never taken under w->lock.  A segment's
 * fd, once in the table, stays open until close, so a reader may pread on an
 * fd it looked up after dropping the lock.  The append state (cur_*,
 * next_no) belongs to the writing thread; scan() runs alone.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/crc32c.h"
#include "util/failpoint.h"
#include "util/fileio.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/walrec.h"

#define SEG_MAGIC	"NRSWALSG"
#define SEG_VERSION	1
#define SEG_HDR		64
#define SEG_CRC_OFF	60
#define SEG_NAME_MAX	32
#define DEFAULT_SEG_SIZE (64ull << 20)
#define SCAN_BUF_SIZE	(8u << 20)	/* grows to the largest record */
#define WRITE_WINDOW	(1u << 20)	/* see pwritev_full */
#define ZERO_AHEAD	(1u << 20)	/* A7 */
#define ZERO_BATCH_MAX	(256u << 10)
#define ZERO_BLOCK	(64u << 10)
#define NO_CUT		UINT64_MAX
#ifdef IOV_MAX
#define WAL_IOV_MAX	IOV_MAX
#else
#define WAL_IOV_MAX	1024
#endif

_Static_assert(sizeof(SEG_MAGIC) - 1 == 8, "segment magic is 8 bytes");

struct seg {
	uint64_t no;
	int fd;			/* -1 until first used; then open until close */
	uint64_t size;		/* file size as last known */
	bool sync_failed;	/* A4 */
};

struct wal_local {
	struct nrs_wal base;
	char *dir;
	int dirfd;
	uint64_t seg_size;
	uint64_t reserve;		/* bytes of free space left to others */
	uint64_t budget;		/* A6: most bytes in segments, 0: none */
	bool read_only;		/* R8 */
	void (*damage)(void *ctx, const struct nrs_wal_damage *d);
	void *damage_ctx;

	pthread_mutex_t lock;
	struct seg *segs;	/* protected by lock; sorted by no */
	size_t nsegs, cap;	/* protected by lock */
	uint64_t cur_no;	/* protected by lock; 0 = no current segment */
	bool broken;		/* protected by lock */
	bool must_rotate;	/* protected by lock (A4) */
	pthread_mutex_t sync_lock;	/* A4 */

	/* The writing thread's (and scan's) own state. */
	bool scanned, appended;
	uint64_t next_no;
	int cur_fd;		/* also in segs[]: closed by close only */
	uint64_t cur_end;
	uint64_t zeroed;	/* A7: bytes [cur_end, zeroed) are zeros */
	uint64_t avg_batch;	/* A7: running average of batch bytes */
	struct iovec *iovwin;	/* WAL_IOV_MAX entries for pwritev */
};

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | p[n];
	return v;
}

static void seg_name(char buf[SEG_NAME_MAX], uint64_t no)
{
	snprintf(buf, SEG_NAME_MAX, "%016" PRIx64 ".seg", no);
}

/* True if name is a segment file name; *no is its number. */
static bool parse_seg_name(const char *name, uint64_t *no)
{
	uint64_t v = 0;

	if (strlen(name) != 20 || strcmp(name + 16, ".seg") != 0)
		return false;
	for (int i = 0; i < 16; i++) {
		char c = name[i];

		if (c >= '0' && c <= '9')
			v = v << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint64_t)(c - 'a' + 10);
		else
			return false;
	}
	*no = v;
	return true;
}

static void seg_hdr_encode(unsigned char *h, uint64_t no)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	memset(h, 0, SEG_HDR);
	memcpy(h, SEG_MAGIC, 8);	/* NOLINT(bugprone-not-null-terminated-result): a magic, not a string */
	put_le(h + 8, SEG_VERSION, 4);
	put_le(h + 12, SEG_HDR, 4);
	put_le(h + 16, no, 8);
	put_le(h + 24, (uint64_t)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec),
	       8);
	put_le(h + SEG_CRC_OFF, nrs_crc32c(0, h, SEG_CRC_OFF), 4);
}

static bool seg_hdr_ok(const unsigned char *h, uint64_t no)
{
	static const unsigned char zero[28];

	return memcmp(h, SEG_MAGIC, 8) == 0 &&
	       get_le(h + SEG_CRC_OFF, 4) == nrs_crc32c(0, h, SEG_CRC_OFF) &&
	       get_le(h + 8, 4) == SEG_VERSION && get_le(h + 12, 4) == SEG_HDR &&
	       get_le(h + 16, 8) == no && memcmp(h + 32, zero, sizeof(zero)) == 0;
}

/* Index of segment no, or -1.  Caller holds w->lock. */
static ssize_t seg_find(const struct wal_local *w, uint64_t no)
{
	size_t lo = 0, hi = w->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->segs[mid].no == no)
			return (ssize_t)mid;
		if (w->segs[mid].no < no)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Insert a segment not yet in the table.  Caller holds w->lock. */
static int seg_insert(struct wal_local *w, uint64_t no, int fd, uint64_t size)
{
	size_t i = w->nsegs;

	if (w->nsegs == w->cap) {
		size_t ncap = w->cap ? 2 * w->cap : 16;
		struct seg *n = realloc(w->segs, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		w->segs = n;
		w->cap = ncap;
	}
	while (i > 0 && w->segs[i - 1].no > no) {
		w->segs[i] = w->segs[i - 1];
		i--;
	}
	w->segs[i] = (struct seg){ .no = no, .fd = fd, .size = size };
	w->nsegs++;
	return 0;
}

static void seg_set_size(struct wal_local *w, uint64_t no, uint64_t size)
{
	ssize_t i;

	pthread_mutex_lock(&w->lock);
	i = seg_find(w, no);
	if (i >= 0)
		w->segs[i].size = size;
	pthread_mutex_unlock(&w->lock);
}

/*
 * The fd of segment no, opened (read-only) on first use, and its size as
 * the table knows it (size may be NULL).  The fd stays valid until close.
 * -ENOENT for a segment not in the table (never listed nor created by this
 * WAL, or removed by scan) or whose file is gone.
 */
static int seg_fd(struct wal_local *w, uint64_t no, int *out, uint64_t *size)
{
	char name[SEG_NAME_MAX];
	ssize_t i;
	int fd;

	pthread_mutex_lock(&w->lock);
	i = seg_find(w, no);
	fd = i >= 0 ? w->segs[i].fd : -1;
	if (i >= 0 && size)
		*size = w->segs[i].size;
	pthread_mutex_unlock(&w->lock);
	if (i < 0)
		return -ENOENT;
	if (fd < 0) {
		seg_name(name, no);
		fd = openat(w->dirfd, name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		pthread_mutex_lock(&w->lock);
		i = seg_find(w, no);
		if (i >= 0 && w->segs[i].fd < 0) {
			w->segs[i].fd = fd;
		} else {
			close(fd);	/* another thread was first */
			fd = i >= 0 ? w->segs[i].fd : -ENOENT;
		}
		pthread_mutex_unlock(&w->lock);
		if (fd < 0)
			return fd;
	}
	*out = fd;
	return 0;
}

static int fsync_dir(struct wal_local *w)
{
	if (fsync(w->dirfd) < 0) {
		int rc = -errno;

		nrs_err("local WAL %s: fsync of the directory: %s", w->dir,
			strerror(-rc));
		return rc;
	}
	return 0;
}

/*
 * Write the first limit bytes of iov[0..iovcnt) back to back at off: A2's
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

/* ftruncate fd to size, and fdatasync it if sync: 0 or -errno. */
static int truncate_fd(int fd, uint64_t size, bool sync)
{
	if (ftruncate(fd, (off_t)size) < 0 || (sync && fdatasync(fd) < 0))
		return -errno;
	return 0;
}

/*
 * A7: cut the current segment back to the end of its last batch, dropping
 * the zeros written ahead; synced if asked (close), else left to R9.
 */
static void cut_back(struct wal_local *w, bool sync)
{
	int rc;

	if (w->cur_fd < 0 || w->zeroed <= w->cur_end)
		return;
	rc = truncate_fd(w->cur_fd, w->cur_end, sync);
	if (rc == 0)
		w->zeroed = w->cur_end;
	else
		nrs_warn("local WAL %s: cutting segment %016" PRIx64 " back to "
			 "%" PRIu64 ": %s", w->dir, w->cur_no, w->cur_end,
			 strerror(-rc));
}

/* A1: start segment next_no and make it current. */
static int rotate(struct wal_local *w)
{
	unsigned char hdr[SEG_HDR];
	char name[SEG_NAME_MAX];
	uint64_t no = w->next_no;
	ssize_t n;
	int fd, rc;

	seg_name(name, no);
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
	cut_back(w, false);	/* the old segment's zeros; R9 if lost */
	seg_hdr_encode(hdr, no);
	n = pwrite(fd, hdr, SEG_HDR, 0);
	if (n != SEG_HDR) {
		rc = n < 0 ? -errno : -EIO;
		goto out_unlink;
	}
	if (fdatasync(fd) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	rc = fsync_dir(w);
	if (rc < 0)
		goto out_unlink;
	pthread_mutex_lock(&w->lock);
	rc = seg_insert(w, no, fd, SEG_HDR);
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

	rc = seg_fd(w, no, &fd, NULL);
	if (rc == 0)
		rc = truncate_fd(fd, size, true);
	if (rc == 0)
		seg_set_size(w, no, size);
	return rc;
}

/*
 * A3: drop everything written at or after pos, given up because of err
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
		i = seg_find(w, no);
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
 * A5: the reserve.  An append that would leave less than w->reserve bytes
 * free fails -ENOSPC before it writes: the space is the metadata store's,
 * which must publish the heads of what the WAL already holds (else those
 * records stay durable but unpublished, and the pipeline fails).
 */
static int check_reserve(struct wal_local *w, size_t total)
{
	return nrs_fs_room(w->dirfd, w->reserve, total);
}

/* A6: the budget, against the bytes the segment table holds. */
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
 * A7: zeros after a small batch that will end at `end`, up to ZERO_AHEAD
 * beyond it.  Failures are ignored: the file then holds zeros, or nothing,
 * past the batch (R9), and the next small batch tries again.
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

static int local_write(struct nrs_wal *base, const struct iovec *iov,
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
		rc = rotate(w);
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
	seg_set_size(w, w->cur_no, w->cur_end);
	return 0;
}

/* A2, A4 */
static int local_sync(struct nrs_wal *base, struct nrs_wal_pos end)
{
	struct wal_local *w = (struct wal_local *)base;
	ssize_t i;
	int fd, rc;

	if (w->read_only)
		return -EROFS;
	pthread_mutex_lock(&w->sync_lock);
	rc = seg_fd(w, end.seg, &fd, NULL);
	if (rc == 0)
		rc = nrs_failpoint(NRS_FP_WAL_BEFORE_SYNC);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	if (rc == 0)
		rc = nrs_failpoint(NRS_FP_WAL_AFTER_SYNC);
	pthread_mutex_lock(&w->lock);
	i = seg_find(w, end.seg);
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

static int local_cut(struct nrs_wal *base, struct nrs_wal_pos pos, int why)
{
	struct wal_local *w = (struct wal_local *)base;

	if (w->read_only)
		return -EROFS;
	if (!w->scanned || pos.off < SEG_HDR)
		return -EINVAL;
	return cut_to(w, pos, why);
}

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
	rc = seg_fd(w, pos.seg, &fd, &end);
	if (rc < 0)
		return rc;
	/* never the zeros past the last record (A7): short at its end */
	if (pos.off >= end)
		return 0;
	if (len > end - pos.off)
		len = (size_t)(end - pos.off);
	return nrs_pread_full(fd, buf, len, pos.off);
}

/* ---- recovery ---------------------------------------------------------- */

struct scan {
	struct wal_local *w;
	nrs_wal_scan_cb cb;
	void *ctx;
	char name[SEG_NAME_MAX];	/* segment being scanned */
	int fd;
	uint64_t fsize;
	unsigned char *buf;		/* file bytes [bstart, bstart + blen) */
	size_t cap, blen;
	uint64_t bstart;
	struct nrs_wal_rec_info *pend;	/* R3: bad-chunk records held back */
	size_t npend, pcap;
};

/*
 * Point *p at file bytes [off, off + want), reading them if the buffer does
 * not hold them.  *avail is how many bytes from off the buffer holds: less
 * than want only at end of file.
 */
static int sb_get(struct scan *s, uint64_t off, size_t want,
		  const unsigned char **p, size_t *avail)
{
	ssize_t n;

	if (off >= s->fsize) {
		*p = s->buf;
		*avail = 0;
		return 0;
	}
	if (want > s->fsize - off)
		want = (size_t)(s->fsize - off);
	if (off < s->bstart || off - s->bstart > s->blen ||
	    want > s->blen - (off - s->bstart)) {
		size_t len;

		if (want > s->cap) {
			/* Bounded: want <= walrec total_len(MAX_LEN). */
			size_t ncap = (want + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
			unsigned char *nb = realloc(s->buf, ncap);

			if (!nb)
				return -ENOMEM;
			s->buf = nb;
			s->cap = ncap;
		}
		len = s->fsize - off < s->cap ? (size_t)(s->fsize - off) : s->cap;
		s->blen = 0;
		n = nrs_pread_full(s->fd, s->buf, len, off);
		if (n < 0) {
			nrs_err("local WAL %s/%s: read at %" PRIu64 ": %s",
				s->w->dir, s->name, off, strerror((int)-n));
			return (int)n;
		}
		s->bstart = off;
		s->blen = (size_t)n;
	}
	*p = s->buf + (off - s->bstart);
	*avail = (size_t)(s->bstart + s->blen - off);
	return 0;
}

/*
 * R3's first test at off: 1 if a record with a valid header lies wholly
 * within the file there (*r, *rec point at it, the whole record in the
 * buffer), 2 if a valid header's record runs past the end of the file, 0 if
 * no valid header starts at off, or -errno.
 */
static int record_at(struct scan *s, uint64_t off, struct nrs_walrec *r,
		     const unsigned char **rec)
{
	const unsigned char *p = NULL;
	size_t avail = 0, tl;
	int rc;

	rc = sb_get(s, off, NRS_WALREC_FIXED, &p, &avail);
	if (rc < 0)
		return rc;
	rc = nrs_walrec_decode_hdr(p, avail, r);
	if (rc == -ENODATA && avail >= NRS_WALREC_FIXED) {
		rc = sb_get(s, off, nrs_walrec_hdr_len(r->len), &p, &avail);
		if (rc < 0)
			return rc;
		rc = nrs_walrec_decode_hdr(p, avail, r);
	}
	if (rc < 0)
		return 0;
	tl = nrs_walrec_total_len(r->len);
	if (tl > s->fsize - off)
		return 2;
	rc = sb_get(s, off, tl, &p, &avail);
	if (rc < 0)
		return rc;
	if (avail < tl)
		return 2;	/* the file shrank under us */
	*rec = p;
	return 1;
}

static int flush_pending(struct scan *s)
{
	int rc = 0;

	for (size_t i = 0; i < s->npend && rc == 0; i++)
		rc = s->cb(s->ctx, &s->pend[i]);
	s->npend = 0;
	return rc;
}

static int hold_back(struct scan *s, const struct nrs_wal_rec_info *ri)
{
	if (s->npend == s->pcap) {
		size_t ncap = s->pcap ? 2 * s->pcap : 8;
		struct nrs_wal_rec_info *n = realloc(s->pend, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->pend = n;
		s->pcap = ncap;
	}
	s->pend[s->npend++] = *ri;
	return 0;
}

/* R8 */
static void report(struct scan *s, enum nrs_wal_damage_kind kind, uint64_t no,
		   uint64_t start, uint64_t end, uint64_t lsn, uint32_t chunk)
{
	struct nrs_wal_damage d = {
		.kind = kind, .seg = no, .start = start, .end = end,
		.lsn = lsn, .chunk = chunk,
	};

	if (s->w->damage)
		s->w->damage(s->w->damage_ctx, &d);
}

/* Truncate the segment being scanned to end, and sync it if asked. */
static int truncate_seg(struct scan *s, uint64_t end, bool sync)
{
	int fd, rc;

	fd = openat(s->w->dirfd, s->name, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = truncate_fd(fd, end, sync);
	close(fd);
	return rc;
}

/* R5: truncate the last segment to end. */
static int cut_tail(struct scan *s, uint64_t no, uint64_t end)
{
	struct wal_local *w = s->w;
	int rc;

	report(s, NRS_WAL_TORN_TAIL, no, end, s->fsize, 0, 0);
	if (w->read_only) {
		nrs_warn("local WAL %s/%s: torn tail of %" PRIu64 " bytes at "
			 "offset %" PRIu64 " (read-only: not cut)", w->dir,
			 s->name, s->fsize - end, end);
		return 0;
	}
	rc = truncate_seg(s, end, true);
	if (rc < 0) {
		nrs_err("local WAL %s/%s: cutting torn tail at %" PRIu64 ": %s",
			w->dir, s->name, end, strerror(-rc));
		return rc;
	}
	nrs_warn("local WAL %s/%s: cut torn tail: %" PRIu64 " bytes at "
		 "offset %" PRIu64, w->dir, s->name, s->fsize - end, end);
	seg_set_size(w, no, end);
	return 0;
}

/* R9: cut the zeros from end off the last segment (nothing if read-only). */
static int cut_zeros(struct scan *s, uint64_t end)
{
	struct wal_local *w = s->w;
	int rc;

	if (w->read_only)
		return 0;
	rc = truncate_seg(s, end, false);
	if (rc < 0) {
		nrs_err("local WAL %s/%s: cutting the zeros after %" PRIu64
			": %s", w->dir, s->name, end, strerror(-rc));
		return rc;
	}
	nrs_info("local WAL %s/%s: cut %" PRIu64 " bytes of zeros written "
		 "ahead, after the last record at %" PRIu64, w->dir, s->name,
		 s->fsize - end, end);
	return 0;
}

/* R1: the last segment is a torn creation (A1 interrupted): no record. */
static int drop_torn_creation(struct scan *s, uint64_t no)
{
	struct wal_local *w = s->w;
	ssize_t i;
	int rc;

	report(s, NRS_WAL_TORN_SEGMENT, no, 0, s->fsize, 0, 0);
	if (w->read_only) {
		nrs_warn("local WAL %s/%s: segment torn at creation (read-only: "
			 "not removed)", w->dir, s->name);
		return 0;
	}
	if (unlinkat(w->dirfd, s->name, 0) < 0) {
		rc = -errno;
		nrs_err("local WAL %s/%s: unlink torn segment: %s", w->dir,
			s->name, strerror(-rc));
		return rc;
	}
	rc = fsync_dir(w);
	if (rc < 0)
		return rc;
	nrs_warn("local WAL %s/%s: removed segment torn at creation (%" PRIu64
		 " bytes)", w->dir, s->name, s->fsize);
	pthread_mutex_lock(&w->lock);
	i = seg_find(w, no);
	if (i >= 0) {
		memmove(&w->segs[i], &w->segs[i + 1],
			(w->nsegs - (size_t)i - 1) * sizeof(w->segs[0]));
		w->nsegs--;
	}
	pthread_mutex_unlock(&w->lock);
	close(s->fd);
	return 0;
}

/*
 * R4: the next position after off where a record lies wholly in the file
 * (*q; the file size if none).  The scan never resumes inside the extent of
 * a valid header (record_at's 2): only that record's own payload is there.
 */
static int next_record(struct scan *s, uint64_t off, uint64_t *q)
{
	const unsigned char *p;
	struct nrs_walrec r;
	int rc;

	for (off += NRS_WALREC_ALIGN; off < s->fsize; off += NRS_WALREC_ALIGN) {
		rc = record_at(s, off, &r, &p);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			*q = off;
			return 0;
		}
	}
	*q = s->fsize;
	return 0;
}

/* R9: *zero is whether file bytes [off, end of file) are all zero. */
static int zero_to_end(struct scan *s, uint64_t off, bool *zero)
{
	const unsigned char *p;
	size_t avail;
	int rc;

	*zero = false;
	while (off < s->fsize) {
		rc = sb_get(s, off, s->cap, &p, &avail);
		if (rc < 0)
			return rc;
		if (avail == 0)
			break;		/* the file shrank under us */
		if (p[0] != 0 || (avail > 1 && memcmp(p, p + 1, avail - 1) != 0))
			return 0;
		off += avail;
	}
	*zero = true;
	return 0;
}

/* R2..R6 and R9 for one segment. */
static int scan_segment(struct scan *s, uint64_t no, bool last)
{
	struct wal_local *w = s->w;
	uint64_t off = SEG_HDR, cut = NO_CUT;
	const unsigned char *p;
	struct stat st;
	size_t avail;
	int rc;

	seg_name(s->name, no);
	rc = seg_fd(w, no, &s->fd, NULL);
	if (rc < 0 || fstat(s->fd, &st) < 0) {
		rc = rc < 0 ? rc : -errno;
		nrs_err("local WAL %s/%s: open: %s", w->dir, s->name,
			strerror(-rc));
		return rc;
	}
	s->fsize = (uint64_t)st.st_size;
	s->blen = 0;
	s->npend = 0;
	seg_set_size(w, no, s->fsize);
	rc = sb_get(s, 0, SEG_HDR, &p, &avail);
	if (rc < 0)
		return rc;
	if (avail < SEG_HDR || !seg_hdr_ok(p, no)) {
		if (last && s->fsize <= SEG_HDR)
			return drop_torn_creation(s, no);	/* R1 */
		nrs_err("local WAL %s/%s: corrupt segment header (%" PRIu64
			" bytes): segment skipped", w->dir, s->name, s->fsize);
		report(s, NRS_WAL_BAD_SEGMENT, no, 0, s->fsize, 0, 0);
		return 0;					/* R2 */
	}
	while (off < s->fsize) {
		struct nrs_wal_rec_info ri = { .pos = { no, off } };
		uint32_t bad = 0;
		uint64_t q = s->fsize;

		rc = record_at(s, off, &ri.rec, &p);
		if (rc < 0)
			return rc;
		if (rc == 0) {					/* R9 */
			bool zero;

			rc = zero_to_end(s, off, &zero);
			if (rc < 0)
				return rc;
			if (zero) {
				rc = last && cut == NO_CUT ?
				     cut_zeros(s, off) : 0;
				if (rc < 0)
					return rc;
				s->fsize = off;	/* the rest is not there */
				seg_set_size(w, no, off);
				break;
			}
		}
		if (rc != 1) {					/* R4 */
			if (rc == 0 && (rc = next_record(s, off, &q)) < 0)
				return rc;
			if (q < s->fsize || !last) {
				nrs_err("local WAL %s/%s: corrupt bytes [%" PRIu64
					", %" PRIu64 ") skipped", w->dir,
					s->name, off, q);
				report(s, NRS_WAL_CORRUPT, no, off, q, 0, 0);
			}
			if (cut == NO_CUT)
				cut = off;
			off = q;
			continue;
		}
		ri.data_ok = nrs_walrec_verify_chunks(p, &ri.rec, 0,
				nrs_walrec_nchunks(ri.rec.len),
				p + nrs_walrec_hdr_len(ri.rec.len), &bad) == 0;
		off += nrs_walrec_total_len(ri.rec.len);
		if (!ri.data_ok) {				/* R3 */
			nrs_err("local WAL %s/%s: record lsn %" PRIu64 " at %"
				PRIu64 ": payload chunk %" PRIu32 " fails its "
				"CRC", w->dir, s->name, ri.rec.lsn,
				ri.pos.off, bad);
			report(s, NRS_WAL_BAD_CHUNK, no, ri.pos.off, off,
			       ri.rec.lsn, bad);
			rc = hold_back(s, &ri);
			if (rc < 0)
				return rc;
			if (cut == NO_CUT)
				cut = ri.pos.off;
			continue;
		}
		rc = flush_pending(s);
		if (rc == 0)
			rc = s->cb(s->ctx, &ri);
		if (rc != 0)
			return rc;
		cut = NO_CUT;
	}
	if (cut != NO_CUT && last) {			/* R5 */
		s->npend = 0;
		return cut_tail(s, no, cut);
	}
	return flush_pending(s);			/* R6 */
}

static int local_scan(struct nrs_wal *base, nrs_wal_scan_cb cb, void *ctx)
{
	struct wal_local *w = (struct wal_local *)base;
	struct scan s = { .w = w, .cb = cb, .ctx = ctx, .fd = -1 };
	int rc = 0;

	if (w->appended || !cb)
		return -EINVAL;
	s.buf = malloc(SCAN_BUF_SIZE);
	if (!s.buf)
		return -ENOMEM;
	s.cap = SCAN_BUF_SIZE;
	for (size_t i = 0;; i++) {
		uint64_t no;
		bool last;

		pthread_mutex_lock(&w->lock);
		if (i >= w->nsegs) {
			pthread_mutex_unlock(&w->lock);
			break;
		}
		no = w->segs[i].no;
		last = i + 1 == w->nsegs;
		pthread_mutex_unlock(&w->lock);
		rc = scan_segment(&s, no, last);
		if (rc != 0)
			break;
	}
	free(s.pend);
	free(s.buf);
	if (rc == 0)
		w->scanned = true;
	return rc;
}

/* A8 */
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
	cut_back(w, false);
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
			continue;	/* see A8 */
		seg_name(name, no);
		rc = seg_fd(w, no, &fd, NULL);
		if (rc == 0 && fdatasync(fd) < 0)
			rc = -errno;
		if (rc < 0) {
			nrs_err("local WAL %s: sync of segment %s: %s", w->dir,
				name, strerror(-rc));
			break;
		}
	}
	pthread_mutex_unlock(&w->sync_lock);
	return rc < 0 ? rc : fsync_dir(w);
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

/* D1 */
static int local_reclaim(struct nrs_wal *base, uint64_t below, uint64_t *bytes)
{
	struct wal_local *w = (struct wal_local *)base;
	char name[SEG_NAME_MAX];
	uint64_t freed = 0;
	int removed = 0, rc = 0;

	if (w->read_only)
		return -EROFS;
	for (;;) {
		struct seg victim = { .no = 0 };

		pthread_mutex_lock(&w->lock);
		for (size_t i = 0; i < w->nsegs && w->segs[i].no < below; i++) {
			if (w->segs[i].no == w->cur_no)
				continue;
			victim = w->segs[i];
			memmove(w->segs + i, w->segs + i + 1,
				(w->nsegs - i - 1) * sizeof(*w->segs));
			w->nsegs--;
			break;
		}
		pthread_mutex_unlock(&w->lock);
		if (victim.no == 0)
			break;
		if (victim.fd >= 0)
			close(victim.fd);
		seg_name(name, victim.no);
		if (unlinkat(w->dirfd, name, 0) < 0 && errno != ENOENT) {
			rc = -errno;
			nrs_err("local WAL %s: cannot remove segment %s: %s",
				w->dir, name, strerror(-rc));
			break;
		}
		freed += victim.size;
		removed++;
	}
	if (removed > 0) {
		int frc = fsync_dir(w);

		if (frc < 0 && rc == 0)
			rc = frc;
	}
	if (bytes)
		*bytes = freed;
	return rc < 0 ? rc : removed;
}

/* D2 (the writing thread) */
static int local_seal(struct nrs_wal *base, uint64_t seg)
{
	struct wal_local *w = (struct wal_local *)base;
	bool broken;
	uint64_t cur;
	int rc;

	if (w->read_only)
		return -EROFS;
	if (!w->scanned)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	broken = w->broken;
	cur = w->cur_no;
	pthread_mutex_unlock(&w->lock);
	if (broken || w->cur_fd < 0 || seg == 0 || seg != cur ||
	    w->cur_end <= SEG_HDR)
		return 0;	/* nothing to seal: D2 */
	rc = rotate(w);
	if (rc < 0)
		return rc;
	nrs_debug("local WAL %s: sealed segment %016" PRIx64 " (idle, no live"
		  " record): appends go to %016" PRIx64, w->dir, seg, w->cur_no);
	return 1;
}

static void local_close(struct nrs_wal *base)
{
	struct wal_local *w = (struct wal_local *)base;

	if (!w->broken)		/* the next scan finds the records alone */
		cut_back(w, true);

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
	.write = local_write,
	.sync = local_sync,
	.cut = local_cut,
	.read = local_read,
	.scan = local_scan,
	.sync_all = local_sync_all,
	.stats = local_stats,
	.reclaim = local_reclaim,
	.seal = local_seal,
	.close = local_close,
};

/* mkdir -p, fsyncing the parent of every directory it creates. */
static int mkdir_p(const char *path)
{
	char *p = strdup(path);
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1;; s++) {
		char c = *s;

		if (c != '/' && c != '\0')
			continue;
		*s = '\0';
		if (mkdir(p, 0700) == 0) {
			char *slash = strrchr(p, '/');
			int fd;

			if (slash == p)
				fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			else if (slash) {
				*slash = '\0';
				fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				*slash = '/';
			} else {
				fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			}
			if (fd < 0 || fsync(fd) < 0)
				rc = -errno;
			if (fd >= 0)
				close(fd);
		} else if (errno != EEXIST) {
			rc = -errno;
		}
		*s = c;
		if (rc < 0 || c == '\0')
			break;
	}
	free(p);
	return rc;
}

/* Fill the table from the directory listing (no file is read). */
static int list_segments(struct wal_local *w)
{
	struct dirent *de;
	DIR *d;
	int fd, rc = 0;

	fd = dup(w->dirfd);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		rc = -errno;
		close(fd);
		return rc;
	}
	for (;;) {
		struct stat st;
		uint64_t no;

		errno = 0;
		de = readdir(d);
		if (!de) {
			rc = -errno;
			break;
		}
		if (!parse_seg_name(de->d_name, &no))
			continue;
		if (fstatat(w->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = -errno;
			break;
		}
		if (no == 0 || !S_ISREG(st.st_mode)) {
			nrs_warn("local WAL %s: ignoring %s", w->dir, de->d_name);
			continue;
		}
		rc = seg_insert(w, no, -1, (uint64_t)st.st_size);
		if (rc < 0)
			break;
		if (no >= w->next_no)
			w->next_no = no + 1;
	}
	closedir(d);
	return rc;
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
	w->next_no = 1;
	w->avg_batch = ZERO_BATCH_MAX;	/* A7: small batches must show first */
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
	rc = w->read_only ? 0 : mkdir_p(dir);
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
	rc = list_segments(w);
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

uint64_t nrs_wal_reserve_scaled(uint64_t max, uint64_t fs_bytes)
{
	uint64_t r = fs_bytes / 20;		/* A5: 5% */

	if (r < NRS_WAL_RESERVE_FLOOR)
		r = NRS_WAL_RESERVE_FLOOR;
	return r < max ? r : max;
}
