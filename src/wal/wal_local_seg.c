/*
 * wal_local_seg.c - segment management of the local WAL (wal_local.c):
 * segment names and headers, the table of segments and their fds, the
 * directory, and reclamation: deleting segments no record is needed of
 * (WD1) and sealing an idle current one (WD2).
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
 * scanning.  Bytes after the last record are zero (WA7) up to the end of the
 * file, except after a crash (a torn tail) or a failed append whose undo
 * failed.  A segment that stops being current (rotation, close) is cut back
 * to the end of its last record.
 *
 * RECLAMATION
 *
 *   WD1 reclaim(below) unlinks every segment numbered below `below` except
 *       the current one, then fsyncs DIR once.  The caller guarantees that
 *       no record in them is needed (published elsewhere, trimmed or
 *       unlinked) and that no reader still reads them; their fds are closed.
 *       A crash part way leaves some of them, which the next reclaim
 *       removes; recovery ignores records a head does not reach (I3).
 *   WD2 Sealing an idle segment (issue 12).  WD1 never removes the current
 *       segment, so on an idle mount the space of its dead records (every
 *       stream that had a record in it unlinked, trimmed past it, or
 *       materialized) would never come back: up to segment_size bytes,
 *       forever.  seal(seg) rotates (WA1) to a new, empty segment when seg
 *       is current and holds a record; WD1 then removes seg by the
 *       caller's rules, like any older segment.  Sealing deletes nothing
 *       and only moves the next write, so a seal of a segment that still
 *       holds a live record costs a rotation, never a byte.  The caller
 *       (pipeline.c PL6) seals only while no batch is in flight: under the
 *       commit role, with every batch synced and indexed.  An empty
 *       current segment is never sealed, so an idle mount rotates once,
 *       then stays put.  The alternative, punching holes in the current
 *       segment, would make every scanner (recovery, fsck) tell punched
 *       zeros from damage inside a segment; a new segment costs a 64-byte
 *       header and keeps WS1-WS9 as they are.  The bound that follows: on
 *       an idle mount, within materialize_age_ms + gc_grace_ms + about a
 *       second of the last append, unlink or trim, the segments hold at
 *       most one 64-byte header beyond the records of live bytes not yet
 *       materialized (README, nereusfs(8)).
 *   WD3 A segment's inode is never reused (write once, issue 16: the
 *       embedded store adopts a sealed segment by link(2), OD6, so the
 *       inode outlives the WAL's name and must keep its bytes).  The WAL
 *       has no recycling and no preallocated pool: WA1 creates every
 *       segment O_CREAT|O_EXCL under a number never used before in this
 *       open, and on EEXIST skips the number without opening the file;
 *       WD1 and WS1 only unlink a name; data is written only at the end
 *       of the current segment (WA2, WA7's zeros), and truncated only past
 *       a position never acknowledged (WA3) or past the last whole record
 *       (WA7, WS5, WS9).  So the bytes of every synced record of a segment
 *       stay as they are in that inode, under any other name, through
 *       rotation, reclaim and reopen.  An adopter must therefore adopt
 *       only synced records of a segment that is no longer current.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/crc32c.h"
#include "util/grow.h"
#include "util/le.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_local_priv.h"

#define SEG_MAGIC	"NRSWALSG"
#define SEG_VERSION	1
#define SEG_CRC_OFF	60

_Static_assert(sizeof(SEG_MAGIC) - 1 == 8, "segment magic is 8 bytes");

void nrs_wal_local_seg_name(char buf[NRS_WAL_SEG_NAME_MAX], uint64_t no)
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

void wl_seg_hdr_encode(unsigned char *h, uint64_t no)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	memset(h, 0, SEG_HDR);
	memcpy(h, SEG_MAGIC, 8);	/* NOLINT(bugprone-not-null-terminated-result): a magic, not a string */
	nrs_le32_put(h + 8, SEG_VERSION);
	nrs_le32_put(h + 12, SEG_HDR);
	nrs_le64_put(h + 16, no);
	nrs_le64_put(h + 24,
		     (uint64_t)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec));
	nrs_le32_put(h + SEG_CRC_OFF, nrs_crc32c(0, h, SEG_CRC_OFF));
}

bool wl_seg_hdr_ok(const unsigned char *h, uint64_t no)
{
	static const unsigned char zero[28];

	return memcmp(h, SEG_MAGIC, 8) == 0 &&
	       nrs_le32_get(h + SEG_CRC_OFF) == nrs_crc32c(0, h, SEG_CRC_OFF) &&
	       nrs_le32_get(h + 8) == SEG_VERSION && nrs_le32_get(h + 12) == SEG_HDR &&
	       nrs_le64_get(h + 16) == no && memcmp(h + 32, zero, sizeof(zero)) == 0;
}

/* Index of segment no, or -1.  Caller holds w->lock. */
ssize_t wl_seg_find(const struct wal_local *w, uint64_t no)
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
int wl_seg_insert(struct wal_local *w, uint64_t no, int fd, uint64_t size)
{
	size_t i = w->nsegs;

	if (nrs_grow((void **)&w->segs, &w->cap, w->nsegs + 1,
		     sizeof(*w->segs)))
		return -ENOMEM;
	while (i > 0 && w->segs[i - 1].no > no) {
		w->segs[i] = w->segs[i - 1];
		i--;
	}
	w->segs[i] = (struct seg){ .no = no, .fd = fd, .size = size };
	w->nsegs++;
	return 0;
}

void wl_seg_set_size(struct wal_local *w, uint64_t no, uint64_t size)
{
	ssize_t i;

	pthread_mutex_lock(&w->lock);
	i = wl_seg_find(w, no);
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
int wl_seg_fd(struct wal_local *w, uint64_t no, int *out, uint64_t *size)
{
	char name[SEG_NAME_MAX];
	ssize_t i;
	int fd;

	pthread_mutex_lock(&w->lock);
	i = wl_seg_find(w, no);
	fd = i >= 0 ? w->segs[i].fd : -1;
	if (i >= 0 && size)
		*size = w->segs[i].size;
	pthread_mutex_unlock(&w->lock);
	if (i < 0)
		return -ENOENT;
	if (fd < 0) {
		nrs_wal_local_seg_name(name, no);
		fd = openat(w->dirfd, name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		pthread_mutex_lock(&w->lock);
		i = wl_seg_find(w, no);
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

int wl_fsync_dir(struct wal_local *w)
{
	if (fsync(w->dirfd) < 0) {
		int rc = -errno;

		nrs_err("local WAL %s: fsync of the directory: %s", w->dir,
			strerror(-rc));
		return rc;
	}
	return 0;
}

/* ftruncate fd to size, and fdatasync it if sync: 0 or -errno. */
int wl_truncate_fd(int fd, uint64_t size, bool sync)
{
	if (ftruncate(fd, (off_t)size) < 0 || (sync && fdatasync(fd) < 0))
		return -errno;
	return 0;
}

/* WD1 */
int wl_reclaim(struct nrs_wal *base, uint64_t below, uint64_t *bytes)
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
		nrs_wal_local_seg_name(name, victim.no);
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
		int frc = wl_fsync_dir(w);

		if (frc < 0 && rc == 0)
			rc = frc;
	}
	if (bytes)
		*bytes = freed;
	return rc < 0 ? rc : removed;
}

/* WD2 (the writing thread) */
int wl_seal(struct nrs_wal *base, uint64_t seg)
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
		return 0;	/* nothing to seal: WD2 */
	rc = wl_rotate(w);
	if (rc < 0)
		return rc;
	nrs_debug("local WAL %s: sealed segment %016" PRIx64 " (idle, no live"
		  " record): appends go to %016" PRIx64, w->dir, seg, w->cur_no);
	return 1;
}

/* mkdir -p, fsyncing the parent of every directory it creates. */
int wl_mkdir_p(const char *path)
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
int wl_list_segments(struct wal_local *w)
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
		rc = wl_seg_insert(w, no, -1, (uint64_t)st.st_size);
		if (rc < 0)
			break;
		if (no >= w->next_no)
			w->next_no = no + 1;
	}
	closedir(d);
	return rc;
}
