/*
 * fixture_wal.c - the unit tests' fake WAL (fixture_wal.h).
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "fixture_wal.h"

static int fw_scan(struct nrs_wal *w, nrs_wal_scan_cb cb, void *ctx)
{
	struct nrs_fixture_wal *fw = (struct nrs_fixture_wal *)w;

	for (size_t i = 0; i < fw->n; i++) {
		int err = cb(ctx, &fw->v[i]);

		if (err)
			return err;
	}
	fw->syncs_at_scan = fw->syncs;
	return 0;
}

static int fw_sync_all(struct nrs_wal *w)
{
	struct nrs_fixture_wal *fw = (struct nrs_fixture_wal *)w;

	fw->syncs++;
	return fw->sync_err;
}

static ssize_t fw_read(struct nrs_wal *w, struct nrs_wal_pos pos, void *buf,
		       size_t len)
{
	struct nrs_fixture_wal *fw = (struct nrs_fixture_wal *)w;

	if (pos.seg != 1 || pos.off > fw->used)
		return -ENOENT;
	if (len > fw->used - pos.off)
		len = fw->used - pos.off;
	memcpy(buf, fw->seg + pos.off, len);
	return (ssize_t)len;
}

static const struct nrs_wal_ops fw_ops = {
	.name = "fake",
	.scan = fw_scan,
	.sync_all = fw_sync_all,
	.read = fw_read,
};

void nrs_fixture_wal_init(struct nrs_fixture_wal *fw)
{
	fw->w.ops = &fw_ops;
}
