/*
 * fsckdir.c - the fsck unit tests' fixture (fsckdir.h).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "fsckdir.h"

void record(void *ctx, enum nrs_fsck_sev sev, const char *line)
{
	struct nrs_fsck *f = ctx;
	struct out *o = (struct out *)(f + 1);

	(void)sev;
	o->len += (size_t)snprintf(o->text + o->len, sizeof(o->text) - o->len,
				   "%s\n", line);
	if (o->len >= sizeof(o->text))
		o->len = sizeof(o->text) - 1;
}

const char *run(struct nrs_fsck *f)
{
	struct out *o = (struct out *)(f + 1);

	o->len = 0;
	o->text[0] = '\0';
	f->errors = f->pending = f->torn = f->unlinked = 0;
	assert_int_equal(nrs_fsck_check(f), 0);
	print_message("%s", o->text);
	return o->text;
}

const char *at(struct objdir *d, const char *rel)
{
	snprintf(d->path, sizeof(d->path), "%s/%s", d->dir, rel);
	return d->path;
}

uint64_t store_object(struct objdir *d, uint64_t start, uint64_t end,
			     char key[NRS_OBJKEY_MAX],
			     unsigned char sha[NRS_SHA256_LEN])
{
	struct nrs_obj_row row = {
		.stream_id = d->sid, .start = start, .end = end,
		.length = nrs_objfmt_hdr_len(end - start) + (end - start),
	};
	unsigned char md5[NRS_MD5_LEN];
	size_t hl = nrs_objfmt_hdr_len(end - start);
	unsigned char *buf = malloc(row.length);
	struct nrs_objhdr h = { .stream_id = d->sid, .start = start,
				.end = end };

	assert_non_null(buf);
	for (uint64_t i = 0; i < end - start; i++)
		buf[hl + i] = (unsigned char)((start + i) * 7 + 1);
	assert_int_equal(nrs_meta_obj_prepare(d->m, &row), 0);
	h.gen = row.gen;
	assert_int_equal(nrs_objfmt_seal(buf, &h), 0);
	assert_int_equal(nrs_objfmt_digest(buf, row.length, sha, md5), 0);
	assert_true(nrs_objfmt_key(key, &h) > 0);
	assert_int_equal(nrs_obj_put(d->store, key, buf, row.length, md5, sha),
			 0);
	free(buf);
	return row.gen;
}

uint64_t put_object(struct objdir *d, uint64_t start, uint64_t end,
			   char key[NRS_OBJKEY_MAX])
{
	unsigned char sha[NRS_SHA256_LEN];
	uint64_t gen = store_object(d, start, end, key, sha);

	assert_int_equal(nrs_meta_obj_publish(d->m, gen, sha), 0);
	return gen;
}

int setup_objdir(void **state)
{
	struct objdir *d = calloc(1, sizeof(*d));
	struct nrs_head_update u = {
		.old_version = 0, .head = OBJ_HEAD, .version = 3, .epoch = 2,
		.last_lsn = 3, .mtime_ns = 1,
	};
	struct nrs_stream_row srow;
	struct nrs_attr a;

	if (!d)
		return -1;
	nrs_fsck_init(&d->f, record, &d->f);
	assert_int_equal(nrs_fixture_mkdtemp(d->dir, sizeof(d->dir), "test_fsck"),
			 0);
	assert_int_equal(nrs_meta_open(at(d, "meta.db"), &d->m), 0);
	assert_int_equal(nrs_objstore_dir_open(at(d, "objects"), &d->store), 0);
	assert_int_equal(nrs_meta_mkdir(d->m, NRS_ROOT_INO, "k", 0755, 0, 0, 1,
					&a), 0);
	assert_int_equal(nrs_meta_create(d->m, a.ino, "s", 0644, 0, 0, 1, &a,
					 &srow), 0);
	d->sid = u.id = srow.id;
	assert_int_equal(nrs_meta_publish(d->m, &u, 1, true), 0);
	*state = d;
	return 0;
}

int teardown_objdir(void **state)
{
	struct objdir *d = *state;

	nrs_meta_close(d->m);
	nrs_obj_close(d->store);
	nrs_fsck_free(&d->f);
	nrs_fixture_rmtree(d->dir);
	free(d);
	return 0;
}

void load(struct objdir *d, bool store)
{
	struct nrs_wal_rec_info ri = {
		.rec = { .kind = NRS_WALREC_DATA, .lsn = 3, .stream_id = d->sid,
			 .base = OBJ_WAL_BASE, .len = OBJ_HEAD - OBJ_WAL_BASE,
			 .n_appends = 1, .epoch = 2, .prev_lsn = 2 },
		.pos = { 2, 64 },
		.data_ok = true,
	};
	struct nrs_meta *m = NULL;
	int err;

	nrs_meta_close(d->m);
	d->m = NULL;
	nrs_obj_close(d->store);
	d->store = NULL;
	nrs_fsck_free(&d->f);
	assert_int_equal(nrs_meta_open_readonly(at(d, "meta.db"), &m), 0);
	assert_int_equal(nrs_meta_inode_foreach(m, nrs_fsck_add_inode, &d->f), 0);
	assert_int_equal(nrs_meta_dirent_foreach(m, nrs_fsck_add_dirent, &d->f),
			 0);
	assert_int_equal(nrs_meta_stream_foreach(m, nrs_fsck_add_stream, &d->f),
			 0);
	assert_int_equal(nrs_meta_obj_foreach(m, 0, nrs_fsck_add_obj, &d->f), 0);
	nrs_meta_close(m);
	assert_int_equal(nrs_fsck_add_rec(&d->f, &ri), 0);
	if (d->now_ns)
		d->f.now_ns = d->now_ns;
	if (d->grace_ms)
		d->f.gc_grace_ms = d->grace_ms;
	if (!store)
		return;
	err = nrs_objstore_dir_open_readonly(at(d, "objects"), &d->store);
	if (err == -ENOENT)
		d->f.store_absent = true;
	else
		assert_int_equal(err, 0);
	d->f.store = d->store;
}

const char *check_objdir(struct objdir *d, bool store, uint64_t errors,
				const char *want1, const char *want2)
{
	const char *text;

	load(d, store);
	text = run(&d->f);
	assert_ptr_equal(text, d->out.text);	/* record() writes there */
	assert_int_equal(d->f.errors, errors);
	if (want1)
		assert_non_null(strstr(text, want1));
	if (want2)
		assert_non_null(strstr(text, want2));
	return text;
}
