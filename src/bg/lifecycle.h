/*
 * lifecycle.h - the retention and GC thread (rules at the top of
 * lifecycle.c).
 */
#ifndef NRS_LIFECYCLE_H
#define NRS_LIFECYCLE_H

#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"

/* G2's grace period unless -o gc_grace_ms says otherwise; nereusfs-fsck
 * judges with the same default. */
#define NRS_GC_GRACE_MS_DEFAULT	60000

struct nrs_lc;
struct nrs_services;

/* Starts the thread; grace_ms 0: NRS_GC_GRACE_MS_DEFAULT.  svc
 * (services.h) stays alive and unchanged until nrs_lc_stop(). */
int nrs_lc_start(const struct nrs_services *svc, uint64_t grace_ms,
		 struct nrs_lc **out);
/* A trim or a forget may have left objects of stream_id unneeded: check
 * them at the next pass (G1).  NULL ok. */
void nrs_lc_poke(struct nrs_lc *l, uint64_t stream_id);
/* Stops it between two steps (NULL ok). */
void nrs_lc_stop(struct nrs_lc *l);

/*
 * Retention L2 over one stream's object rows: the new start (an object's
 * end), or 0 if nothing is to go.  ret_bytes, ret_ms: 0 = no limit.
 */
uint64_t nrs_retention_cut(const struct nrs_obj_row *v, size_t n, uint64_t head,
			   uint64_t ret_bytes, uint64_t ret_ms, int64_t now_ns);

#endif
