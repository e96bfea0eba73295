/*
 * pool.h - a bounded free list of blocks of one size, for buffers that
 * one thread takes and another gives back, many times a second: the
 * requests of small appends (core_append.c), taken by the FUSE thread that
 * received the write and given back by the pipeline's publisher after the
 * reply.  malloc serves such a block (over 1 KiB: past glibc's per-thread
 * cache) from the taking thread's arena, under that arena's lock, and the
 * free from the other thread takes the same lock again; here both are a
 * push or a pop under one short lock.
 *
 *   PO1 At most max blocks are kept: nrs_pool_put frees the rest, so the
 *       list never holds more than max * size bytes after a burst.
 *   PO2 A block comes back to the pool it came from (its size): the caller
 *       tells pooled blocks from others.  A block is uninitialized when
 *       handed out, like malloc's.
 */
#ifndef NRS_POOL_H
#define NRS_POOL_H

#include <pthread.h>
#include <stddef.h>

struct nrs_pool {
	pthread_mutex_t lock;
	void *free;		/* protected by lock: a stack linked through
				 * each block's first word */
	size_t n;		/* protected by lock: blocks on the stack */
	size_t size, max;	/* set at init */
};

/* size: bytes of a block (at least a pointer's); max: blocks kept (PO1). */
void nrs_pool_init(struct nrs_pool *p, size_t size, size_t max);
/* Frees every block kept; none may be out any more. */
void nrs_pool_destroy(struct nrs_pool *p);
/* A block of p->size bytes, the caller's until nrs_pool_put; NULL if
 * memory is short. */
void *nrs_pool_get(struct nrs_pool *p);
/* Give b (from nrs_pool_get of p; NULL is a no-op) back, or free it
 * (PO1). */
void nrs_pool_put(struct nrs_pool *p, void *b);

#endif
