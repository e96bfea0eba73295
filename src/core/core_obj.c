/*
 * core_obj.c - the stream core's object side: which object store it uses
 * (DESIGN.md section 7), the block cache reads go through, the
 * materializer threads and the lifecycle (retention, GC) thread.
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
 * The bucket's owner record is claimed as soon as the store is open
 * (core_owner.c); the services get the store that stops writing once the
 * mount is fenced.
 *
 * The services get c->svc (bg/services.h), never the core itself: its
 * upcalls are here, and the one "drain the readers" barrier (svc_drain)
 * is the only place outside reader.c that takes the read gate.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "bg/lifecycle.h"
#include "bg/materializer.h"
#include "bg/services.h"
#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "obj/bcache.h"
#include "obj/objstore.h"
#include "util/log.h"

int nrs_core_obj_open(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_bcache_opts bo = {
		.mem_bytes = o->cache_size,
		.disk_dir = o->disk_cache,
		.disk_bytes = o->disk_cache_size,
	};
	int err;

	if (o->s3_url) {
		struct nrs_s3_opts so = o->s3;

		so.url = o->s3_url;
		so.ca_file = o->s3_ca_file;
		err = nrs_objstore_s3_open_url(&so, o->s3_credentials,
					       &c->store);
	} else {
		char path[4096];

		snprintf(path, sizeof(path), "%s/objects", c->data_dir);
		err = nrs_objstore_dir_open(path, &c->store);
		if (err)
			nrs_err("cannot open object directory %s: %s", path,
				strerror(-err));
	}
	if (err)
		return err;
	err = nrs_core_owner_open(c, o);	/* core_owner.c CW1 */
	if (err)
		return err;
	err = nrs_bcache_open(&bo, c->store, &c->bcache);
	if (err) {
		nrs_err("cannot set up the block cache: %s", strerror(-err));
		return err;
	}
	c->reader.wal = c->wal;
	c->reader.bcache = c->bcache;
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

static uint64_t svc_wal_floor(void *ctx)
{
	struct nrs_core *c = ctx;

	return nrs_pipeline_wal_floor(c->pipe);
}

static int svc_wal_seal(void *ctx, uint64_t seg, uint64_t idle_ns)
{
	struct nrs_core *c = ctx;

	return nrs_pipeline_wal_seal(c->pipe, seg, idle_ns);
}

int nrs_core_obj_start(struct nrs_core *c, const struct nrs_core_opts *o)
{
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
		.reader = &c->reader,
		.streams = &c->streams,
		.metrics = &c->metrics,
		.ctx = c,
		.trim = svc_trim,
		.poke = svc_poke,
		.drain = svc_drain,
		.wal_floor = svc_wal_floor,
		.wal_seal = svc_wal_seal,
	};
	return nrs_mat_start(&c->svc, &mo, &c->mat) ?:
	       nrs_lc_start(&c->svc, o->gc_grace_ms, &c->lc);
}

void nrs_core_obj_close(struct nrs_core *c)
{
	nrs_lc_stop(c->lc);
	c->lc = NULL;
	nrs_mat_stop(c->mat);
	c->mat = NULL;
	nrs_core_owner_close(c);
}
