/*
 * nrs-ckpt - the metadata checkpoints of an object store, for the
 * integration tests (bg/checkpoint.h): what a recovery would find, and a
 * restore into an empty data directory.
 *
 *	nrs-ckpt find    STORE          prints "top SEQ pointer SEQ"
 *	nrs-ckpt show    STORE          the newest usable one, verified:
 *	                                "seq S covered C epoch E db_bytes N"
 *	nrs-ckpt restore STORE DATADIR  install it as DATADIR/meta.db
 *	                                (DATADIR must exist and hold none);
 *	                                prints what show prints
 *
 * STORE is dir:PATH (an embedded store's directory, opened read-only: a
 * restore writes nothing there) or s3:URL (keys from AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY).  Exit 0, or 1 with the reason on stderr.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bg/checkpoint.h"
#include "obj/objstore.h"

static int open_store(const char *spec, struct nrs_objstore **s)
{
	if (strncmp(spec, "dir:", 4) == 0)
		return nrs_objstore_dir_open_readonly(spec + 4, s);
	if (strncmp(spec, "s3:", 3) == 0) {
		struct nrs_s3_opts o = { .url = spec + 3 };

		return nrs_objstore_s3_open_url(&o, NULL, s);
	}
	return -EINVAL;
}

static void show(const struct nrs_ckpt_hdr *h)
{
	printf("seq %" PRIu64 " covered %" PRIu64 " epoch %" PRIu64
	       " db_bytes %" PRIu64 "\n", h->seq, h->covered, h->epoch,
	       h->db_len);
}

int main(int argc, char **argv)
{
	struct nrs_objstore *s = NULL;
	struct nrs_ckpt_hdr h;
	const char *cmd = argc > 2 ? argv[1] : "";
	const void *db;
	void *obj = NULL;
	int err;

	if (argc < 3 || (strcmp(cmd, "restore") == 0) != (argc == 4) ||
	    argc > 4) {
		fprintf(stderr, "usage: nrs-ckpt find|show STORE\n"
			"       nrs-ckpt restore STORE DATADIR\n");
		return 1;
	}
	err = open_store(argv[2], &s);
	if (err) {
		fprintf(stderr, "nrs-ckpt: cannot open %s: %s\n", argv[2],
			strerror(-err));
		return 1;
	}
	if (strcmp(cmd, "find") == 0) {
		uint64_t top = 0, ptr = 0;

		err = nrs_ckpt_find(s, &top, &ptr);
		if (!err)
			printf("top %" PRIu64 " pointer %" PRIu64 "\n", top, ptr);
	} else if (strcmp(cmd, "show") == 0 || strcmp(cmd, "restore") == 0) {
		err = nrs_ckpt_load(s, &h, &obj, &db);
		if (!err && argc == 4) {
			uint64_t covered = 0, epoch = 0;

			err = nrs_ckpt_restore(s, argv[3], &covered, &epoch);
			if (!err && (covered != h.covered || epoch != h.epoch))
				err = -ESTALE;	/* a newer one came meanwhile */
		}
		if (!err)
			show(&h);
		free(obj);
	} else {
		err = -EINVAL;
	}
	nrs_obj_close(s);
	if (err) {
		fprintf(stderr, "nrs-ckpt %s: %s\n", cmd, strerror(-err));
		return 1;
	}
	return 0;
}
