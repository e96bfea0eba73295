/*
 * materializer.h - background threads that move committed bytes from the
 * WAL into segment objects, publish them as new generations, and reclaim
 * WAL segments nothing needs any more (DESIGN.md section 1 events 4 and 5,
 * section 6).  The rules are at the top of materializer.c, mat_plan.c,
 * mat_worker.c, mat_object.c and compaction.c, and of walgc.c for the
 * reclaim (its API in walgc.h).
 */
#ifndef NRS_MATERIALIZER_H
#define NRS_MATERIALIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "bg/walgc.h"
#include "obj/objstore.h"

struct nrs_mat;
struct nrs_services;

#define NRS_COMPACT_OFF	UINT64_MAX

struct nrs_mat_opts {
	uint64_t min_bytes;	/* materialize once this many bytes wait;
				 * 0: 4 MiB */
	uint64_t max_age_ms;	/* ... or once the oldest waited this long;
				 * 0: 5000 */
	uint64_t object_size;	/* most payload bytes per object; 0: 16 MiB */
	unsigned int threads;	/* 0: 2 */
	uint64_t retry_max_ms;	/* backoff cap for store errors; 0: 10000 */
	uint64_t compact_size;	/* merge objects below a quarter of it into
				 * objects of at most it; 0: 64 MiB,
				 * NRS_COMPACT_OFF: never */
};

/* Starts the threads (after recovery, with the pipeline running).  svc
 * (services.h) stays alive and unchanged until nrs_mat_stop(). */
int nrs_mat_start(const struct nrs_services *svc,
		  const struct nrs_mat_opts *o, struct nrs_mat **out);
/* Stops at a safe point: an upload in flight is abandoned (its intent is
 * cleaned up at the next start), nothing half published. NULL ok. */
void nrs_mat_stop(struct nrs_mat *m);

#endif
