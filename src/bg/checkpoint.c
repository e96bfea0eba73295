/*
 * checkpoint.c - metadata checkpoints in the object store, the store side
 * (issue 15; the formats and keys: ckptfmt.c; the thread that takes them:
 * ckpt_service.c).  A checkpoint is a snapshot of the whole metadata
 * store (meta.h nrs_meta_snapshot) and the object-WAL position it covers,
 * so that recovery from the bucket replays only what came after it.
 *
 *  KP1 Keys.  Checkpoint seq is written under ckpt/<seq> only, seq
 *      increasing by one from the highest found (KP4) at start; a key gets
 *      one set of bytes: a checkpoint not yet proven is PUT again with the
 *      same bytes under the same key until it is (never other bytes under
 *      it), and a seq whose key holds other bytes is skipped for good.
 *  KP2 Proof (DESIGN.md 6).  A checkpoint counts only once HEAD shows the
 *      exact length and SHA-256 that were sent; a missing object or no
 *      answer: the same bytes again; other bytes: quarantined (logged,
 *      counted), never used by this writer, never overwritten.
 *  KP3 The pointer ckpt/latest is rewritten only after the checkpoint it
 *      names is proven (KP2), and is itself proven the same way.  It is a
 *      hint: a pointer that lags (a crash, a failed PUT) costs a few HEADs
 *      at the next find (KP4), never a checkpoint.
 *  KP4 Found without a listing: the pointer's seq, then HEAD of seq + 1,
 *      seq + 2, ... until one is missing; the last that exists is the
 *      newest.  A damaged pointer is -EUCLEAN: without it nothing can be
 *      found short of a listing, so recovery stops and says so.
 *  KP5 A checkpoint is used only whole and verified: GET of all of it, its
 *      SHA-256 equal to the one in the store's metadata, then the header
 *      CRC, the length, the table CRC and every block CRC (ckptfmt.c).
 *      Anything else is -EUCLEAN, logged naming the key.
 *  KP6 A damaged newest checkpoint is passed over for the one before it
 *      (two are kept, KP7), never repaired and never half used.
 *  KP7 Old checkpoints: the newest two are kept; an older one is deleted
 *      only once the pointer names one at least two above it, and after
 *      the GC grace period (gc_grace_ms) since then, so that a recovery
 *      that found it a moment ago can still read it.  Every one is
 *      deleted in the end, however many a burst wrote within one grace
 *      period (ckpt_service.c keeps ranges, not a list), but for a
 *      quarantined key (KP1), which holds someone else's bytes.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bg/checkpoint.h"
#include "bg/materializer.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "util/log.h"

int nrs_ckpt_put_proven(struct nrs_objstore *s, const char *key,
			const void *buf, size_t len,
			const unsigned char md5[NRS_MD5_LEN],
			const unsigned char sha256[NRS_SHA256_LEN])
{
	struct nrs_obj_meta got = { 0 };
	int perr, herr;

	perr = nrs_obj_put(s, key, buf, len, md5, sha256);
	herr = nrs_obj_head(s, key, &got);
	switch (nrs_put_decide(herr, &got, len, sha256)) {	/* KP2 */
	case NRS_PUT_PROVEN:
		return 0;
	case NRS_PUT_QUARANTINE:
		nrs_err("checkpoint: %s holds %" PRIu64 " bytes %s, not the %zu"
			" sent: quarantined, never used or overwritten", key,
			got.length, got.has_sha256 ? "with another SHA-256" :
			"without a SHA-256", len);
		return -EBADMSG;
	default:
		nrs_debug("checkpoint: %s not proven yet (PUT: %s, HEAD: %s)",
			  key, perr ? strerror(-perr) : "ok",
			  herr ? strerror(-herr) : "ok");
		return -EAGAIN;
	}
}

int nrs_ckpt_put_pointer(struct nrs_objstore *s, const struct nrs_ckpt_ptr *p)
{
	unsigned char buf[NRS_CKPT_PTR_LEN], sha[NRS_SHA256_LEN];
	unsigned char md5[NRS_MD5_LEN];
	bool want = nrs_obj_wants_md5(s);
	int err;

	nrs_ckptfmt_ptr_encode(buf, p);
	err = nrs_objfmt_digest(buf, sizeof(buf), sha, want ? md5 : NULL);
	return err ? err : nrs_ckpt_put_proven(s, NRS_CKPT_LATEST_KEY, buf,
					       sizeof(buf), want ? md5 : NULL,
					       sha);
}

/* The pointer: 0 and *p, -ENOENT (none), -EUCLEAN (damaged), or the
 * store's error. */
static int read_pointer(struct nrs_objstore *s, struct nrs_ckpt_ptr *p)
{
	unsigned char buf[NRS_CKPT_PTR_LEN + 1];
	ssize_t n = nrs_obj_get(s, NRS_CKPT_LATEST_KEY, 0, buf, sizeof(buf));
	int err;

	if (n < 0)
		return (int)n;
	err = nrs_ckptfmt_ptr_decode(buf, (size_t)n, p);
	if (err)
		nrs_err("checkpoint: the pointer %s is damaged (%zd bytes):"
			" the newest checkpoint cannot be found without a"
			" listing", NRS_CKPT_LATEST_KEY, n);
	return err;
}

/* HEAD of checkpoint seq: 0, -ENOENT or the store's error. */
static int head_seq(struct nrs_objstore *s, uint64_t seq,
		    struct nrs_obj_meta *m)
{
	char key[NRS_OBJKEY_MAX];

	nrs_ckptfmt_key(key, seq);
	return nrs_obj_head(s, key, m);
}

int nrs_ckpt_find(struct nrs_objstore *s, uint64_t *top, uint64_t *ptr_seq)
{
	struct nrs_ckpt_ptr p = { 0 };
	struct nrs_obj_meta m;
	uint64_t seq;
	int err = read_pointer(s, &p);

	if (err == -ENOENT)
		p.seq = 0;
	else if (err)
		return err;
	seq = p.seq;
	for (;;) {		/* KP4: the pointer may lag */
		err = head_seq(s, seq + 1, &m);
		if (err == -ENOENT)
			break;
		if (err)
			return err;
		seq++;
	}
	if (seq != p.seq)
		nrs_info("checkpoint: the pointer names %" PRIu64 ", the"
			 " newest is %" PRIu64, p.seq, seq);
	*top = seq;
	if (ptr_seq)
		*ptr_seq = p.seq;
	return 0;
}

int nrs_ckpt_read(struct nrs_objstore *s, uint64_t seq, struct nrs_ckpt_hdr *h,
		  void **obj, const void **db)
{
	unsigned char sha[NRS_SHA256_LEN];
	char key[NRS_OBJKEY_MAX];
	struct nrs_obj_meta m;
	struct nrs_ckpt_hdr r;
	const void *d;
	void *buf;
	ssize_t n;
	int err;

	nrs_ckptfmt_key(key, seq);
	err = nrs_obj_head(s, key, &m);
	if (err)
		return err;
	if (!m.has_sha256 || m.length < NRS_CKPT_HDR_LEN ||
	    m.length > nrs_ckptfmt_len(NRS_CKPT_DB_MAX - 1)) {
		nrs_err("checkpoint %s: %" PRIu64 " bytes%s: not used", key,
			m.length, m.has_sha256 ? "" : " without a SHA-256");
		return -EUCLEAN;
	}
	buf = malloc((size_t)m.length);
	if (!buf)
		return -ENOMEM;
	n = nrs_obj_get(s, key, 0, buf, (size_t)m.length);
	err = n < 0 ? (int)n : (uint64_t)n != m.length ? -EUCLEAN : 0;
	if (err == -EUCLEAN)
		nrs_err("checkpoint %s: %zd bytes read, %" PRIu64 " stored", key,
			n, m.length);
	if (!err)
		err = nrs_objfmt_digest(buf, (size_t)n, sha, NULL);
	if (!err && memcmp(sha, m.sha256, sizeof(sha)) != 0) {	/* KP5 */
		nrs_err("checkpoint %s: its bytes do not have the SHA-256 the"
			" store holds for it: not used", key);
		err = -EUCLEAN;
	}
	if (!err)
		err = nrs_ckptfmt_parse(buf, (size_t)n, &r, &d);
	if (!err && r.seq != seq) {
		nrs_err("checkpoint %s: its header says seq %" PRIu64, key,
			r.seq);
		err = -EUCLEAN;
	}
	if (err) {
		if (err == -EUCLEAN || err == -EPROTO)
			nrs_err("checkpoint %s is damaged: not used", key);
		free(buf);
		return err;
	}
	*h = r;
	*obj = buf;
	*db = d;
	return 0;
}

int nrs_ckpt_load(struct nrs_objstore *s, struct nrs_ckpt_hdr *h, void **obj,
		  const void **db)
{
	uint64_t top = 0;
	int err = nrs_ckpt_find(s, &top, NULL), found = 0;

	if (err)
		return err;
	for (uint64_t seq = top; seq > 0; seq--) {	/* KP6 */
		err = nrs_ckpt_read(s, seq, h, obj, db);
		if (err == 0) {
			if (seq != top)
				nrs_warn("checkpoint: using %" PRIu64 ", the"
					 " newest usable one (%" PRIu64 " is"
					 " damaged)", seq, top);
			return 0;
		}
		if (err == -ENOENT)
			break;
		if (err != -EUCLEAN && err != -EPROTO)
			return err;	/* the store: nothing can be told */
		found++;
	}
	return found ? -EUCLEAN : -ENOENT;
}

int nrs_ckpt_restore(struct nrs_objstore *s, const char *data_dir,
		     uint64_t *covered, uint64_t *epoch)
{
	struct nrs_ckpt_hdr h;
	char path[4096];
	const void *db;
	void *obj;
	int err;

	if (snprintf(path, sizeof(path), "%s/meta.db", data_dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	err = nrs_ckpt_load(s, &h, &obj, &db);
	if (err)
		return err;
	err = nrs_meta_install(path, db, (size_t)h.db_len);
	free(obj);
	if (err)
		return err;
	nrs_info("checkpoint %" PRIu64 " restored into %s (%" PRIu64 " bytes,"
		 " object WAL covered up to %" PRIu64 ")", h.seq, path,
		 h.db_len, h.covered);
	if (covered)
		*covered = h.covered;
	if (epoch)
		*epoch = h.epoch;
	return 0;
}
