/*
 * reader.c - the read path.
 *
 * Under the stream lock it takes a snapshot of [start, head) and copies the
 * index entries overlapping the request; the I/O runs without the lock.
 * Committed bytes never change (I2), so a snapshot can never go stale: at
 * worst a concurrent append makes it shorter than it could be.
 *
 * An object entry is read through the block cache (bcache.h), which
 * verifies every block against the object's CRC table and the header
 * against the stream, range and generation the index names.  Near the end
 * of an object the cache is told which object comes next, so that a
 * sequential reader's prefetches need not stop at the boundary.
 *
 * For each WAL record it reads the header (verified: magic, CRC, and that
 * its stream, base and length are the ones the index names) and the payload
 * chunks the request touches, verifies their CRC32C, and copies the bytes
 * wanted.  A small record is fetched with one pread.  A record in a WAL
 * segment the embedded store adopted (NRS_TARGET_ADOPT) is read the same
 * way from the store's file (objstore.h nrs_objstore_dir_adopt), and
 * verified the same way: the record format is the object's (I6).
 *
 *  RA1 An adopted record at segment offset X is the store's object bytes
 *      from X - 64 (the store's get() reads behind 64 header bytes, where
 *      the segment has its own header); a reader with no store fails the
 *      read (EIO), as for a missing copy.  Its header must name the
 *      stream, base and length the index does, and every chunk touched
 *      passes its CRC32C, exactly as for a record read from the WAL.
 *
 * An adopted file (a WAL object, or a segment) holds the records of
 * several streams side by side, so the store is told where the reader's
 * wants end in it (objstore_dir_adopt.c OD10): at the end of the record,
 * unless the stream's next record follows it in the same file within
 * ADOPT_GAP bytes (a stream written alone, or by several writers at
 * once): then the kernel's readahead reads on into bytes of this stream
 * and is left alone.  A stream written among others is read record by
 * record, its own bytes only.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "obj/bcache.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "stream/reader.h"
#include "stream/stream.h"
#include "util/log.h"
#include "util/metrics.h"
#include "wal/wal.h"
#include "wal/walrec.h"

#define ENTS_PER_ROUND	64
#define SMALL_RECORD	(128u << 10)
#define ADOPT_GAP	(64u << 10)	/* OD10 */

/* Where a WAL record is read from: the WAL, or the segment file the
 * embedded store adopted (store and key set; pos.off an offset in it, and
 * until the file offset where the reader's wants end, OD10). */
struct rec_src {
	struct nrs_wal *wal;
	struct nrs_objstore *store;
	char key[NRS_OBJKEY_MAX];
	uint64_t until;
};

/* Read exactly len bytes at pos, or fail: a short read is a missing copy. */
static int read_full(const struct rec_src *src, struct nrs_wal_pos pos,
		     void *buf, size_t len)
{
	ssize_t n;

	if (src->store)	/* RA1: the file's byte X is the object's X - 64 */
		n = pos.off < NRS_OBJ_FIXED ? -EUCLEAN
			: nrs_objstore_dir_get_slice(src->store, src->key,
				      pos.off - NRS_OBJ_FIXED, buf, len,
				      src->until == NRS_OBJ_SLICE_ALL ?
				      NRS_OBJ_SLICE_ALL :
				      src->until - NRS_OBJ_FIXED);
	else
		n = nrs_wal_read(src->wal, pos, buf, len);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EUCLEAN;
}

/*
 * Copy logical [a, b) of the record e into dst.  Returns 0, -EBADMSG
 * (checksum), -EUCLEAN (record missing or not the one indexed), -ENOMEM.
 */
static int read_record(const struct rec_src *src, const struct nrs_stream *st,
		       const struct nrs_index_ent *e, uint64_t a, uint64_t b,
		       char *dst)
{
	uint32_t len = (uint32_t)(e->end - e->start);
	size_t hl = nrs_walrec_hdr_len(len);
	uint32_t c0 = (uint32_t)((a - e->start) / NRS_WALREC_CHUNK);
	uint32_t c1 = (uint32_t)((b - 1 - e->start) / NRS_WALREC_CHUNK);
	size_t p0 = (size_t)c0 * NRS_WALREC_CHUNK;
	size_t p1 = (size_t)(c1 + 1) * NRS_WALREC_CHUNK;
	struct nrs_wal_pos pos = { e->seg, e->off };
	struct nrs_walrec rec;
	unsigned char *buf, *payload;
	int err;

	if (p1 > len)
		p1 = len;
	if (hl + len <= SMALL_RECORD) {
		buf = malloc(hl + len);
		if (!buf)
			return -ENOMEM;
		err = read_full(src, pos, buf, hl + len);
		payload = buf + hl + p0;
	} else {
		buf = malloc(hl + (p1 - p0));
		if (!buf)
			return -ENOMEM;
		err = read_full(src, pos, buf, hl);
		if (!err) {
			struct nrs_wal_pos pp = { e->seg, e->off + hl + p0 };

			err = read_full(src, pp, buf + hl, p1 - p0);
		}
		payload = buf + hl;
	}
	if (err)
		goto out_free;
	err = nrs_walrec_decode_hdr(buf, hl, &rec);
	if (err)
		goto out_free;
	if (rec.kind != NRS_WALREC_DATA || rec.stream_id != st->id ||
	    rec.base != e->start || rec.len != len) {
		err = -EUCLEAN;
		goto out_free;
	}
	err = nrs_walrec_verify_chunks(buf, &rec, c0, c1 - c0 + 1, payload, NULL);
	if (err)
		goto out_free;
	memcpy(dst, payload + (a - e->start - p0), b - a);
out_free:
	free(buf);
	return err;
}

static void log_failure(const struct nrs_stream *st, const struct nrs_index_ent *e,
			uint64_t cur, int err)
{
	/* objstore.h's errors for a store that did not answer, or refused
	 * us: nothing is known of the object then, so nothing is said of it */
	bool away = err == -ECONNREFUSED || err == -EHOSTUNREACH ||
		    err == -ETIMEDOUT || err == -EACCES;
	const char *why = err == -EBADMSG ? "fails its checksum"
			  : err == -ENOMEM ? "cannot be buffered"
			  : away ? "cannot be fetched, the object store is unavailable"
			  : "is missing or not the one indexed";

	if (e->kind == NRS_TARGET_OBJ) {
		char key[NRS_OBJKEY_MAX];
		struct nrs_objhdr h = { .stream_id = st->id, .start = e->ostart,
					.end = e->oend, .gen = e->gen };

		nrs_objfmt_key(key, &h);
		nrs_err("stream %" PRIu64 " offset %" PRIu64 ": object %s %s"
			" (%s)", st->id, cur, key, why, strerror(-err));
	} else {
		nrs_err("stream %" PRIu64 " offset %" PRIu64 ": WAL record at"
			" segment %016" PRIx64 " byte %" PRIu64 "%s %s", st->id,
			cur, e->seg, e->off, e->kind == NRS_TARGET_ADOPT ?
			" (adopted by the object store)" : "", why);
	}
}

/*
 * Name the objects after e's to the block cache when a read of e ends at b,
 * within NRS_BCACHE_FOLLOW of the end of e's object, so that a sequential
 * reader's prefetches run on into them (bcache_prefetch.c): those whose
 * entries follow e's without a gap, within NRS_BCACHE_FOLLOW bytes.  Takes
 * st->lock.
 */
static void hint_next(const struct nrs_reader *r, struct nrs_stream *st,
		      const struct nrs_index_ent *e, uint64_t b)
{
	struct nrs_index_ent nx[NRS_BCACHE_FOLLOW_MAX];
	struct nrs_objhdr h = { .stream_id = st->id, .start = e->ostart,
				.end = e->oend, .gen = e->gen };
	struct nrs_objhdr next[NRS_BCACHE_FOLLOW_MAX];
	uint64_t at = e->end;
	size_t n, k;

	if (e->end != e->oend || e->oend - b > NRS_BCACHE_FOLLOW)
		return;
	pthread_mutex_lock(&st->lock);
	n = nrs_index_collect(&st->index, at, at + NRS_BCACHE_FOLLOW, nx,
			      NRS_BCACHE_FOLLOW_MAX);
	pthread_mutex_unlock(&st->lock);
	for (k = 0; k < n; k++) {
		if (nx[k].kind != NRS_TARGET_OBJ || nx[k].start != at)
			break;
		next[k] = (struct nrs_objhdr){ .stream_id = st->id,
					       .start = nx[k].ostart,
					       .end = nx[k].oend,
					       .gen = nx[k].gen };
		at = nx[k].end;
		if (nx[k].end != nx[k].oend) {
			k++;
			break;		/* the stream goes on elsewhere */
		}
	}
	if (k > 0)
		nrs_bcache_follow(r->bcache, &h, next, k);
}

/* The bytes of the WAL record of adopted entry e in its file. */
static uint64_t rec_bytes(const struct nrs_index_ent *e)
{
	uint32_t len = (uint32_t)(e->end - e->start);

	return nrs_walrec_hdr_len(len) + len;
}

/* OD10: the offset in adopted entry e's file where a reader of st stops
 * wanting its bytes: the record's end, or NRS_OBJ_SLICE_ALL when the
 * stream's next record follows it there within ADOPT_GAP bytes (the top
 * comment).  Takes st->lock. */
static uint64_t adopt_until(struct nrs_stream *st,
			    const struct nrs_index_ent *e)
{
	struct nrs_index_ent x;
	uint64_t until = e->off + rec_bytes(e);
	size_t n;

	pthread_mutex_lock(&st->lock);
	n = nrs_index_collect(&st->index, e->end, e->end + 1, &x, 1);
	pthread_mutex_unlock(&st->lock);
	if (n == 1 && x.kind == NRS_TARGET_ADOPT && x.seg == e->seg &&
	    x.start == e->end && x.off >= until && x.off - until <= ADOPT_GAP)
		return NRS_OBJ_SLICE_ALL;
	return until;
}

static int read_ent(const struct nrs_reader *r, struct nrs_wal *wal,
		    struct nrs_stream *st, const struct nrs_index_ent *e,
		    uint64_t a, uint64_t b, char *dst)
{
	struct nrs_objhdr h = { .stream_id = st->id, .start = e->ostart,
				.end = e->oend, .gen = e->gen };

	struct rec_src src = { .wal = wal };

	if (e->kind == NRS_TARGET_WAL)	/* the WAL of st's profile */
		return read_record(&src, st, e, a, b, dst);
	if (e->kind == NRS_TARGET_ADOPT) {
		if (!r->store)
			return -EUCLEAN;
		src.store = r->store;
		src.until = adopt_until(st, e);		/* OD10 */
		nrs_objfmt_adopt_key(src.key, e->seg);
		return read_record(&src, st, e, a, b, dst);
	}
	if (e->kind != NRS_TARGET_OBJ || !r->bcache)
		return -EUCLEAN;
	return nrs_bcache_read(r->bcache, &h, a, b - a, dst);
}

static ssize_t read_locked(const struct nrs_reader *r, struct nrs_stream *st,
			   void *buf, size_t size, uint64_t off,
			   bool whole_pages)
{
	struct nrs_metrics *m = r->metrics;
	struct nrs_index_ent ents[ENTS_PER_ROUND];
	uint64_t head, start, end, cur;
	struct nrs_wal *wal;
	size_t n;
	int err = 0;

	pthread_mutex_lock(&st->lock);
	head = st->read_limit;	/* >= st->head: see pipeline.c, PL4 */
	start = st->start;
	/* the WAL that holds st's records: fixed while it has any */
	wal = st->profile == NRS_PROFILE_OBJECT_WAL && r->owal ? r->owal
							       : r->wal;
	/* The kernel may cache the page holding the head, zero-filled past
	 * it; the next commit must invalidate it (see core_handle.c).  Set
	 * under the lock that the commit's head change takes. */
	if (off < head && size > 0 && head - off <= size)
		st->tail_cached = true;
	pthread_mutex_unlock(&st->lock);
	if (off >= head || size == 0)
		return 0;
	end = head - off < size ? head : off + size;
	cur = off;
	if (off < start) {
		/* The page cache reads whole pages: a read of the page that
		 * holds start (by a handle opened before an unaligned trim,
		 * see core_handle.c) gets zeros below start, never trimmed
		 * bytes (I4).  Any other read below start is ENODATA. */
		if (!whole_pages || end <= start ||
		    off != (start & ~(uint64_t)4095))
			return -ENODATA;
		memset(buf, 0, start - off);
		cur = start;
	}
	while (cur < end) {
		pthread_mutex_lock(&st->lock);
		n = nrs_index_collect(&st->index, cur, end, ents, ENTS_PER_ROUND);
		pthread_mutex_unlock(&st->lock);
		if (n == 0 || ents[0].start > cur) {
			err = -EUCLEAN;		/* no copy for a committed range */
			break;
		}
		for (size_t i = 0; i < n && cur < end; i++) {
			const struct nrs_index_ent *e = &ents[i];
			uint64_t b = e->end < end ? e->end : end;

			if (e->start > cur) {
				err = -EUCLEAN;
				break;
			}
			if (e->kind == NRS_TARGET_OBJ && r->bcache)
				hint_next(r, st, e, b);
			err = read_ent(r, wal, st, e, cur, b,
				       (char *)buf + (cur - off));
			if (err) {
				log_failure(st, e, cur, err);
				break;
			}
			cur = b;
		}
		if (err)
			break;
	}
	if (err) {
		if (m) {
			nrs_count(&m->read_errors, 1);
			if (err == -EBADMSG)
				nrs_count(&m->checksum_errors, 1);
		}
		return err == -ENOMEM ? -ENOMEM : -EIO;
	}
	if (m) {
		nrs_count(&m->reads, 1);
		nrs_count(&m->read_bytes, end - off);
	}
	return (ssize_t)(end - off);
}

ssize_t nrs_reader_read(const struct nrs_reader *r, struct nrs_stream *st,
			void *buf, size_t size, uint64_t off, bool whole_pages)
{
	ssize_t n;

	if (r->gate)
		pthread_rwlock_rdlock(r->gate);
	n = read_locked(r, st, buf, size, off, whole_pages);
	if (r->gate)
		pthread_rwlock_unlock(r->gate);
	return n;
}
