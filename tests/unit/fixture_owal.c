/*
 * fixture_owal.c - the object WAL tests' directory and store
 * (fixture_owal.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "fixture.h"
#include "fixture_owal.h"
#include "obj/objstore.h"
#include "wal/wal.h"
#include "wal/walrec.h"

int nrs_fixture_owal_open(struct nrs_fixture_owal *f, const char *name)
{
	int rc;

	memset(f, 0, sizeof(*f));
	rc = nrs_fixture_mkdtemp(f->root, sizeof(f->root), name);
	if (rc)
		return rc;
	snprintf(f->objs, sizeof(f->objs), "%s/objects", f->root);
	snprintf(f->state, sizeof(f->state), "%s/owal", f->root);
	rc = nrs_objstore_dir_open(f->objs, &f->store);
	if (rc) {
		nrs_fixture_rmtree(f->root);
		return rc;
	}
	return 0;
}

int nrs_fixture_owal_close(struct nrs_fixture_owal *f)
{
	nrs_obj_close(f->store);
	f->store = NULL;
	return nrs_fixture_rmtree(f->root);
}

int nrs_fixture_owal_batch(struct nrs_wal *w, struct nrs_wal_pos *pos,
			   struct nrs_wal_pos *end)
{
	const uint32_t plen = 1000;
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = 1, .stream_id = 9, .len = plen,
		.n_appends = 1, .epoch = 1,
	};
	size_t hl = nrs_walrec_hdr_len(plen), tl = nrs_walrec_total_len(plen);
	unsigned char *buf = calloc(1, tl);
	struct iovec iov = { buf, tl }, payload = { NULL, plen };
	int err;

	if (!buf)
		return -ENOMEM;
	payload.iov_base = buf + hl;
	err = nrs_walrec_encode_hdr(&r, &payload, 1, buf, hl) == (ssize_t)hl ?
	      nrs_wal_write(w, &iov, 1, pos) : -EINVAL;
	*end = *pos;
	end->off += tl;
	free(buf);
	return err;
}
