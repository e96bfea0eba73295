/*
 * grow.h - room in a growing array: *arr (elements of size sz, *cap
 * allocated) is reallocated, doubling from 64 elements, until it holds at
 * least want.  Returns 0 or -ENOMEM (then *arr and *cap are unchanged),
 * also when the doubling or the byte count would overflow (a count from
 * the disk must never wrap into a small allocation or an endless loop).
 */
#ifndef NRS_GROW_H
#define NRS_GROW_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline int nrs_grow(void **arr, size_t *cap, size_t want, size_t sz)
{
	size_t n = *cap ? *cap : 64;
	void *p;

	if (want <= *cap)
		return 0;
	while (n < want) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	if (sz && n > SIZE_MAX / sz)
		return -ENOMEM;
	p = realloc(*arr, n * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

#endif
