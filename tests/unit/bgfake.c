/* bgfake.c - the background services' fake surroundings (bgfake.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "bgfake.h"
#include "fixture.h"
#include "obj/objfmt.h"
#include "util/clock.h"
#include "wal/wal.h"
#include "wal/walrec.h"

static struct bgstore *bs(struct nrs_objstore *s)
{
	return (struct bgstore *)s;
}

/* Is there a prepared row whose key is key? */
static bool has_intent(struct nrs_meta *meta, const char *key)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	bool found = false;

	if (nrs_meta_obj_rows(meta, 0, NRS_OBJ_PREPARED, &v, &n) != 0)
		return false;
	for (size_t i = 0; i < n && !found; i++) {
		char k[NRS_OBJKEY_MAX];

		bg_key(&v[i], k);
		found = strcmp(k, key) == 0;
	}
	free(v);
	return found;
}

static int bs_put(struct nrs_objstore *s, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	struct bgstore *b = bs(s);
	bool away, drop, intent = has_intent(b->meta, key);

	if (b->put_hook)
		b->put_hook(b->put_hook_ctx, key);
	pthread_mutex_lock(&b->mu);
	b->puts++;
	if (!intent)
		b->no_intent = true;
	if (b->nkeys < BG_KEYS)
		snprintf(b->keys[b->nkeys++], NRS_OBJKEY_MAX, "%s", key);
	away = b->away_forever || b->away > 0;
	drop = !away && b->drop > 0;
	if (b->drop > 0 && drop)
		b->drop--;
	if (b->lie_first && !b->lie_key[0])
		snprintf(b->lie_key, sizeof(b->lie_key), "%s", key);
	pthread_mutex_unlock(&b->mu);
	if (away)
		return -ECONNREFUSED;
	if (drop)
		return 0;
	return nrs_obj_put(b->real, key, buf, len, md5, sha256);
}

static int bs_head(struct nrs_objstore *s, const char *key,
		   struct nrs_obj_meta *out)
{
	struct bgstore *b = bs(s);
	bool away, lie;
	int err;

	pthread_mutex_lock(&b->mu);
	b->heads++;
	away = b->away_forever || b->away > 0;
	if (b->away > 0)
		b->away--;	/* a PUT and its HEAD are one try */
	lie = b->lie_key[0] && strcmp(b->lie_key, key) == 0;
	pthread_mutex_unlock(&b->mu);
	if (away)
		return -ECONNREFUSED;
	err = nrs_obj_head(b->real, key, out);
	if (!err && lie)
		out->sha256[0] ^= 1;	/* other bytes under the key */
	return err;
}

static ssize_t bs_get(struct nrs_objstore *s, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	return nrs_obj_get(bs(s)->real, key, off, buf, len);
}

static int bs_del(struct nrs_objstore *s, const char *key)
{
	struct bgstore *b = bs(s);
	bool fail;

	pthread_mutex_lock(&b->mu);
	b->dels++;
	fail = b->del_fail > 0;
	if (fail) {
		b->del_fail--;
		b->del_fails_done++;
	} else if (b->ndels < BG_KEYS) {
		snprintf(b->dels_done[b->ndels++], NRS_OBJKEY_MAX, "%s", key);
	}
	pthread_mutex_unlock(&b->mu);
	if (fail)
		return -EIO;
	return nrs_obj_del(b->real, key);
}

static void bs_close(struct nrs_objstore *s)
{
	(void)s;
}

static const struct nrs_objstore_ops bs_ops = {
	.name = "bgfake",
	.wants_md5 = false,
	.put = bs_put,
	.head = bs_head,
	.get = bs_get,
	.del = bs_del,
	.close = bs_close,
};

/* ---- the upcalls ------------------------------------------------------ */

/* What user.nereus.trim does (core.c): durable first, then the index. */
static int up_trim(void *ctx, struct nrs_stream *st, uint64_t v)
{
	struct bgfake *f = ctx;
	int err = nrs_meta_set_start(f->meta, st->id, v);

	if (err)
		return err;
	pthread_mutex_lock(&st->lock);
	if (v > st->start) {
		st->start = v;
		nrs_index_drop_below(&st->index, v);
	}
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_lock(&f->mu);
	f->trims++;
	f->trim_id = st->id;
	f->trim_v = v;
	pthread_mutex_unlock(&f->mu);
	if (f->on_trim)
		f->on_trim(f->on_trim_ctx, st->id);
	return 0;
}

static void up_poke(void *ctx, uint64_t stream_id)
{
	struct bgfake *f = ctx;

	pthread_mutex_lock(&f->mu);
	f->pokes++;
	f->poke_id = stream_id;
	pthread_mutex_unlock(&f->mu);
}

static void up_drain(void *ctx)
{
	struct bgfake *f = ctx;
	struct nrs_wal_stats ws = { 0 };
	unsigned int dels;

	pthread_mutex_lock(&f->store.mu);
	dels = f->store.dels;
	pthread_mutex_unlock(&f->store.mu);
	if (f->wal)
		nrs_wal_stats(f->wal, &ws);
	pthread_mutex_lock(&f->mu);
	if (f->drains++ == 0)
		f->dels_at_first_drain = dels;
	f->segs_at_drain = ws.segments;
	pthread_mutex_unlock(&f->mu);
}

static uint64_t up_wal_keep(void *ctx, struct nrs_wal *w)
{
	struct bgfake *f = ctx;

	(void)w;
	return atomic_load(&f->keep);
}

static uint64_t up_wal_floor(void *ctx, struct nrs_wal *w)
{
	struct bgfake *f = ctx;

	(void)w;
	return atomic_load(&f->floor);
}

static int up_wal_seal(void *ctx, struct nrs_wal *w, uint64_t seg,
		       uint64_t idle_ns)
{
	struct bgfake *f = ctx;
	int err;

	(void)idle_ns;
	pthread_mutex_lock(&f->mu);
	f->seals++;
	f->seal_seg = seg;
	err = f->seal_err;
	pthread_mutex_unlock(&f->mu);
	return err < 0 ? err : nrs_wal_seal(w, seg);
}

/* Is there a prepared row naming WAL segment seg (MZ11)? */
static bool has_seg_intent(struct nrs_meta *meta, uint64_t seg)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	bool found = false;

	if (nrs_meta_obj_rows(meta, 0, NRS_OBJ_PREPARED, &v, &n) != 0)
		return false;
	for (size_t i = 0; i < n && !found; i++)
		found = v[i].seg == seg;
	free(v);
	return found;
}

static int up_adopt(void *ctx, uint64_t seg)
{
	struct bgfake *f = ctx;
	char path[4200], key[NRS_OBJKEY_MAX];
	bool intent = has_seg_intent(f->meta, seg);
	struct nrs_wal_stats ws;
	int err;

	nrs_wal_stats(f->wal, &ws);
	pthread_mutex_lock(&f->mu);
	f->adopts++;
	f->adopt_seg = seg;
	if (!intent)
		f->adopt_no_intent = true;
	if (ws.cur_seg == seg)
		f->adopt_current = true;
	err = f->adopt_err;
	pthread_mutex_unlock(&f->mu);
	if (err < 0)
		return err;
	err = nrs_wal_local_seg_path(f->wal, seg, path, sizeof(path));
	if (err)
		return err;
	nrs_objfmt_adopt_key(key, seg);
	return nrs_objstore_dir_adopt(f->store.real, key, path);
}

void bg_adopting(struct bgfake *f)
{
	f->svc.adopt = up_adopt;
	f->reader.store = f->store.real;
}

void bg_adopted_segment(struct bgfake *f, const char *path, uint64_t seg,
			size_t size)
{
	char key[NRS_OBJKEY_MAX];
	unsigned char *buf = malloc(size);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	assert_non_null(buf);
	assert_true(fd >= 0);
	memset(buf, 0xab, size);
	assert_int_equal(write(fd, buf, size), (ssize_t)size);
	assert_int_equal(close(fd), 0);
	free(buf);
	nrs_objfmt_adopt_key(key, seg);
	assert_int_equal(nrs_objstore_dir_adopt(f->store.real, key, path), 0);
}

struct mat_until {
	struct nrs_stream *st;
	uint64_t v;
};

static bool is_materialized(void *ctx)
{
	struct mat_until *u = ctx;
	uint64_t v;

	pthread_mutex_lock(&u->st->lock);
	v = u->st->materialized;
	pthread_mutex_unlock(&u->st->lock);
	return v >= u->v;
}

void bg_wait_materialized(struct nrs_stream *st, uint64_t v)
{
	struct mat_until u = { st, v };

	assert_true(bg_wait(is_materialized, &u));
}

/* ---- setup ------------------------------------------------------------ */

static int no_rec(void *ctx, const struct nrs_wal_rec_info *ri)
{
	(void)ctx;
	(void)ri;
	return 0;
}

void bg_open(struct bgfake *f, const char *name, bool with_wal)
{
	char path[4200];

	memset(f, 0, sizeof(*f));
	assert_int_equal(nrs_fixture_mkdtemp(f->dir, sizeof(f->dir), name), 0);
	snprintf(path, sizeof(path), "%s/meta.db", f->dir);
	assert_int_equal(nrs_meta_open(path, &f->meta), 0);
	snprintf(path, sizeof(path), "%s/objects", f->dir);
	assert_int_equal(nrs_objstore_dir_open(path, &f->store.real), 0);
	f->store.s.ops = &bs_ops;
	f->store.meta = f->meta;
	pthread_mutex_init(&f->store.mu, NULL);
	if (with_wal) {
		struct nrs_wal_local_opts o = { 0 };

		snprintf(path, sizeof(path), "%s/wal", f->dir);
		assert_int_equal(nrs_wal_local_open(path, &o, &f->wal), 0);
		/* WA0: a WAL takes writes once scanned (as recovery does) */
		assert_int_equal(nrs_wal_scan(f->wal, no_rec, NULL), 0);
	}
	nrs_streams_init(&f->t);
	pthread_mutex_init(&f->mu, NULL);
	atomic_init(&f->floor, UINT64_MAX);
	atomic_init(&f->keep, UINT64_MAX);
	f->next_lsn = 1;
	f->reader = (struct nrs_reader){ .wal = f->wal };
	f->svc = (struct nrs_services){
		.meta = f->meta, .store = &f->store.s, .wal = f->wal,
		.reader = &f->reader, .streams = &f->t, .metrics = &f->metrics,
		.ctx = f, .trim = up_trim, .poke = up_poke, .drain = up_drain,
		.wal_floor = up_wal_floor, .wal_seal = up_wal_seal,
		.wal_keep = up_wal_keep,
	};
}

void bg_close(struct bgfake *f)
{
	nrs_streams_destroy(&f->t);
	nrs_wal_close(f->wal);
	nrs_obj_close(f->store.real);
	nrs_meta_close(f->meta);
	pthread_mutex_destroy(&f->store.mu);
	pthread_mutex_destroy(&f->mu);
	assert_int_equal(nrs_fixture_rmtree(f->dir), 0);
}

struct nrs_stream *bg_stream(struct bgfake *f, const char *name,
			     uint64_t *ino)
{
	struct nrs_stream_row row;
	struct nrs_attr a;
	struct nrs_stream *st;

	assert_int_equal(nrs_meta_create(f->meta, 1, name, 0644, 0, 0, 1, &a,
					 &row), 0);
	st = nrs_stream_new(&row);
	assert_non_null(st);
	assert_int_equal(nrs_streams_insert(&f->t, st), 0);
	if (ino)
		*ino = a.ino;
	return st;
}

uint64_t bg_write(struct bgfake *f, struct nrs_stream *st, uint32_t len,
		  char fill)
{
	static const char zero[NRS_WALREC_ALIGN];
	char *payload = malloc(len ? len : 1);
	unsigned char hdr[4096];
	struct nrs_walrec r = {
		.kind = NRS_WALREC_DATA, .stream_id = st->id, .len = len,
		.n_appends = 1, .lsn = f->next_lsn++,
	};
	struct iovec iov[3];
	struct nrs_wal_pos pos, end;
	struct nrs_index_ent e;
	ssize_t hl;
	size_t pad, total;

	assert_non_null(payload);
	memset(payload, fill, len);
	pthread_mutex_lock(&st->lock);
	r.base = st->head;
	r.epoch = st->epoch;
	r.prev_lsn = st->last_lsn;
	pthread_mutex_unlock(&st->lock);
	iov[0] = (struct iovec){ payload, len };
	hl = nrs_walrec_encode_hdr(&r, iov, 1, hdr, sizeof(hdr));
	assert_true(hl > 0);
	total = nrs_walrec_total_len(len);
	pad = total - (size_t)hl - len;
	iov[0] = (struct iovec){ hdr, (size_t)hl };
	iov[1] = (struct iovec){ payload, len };
	iov[2] = (struct iovec){ (void *)zero, pad };
	assert_int_equal(nrs_wal_write(f->wal, iov, pad ? 3 : 2, &pos), 0);
	end = (struct nrs_wal_pos){ pos.seg, pos.off + total };
	assert_int_equal(nrs_wal_sync(f->wal, end), 0);
	free(payload);

	e = (struct nrs_index_ent){ .start = r.base, .end = r.base + len,
				    .kind = NRS_TARGET_WAL, .seg = pos.seg,
				    .off = pos.off };
	pthread_mutex_lock(&st->lock);
	assert_int_equal(nrs_index_append(&st->index, &e), 0);
	st->wal_bytes += total;
	if (!st->unmat_since_ns)
		st->unmat_since_ns = (int64_t)nrs_now_mono_ns();
	pthread_mutex_unlock(&st->lock);
	bg_head(f, st, r.base + len, r.lsn);
	return pos.seg;
}

void bg_head(struct bgfake *f, struct nrs_stream *st, uint64_t head,
	     uint64_t last_lsn)
{
	struct nrs_head_update u;

	pthread_mutex_lock(&st->lock);
	u = (struct nrs_head_update){
		.id = st->id, .old_version = st->version, .head = head,
		.version = st->version + 1, .epoch = st->epoch,
		.last_lsn = last_lsn ? last_lsn : st->last_lsn + 1,
		.mtime_ns = nrs_now_real_ns(),
	};
	pthread_mutex_unlock(&st->lock);
	assert_int_equal(nrs_meta_publish(f->meta, &u, 1, true), 0);
	pthread_mutex_lock(&st->lock);
	st->head = st->ord_head = st->read_limit = head;
	st->version = st->ord_version = u.version;
	st->last_lsn = st->ord_lsn = u.last_lsn;
	st->mtime_ns = u.mtime_ns;
	pthread_mutex_unlock(&st->lock);
}

unsigned int bg_count(pthread_mutex_t *mu, const unsigned int *c)
{
	unsigned int n;

	pthread_mutex_lock(mu);
	n = *c;
	pthread_mutex_unlock(mu);
	return n;
}

bool bg_wait(bool (*cond)(void *ctx), void *ctx)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };

	for (int i = 0; i < 4000; i++) {
		if (cond(ctx))
			return true;
		nanosleep(&ts, NULL);
	}
	return cond(ctx);
}

size_t bg_rows(struct bgfake *f, uint64_t id, int state)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;

	assert_int_equal(nrs_meta_obj_rows(f->meta, id, state, &v, &n), 0);
	free(v);
	return n;
}

bool bg_row(struct bgfake *f, uint64_t gen, struct nrs_obj_row *o)
{
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	bool found = false;

	assert_int_equal(nrs_meta_obj_rows(f->meta, 0, 0, &v, &n), 0);
	for (size_t i = 0; i < n; i++) {
		if (v[i].gen == gen) {
			*o = v[i];
			found = true;
		}
	}
	free(v);
	return found;
}

void bg_key(const struct nrs_obj_row *o, char key[NRS_OBJKEY_MAX])
{
	struct nrs_objhdr h = { .stream_id = o->stream_id, .start = o->start,
				.end = o->end, .gen = o->gen };

	(void)nrs_objfmt_key(key, &h);	/* also from the uploader: no cmocka */
}

bool bg_has(struct bgfake *f, const char *key, uint64_t *len)
{
	struct nrs_obj_meta m = { 0 };

	if (nrs_obj_head(f->store.real, key, &m) != 0)
		return false;
	if (len)
		*len = m.length;
	return true;
}

static unsigned int count_key(struct bgstore *b, char (*keys)[NRS_OBJKEY_MAX],
			      const unsigned int *n, const char *key)
{
	unsigned int c = 0;

	pthread_mutex_lock(&b->mu);
	for (unsigned int i = 0; i < *n; i++)
		c += strcmp(keys[i], key) == 0;
	pthread_mutex_unlock(&b->mu);
	return c;
}

unsigned int bg_puts_of(struct bgfake *f, const char *key)
{
	return count_key(&f->store, f->store.keys, &f->store.nkeys, key);
}

unsigned int bg_dels_of(struct bgfake *f, const char *key)
{
	return count_key(&f->store, f->store.dels_done, &f->store.ndels, key);
}

uint64_t bg_object(struct bgfake *f, uint64_t id, uint64_t start,
		   uint64_t end, int64_t ctime_ns)
{
	static const unsigned char sha[NRS_SHA256_LEN];
	uint64_t len = nrs_objfmt_hdr_len(end - start) + (end - start);
	struct nrs_obj_row o = { .stream_id = id, .start = start, .end = end,
				 .length = len, .ctime_ns = ctime_ns };
	char key[NRS_OBJKEY_MAX];
	void *buf = calloc(1, len);

	assert_non_null(buf);
	assert_int_equal(nrs_meta_obj_prepare(f->meta, &o), 0);
	bg_key(&o, key);
	assert_int_equal(nrs_obj_put(f->store.real, key, buf, len, NULL, sha),
			 0);
	free(buf);
	assert_int_equal(nrs_meta_obj_publish(f->meta, o.gen, sha), 0);
	return o.gen;
}
