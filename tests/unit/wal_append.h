/*
 * wal_append.h - for unit tests only: a WAL provider's write(), sync(),
 * and cut() if the sync failed, in one call, the way the commit pipeline
 * drives them (pipeline.c PL2) for one batch.  Not part of wal.h: the
 * daemon never appends without the pipeline.
 */
#ifndef NRS_TEST_WAL_APPEND_H
#define NRS_TEST_WAL_APPEND_H

#include <stdint.h>
#include <sys/uio.h>

#include "wal/wal.h"

/* The batch is durable, or (if the cut worked) it left no trace.  Returns
 * 0 or -errno. */
static inline int nrs_wal_append(struct nrs_wal *w, const struct iovec *iov,
				 int iovcnt, struct nrs_wal_pos *pos)
{
	struct nrs_wal_pos end;
	uint64_t total = 0;
	int err;

	err = nrs_wal_write(w, iov, iovcnt, pos);
	if (err < 0)
		return err;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	end.seg = pos->seg;
	end.off = pos->off + total;
	err = nrs_wal_sync(w, end);
	if (err < 0)
		(void)nrs_wal_cut(w, *pos, err);
	return err;
}

#endif
