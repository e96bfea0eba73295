/*
 * grow.h - room in a growing array, the one way every growable array in
 * nereusfs (and its tools and test helpers) is grown.
 *
 * *arr holds elements of size sz, *cap of them allocated.  nrs_grow_max
 * reallocates it, doubling from 64 elements, until it holds at least
 * want, never more than max elements:
 *
 *  GR1 A want above max is refused with -E2BIG, whatever memory there
 *      is: a count that came from the disk, the bucket or a user cannot
 *      grow an array without bound.  The doubling stops at max (the last
 *      step is clamped to it).
 *  GR2 The doubling and the byte count never wrap: a count that would
 *      overflow size_t is -ENOMEM, never a small allocation or an
 *      endless loop.
 *
 * On any error *arr and *cap are unchanged (the caller still owns and
 * frees *arr).  nrs_grow is nrs_grow_max with no cap but GR2's, for
 * arrays whose count the program itself makes (one per request, per
 * record written); a count read from outside goes through nrs_grow_max.
 */
#ifndef NRS_GROW_H
#define NRS_GROW_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline int nrs_grow_max(void **arr, size_t *cap, size_t want,
			       size_t sz, size_t max)
{
	size_t n = *cap ? *cap : 64;
	void *p;

	if (want <= *cap)
		return 0;
	if (want > max)
		return -E2BIG;			/* GR1 */
	while (n < want) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;		/* GR2 */
		n *= 2;
	}
	if (n > max)
		n = max;			/* GR1: want <= max */
	if (sz && n > SIZE_MAX / sz)
		return -ENOMEM;			/* GR2 */
	p = realloc(*arr, n * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

static inline int nrs_grow(void **arr, size_t *cap, size_t want, size_t sz)
{
	return nrs_grow_max(arr, cap, want, sz, SIZE_MAX);
}

#endif
