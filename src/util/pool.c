/*
 * pool.c - the bounded free list of pool.h (PO1, PO2 there).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "util/pool.h"

void nrs_pool_init(struct nrs_pool *p, size_t size, size_t max)
{
	pthread_mutex_init(&p->lock, NULL);
	p->free = NULL;
	p->n = 0;
	p->size = size < sizeof(void *) ? sizeof(void *) : size;
	p->max = max;
}

void nrs_pool_destroy(struct nrs_pool *p)
{
	void *b = p->free, *next;

	for (; b; b = next) {
		memcpy(&next, b, sizeof(next));
		free(b);
	}
	p->free = NULL;
	p->n = 0;
	pthread_mutex_destroy(&p->lock);
}

void *nrs_pool_get(struct nrs_pool *p)
{
	void *b;

	pthread_mutex_lock(&p->lock);
	b = p->free;
	if (b) {
		memcpy(&p->free, b, sizeof(p->free));
		p->n--;
	}
	pthread_mutex_unlock(&p->lock);
	return b ? b : malloc(p->size);
}

void nrs_pool_put(struct nrs_pool *p, void *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->n < p->max) {		/* PO1 */
		memcpy(b, &p->free, sizeof(p->free));
		p->free = b;
		p->n++;
		b = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	free(b);
}
