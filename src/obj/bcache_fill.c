/*
 * bcache_fill.c - what a GET of the block cache (bcache.c) brings, landed
 * block by block: each block verified (B1), cached, written to the disk
 * tier, copied out to the reader that wants it, and moved out of its
 * flight, so that a reader waiting for it wakes then, not when the GET
 * ends.  Also the GET itself (counted, logged) and the parse of a header.
 *
 * STREAMING
 *
 * A GET's body comes to a sink (nrs_obj_get_stream: libcurl's write
 * callback on S3, one buffer from a store that cannot stream) in pieces of
 * any size.  The sink writes them straight into the entry of the block
 * they belong to, one entry at a time (allocated when its first byte
 * comes); when an entry is full it is verified against the object's CRC
 * table and landed, and the next block begins.  A GET from the object's
 * start (B8) first fills the header and table, which are parsed and
 * verified before any block, so that the blocks have a table to match.
 *   BS1 A block lands only when all its bytes are in and they matched
 *       its CRC; a block cut short, or one that fails, is never cached
 *       nor copied out, and fails the read only if the read wanted it.
 *       So a body cut in the middle lands the blocks before the cut and
 *       fails only the rest (a reader fetches those itself), and a bad
 *       block k fails block k alone: the blocks after it are verified
 *       and landed on their own.
 *   BS2 A landed block moves its flight's `next` past it (a flight
 *       carries only [next, first + n)) and c->landed is broadcast: a
 *       reader waiting for block k takes it once k is in (from memory,
 *       or, had memory no room for it, with a GET of its own).
 *   BS3 A GET holds at most one block outside the memory tier, the one
 *       being filled: every landed block goes through nrs_bc_mem_insert,
 *       which makes room for it or drops it (B5), so a GET larger than
 *       the free tier never takes the tier over its budget.
 *   BS4 Bytes a provider sends again (a retry starts over at 0) are
 *       skipped up to what the sink had: an object never changes.
 *   BS5 A header that came at the start of a GET is published (in
 *       memory, its flight ended, bcache_fetch.c nrs_bc_hdr_publish) as
 *       soon as it verified, before the blocks that follow it: a reader
 *       that reaches an object whose header a prefetch brings waits for
 *       the header and then each block it wants, not for the whole GET.
 *
 * The sink runs in the store's thread (S3: the engine's), so it takes
 * c->lock only briefly and never waits for anything.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "obj/bcache_priv.h"
#include "util/log.h"

void nrs_bc_report_bad(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint64_t offset, const char *what, bool count)
{
	char key[NRS_OBJKEY_MAX];

	if (count) {
		pthread_mutex_lock(&c->lock);
		c->st.bad_blocks++;
		pthread_mutex_unlock(&c->lock);
	}
	nrs_objfmt_key(key, h);
	nrs_err("bcache: object %s (stream %" PRIu64 " offset %" PRIu64
		"): %s", key, h->stream_id, offset, what);
}

/* Count a GET of len bytes at at that read got, and log a store error; a
 * prefetch's (quiet) only at debug level: no read asked for it, and the
 * one that does will say what fails.  A sink's own error (sink_err) is
 * not the store's: said where it happened. */
static ssize_t got_count(struct nrs_bcache *c, const struct nrs_objhdr *h,
			 uint64_t at, size_t len, bool quiet, ssize_t got,
			 int sink_err)
{
	char key[NRS_OBJKEY_MAX];

	pthread_mutex_lock(&c->lock);
	c->st.get_requests++;
	if (got > 0)
		c->st.get_bytes += (uint64_t)got;
	pthread_mutex_unlock(&c->lock);
	if (got < 0 && got != sink_err) {
		nrs_objfmt_key(key, h);
		nrs_log(quiet ? NRS_LOG_DEBUG : got == -ENOENT ? NRS_LOG_ERR
							       : NRS_LOG_WARN,
			"bcache: %sGET %s bytes %" PRIu64 "+%zu: %s",
			quiet ? "prefetch " : "", key, at, len,
			strerror((int)-got));
	}
	return got;
}

ssize_t nrs_bc_store_get(struct nrs_bcache *c, const struct nrs_objhdr *h,
			 uint64_t at, void *buf, size_t len, bool quiet)
{
	char key[NRS_OBJKEY_MAX];

	nrs_objfmt_key(key, h);
	return got_count(c, h, at, len, quiet,
			 nrs_obj_get(c->store, key, at, buf, len), 0);
}

void nrs_bc_copy_out(const struct req *r, uint32_t idx,
		     const unsigned char *data, size_t len)
{
	uint64_t bs = (uint64_t)idx * NRS_OBJ_BLOCK;
	uint64_t from = bs > r->rel ? bs : r->rel;
	uint64_t to = bs + len < r->end ? bs + len : r->end;

	if (from < to)
		memcpy(r->dst + (from - r->rel), data + (from - bs),
		       (size_t)(to - from));
}

int nrs_bc_hdr_parse(struct nrs_bcache *c, const struct nrs_objhdr *h,
		     const unsigned char *buf, size_t got, struct ent **out)
{
	size_t hl = nrs_objfmt_hdr_len(h->end - h->start);
	struct ent *e;
	const char *what = NULL;
	int err;

	if (got < hl) {
		nrs_bc_report_bad(c, h, h->start, "shorter than its header",
				  true);
		return -EBADMSG;
	}
	e = nrs_bc_ent_new(h, HDR_IDX, hl);
	if (!e)
		return -ENOMEM;
	memcpy(e->data, buf, hl);
	err = nrs_objfmt_parse(e->data, hl, h, &e->info);
	if (err == -EBADMSG)
		what = "header fails its checksum";
	else if (err == -EUCLEAN)
		what = "header names another stream, range or generation";
	else if (err == -EPROTO)
		what = "newer object format version than this build reads";
	if (err == -EUCLEAN)
		err = -EBADMSG;
	if (!err) {
		err = nrs_objfmt_verify_table(&e->info, e->data + NRS_OBJ_FIXED);
		if (err)
			what = "block CRC table fails its checksum";
	}
	if (err) {
		nrs_bc_report_bad(c, h, h->start, what, err != -EPROTO);
		free(e);
		return err;
	}
	*out = e;
	return 0;
}

/* Is block idx wanted by f's reader? */
static bool fill_wants(const struct fill *f, uint32_t idx)
{
	return !f->r->job && idx <= f->r->last;
}

/*
 * Block e (idx e->idx, its bytes all in, not yet verified) of f's GET:
 * verify it against hdr's table and land it (BS1), or report it bad
 * (-EBADMSG if f's reader wants it); then move f's flight past it and
 * wake its waiters (BS2).  e is consumed.
 */
static int land_block(struct fill *f, struct ent *e)
{
	struct nrs_bcache *c = f->c;
	const struct req *r = f->r;
	const struct nrs_objinfo *oi = &f->hdr->info;
	uint32_t idx = e->idx;
	int err = 0;

	if (nrs_objfmt_verify_block(oi, f->hdr->data + NRS_OBJ_FIXED, idx,
				    e->data, e->len)) {
		nrs_bc_report_bad(c, r->h, r->h->start +
				  (uint64_t)idx * NRS_OBJ_BLOCK,
				  "block fails its checksum", true);
		err = fill_wants(f, idx) ? -EBADMSG : 0;
		free(e);	/* BS1: never cached */
	} else {
		if (fill_wants(f, idx))
			nrs_bc_copy_out(r, idx, e->data, e->len);
		if (c->dir_fd >= 0)
			nrs_bc_disk_store(c, r->h, idx, e->data, e->len);
		nrs_bc_mem_insert(c, e, r->job);	/* BS3; B1: verified */
	}
	pthread_mutex_lock(&c->lock);
	if (f->slot >= 0)	/* BS2 */
		c->flights[f->slot].next = idx + 1;
	pthread_cond_broadcast(&c->landed);
	pthread_mutex_unlock(&c->lock);
	return err;
}

void nrs_bc_fill_init(struct fill *f, struct nrs_bcache *c,
		      const struct req *r, uint32_t first, uint32_t n,
		      int slot)
{
	*f = (struct fill){ .c = c, .r = r, .hdr = r->hdr, .slot = slot,
			    .first = first, .n = n };
}

/* Take n header bytes at p (the GET starts at the object's start); once
 * they are all in, parse them. */
static int fill_hdr(struct fill *f, const unsigned char *p, size_t n)
{
	int err;

	memcpy(f->hbuf + f->have, p, n);
	f->have += n;
	if (f->have < f->hl)
		return 0;
	err = nrs_bc_hdr_parse(f->c, f->r->h, f->hbuf, f->hl, &f->hdr);
	if (!err && f->hslot)
		nrs_bc_hdr_publish(f);	/* BS5: its waiters wake now */
	return err;
}

/* Take n bytes of the block being filled at p; land it once full. */
static int fill_blk(struct fill *f, const unsigned char *p, size_t n,
		    size_t *took)
{
	uint32_t idx = f->first + f->done;
	size_t bl = nrs_objfmt_block_len(&f->hdr->info, idx);
	size_t at = (size_t)(f->have - f->hl -
			     (uint64_t)f->done * NRS_OBJ_BLOCK);
	int err;

	if (bl == 0)
		return -EIO;	/* past the object: run_bytes asks less */
	if (!f->cur) {
		f->cur = nrs_bc_ent_new(f->r->h, idx, bl);
		if (!f->cur)
			return -ENOMEM;
	}
	*took = n < bl - at ? n : bl - at;
	memcpy(f->cur->data + at, p, *took);
	f->have += *took;
	if (at + *took < bl)
		return 0;
	err = land_block(f, f->cur);
	f->cur = NULL;
	f->done++;
	if (err && !f->err)
		f->err = err;	/* the read fails; the GET goes on (BS1) */
	return 0;
}

int nrs_bc_fill_sink(void *arg, uint64_t pos, const void *buf, size_t n)
{
	struct fill *f = arg;
	const unsigned char *p = buf;
	int err = 0;

	if (pos > f->have)
		err = -EIO;	/* a gap: no provider sends one */
	if (err || pos + n <= f->have)	/* BS4 */
		goto out;
	p += f->have - pos;
	n -= (size_t)(f->have - pos);
	while (n && !err) {
		size_t took = 0;

		if (f->have < f->hl) {
			took = n < f->hl - f->have ? n : f->hl - f->have;
			err = fill_hdr(f, p, took);
		} else if (f->done < f->n) {
			err = fill_blk(f, p, n, &took);
		} else {
			break;		/* more than asked for: not ours */
		}
		p += took;
		n -= took;
	}
out:
	if (err)
		f->sink_err = err;
	return err;
}

ssize_t nrs_bc_fill_get(struct fill *f, bool with_hdr)
{
	struct nrs_bcache *c = f->c;
	const struct nrs_objhdr *h = f->r->h;
	size_t hl = nrs_objfmt_hdr_len(h->end - h->start);
	size_t len = nrs_bc_run_bytes(h, f->first, f->n);
	uint64_t at = with_hdr ? 0 : hl + (uint64_t)f->first * NRS_OBJ_BLOCK;
	char key[NRS_OBJKEY_MAX];
	ssize_t got;

	if (with_hdr) {
		f->hl = hl;
		f->hbuf = malloc(hl);
		if (!f->hbuf)
			return -ENOMEM;
		len += hl;
	}
	nrs_objfmt_key(key, h);
	got = nrs_obj_get_stream(c->store, key, at, len, nrs_bc_fill_sink, f);
	return got_count(c, h, at, len, f->r->job != NULL, got, f->sink_err);
}

int nrs_bc_fill_end(struct fill *f, ssize_t got)
{
	uint32_t idx = f->first + f->done;

	free(f->cur);	/* BS1: cut short, never landed */
	f->cur = NULL;
	free(f->hbuf);
	f->hbuf = NULL;
	if (got < 0)
		return (int)got;
	if (f->done < f->n && f->hdr) {
		nrs_bc_report_bad(f->c, f->r->h, f->r->h->start +
				  (uint64_t)idx * NRS_OBJ_BLOCK,
				  "object shorter than its header says", true);
		if (fill_wants(f, idx) && !f->err)
			f->err = -EBADMSG;
	}
	return f->err;
}

/* Bytes of payload blocks [first, first + n) of h (the last may be short). */
size_t nrs_bc_run_bytes(const struct nrs_objhdr *h, uint32_t first,
			uint32_t n)
{
	uint64_t plen = h->end - h->start, at = (uint64_t)first * NRS_OBJ_BLOCK;

	if (at >= plen)
		return 0;
	return (size_t)(plen - at < (uint64_t)n * NRS_OBJ_BLOCK ?
			plen - at : (uint64_t)n * NRS_OBJ_BLOCK);
}

int nrs_bc_land_buf(struct fill *f, const unsigned char *buf, size_t got)
{
	return nrs_bc_fill_sink(f, 0, buf, got);
}
