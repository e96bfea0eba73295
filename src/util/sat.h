/*
 * sat.h - saturating arithmetic for the times and sizes computed from a
 * user value (an xattr), an option or a timestamp read back from disk.
 *
 *  SAT1 A result too large to represent is the largest value: a duration
 *     that long means "forever", never a wrapped small one that means
 *     "now" (issue 12: retention.ms = 2^63 - 1 trimmed a stream to its
 *     last object, ret_ms * 1000000 having wrapped).  Every such
 *     computation goes through these helpers, not through a bare * or +.
 *
 * Times are nanoseconds in int64_t (the clocks' range, good to 2262);
 * durations as the user gives them, unsigned milliseconds.
 */
#ifndef NRS_SAT_H
#define NRS_SAT_H

#include <stdbool.h>
#include <stdint.h>

#define NRS_NS_PER_MS	1000000u

/* a + b, or UINT64_MAX. */
static inline uint64_t nrs_sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* a * b, or UINT64_MAX. */
static inline uint64_t nrs_sat_mul(uint64_t a, uint64_t b)
{
	return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Has at least ms milliseconds passed from then to now?  A then in the
 * future (a clock step, a damaged timestamp) has not aged at all; a
 * duration too long to count in nanoseconds never passes (SAT1). */
static inline bool nrs_elapsed_ms(int64_t now_ns, int64_t then_ns, uint64_t ms)
{
	uint64_t d = nrs_sat_mul(ms, NRS_NS_PER_MS);

	if (then_ns > now_ns || d == UINT64_MAX)
		return false;
	return (uint64_t)now_ns - (uint64_t)then_ns >= d;
}

#endif
