/*
 * core_obj.c - the stream core's object side: which object store it uses
 * (DESIGN.md section 7), the block cache reads go through, the
 * materializer threads, the lifecycle (retention, GC) thread and the
 * checkpoint thread (bg/ckpt_service.c), with either store.
 *
 * With no s3 option the store is the embedded directory DATA/objects, so
 * the whole pipeline (materialize, read from objects, reclaim the WAL) runs
 * with no server.  With -o s3=URL the same objects go to that bucket;
 * credentials come from the s3_credentials file or the environment, never
 * from the command line.  Opening probes the bucket once
 * (objstore_s3_open.c PROBE): credentials, a region or a bucket the store refuses fail the
 * mount; a store that is down at mount only delays materialization
 * (appends go on from the WAL, up to its budget).
 *
 * The object WAL (wal/wal_object.c) of object-wal streams keeps its
 * objects in the same store, bucket or directory, under owal/; -o
 * objects=DIR puts the embedded store on another disk or a shared mount.
 *
 * A namespace or xattr change under an object-wal directory reaches the
 * bucket as a META record of the object WAL (core_metalog.c NS1-NS3).
 *
 *  CO1 Same disk.  The embedded store on the WAL's file system (the
 *      default DATA/objects, or -o objects=DIR with the same st_dev) writes
 *      every materialized byte a second time to the disk that holds it in
 *      the WAL: the mount logs so once, and /.nereus/status says it
 *      ("objects": "same_fs_as_wal").  S3, and a directory on another file
 *      system, are a copy somewhere else, the point of materializing.  An
 *      error of the probe counts as another file system (nothing is
 *      claimed that was not seen).
 *  CO2 Write once (-o write_once=auto; README, "Write once on the embedded
 *      store").  Only with the embedded store on the WAL's file system
 *      (CO1) do the services get the adopt upcall (services.h), so the
 *      materializer adopts large records in place (mat_adopt.c MZ10):
 *      S3, a directory on another file system, and write_once=off copy
 *      every record as before.  The upcall links a local WAL segment into
 *      the embedded store itself, not through the fencing store, so it
 *      refuses (-ESTALE) once the mount is fenced (core_owner.c CW2), as
 *      that store refuses writes.
 *
 *  CO4 Write once for object-wal streams (mat_adopt.c MZ13) is on with
 *      the embedded store wherever its directory is (-o objects=DIR on
 *      another file system too): their WAL objects already are objects of
 *      that store, so adopting a slice of one writes nothing and links
 *      nothing; copying it would write every byte a second time, on the
 *      store's disk.  S3 and write_once=off copy as before.
 *
 *  CO3 With write once on the embedded store, the local WAL numbers new
 *      segments above the highest one the store adopted (OD8, wal.h
 *      first_seg): once the WAL reclaimed all of its segments, its numbers
 *      would otherwise start at 1 again, and every link of a new segment
 *      1, 2, ... would meet the name of an old adopted one (-EEXIST: the
 *      records copied after all, write once lost until the numbers pass).
 *      A store directory that cannot be read fails the mount.
 *
 * The bucket's owner record is claimed as soon as the store is open
 * (core_owner.c), before a recovery reads the bucket; the services and the
 * object WAL get the store that stops writing once the mount is fenced.
 *
 * The services get c->svc (bg/services.h), never the core itself: its
 * upcalls are here, and the one "drain the readers" barrier (svc_drain)
 * is the only place outside reader.c that takes the read gate.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bg/checkpoint.h"
#include "bg/lifecycle.h"
#include "bg/materializer.h"
#include "bg/services.h"
#include "bg/walgc.h"
#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "meta/meta.h"
#include "obj/bcache.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "owner/owner.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/log.h"
#include "wal/wal.h"

/* The object WAL wrote bytes: the checkpoints' bytes trigger. */
static void owal_stored(void *ctx, uint64_t bytes)
{
	struct nrs_core *c = ctx;

	nrs_ckpt_wal_bytes(c->ckpt, bytes);
}

/* OW1, I8: the object WAL acknowledges only while this mount owns the
 * bucket (owner.c OR3). */
static bool owal_may_ack(void *ctx)
{
	struct nrs_core *c = ctx;

	return !c->owner || nrs_owner_may_ack(c->owner, nrs_now_mono_ns());
}

/* OW18: does a row that is neither retired nor quarantined name a slice
 * of WAL object seg (mat_adopt.c MZ13)?  1, 0 or -errno. */
static int owal_named(void *ctx, uint64_t seg)
{
	struct nrs_core *c = ctx;
	struct nrs_obj_row *v = NULL;
	size_t n = 0;
	int err = nrs_meta_obj_rows(c->meta, 0, 0, &v, &n), named = 0;

	for (size_t i = 0; !err && i < n && !named; i++)
		named = v[i].seg == (NRS_ADOPT_OWAL | seg) &&
			v[i].state != NRS_OBJ_RETIRED &&
			v[i].state != NRS_OBJ_QUARANTINED;
	free(v);
	return err ? err : named;
}

/* The object WAL of object-wal streams, on the same store (its state in
 * DATA/owal, wal_object_scan.c OW6), through the fencing store. */
static int owal_open(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_wal_object_opts wo = {
		.store = c->owned_store ? c->owned_store : c->store,
		.may_ack = owal_may_ack,
		.may_ack_ctx = c,
		.inflight_max = o->owal_inflight,
		.timeout_ms = o->owal_timeout_ms,
		.flush_bytes = o->owal_bytes,
		.linger_ms = o->owal_linger_set ? o->owal_linger_ms :
			     NRS_WAL_OBJECT_LINGER_MS,
		.grace_ms = o->gc_grace_ms ? o->gc_grace_ms :	/* OWG1 */
			    NRS_GC_GRACE_MS_DEFAULT,
		.metrics = &c->metrics,
		.stored = owal_stored,
		.stored_ctx = c,
		.progress = &c->progress,		/* RP1 */
		.named = owal_named,			/* OW18 */
		.named_ctx = c,
	};
	char path[4096];

	snprintf(path, sizeof(path), "%s/owal", c->data_dir);
	wo.dir = path;
	return nrs_wal_object_open(&wo, &c->owal);
}

/* The embedded store's directory. */
static void embedded_path(const struct nrs_core *c,
			  const struct nrs_core_opts *o, char *path, size_t size)
{
	if (o->objects_dir)
		snprintf(path, size, "%s", o->objects_dir);
	else
		snprintf(path, size, "%s/objects", c->data_dir);
}

/* CO1: is the embedded store on the WAL's file system?  After both are
 * open (a fresh data directory has no wal/ before the WAL's open). */
static void probe_same_fs(struct nrs_core *c, const struct nrs_core_opts *o)
{
	char path[4096], wal[4096];
	int same;

	c->obj_same_fs = false;
	c->write_once = o->write_once;
	if (o->s3_url)
		return;
	embedded_path(c, o, path, sizeof(path));
	snprintf(wal, sizeof(wal), "%s/wal", c->data_dir);
	same = nrs_fs_same(path, wal);
	c->obj_same_fs = same > 0;
	if (c->obj_same_fs && o->write_once)
		nrs_info("objects in %s share the WAL's file system: large"
			 " records are adopted in place (write_once=auto)",
			 path);
	else if (c->obj_same_fs)
		nrs_info("objects in %s share the WAL's file system: each"
			 " materialized byte is written to that disk twice", path);
}

int nrs_core_store_open(struct nrs_core *c, const struct nrs_core_opts *o)
{
	int err;

	if (o->s3_url) {
		struct nrs_s3_opts so = o->s3;

		so.url = o->s3_url;
		so.ca_file = o->s3_ca_file;
		err = nrs_objstore_s3_open_url(&so, o->s3_credentials,
					       &c->store);
	} else {
		char path[4096];

		embedded_path(c, o, path, sizeof(path));
		err = nrs_objstore_dir_open(path, &c->store);
		if (err)
			nrs_err("cannot open object directory %s: %s", path,
				strerror(-err));
	}
	if (err)
		return err;
	return nrs_core_owner_open(c, o);	/* core_owner.c CW1 */
}

int nrs_core_wal_first_seg(struct nrs_core *c, const struct nrs_core_opts *o,
			   uint64_t *first)
{
	uint64_t max = 0;
	int err;

	*first = 0;
	if (!o->write_once || o->s3_url)
		return 0;
	err = nrs_objstore_dir_adopted_max(c->store, &max);	/* CO3 */
	if (err) {
		nrs_err("cannot list the adopted WAL segments of the object"
			" store: %s", strerror(-err));
		return err;
	}
	*first = max < UINT64_MAX ? max + 1 : max;
	return 0;
}

int nrs_core_obj_open(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_bcache_opts bo = {
		.mem_bytes = o->cache_size,
		.disk_dir = o->disk_cache,
		.disk_bytes = o->disk_cache_size,
	};
	int err;

	probe_same_fs(c, o);
	err = nrs_bcache_open(&bo, c->store, &c->bcache);
	if (err) {
		nrs_err("cannot set up the block cache: %s", strerror(-err));
		return err;
	}
	err = owal_open(c, o);
	if (err)
		return err;
	c->reader.wal = c->wal;
	c->reader.owal = c->owal;
	c->reader.bcache = c->bcache;
	c->reader.store = o->s3_url ? NULL : c->store;	/* adopted segments */
	c->reader.metrics = &c->metrics;
	c->reader.gate = &c->gate;
	return 0;
}

static int svc_trim(void *ctx, struct nrs_stream *st, uint64_t v)
{
	return nrs_core_trim(ctx, st, v);
}

static void svc_poke(void *ctx, uint64_t stream_id)
{
	struct nrs_core *c = ctx;

	nrs_lc_poke(c->lc, stream_id);
}

/* reader.h: reads that may hold an older index snapshot finish first */
static void svc_drain(void *ctx)
{
	struct nrs_core *c = ctx;

	pthread_rwlock_wrlock(&c->gate);
	pthread_rwlock_unlock(&c->gate);
}

/* The pipeline that writes to w (core.c: one per WAL). */
static struct nrs_pipeline *pipe_for(struct nrs_core *c, struct nrs_wal *w)
{
	return w == c->owal && c->opipe ? c->opipe : c->pipe;
}

static uint64_t svc_wal_floor(void *ctx, struct nrs_wal *w)
{
	struct nrs_core *c = ctx;

	return nrs_pipeline_wal_floor_of(pipe_for(c, w), w);
}

static int svc_wal_seal(void *ctx, struct nrs_wal *w, uint64_t seg,
			uint64_t idle_ns)
{
	struct nrs_core *c = ctx;

	return nrs_pipeline_wal_seal_of(pipe_for(c, w), w, seg, idle_ns);
}

/*
 * The object-WAL position the metadata covers (checkpoint.h, KC1): MZ5's
 * bound of the object WAL now -- every record below it is materialized,
 * trimmed or unlinked, and the generations that replaced them are in
 * c->meta, which the snapshot that follows copies.  A recovery from the
 * checkpoint scans the object WAL from there (walgc.c MZ8).
 */
static uint64_t svc_ckpt_covered(void *ctx)
{
	struct nrs_core *c = ctx;
	struct nrs_wal_stats ws;

	return c->owal ? nrs_walgc_bound(&c->svc, c->owal, true, &ws) : 0;
}

/* MZ8: the object WAL keeps what the last checkpoint does not cover. */
static uint64_t svc_wal_keep(void *ctx, struct nrs_wal *w)
{
	struct nrs_core *c = ctx;

	return w == c->owal ? nrs_ckpt_covered(c->ckpt) : UINT64_MAX;
}

/* CO2: link WAL segment seg into the embedded store in place. */
static int svc_adopt(void *ctx, uint64_t seg)
{
	struct nrs_core *c = ctx;
	char path[4096], key[NRS_OBJKEY_MAX];
	int err;

	if (nrs_core_is_fenced(c))
		return -ESTALE;
	err = nrs_wal_local_seg_path(c->wal, seg, path, sizeof(path));
	if (err)
		return err;
	nrs_objfmt_adopt_key(key, seg);
	return nrs_objstore_dir_adopt(c->store, key, path);
}

/* G6: punch bytes of adopted file seg, through no fencing wrapper (the
 * embedded store's own call) but refused as every write once fenced. */
static int svc_punch(void *ctx, uint64_t seg, uint64_t off, uint64_t len)
{
	struct nrs_core *c = ctx;
	char key[NRS_OBJKEY_MAX];

	if (nrs_core_is_fenced(c))
		return -ESTALE;
	nrs_objfmt_adopt_key(key, seg);
	return nrs_objstore_dir_punch(c->store, key, off, len);
}

/* G8: the holes of adopted file seg durable. */
static int svc_punch_sync(void *ctx, uint64_t seg)
{
	struct nrs_core *c = ctx;
	char key[NRS_OBJKEY_MAX];

	nrs_objfmt_adopt_key(key, seg);
	return nrs_objstore_dir_punch_sync(c->store, key);
}

/* An -o value of checkpoint_*: 0 the default, UINT64_MAX off (0). */
static uint64_t ckpt_opt(uint64_t v, uint64_t dflt)
{
	return v == 0 ? dflt : v == UINT64_MAX ? 0 : v;
}

int nrs_core_obj_start(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_ckpt_opts ko = {
		.interval_ms = ckpt_opt(o->ckpt_ms, NRS_CKPT_MS_DEFAULT),
		.bytes = ckpt_opt(o->ckpt_bytes, NRS_CKPT_BYTES_DEFAULT),
		.grace_ms = o->gc_grace_ms ? o->gc_grace_ms :
			    NRS_GC_GRACE_MS_DEFAULT,
		.covered = svc_ckpt_covered,
		.ctx = c,
	};
	struct nrs_mat_opts mo = {
		.min_bytes = o->mat_min_bytes,
		.max_age_ms = o->mat_max_age_ms,
		.object_size = o->object_size,
		.threads = o->mat_threads,
		.compact_size = o->compact_size,
	};

	c->svc = (struct nrs_services){
		.meta = c->meta,
		.store = c->owned_store,	/* CW2: no writes once fenced */
		.bcache = c->bcache,
		.wal = c->wal,
		.owal = c->owal,
		.reader = &c->reader,
		.streams = &c->streams,
		.metrics = &c->metrics,
		.ctx = c,
		.trim = svc_trim,
		.poke = svc_poke,
		.drain = svc_drain,
		.wal_floor = svc_wal_floor,
		.wal_seal = svc_wal_seal,
		.wal_keep = svc_wal_keep,
		/* CO2 */
		.adopt = o->write_once && c->obj_same_fs && !o->s3_url ?
			 svc_adopt : NULL,
		.owal_adopt = o->write_once && !o->s3_url,	/* CO4 */
		/* G6, G8: rows adopted by an earlier mount too */
		.punch = o->s3_url ? NULL : svc_punch,
		.punch_sync = o->s3_url ? NULL : svc_punch_sync,
	};
	return nrs_mat_start(&c->svc, &mo, &c->mat) ?:
	       nrs_lc_start(&c->svc, o->gc_grace_ms, &c->lc) ?:
	       nrs_ckpt_start(&c->svc, &ko, &c->ckpt);
}

/* The checkpoint service last: the materializer's walgc asks it what the
 * last checkpoint covers (walgc.c MZ8, nrs_ckpt_covered) until it stops. */
void nrs_core_obj_close(struct nrs_core *c)
{
	nrs_lc_stop(c->lc);
	c->lc = NULL;
	nrs_mat_stop(c->mat);
	c->mat = NULL;
	nrs_ckpt_stop(c->ckpt);
	c->ckpt = NULL;
}
