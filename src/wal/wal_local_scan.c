/*
 * wal_local_scan.c - the local WAL's recovery scan (wal_local.c): every
 * intact record handed to the caller in log order, the torn tail a crash
 * left cut, damage reported.
 *
 * RECOVERY (scan: before the first append; again only before one)
 *
 *   WS1 A last segment of at most 64 bytes with a bad header is a torn
 *       creation (WA1 interrupted): it holds no record and is unlinked, then
 *       DIR is fsynced.
 *   WS2 Any other segment with a bad header is logged and skipped whole.
 *   WS3 From offset 64, a record is taken when its header decodes with a
 *       valid CRC and the whole record lies within the file; it is "whole"
 *       when every chunk CRC matches too.  Whole records are passed to the
 *       callback at once.  A record with a bad chunk is held back and passed
 *       (data_ok false) only once a whole record follows it, or at the end
 *       of a segment that is not the last.
 *   WS4 Where no header verifies, the scan searches forward at 8-byte steps
 *       for the next position where WS3 takes a record, and logs the bytes
 *       skipped as corruption.  A verified header whose record runs past
 *       the end of the file is not searched: only its own (torn) payload
 *       lies after it, and a record image stored in a payload must never be
 *       taken for a record.  (Inside a range whose header is damaged such an
 *       image cannot be told from a real record; WS3's CRCs are all there is.)
 *   WS5 In the last segment, everything after the last whole record that
 *       is bad (garbage, a record running past the end of the file, records
 *       with bad chunks) is a torn tail: the file is truncated to the end of
 *       the last whole record (64 if none) and fdatasynced, and "cut torn
 *       tail" is logged with the byte count.  A second scan then returns the
 *       same records and cuts nothing.
 *   WS6 In any other segment nothing is cut: damage there is corruption,
 *       logged, not a crash artefact.
 *   WS7 The callback's nonzero return stops the scan and is returned.  A
 *       scan that did not return 0 leaves the WAL unscanned (append -EINVAL).
 *   WS8 Every damaged range of WS1, WS2, WS4, WS5 and every bad chunk of WS3 is
 *       also passed to the opts' damage callback, if any.  A WAL opened
 *       read_only (nereusfs-fsck) does everything above except the writes:
 *       WS1 and WS5 report what they would remove and leave the file as it
 *       is, and the records of the torn tail are dropped as after a cut, so
 *       a checker sees exactly what recovery would.
 *   WS9 Where no header verifies and every byte from there to the end of
 *       the file is zero, the segment's records end there: that is space
 *       WA7 wrote ahead (a crash kept it from being cut back), not damage,
 *       and never reported.  In the last segment it is cut off (with the
 *       torn bytes before it, if WS5 cuts; else alone, logged as info);
 *       elsewhere it stays.  Zeros followed by anything else are searched
 *       and reported as WS4 says.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/grow.h"
#include "util/log.h"
#include "wal/wal.h"
#include "wal/wal_local_priv.h"
#include "wal/walrec.h"

#define SCAN_BUF_SIZE	(8u << 20)	/* grows to the largest record */
#define NO_CUT		UINT64_MAX

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
	struct nrs_wal_rec_info *pend;	/* WS3: bad-chunk records held back */
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
			/* Bounded: want <= walrec total_len(MAX_LEN).  One
			 * exact resize, not nrs_grow: doubling would take a
			 * 64 MiB record's buffer to 128 MiB. */
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
 * WS3's first test at off: 1 if a record with a valid header lies wholly
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
	if (nrs_grow((void **)&s->pend, &s->pcap, s->npend + 1,
		     sizeof(*s->pend)))
		return -ENOMEM;
	s->pend[s->npend++] = *ri;
	return 0;
}

/* WS8 */
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
	rc = wl_truncate_fd(fd, end, sync);
	close(fd);
	return rc;
}

/* WS5: truncate the last segment to end. */
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
	wl_seg_set_size(w, no, end);
	return 0;
}

/* WS9: cut the zeros from end off the last segment (nothing if read-only). */
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

/* WS1: the last segment is a torn creation (WA1 interrupted): no record. */
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
	rc = wl_fsync_dir(w);
	if (rc < 0)
		return rc;
	nrs_warn("local WAL %s/%s: removed segment torn at creation (%" PRIu64
		 " bytes)", w->dir, s->name, s->fsize);
	pthread_mutex_lock(&w->lock);
	i = wl_seg_find(w, no);
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
 * WS4: the next position after off where a record lies wholly in the file
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

/* WS9: *zero is whether file bytes [off, end of file) are all zero. */
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

/* WS2..WS6 and WS9 for one segment. */
static int scan_segment(struct scan *s, uint64_t no, bool last)
{
	struct wal_local *w = s->w;
	uint64_t off = SEG_HDR, cut = NO_CUT;
	const unsigned char *p;
	struct stat st;
	size_t avail;
	int rc;

	nrs_wal_local_seg_name(s->name, no);
	rc = wl_seg_fd(w, no, &s->fd, NULL);
	if (rc < 0 || fstat(s->fd, &st) < 0) {
		rc = rc < 0 ? rc : -errno;
		nrs_err("local WAL %s/%s: open: %s", w->dir, s->name,
			strerror(-rc));
		return rc;
	}
	s->fsize = (uint64_t)st.st_size;
	s->blen = 0;
	s->npend = 0;
	wl_seg_set_size(w, no, s->fsize);
	rc = sb_get(s, 0, SEG_HDR, &p, &avail);
	if (rc < 0)
		return rc;
	if (avail < SEG_HDR || !wl_seg_hdr_ok(p, no)) {
		if (last && s->fsize <= SEG_HDR)
			return drop_torn_creation(s, no);	/* WS1 */
		nrs_err("local WAL %s/%s: corrupt segment header (%" PRIu64
			" bytes): segment skipped", w->dir, s->name, s->fsize);
		report(s, NRS_WAL_BAD_SEGMENT, no, 0, s->fsize, 0, 0);
		return 0;					/* WS2 */
	}
	while (off < s->fsize) {
		struct nrs_wal_rec_info ri = { .pos = { no, off } };
		uint32_t bad = 0;
		uint64_t q = s->fsize;

		rc = record_at(s, off, &ri.rec, &p);
		if (rc < 0)
			return rc;
		if (rc == 0) {					/* WS9 */
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
				wl_seg_set_size(w, no, off);
				break;
			}
		}
		if (rc != 1) {					/* WS4 */
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
		if (!ri.data_ok) {				/* WS3 */
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
	if (cut != NO_CUT && last) {			/* WS5 */
		s->npend = 0;
		return cut_tail(s, no, cut);
	}
	return flush_pending(s);			/* WS6 */
}

int wl_scan(struct nrs_wal *base, nrs_wal_scan_cb cb, void *ctx)
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
