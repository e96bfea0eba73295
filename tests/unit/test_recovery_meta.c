/*
 * test_recovery_meta.c - recovery_meta.c RM1 through its seam (recovery.h,
 * struct nrs_recover_env): the META records of a fake object WAL
 * (fixture_wal.h: scan lists the records, read returns their bytes) hold
 * changes a real SQLite store handed its sink (meta.h, THE CHANGE LOG),
 * encoded as the pipeline encodes them (metarec.h, walrec.h).
 * Recovery onto a copy of the store from before the changes applies them
 * in number order -- a record tried again, with a later LSN, a second
 * copy of one -- and a stream a META record made is loaded with its
 * appends re-published; run again it changes nothing; a META record that
 * fails its CRC, a damaged payload or a gap stop it with -EUCLEAN; META
 * LSNs count for the next LSN (RC6).
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixture_meta.h"
#include "fixture_wal.h"
#include "meta/meta.h"
#include "stream/recovery.h"
#include "stream/table.h"
#include "wal/metarec.h"
#include "wal/wal.h"
#include "wal/walrec.h"

struct fx {
	struct nrs_fixture_meta mf;	/* the store the changes come from */
	struct nrs_fixture_wal ow, lw;	/* object WAL, local WAL (empty) */
};

/* A META record of change c at LSN lsn, appended to the fake WAL. */
static void put_meta(struct nrs_fixture_wal *fw,
		     const struct nrs_fixture_change *c,
		     uint64_t lsn)
{
	unsigned char fixed[NRS_METAREC_FIXED];
	struct nrs_walrec r;
	struct iovec iov[2];
	unsigned char *at = fw->seg + fw->used;
	size_t hl;

	assert_int_equal(nrs_metarec_make(lsn, c->seq, c->len, &r, fixed), 0);
	hl = nrs_walrec_hdr_len(r.len);
	assert_true(fw->used + nrs_walrec_total_len(r.len) <=
		    NRS_FIXTURE_WAL_SEG);
	iov[0] = (struct iovec){ fixed, sizeof(fixed) };
	iov[1] = (struct iovec){ c->p, c->len };
	assert_int_equal(nrs_walrec_encode_hdr(&r, iov, 2, at, hl),
			 (ssize_t)hl);
	memcpy(at + hl, fixed, sizeof(fixed));
	memcpy(at + hl + sizeof(fixed), c->p, c->len);
	assert_true(fw->n < NRS_FIXTURE_WAL_MAX);
	fw->v[fw->n++] = (struct nrs_wal_rec_info){
		.rec = r, .pos = { 1, fw->used }, .data_ok = true,
		.object = true,
	};
	fw->used += nrs_walrec_total_len(r.len);
}

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	void *buf = NULL;
	size_t len = 0;

	if (!f || nrs_fixture_meta_open(&f->mf, "test_rmeta", true)) {
		free(f);
		return -1;
	}
	/* the checkpoint, at f->mf.path2: before every change */
	if (nrs_meta_snapshot(f->mf.m, &buf, &len, NULL) ||
	    nrs_meta_install(f->mf.path2, buf, len)) {
		free(buf);
		nrs_fixture_meta_close(&f->mf);
		free(f);
		return -1;
	}
	free(buf);
	nrs_fixture_wal_init(&f->ow);
	nrs_fixture_wal_init(&f->lw);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;

	nrs_fixture_meta_close(&f->mf);
	free(f);
	return 0;
}

/* Changes 1-4: mkdir d, d object-wal, create d/s (its stream id),
 * setxattr on it. */
static uint64_t four_changes(struct fx *f)
{
	struct nrs_attr d, a;
	struct nrs_stream_row r;

	assert_int_equal(nrs_meta_mkdir(f->mf.m, NRS_ROOT_INO, "d", 0755, 0, 0, 1,
					&d), 0);
	assert_int_equal(nrs_meta_set_profile(f->mf.m, d.ino,
					      NRS_PROFILE_OBJECT_WAL), 0);
	assert_int_equal(nrs_meta_create(f->mf.m, d.ino, "s", 0644, 0, 0, 1, &a,
					 &r), 0);
	assert_int_equal(r.profile, NRS_PROFILE_OBJECT_WAL);
	assert_int_equal(nrs_meta_xattr_set(f->mf.m, a.ino, "user.k", "v", 1, 0),
			 0);
	assert_int_equal(f->mf.n, 4);
	return r.id;
}

static int recover(struct fx *f, struct nrs_meta **dst, uint64_t *next)
{
	struct nrs_streams t;
	struct nrs_recover_env e = {
		.wal = &f->lw.w, .owal = &f->ow.w, .streams = &t,
		.data_dir = "(test)",
	};
	int err;

	if (!*dst)
		assert_int_equal(nrs_meta_open(f->mf.path2, dst), 0);
	e.meta = *dst;
	nrs_streams_init(&t);
	err = nrs_recover(&e, next);
	nrs_streams_destroy(&t);
	return err;
}

/* RM1: applied in number order (one record tried again at a later LSN,
 * a copy of one), before the stream's appends; twice is once; RC6. */
static void test_replayed(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *dst = NULL;
	struct nrs_attr d, a;
	struct nrs_stream_row r;
	uint64_t id = four_changes(f), seq = 0, next = 0;
	char v[4];

	put_meta(&f->ow, &f->mf.log[0], 20);
	put_meta(&f->ow, &f->mf.log[1], 22);
	put_meta(&f->ow, &f->mf.log[3], 23);	/* 3 failed, tried at 24 */
	put_meta(&f->ow, &f->mf.log[2], 24);
	put_meta(&f->ow, &f->mf.log[0], 25);	/* a late copy */
	f->ow.v[f->ow.n] = (struct nrs_wal_rec_info){	/* s's append */
		.rec = { .kind = NRS_WALREC_DATA, .lsn = 21, .stream_id = id,
			 .base = 0, .len = 5, .n_appends = 1, .epoch = 0 },
		.pos = { 1, 60000 }, .data_ok = true, .object = true,
	};
	f->ow.n++;
	assert_int_equal(recover(f, &dst, &next), 0);
	assert_int_equal(next, 26);			/* RC6 */
	assert_int_equal(nrs_meta_log_seq(dst, &seq), 0);
	assert_int_equal(seq, 4);
	assert_int_equal(nrs_meta_lookup(dst, NRS_ROOT_INO, "d", &d), 0);
	assert_int_equal(nrs_meta_lookup(dst, d.ino, "s", &a), 0);
	assert_int_equal(nrs_meta_xattr_get(dst, a.ino, "user.k", v,
					    sizeof(v)), 1);
	assert_int_equal(nrs_meta_stream_get(dst, id, &r), 0);
	assert_int_equal(r.head, 5);			/* RC3 after RM1 */
	assert_int_equal(recover(f, &dst, &next), 0);	/* again */
	assert_int_equal(nrs_meta_stream_get(dst, id, &r), 0);
	assert_int_equal(r.head, 5);
	nrs_meta_close(dst);
}

/* RM1: a needed META record that fails its CRC, a damaged payload, a
 * gap: -EUCLEAN, and nothing of the later changes applied. */
static void test_damage_stops(void **state)
{
	struct fx *f = *state;
	struct nrs_meta *dst = NULL;
	uint64_t seq = 9, next = 0;
	struct nrs_wal_rec_info *ri;
	struct nrs_attr d;

	four_changes(f);
	for (size_t i = 0; i < 4; i++)
		put_meta(&f->ow, &f->mf.log[i], 20 + i);
	ri = &f->ow.v[1];
	ri->data_ok = false;				/* its CRC failed */
	assert_int_equal(recover(f, &dst, &next), -EUCLEAN);
	assert_int_equal(nrs_meta_log_seq(dst, &seq), 0);
	assert_int_equal(seq, 1);
	ri->data_ok = true;				/* MR1 */
	f->ow.seg[ri->pos.off + nrs_walrec_hdr_len(ri->rec.len) + 8] ^= 1;
	assert_int_equal(recover(f, &dst, &next), -EUCLEAN);
	f->ow.seg[ri->pos.off + nrs_walrec_hdr_len(ri->rec.len) + 8] ^= 1;
	f->ow.v[1] = f->ow.v[3];			/* a gap: 2, 3 lost */
	f->ow.n = 2;
	assert_int_equal(recover(f, &dst, &next), -EUCLEAN);
	assert_int_equal(nrs_meta_log_seq(dst, &seq), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(nrs_meta_lookup(dst, NRS_ROOT_INO, "d", &d), 0);
	nrs_meta_close(dst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_replayed, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_damage_stops, fx_setup,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
