/*
 * wal_object_scan.c - the object WAL's state file and its recovery scan
 * (wal_object.c has the object format and OW1-OW5, wal_object_gc.c OW7).
 *
 *  OW6 The state file DIR/state says where the WAL's objects are without
 *      a listing: the floor (every object below it is gone or abandoned)
 *      and the last run that may have written one.  32 bytes:
 *        0  magic "NRSOWST1"   8  u64 floor   16  u64 last run
 *        24 u32 CRC32C of [0, 24)   28 u32 0
 *      It is replaced whole (a temporary file, fsync, rename, fsync of
 *      the directory) before a run's first PUT (OW3) and before a reclaim
 *      deletes anything (OW7); DIR's own name is made durable (its
 *      parent fsynced, nrs_mkdir_durable) at every open that may write:
 *      else a power cut takes DIR away with the state file, and the next
 *      mount scans nothing (t0403).  A state file that fails its checks is
 *      damage: the open fails (-EUCLEAN) rather than start from a guess,
 *      which could reuse a key or miss objects.
 *  OW8 Scan.  For each run from the floor's to the last, keys are probed
 *      by HEAD in seq order (from the floor's seq in its run, else 1) and
 *      the probe of a run ends after inflight_max missing keys in a row
 *      (OW5; in a run not yet sealed, OW14's window).  A found object is read whole and accepted only if its
 *      length and SHA-256 are those of its HEAD, its header verifies and
 *      names its own key, and its length is header + rec_len: else it is
 *      damage, logged, never used or deleted, and its records are not
 *      returned (their ranges read EIO, recovery_index.c RC5b).  The abandoned
 *      ranges of every accepted header are gathered first; then the
 *      records of every accepted object no range names are returned in
 *      log order, each with its chunk CRCs checked (data_ok).  A store
 *      that does not answer fails the scan (the mount): object-wal heads
 *      cannot be known without it.  The seqs the last run may still have
 *      had in flight are recorded abandoned by the next object (OW4).
 *      Runs after the last the state file names are found by their
 *      markers (wal_object.c OW11).  Each run's seal is read before its
 *      objects, and a scan that may write seals every run it probed that
 *      had none before it returns any record (wal_object_seal.c SL1-SL4):
 *      an object that lands in a sealed run later is never returned.  A
 *      WAL that never wrote (no state file) scans nothing and touches no
 *      store.
 *  OW14 The window a run was written with is not known to the scan (a
 *      mount may set object_wal_inflight lower than the one before it,
 *      and a new host knows nothing of the old one's): so a run without
 *      a seal is probed until NRS_WAL_OBJECT_INFLIGHT_MAX (wal.h: the
 *      option's maximum) missing keys in a row, not this mount's own
 *      inflight_max, and the seqs the last run may still have had in
 *      flight are that many too.  A gap of a run written with a window
 *      of 16, objects past it acknowledged (the ones in the gap cut,
 *      OW4, their PUTs never landing), is crossed by a mount with 8.
 *      A sealed run is bounded by its seal (SL3).
 *  OW16 Keys in flight.  The probe of OW8 asks SCAN_PAR (16) keys at
 *      once: each key's HEAD, GET and the SHA-256 of what GET read run
 *      in a thread of its own (every store call is thread safe; S3's
 *      share one curl multi handle).  Their answers are then taken in seq
 *      order exactly as one key at a time would take them: the misses,
 *      holes, seals, checks and damage of OW8 and SL3 are decided there,
 *      under the lock, and the answers for keys past where the probe
 *      ends are dropped (at most SCAN_PAR - 1 keys asked for nothing).
 *      So a scan waits about one round trip per SCAN_PAR objects, not
 *      two per object, and the digests use every core.
 *  RP1 Progress.  A recovery that reads from the store says how far it
 *      got: the objects and bytes read and the streams recovered, in one
 *      line "WHAT: progress: objects read N, bytes B (M MiB), streams S,
 *      T s" once a second at most while it runs, and a last line
 *      "WHAT: progress: done: ..." with the totals.  The lines go to the
 *      log, which before the daemon detaches is its standard error -- the
 *      terminal that started it, or the journal (main.c) -- and, without
 *      -f, syslog as well (log.c LG3).  One line a
 *      second stays within LG2's burst (log.c), so none is summed up; the
 *      done line is another call site and always written.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/clock.h"
#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/grow.h"
#include "util/le.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/parse.h"
#include "wal/wal.h"
#include "wal/wal_object_priv.h"
#include "wal/walrec.h"

#define ST_LEN		32
#define ST_MAGIC	"NRSOWST1"
/* The largest WAL object a scan reads: what a writer may put in one
 * (OW_OBJ_MAX) and its header.  A length from the store above it is
 * damage, never an allocation. */
#define OBJ_MAX		(OW_OBJ_MAX + OW_HDR)
#define SCAN_PAR	16	/* OW16: keys probed at once */

int ow_state_read(const char *path, uint64_t *floor, uint64_t *last_run)
{
	unsigned char b[ST_LEN];
	ssize_t n;
	int fd;

	*floor = 0;
	*last_run = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	n = nrs_pread_full(fd, b, sizeof(b), 0);
	close(fd);
	if (n < 0)
		return (int)n;
	if (n != ST_LEN || memcmp(b, ST_MAGIC, 8) != 0 ||
	    nrs_le32_get(b + 24) != nrs_crc32c(0, b, 24) ||
	    nrs_le32_get(b + 28) != 0 ||
	    nrs_le64_get(b + 16) > OW_RUN_MAX ||
	    ow_run_of(nrs_le64_get(b + 8)) > nrs_le64_get(b + 16)) {
		nrs_err("object WAL: state file %s is damaged (OW6); the mount"
			" stops rather than guess where the objects are", path);
		return -EUCLEAN;
	}
	*floor = nrs_le64_get(b + 8);
	*last_run = nrs_le64_get(b + 16);
	return 0;
}

int ow_state_write(const char *path, const char *dir, uint64_t floor,
		   uint64_t last_run)
{
	unsigned char b[ST_LEN] = { 0 };
	char tmp[4096];

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(b, ST_MAGIC, 8);
	nrs_le64_put(b + 8, floor);
	nrs_le64_put(b + 16, last_run);
	nrs_le32_put(b + 24, nrs_crc32c(0, b, 24));
	return nrs_file_replace(path, tmp, dir, b, sizeof(b));
}

void nrs_wal_progress_tick(struct nrs_wal_progress *p, bool final)
{
	uint64_t now = nrs_now_mono_ns();
	double mib, secs;

	if (!p)
		return;
	if (!p->start_ns)
		p->start_ns = p->last_ns = now;
	if (!final && now - p->last_ns < 1000000000)
		return;					/* RP1 */
	p->last_ns = now;
	p->lines++;
	mib = (double)p->bytes / (1 << 20);
	secs = (double)(now - p->start_ns) / 1e9;
	if (final)
		nrs_info("%s: progress: done: objects read %" PRIu64 ", bytes %"
			 PRIu64 " (%.1f MiB), streams %" PRIu64 ", %.1f s",
			 p->what, p->objects, p->bytes, mib, p->streams, secs);
	else
		nrs_info("%s: progress: objects read %" PRIu64 ", bytes %"
			 PRIu64 " (%.1f MiB), streams %" PRIu64 ", %.1f s",
			 p->what, p->objects, p->bytes, mib, p->streams, secs);
}

/*
 * OW16: one key's probe, run by a thread of its own: HEAD, then GET of
 * the whole object when its HEAD is possible and a sealed run's view does
 * not exclude it.  Nothing else is touched; the checks and everything
 * they decide are fetch()'s, in seq order.
 */
struct probe {
	struct nrs_objstore *store;
	const struct ow_view *v;	/* read only while sealed */
	uint64_t seq, seg;
	int head_err;
	struct nrs_obj_meta m;
	unsigned char *buf;		/* m.length bytes; NULL: not read */
	ssize_t got;			/* GET's answer */
	unsigned char sha[NRS_SHA256_LEN];	/* of buf, once all read */
	int sha_err;
	pthread_t thread;
	bool started;
};

static void *probe_one(void *arg)
{
	struct probe *p = arg;
	char key[NRS_OBJKEY_MAX];

	ow_key(key, p->seg);
	p->head_err = nrs_obj_head(p->store, key, &p->m);
	if (p->head_err || p->m.length < OW_HDR || p->m.length > OBJ_MAX ||
	    !p->m.has_sha256 || ow_view_excludes(p->v, p->seq))
		return NULL;
	p->buf = malloc(p->m.length);
	p->got = p->buf ? nrs_obj_get(p->store, key, 0, p->buf, p->m.length)
			: -ENOMEM;
	if (p->got == (ssize_t)p->m.length)
		p->sha_err = nrs_objfmt_digest(p->buf, p->m.length, p->sha,
					       NULL);
	return NULL;
}

/* OW16: probe n keys of run from seq on at once; every one is answered
 * when this returns (a thread that cannot start probes inline). */
static void probe_batch(struct wal_object *w, const struct ow_view *v,
			uint64_t seq, struct probe *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].store = w->store;
		p[i].v = v;
		p[i].seq = seq + i;
		p[i].seg = ow_seg(v->run, seq + i);
		p[i].started = n > 1 && pthread_create(&p[i].thread, NULL,
						       probe_one, &p[i]) == 0;
		if (!p[i].started)
			probe_one(&p[i]);
	}
	for (size_t i = 0; i < n; i++)
		if (p[i].started)
			pthread_join(p[i].thread, NULL);
}

/* OW8: check the object p read; it takes p's bytes. */
static int fetch(struct wal_object *w, struct probe *p, struct ow_obj **out)
{
	unsigned char sha[NRS_SHA256_LEN];
	char key[NRS_OBJKEY_MAX];
	const struct nrs_obj_meta *m = &p->m;
	uint64_t seg = p->seg;
	const char *why = NULL;
	struct ow_hdr h;
	struct ow_obj *o;
	ssize_t n = p->got;

	ow_key(key, seg);
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->seg = seg;
	o->state = OW_BAD;
	o->size = m->length;
	if (m->length < OW_HDR || m->length > OBJ_MAX || !m->has_sha256) {
		why = "its length or SHA-256 metadata is impossible";
		goto damaged;
	}
	if (n == -ENOMEM) {
		free(o);
		return -ENOMEM;
	}
	o->buf = p->buf;
	p->buf = NULL;
	if (n < 0 && n != -ENOENT) {
		nrs_err("object WAL scan: GET %s: %s", key, strerror((int)-n));
		free(o->buf);
		free(o);
		return (int)n;
	}
	if (w->progress && n > 0) {				/* RP1 */
		w->progress->objects++;
		w->progress->bytes += (uint64_t)n;
		nrs_wal_progress_tick(w->progress, false);
	}
	if (n != (ssize_t)m->length) {
		why = "it is shorter than its HEAD said";
		goto damaged;
	}
	memcpy(sha, p->sha, sizeof(sha));
	if (p->sha_err != 0 || memcmp(sha, m->sha256, sizeof(sha)) != 0) {
		why = "its bytes fail the SHA-256 stored with it";
		goto damaged;
	}
	if (ow_hdr_decode(o->buf, &h) != 0 || h.seg != seg ||
	    h.rec_len != o->size - OW_HDR) {
		why = "its header fails (magic, CRC, key or length)";
		goto damaged;
	}
	memcpy(o->sha256, sha, sizeof(sha));
	o->state = OW_PROVEN;
	*out = o;
	return 0;
damaged:
	nrs_err("object WAL scan: %s is damaged: %s; kept, never used; the "
		"ranges it held read EIO", key, why);
	if (w->damage) {
		struct nrs_wal_damage d = {
			.kind = NRS_WAL_CORRUPT, .seg = seg, .start = 0,
			.end = m->length, .object = true,
		};

		w->damage(w->damage_ctx, &d);
	}
	free(o->buf);
	o->buf = NULL;
	*out = o;
	return 0;
}

/* SL1, SL3: the view of run, from its seal if it has one (lock held);
 * NULL with *err set on failure. */
static struct ow_view *view_of(struct wal_object *w, uint64_t run,
			       uint64_t from, int *err)
{
	struct ow_view *v;

	*err = nrs_grow((void **)&w->views, &w->cap_views, w->n_views + 1,
			sizeof(*w->views));
	if (*err)
		return NULL;
	v = &w->views[w->n_views];
	memset(v, 0, sizeof(*v));
	v->run = run;
	v->from = from;
	*err = ow_seal_read(w, run, v);
	if (*err)
		return NULL;
	w->n_views++;
	return v;
}

/* OW8: probe run from seq on, OW16's batch at a time; *last: the
 * highest seq found (0: none).  SL3: a sealed run is probed at least to
 * its end, and its late objects are only counted; SL4: an unsealed one's
 * gaps become its holes. */
static int probe_run(struct wal_object *w, uint64_t run, uint64_t seq,
		     uint64_t *last)
{
	unsigned int misses = 0, window;
	uint64_t gap = 0;		/* the first seq of a gap, 0: none */
	struct probe *p;
	struct ow_view *v;
	bool more = true;
	int err;

	*last = 0;
	v = view_of(w, run, seq, &err);
	if (!v)
		return err;
	p = calloc(SCAN_PAR, sizeof(*p));
	if (!p)
		return -ENOMEM;
	/* OW8 in a sealed run (its seal bounds it); OW14 in one not yet */
	window = v->sealed ? w->inflight_max : NRS_WAL_OBJECT_INFLIGHT_MAX;
	while (more && !err && seq <= OW_SEQ_MAX) {
		size_t n = OW_SEQ_MAX - seq + 1 < SCAN_PAR ?
			   (size_t)(OW_SEQ_MAX - seq + 1) : SCAN_PAR;

		probe_batch(w, v, seq, p, n);
		for (size_t i = 0; i < n; i++, seq++) {
			struct ow_obj *o = NULL;

			more = misses < window || (v->sealed && seq <= v->end);
			if (!more || err)
				break;
			if (p[i].head_err == -ENOENT) {
				misses++;
				if (!gap)
					gap = seq;
				continue;
			}
			if (p[i].head_err) {
				char key[NRS_OBJKEY_MAX];

				ow_key(key, p[i].seg);
				nrs_err("object WAL scan: HEAD %s: %s: the "
					"object store must answer for "
					"object-wal streams to be recovered",
					key, strerror(-p[i].head_err));
				err = p[i].head_err;
				break;
			}
			misses = 0;
			if (ow_view_excludes(v, seq)) {
				v->ignored++;		/* SL3: late */
				continue;
			}
			if (gap && !v->sealed) {
				err = ow_view_add_hole(v, gap, seq - 1); /* SL4 */
				if (err)
					break;
			}
			gap = 0;
			*last = seq;
			if (!v->sealed)
				v->end = seq;
			err = fetch(w, &p[i], &o);
			if (err)
				break;
			ow_insert(w, o);
			if (o->buf)
				w->cached_bytes += o->size;
		}
		for (size_t i = 0; i < n; i++)
			free(p[i].buf);		/* those not taken */
	}
	free(p);
	return err;
}

/* OW11: the runs past last_run that left a marker, up to a gap of
 * OW_RUN_PROBE missing ones; last_run moves to the highest found (lock
 * held), *last to its highest seq. */
static int later_runs(struct wal_object *w, uint64_t *last)
{
	unsigned int misses = 0;

	for (uint64_t run = w->last_run + 1;
	     misses < OW_RUN_PROBE && run <= OW_RUN_MAX; run++) {
		struct nrs_obj_meta m = { 0 };
		char key[NRS_OBJKEY_MAX];
		int err;

		ow_key(key, ow_seg(run, 0));
		err = nrs_obj_head(w->store, key, &m);
		if (err == -ENOENT) {
			misses++;
			continue;
		}
		if (err)
			return err;
		misses = 0;
		nrs_info("object WAL scan: run %" PRIu64 " (after the %" PRIu64
			 " the state file names) has a marker: scanning it",
			 run, w->last_run);
		w->last_run = run;
		err = probe_run(w, run, 1, last);
		if (err)
			return err;
	}
	return 0;
}

/*
 * SL1: seal every run probed that has none (unless read-only), then drop
 * the objects a seal -- maybe another scan's, adopted (SL2) -- excludes,
 * and log the late ones once per run (SL3).  Lock held.
 */
static int seal_runs(struct wal_object *w)
{
	struct ow_obj **pp = &w->head;
	int err = 0;

	for (size_t i = 0; !err && !w->read_only && i < w->n_views; i++)
		if (!w->views[i].sealed)
			err = ow_seal_store(w, &w->views[i]);
	if (err)
		return err;
	w->tail = NULL;
	while (*pp) {
		struct ow_obj *o = *pp;
		struct ow_view *v = NULL;

		for (size_t i = 0; i < w->n_views; i++)
			if (w->views[i].run == ow_run_of(o->seg))
				v = &w->views[i];
		if (!v || !ow_view_excludes(v, ow_seq_of(o->seg))) {
			w->tail = o;
			pp = &o->next;
			continue;
		}
		v->ignored++;
		*pp = o->next;
		w->held_bytes -= o->size;
		if (o->buf)
			w->cached_bytes -= o->size;
		free(o->buf);
		free(o);
	}
	for (size_t i = 0; i < w->n_views; i++) {
		const struct ow_view *v = &w->views[i];

		if (!v->ignored)
			continue;
		nrs_warn("object WAL scan: %" PRIu64 " objects of run %" PRIu64
			 " landed after it was sealed at seq %" PRIu64 " (SL3):"
			 " never acknowledged, ignored, left in the store",
			 v->ignored, v->run, v->end);
		if (w->metrics)
			nrs_count(&w->metrics->owal_late, v->ignored);
	}
	return 0;
}

static bool abandoned(const struct ow_range *r, size_t n, uint64_t seg,
		      uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		if (ow_range_has(&r[i], seg, off))
			return true;
	return false;
}

/* OW8: the records of object o that no range of ab names, in order. */
static int walk(const struct ow_obj *o, const struct ow_range *ab, size_t nab,
		nrs_wal_scan_cb cb, void *ctx)
{
	uint64_t len = o->size - OW_HDR, off = 0;
	const unsigned char *p = o->buf + OW_HDR;

	while (off < len) {
		struct nrs_wal_rec_info ri = { 0 };
		uint64_t total;
		int err;

		err = nrs_walrec_decode_hdr(p + off, len - off, &ri.rec);
		total = err ? 0 : nrs_walrec_total_len(ri.rec.len);
		if (err || total > len - off) {
			nrs_err("object WAL scan: object %016" PRIx64 " has no "
				"valid record at offset %" PRIu64 "; the rest "
				"of it is not used", o->seg, off);
			return 0;
		}
		ri.pos.seg = o->seg;
		ri.pos.off = off;
		ri.object = true;
		if (abandoned(ab, nab, o->seg, off)) {
			off += total;
			continue;
		}
		ri.data_ok = nrs_walrec_verify_chunks(p + off, &ri.rec, 0,
			nrs_walrec_nchunks(ri.rec.len),
			p + off + nrs_walrec_hdr_len(ri.rec.len), NULL) == 0;
		err = cb(ctx, &ri);
		if (err)
			return err;
		off += total;
	}
	return 0;
}

int ow_scan(struct nrs_wal *wal, nrs_wal_scan_cb cb, void *ctx)
{
	struct wal_object *w = (struct wal_object *)wal;
	struct ow_range *ab = NULL;
	size_t nab = 0, cap = 0;
	uint64_t run, last = 0;
	int err = 0;

	if (w->last_run == 0)
		return 0;			/* never written */
	pthread_mutex_lock(&w->lock);
	w->n_views = 0;
	run = ow_run_of(w->floor) ? ow_run_of(w->floor) : 1;
	for (; !err && run <= w->last_run; run++)
		err = probe_run(w, run, run == ow_run_of(w->floor) &&
				ow_seq_of(w->floor) ? ow_seq_of(w->floor) : 1,
				&last);
	if (!err)
		err = later_runs(w, &last);
	if (!err)
		err = seal_runs(w);		/* SL1, before any record */
	for (struct ow_obj *o = w->head; !err && o; o = o->next) {
		struct ow_hdr h;

		if (o->state != OW_PROVEN || ow_hdr_decode(o->buf, &h) != 0)
			continue;
		for (uint32_t i = 0; !err && i < h.n_aband; i++) {
			err = nrs_grow((void **)&ab, &cap, nab + 1, sizeof(*ab));
			if (!err)
				ab[nab++] = h.aband[i];
		}
	}
	for (struct ow_obj *o = w->head; !err && o; o = o->next)
		if (o->state == OW_PROVEN)
			err = walk(o, ab, nab, cb, ctx);
	if (!err && !w->read_only) {
		/* OW4: what the last run may have had in flight */
		struct ow_range r = {
			.lo_seg = ow_seg(w->last_run, last + 1),
			.hi_seg = ow_seg(w->last_run,			/* OW14 */
					 last + NRS_WAL_OBJECT_INFLIGHT_MAX),
		};

		err = ow_pend_add(w, &r);
	}
	if (!err)
		ow_evict(w);
	pthread_mutex_unlock(&w->lock);
	free(ab);
	return err;
}

int nrs_wal_object_state_init(const char *dir, uint64_t floor)
{
	char path[4096];
	int err;

	if (snprintf(path, sizeof(path), "%s/state", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	err = nrs_mkdir_durable(dir);			/* OW6 */
	if (err)
		return err;
	if (access(path, F_OK) == 0)
		return -EEXIST;
	/* last run: floor's; run 1 when nothing was covered */
	return ow_state_write(path, dir, floor,
			      ow_run_of(floor) ? ow_run_of(floor) : 1);
}

int nrs_wal_object_floor(const char *dir, uint64_t *floor)
{
	char path[4096];
	uint64_t last_run;

	if (snprintf(path, sizeof(path), "%s/state", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if (access(path, F_OK) < 0)
		return -errno;
	return ow_state_read(path, floor, &last_run);
}

/* The names ow_key and ow_seal_key give (wal_object.c THE KEYS). */
enum nrs_owkey nrs_wal_object_key_kind(const char *key, uint64_t *seg)
{
	uint64_t run, seq;

	/* "owal/" 6 hex "/" then 10 hex or "seal", nothing after */
	if (strncmp(key, "owal/", 5) != 0 || strlen(key) < 16 ||
	    key[11] != '/' || nrs_parse_x64(key + 5, 6, &run) || run == 0)
		return NRS_OWKEY_NONE;
	*seg = ow_seg(run, 0);
	if (strcmp(key + 12, "seal") == 0)
		return NRS_OWKEY_SEAL;
	if (strlen(key + 12) != 10 || nrs_parse_x64(key + 12, 10, &seq))
		return NRS_OWKEY_NONE;
	*seg = ow_seg(run, seq);
	return seq == 0 ? NRS_OWKEY_MARKER : NRS_OWKEY_OBJECT;
}
