/*
 * metarec.c - the payload of a META record (walrec.c kind 2): one change
 * of the metadata, logged in the same WAL as the appends so that a
 * recovery from the bucket alone brings the namespace back (meta.h, THE
 * CHANGE LOG; issue 15).
 *
 * PAYLOAD FORMAT
 *
 * Little-endian, byte by byte; offsets from the payload start (the byte
 * after the record's chunk-CRC table).  The record's chunk CRCs (walrec.c)
 * cover all of it.
 *
 *     0   u32  magic      0x4d53524e: the bytes "NRSM"
 *     4   u16  format     1 = a SQLite session changeset (sqlite_log.c)
 *     6   u16  reserved   0
 *     8   u64  seq        the meta sequence number of the change: the
 *                         same as the record header's base (WV4)
 *    16        the change, len - 16 bytes, at least one
 *
 *  MR1 A payload is taken only if its magic, format and reserved are as
 *      above and its seq is the header's base; else it is damage
 *      (-EUCLEAN), never a change applied.  The decoder does not parse
 *      the changeset: SQLite does, when it is applied (meta.h).
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "util/le.h"
#include "wal/metarec.h"

int nrs_metarec_make(uint64_t lsn, uint64_t seq, size_t change_len,
		     struct nrs_walrec *r,
		     unsigned char fixed[NRS_METAREC_FIXED])
{
	if (lsn == 0 || lsn > NRS_WALREC_LSN_MAX || seq == 0 ||
	    change_len == 0 ||
	    change_len > NRS_WALREC_MAX_LEN - NRS_METAREC_FIXED)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->kind = NRS_WALREC_META;
	r->lsn = lsn;
	r->base = seq;
	r->len = (uint32_t)(change_len + NRS_METAREC_FIXED);
	r->n_appends = 1;
	nrs_le32_put(fixed, NRS_METAREC_MAGIC);
	nrs_le16_put(fixed + 4, NRS_METAREC_CHANGESET);
	nrs_le16_put(fixed + 6, 0);
	nrs_le64_put(fixed + 8, seq);
	return 0;
}

int nrs_metarec_decode(const struct nrs_walrec *r, const void *payload,
		       struct nrs_metarec *out)
{
	const unsigned char *p = payload;

	if (r->kind != NRS_WALREC_META || r->len <= NRS_METAREC_FIXED ||
	    !payload)
		return -EUCLEAN;
	if (nrs_le32_get(p) != NRS_METAREC_MAGIC ||		/* MR1 */
	    nrs_le16_get(p + 4) != NRS_METAREC_CHANGESET ||
	    nrs_le16_get(p + 6) != 0 || nrs_le64_get(p + 8) != r->base)
		return -EUCLEAN;
	out->seq = r->base;
	out->format = NRS_METAREC_CHANGESET;
	out->change = p + NRS_METAREC_FIXED;
	out->change_len = r->len - NRS_METAREC_FIXED;
	return 0;
}
