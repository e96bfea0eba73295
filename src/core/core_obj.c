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
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "bg/lifecycle.h"
#include "bg/materializer.h"
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

int nrs_core_obj_start(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_mat_opts mo = {
		.min_bytes = o->mat_min_bytes,
		.max_age_ms = o->mat_max_age_ms,
		.object_size = o->object_size,
		.threads = o->mat_threads,
		.compact_size = o->compact_size,
	};

	return nrs_mat_start(c, &mo, &c->mat) ?:
	       nrs_lc_start(c, o->gc_grace_ms, &c->lc);
}

void nrs_core_obj_close(struct nrs_core *c)
{
	nrs_lc_stop(c->lc);
	c->lc = NULL;
	nrs_mat_stop(c->mat);
	c->mat = NULL;
}
