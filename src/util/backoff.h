/*
 * backoff.h - the pause before a retry: exponential, capped, optionally
 * with jitter.  One rule for every retry loop of the daemon (the S3
 * client's requests, s3_curl.c SR2; the object WAL's PUTs, wal_object.c
 * OW2; the materializer's uploads; the checkpoints, ckpt_service.c KC2).
 *
 * The pause of retry k (k = 0 for the first) is base * 2^k, at most cap:
 * the doubling stops at the cap, so no k however large can wrap it.  With
 * jitter, the pause is uniform in [d/2, d] of that, so that threads that
 * failed together do not come back together.
 */
#ifndef NRS_BACKOFF_H
#define NRS_BACKOFF_H

#include <stdint.h>
#include <stdlib.h>

/* base * 2^k, at most cap (0 if either is 0). */
static inline uint64_t nrs_backoff_ms(unsigned int k, uint64_t base,
				      uint64_t cap)
{
	uint64_t d = base;

	if (!base || !cap)
		return 0;
	while (k-- > 0 && d < cap)
		d *= 2;
	return d < cap ? d : cap;
}

/* nrs_backoff_ms with jitter: uniform in [d/2, d], from rand_r(seed). */
static inline uint64_t nrs_backoff_jitter_ms(unsigned int k, uint64_t base,
					     uint64_t cap, unsigned int *seed)
{
	uint64_t d = nrs_backoff_ms(k, base, cap);

	return d / 2 + (uint64_t)rand_r(seed) % (d / 2 + 1);
}

#endif
