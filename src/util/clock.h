/*
 * clock.h - the two clocks: monotonic time for ages, timeouts and
 * latencies (never stepped), wall time for what is stored or shown
 * (mtime, retention, the GC grace of an object generation).
 */
#ifndef NRS_CLOCK_H
#define NRS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic clock in nanoseconds. */
static inline uint64_t nrs_now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wall clock in nanoseconds since the epoch. */
static inline int64_t nrs_now_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
