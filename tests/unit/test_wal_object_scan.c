/*
 * test_wal_object_scan.c - the object WAL's recovery scan asks several
 * keys at once and still takes them in log order (wal_object_scan.c OW16),
 * over the real embedded directory store behind a wrapper that counts the
 * calls and how many HEADs are in flight together (each HEAD waits a few
 * milliseconds, so that calls made one after another never overlap).
 * And a sync, which looks only at the unproven objects and the open one
 * (wal_object.c OW17), still refuses a batch cut out of the open object.
 *
 * No figure is measured: what is checked is that HEADs overlapped, that
 * every object was read once, and that the records come back in order.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objstore.h"
#include "wal/wal.h"
#include "wal/walrec.h"
#include "wal_append.h"

#define N_OBJS	40

struct counting {
	struct nrs_objstore base;
	struct nrs_objstore *real;
	atomic_int heads, gets, in_flight, most;
};

static struct counting *cs(struct nrs_objstore *s)
{
	return (struct counting *)s;
}

static int c_put(struct nrs_objstore *s, const char *key, const void *buf,
		 size_t len, const unsigned char md5[NRS_MD5_LEN],
		 const unsigned char sha[NRS_SHA256_LEN])
{
	return nrs_obj_put(cs(s)->real, key, buf, len, md5, sha);
}

static int c_head(struct nrs_objstore *s, const char *key,
		  struct nrs_obj_meta *out)
{
	struct counting *c = cs(s);
	int now = atomic_fetch_add(&c->in_flight, 1) + 1, most, err;

	most = atomic_load(&c->most);
	while (now > most && !atomic_compare_exchange_weak(&c->most, &most, now))
		;
	atomic_fetch_add(&c->heads, 1);
	usleep(3000);
	err = nrs_obj_head(c->real, key, out);
	atomic_fetch_sub(&c->in_flight, 1);
	return err;
}

static ssize_t c_get(struct nrs_objstore *s, const char *key, uint64_t off,
		     void *buf, size_t len)
{
	atomic_fetch_add(&cs(s)->gets, 1);
	return nrs_obj_get(cs(s)->real, key, off, buf, len);
}

static int c_del(struct nrs_objstore *s, const char *key)
{
	return nrs_obj_del(cs(s)->real, key);
}

static void c_close(struct nrs_objstore *s)
{
	(void)s;
}

static const struct nrs_objstore_ops counting_ops = {
	.name = "counting", .put = c_put, .head = c_head, .get = c_get,
	.del = c_del, .close = c_close,
};

struct fx {
	char root[4096], objs[4200], state[4200];
	struct counting store;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || nrs_fixture_mkdtemp(f->root, sizeof(f->root), "owscan"))
		return -1;
	snprintf(f->objs, sizeof(f->objs), "%s/objects", f->root);
	snprintf(f->state, sizeof(f->state), "%s/owal", f->root);
	if (nrs_objstore_dir_open(f->objs, &f->store.real))
		return -1;
	f->store.base.ops = &counting_ops;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	nrs_obj_close(f->store.real);
	rc = nrs_fixture_rmtree(f->root);
	free(f);
	return rc;
}

static struct nrs_wal *wopen_t(struct fx *f, uint64_t timeout_ms,
			       uint64_t linger_ms)
{
	struct nrs_wal_object_opts o = {
		.store = &f->store.base, .dir = f->state, .inflight_max = 4,
		.timeout_ms = timeout_ms, .linger_ms = linger_ms,
	};
	struct nrs_wal *w = NULL;

	assert_int_equal(nrs_wal_object_open(&o, &w), 0);
	return w;
}

static struct nrs_wal *wopen(struct fx *f)
{
	return wopen_t(f, 60000, 5);
}

/* The record of lsn, 500 bytes, into buf (of nrs_walrec_total_len(500)). */
static size_t mkrec(uint64_t lsn, unsigned char **out)
{
	const uint32_t plen = 500;
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .lsn = lsn, .stream_id = 9,
		.base = (lsn - 1) * plen, .len = plen, .n_appends = 1,
		.epoch = 1, .prev_lsn = lsn - 1,
	};
	size_t hl = nrs_walrec_hdr_len(plen), tl = nrs_walrec_total_len(plen);
	unsigned char *buf = calloc(1, tl);
	struct iovec payload = { NULL, plen };

	assert_non_null(buf);
	payload.iov_base = buf + hl;
	assert_int_equal(nrs_walrec_encode_hdr(&r, &payload, 1, buf, hl),
			 (ssize_t)hl);
	*out = buf;
	return tl;
}

/* One append of lsn; a lone writer's append is an object of its own
 * (OW13). */
static void append(struct nrs_wal *w, uint64_t lsn)
{
	struct iovec iov;
	struct nrs_wal_pos pos;

	iov.iov_len = mkrec(lsn, (unsigned char **)&iov.iov_base);
	assert_int_equal(nrs_wal_append(w, &iov, 1, &pos), 0);
	free(iov.iov_base);
}

struct seen {
	uint64_t n, last_lsn;
	uint64_t last_seg;
	bool in_order;
};

static int collect(void *ctx, const struct nrs_wal_rec_info *ri)
{
	struct seen *s = ctx;

	if (ri->rec.lsn != s->last_lsn + 1 || ri->pos.seg <= s->last_seg ||
	    !ri->data_ok)
		s->in_order = false;
	s->last_lsn = ri->rec.lsn;
	s->last_seg = ri->pos.seg;
	s->n++;
	return 0;
}

/* OW16: a scan of N_OBJS objects has HEADs in flight together, reads each
 * object once, and returns the records in log order. */
static void test_keys_in_flight(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen(f);
	struct seen s = { .in_order = true };

	for (uint64_t lsn = 1; lsn <= N_OBJS; lsn++)
		append(w, lsn);
	nrs_wal_close(w);
	atomic_store(&f->store.heads, 0);
	atomic_store(&f->store.gets, 0);
	atomic_store(&f->store.most, 0);
	w = wopen(f);
	assert_int_equal(nrs_wal_scan(w, collect, &s), 0);
	nrs_wal_close(w);
	assert_int_equal(s.n, N_OBJS);
	assert_true(s.in_order);
	/* each object once (a seal, SL1, is PUT, not read back by GET) */
	assert_int_equal(atomic_load(&f->store.gets), N_OBJS);
	/* keys past the run's end are probed too: OW14's window */
	assert_true(atomic_load(&f->store.heads) >= N_OBJS + 64);
	assert_true(atomic_load(&f->store.most) >= 2);
}

/* OW17, OW4: two batches in the open object, the first cut (its sync
 * failed): the object is left with nothing, and the second batch's sync
 * fails too -- it waits on the open object, not only on the unproven
 * ones -- rather than report bytes that were never sent as proven. */
static void test_sync_after_cut(void **state)
{
	struct fx *f = *state;
	struct nrs_wal *w = wopen_t(f, 300, 60000);
	struct nrs_wal_pos a, b, eb;
	struct iovec iov;

	iov.iov_len = mkrec(1, (unsigned char **)&iov.iov_base);
	assert_int_equal(nrs_wal_write(w, &iov, 1, &a), 0);
	free(iov.iov_base);
	iov.iov_len = mkrec(2, (unsigned char **)&iov.iov_base);
	assert_int_equal(nrs_wal_write(w, &iov, 1, &b), 0);
	free(iov.iov_base);
	assert_int_equal(b.seg, a.seg);
	eb = b;
	eb.off += iov.iov_len;
	assert_int_equal(nrs_wal_cut(w, a, -EIO), 0);
	assert_int_equal(nrs_wal_sync(w, eb), -ETIMEDOUT);
	nrs_wal_close(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_keys_in_flight, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sync_after_cut, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
