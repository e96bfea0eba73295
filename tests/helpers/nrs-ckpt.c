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
 *	nrs-ckpt old     STORE VERSION  the newest usable one again, as the
 *	                                release of schema VERSION would
 *	                                have written it: its database taken
 *	                                down to that schema, stored (proven)
 *	                                as the next checkpoint, with the same
 *	                                covered position and epoch; prints
 *	                                what show prints of the new one
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

#include <sqlite3.h>

#include "bg/checkpoint.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "../unit/schema_undo.h"

static int open_store(const char *spec, bool rw, struct nrs_objstore **s)
{
	if (strncmp(spec, "dir:", 4) == 0)
		return rw ? nrs_objstore_dir_open(spec + 4, s) :
		       nrs_objstore_dir_open_readonly(spec + 4, s);
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

/* The database db (of schema cur) taken down to schema v: *out. */
static int downgrade(const void *db, size_t len, long v, void **out,
		     size_t *out_len)
{
	unsigned char *img = sqlite3_malloc64(len), *ser = NULL;
	sqlite3_int64 size = 0;
	sqlite3 *d = NULL;
	sqlite3_stmt *st = NULL;
	char sql[64];
	long cur = 0;
	int rc;

	if (!img)
		return -ENOMEM;
	memcpy(img, db, len);
	rc = sqlite3_open(":memory:", &d);
	if (rc != SQLITE_OK)
		sqlite3_free(img);
	else
		rc = sqlite3_deserialize(d, "main", img, (sqlite3_int64)len,
					 (sqlite3_int64)len,
					 SQLITE_DESERIALIZE_FREEONCLOSE |
					 SQLITE_DESERIALIZE_RESIZEABLE);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(d, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		cur = (long)sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc == SQLITE_OK && (v < 1 || v >= cur ||
				cur > (long)NRS_SCHEMA_UNDO_N))
		rc = SQLITE_RANGE;
	for (long k = cur - 1; rc == SQLITE_OK && k >= v; k--)
		rc = sqlite3_exec(d, nrs_schema_undo[k], NULL, NULL, NULL);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %ld", v);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(d, sql, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		ser = sqlite3_serialize(d, "main", &size, 0);
	if (rc == SQLITE_OK && ser && size > 100 &&
	    (*out = malloc((size_t)size)) != NULL) {
		memcpy(*out, ser, (size_t)size);
		((unsigned char *)*out)[18] = ((unsigned char *)*out)[19] = 1;
		*out_len = (size_t)size;
	} else if (rc == SQLITE_OK) {
		rc = SQLITE_NOMEM;
	}
	if (rc != SQLITE_OK)
		fprintf(stderr, "nrs-ckpt old: schema %ld from %ld: %s\n", v,
			cur, d ? sqlite3_errmsg(d) : "?");
	sqlite3_free(ser);
	sqlite3_close(d);
	return rc == SQLITE_OK ? 0 : -EINVAL;
}

/* nrs-ckpt old: the newest checkpoint again, of schema v. */
static int store_old(struct nrs_objstore *s, long v, struct nrs_ckpt_hdr *h)
{
	unsigned char sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	bool want = nrs_obj_wants_md5(s);
	char key[NRS_OBJKEY_MAX];
	void *obj = NULL, *old = NULL, *built = NULL;
	const void *db;
	uint64_t top = 0;
	size_t len = 0, blen = 0;
	int err;

	err = nrs_ckpt_load(s, h, &obj, &db) ?: nrs_ckpt_find(s, &top, NULL) ?:
		downgrade(db, (size_t)h->db_len, v, &old, &len);
	if (!err) {
		h->seq = top + 1;
		h->db_len = len;
		err = nrs_ckptfmt_build(h, old, &built, &blen) ?:
			nrs_objfmt_digest(built, blen, sha, want ? md5 : NULL);
		if (!err && nrs_ckptfmt_key(key, h->seq) < 0)
			err = -EINVAL;
		err = err ?: nrs_ckpt_put_proven(s, key, built, blen,
					    want ? md5 : NULL, sha);
	}
	free(built);
	free(old);
	free(obj);
	return err;
}

int main(int argc, char **argv)
{
	struct nrs_objstore *s = NULL;
	struct nrs_ckpt_hdr h;
	const char *cmd = argc > 2 ? argv[1] : "";
	const void *db;
	void *obj = NULL;
	int err;

	if (argc < 3 || (strcmp(cmd, "restore") == 0 ||
			 strcmp(cmd, "old") == 0) != (argc == 4) ||
	    argc > 4) {
		fprintf(stderr, "usage: nrs-ckpt find|show STORE\n"
			"       nrs-ckpt restore STORE DATADIR\n"
			"       nrs-ckpt old STORE VERSION\n");
		return 1;
	}
	err = open_store(argv[2], strcmp(cmd, "old") == 0, &s);
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
	} else if (strcmp(cmd, "old") == 0) {
		err = store_old(s, strtol(argv[3], NULL, 10), &h);
		if (!err)
			show(&h);
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
