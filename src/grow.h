/*
 * grow.h - room in a growing array: *arr (elements of size sz, *cap
 * allocated) is reallocated, doubling from 64 elements, until it holds at
 * least want.  Returns 0 or -ENOMEM (then *arr and *cap are unchanged).
 */
#ifndef NRS_GROW_H
#define NRS_GROW_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

static inline int nrs_grow(void **arr, size_t *cap, size_t want, size_t sz)
{
	size_t n = *cap ? *cap : 64;
	void *p;

	if (want <= *cap)
		return 0;
	while (n < want)
		n *= 2;
	p = realloc(*arr, n * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

#endif
