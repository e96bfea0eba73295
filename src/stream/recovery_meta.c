/*
 * recovery_meta.c - the replay of the metadata's change log at start-up
 * (recovery.c gives the whole of recovery and its order of steps).
 *
 *  RM1 The metadata's change log (meta.h; core_metalog.c NS1): the META
 *     records of both WALs are applied, in the order of their numbers (a
 *     record tried again has a later LSN, core_metalog.c NS2), before RC1
 *     and before the streams are loaded -- so a stream a META record made
 *     exists before its appends are re-published, and one it unlinked is
 *     gone -- each one whose number is above the store's (sqlite_log.c
 *     ML2; a second copy is skipped).  A META record needed whose payload
 *     fails its CRC, or metarec.c MR1, or that the store refuses (a gap, a
 *     change that does not fit), stops the recovery with -EUCLEAN and a
 *     line naming it: a namespace change is never skipped silently.  Each
 *     change is applied with its number in one transaction, so a recovery
 *     killed midway runs again to the same state.  Their LSNs count for
 *     RC6.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"
#include "stream/recovery.h"
#include "stream/recovery_priv.h"
#include "util/log.h"
#include "wal/metarec.h"
#include "wal/wal.h"

/* RM1: META records by their number, then LSN. */
static int cmp_seq(const void *a, const void *b)
{
	const struct nrs_wal_rec_info *x = a, *y = b;

	if (x->rec.base != y->rec.base)
		return x->rec.base < y->rec.base ? -1 : 1;
	return nrs_recover_cmp_lsn(a, b);
}

/* RM1: one META record's change, read back, checked and applied. */
static int apply_meta(const struct nrs_recover_env *e,
		      const struct nrs_wal_rec_info *ri)
{
	struct nrs_wal *w = ri->object ? e->owal : e->wal;
	size_t hl = nrs_walrec_hdr_len(ri->rec.len);
	struct nrs_walrec r;
	struct nrs_metarec mr;
	const char *why = NULL;
	unsigned char *buf = NULL;
	ssize_t n;
	int err = -EUCLEAN;

	if (!ri->data_ok || !w) {
		why = "its payload fails its CRC";
		goto out;
	}
	buf = malloc(hl + ri->rec.len);
	if (!buf)
		return -ENOMEM;
	n = nrs_wal_read(w, ri->pos, buf, hl + ri->rec.len);
	if (n != (ssize_t)(hl + ri->rec.len)) {
		err = n < 0 ? (int)n : -EIO;
		why = "it cannot be read back";
		goto out;
	}
	if (nrs_walrec_decode_hdr(buf, hl, &r) || r.lsn != ri->rec.lsn ||
	    nrs_walrec_verify_chunks(buf, &r, 0, nrs_walrec_nchunks(r.len),
				     buf + hl, NULL) ||
	    nrs_metarec_decode(&r, buf + hl, &mr)) {	/* metarec.c MR1 */
		why = "it is damaged";
		goto out;
	}
	err = nrs_meta_log_apply(e->meta, mr.seq, mr.change, mr.change_len);
	if (err < 0)
		why = "the metadata store refuses it (logged above)";
	else
		err = 0;
out:
	if (why)
		nrs_err("recovery: META record of metadata change %" PRIu64
			" (LSN %" PRIu64 ") at %s segment %016" PRIx64 " offset %"
			PRIu64 ": %s: %s; the namespace cannot be brought back "
			"past it, and the mount stops (see nereusfs-fsck(8))",
			ri->rec.base, ri->rec.lsn, ri->object ? "object WAL" :
			"WAL", ri->pos.seg, ri->pos.off, why, strerror(-err));
	free(buf);
	return err;
}

/* RM1: the changes above the store's number, in number order. */
int nrs_recover_replay_meta(const struct nrs_recover_env *e, struct scan *s)
{
	uint64_t held = 0, from;
	size_t applied = 0;
	int err;

	if (s->nmeta == 0)
		return 0;
	qsort(s->meta, s->nmeta, sizeof(*s->meta), cmp_seq);
	err = nrs_meta_log_seq(e->meta, &held);
	if (err)
		return err;
	from = held;
	for (size_t i = 0; i < s->nmeta; i++) {
		const struct nrs_wal_rec_info *ri = &s->meta[i];

		if (ri->rec.base <= held)
			continue;			/* held, or a copy */
		err = apply_meta(e, ri);
		if (err)
			return err;
		held = ri->rec.base;
		applied++;
	}
	if (applied)
		nrs_info("recovery: %zu metadata changes (%" PRIu64 " to %"
			 PRIu64 ") replayed from the WAL's META records",
			 applied, from + 1, held);
	return 0;
}
