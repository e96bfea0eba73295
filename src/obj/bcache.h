/*
 * bcache.h - verified reads of segment objects (objfmt.h) through a block
 * cache of two tiers, memory and an optional local directory, with
 * prefetches for sequential readers.  How it works and what it promises
 * are at the top of bcache.c.
 */
#ifndef NRS_BCACHE_H
#define NRS_BCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"

struct nrs_bcache;

struct nrs_bcache_opts {
	uint64_t mem_bytes;	/* memory tier budget; 0: 128 MiB */
	const char *disk_dir;	/* optional disk tier (created), NULL: none */
	uint64_t disk_bytes;	/* disk tier budget; 0 with a dir: 1 GiB */
	uint32_t readahead;	/* bytes fetched per GET at most; 0: 16 MiB
				 * (sequential reads ramp up to it from
				 * 1 MiB, their prefetches to less if
				 * mem_bytes / 6 is less: bcache.c BA1) */
};

struct nrs_bcache_stats {
	uint64_t hits, misses;		/* block lookups in memory */
	uint64_t disk_hits;		/* misses of memory served by disk */
	uint64_t get_requests, get_bytes;	/* headers' GETs included */
	uint64_t mem_bytes, disk_bytes;	/* held now */
	uint64_t bad_blocks;		/* verification failures seen: a
					 * block, header or table from the
					 * store, or a block from disk */
};

/*
 * A cache reading through store, which it borrows: store must outlive it.
 * o NULL: every default.  readahead is rounded down to a multiple of
 * NRS_OBJ_BLOCK (at least one block, at most 64 MiB).  With disk_dir, the
 * directory is created if missing (its parent must exist), locked against a
 * second cache (-EBUSY), and blocks an earlier run left there are reused,
 * each verified again before use (bcache_disk.c says how).  The caller frees
 * *out with nrs_bcache_close().
 */
int nrs_bcache_open(const struct nrs_bcache_opts *o, struct nrs_objstore *store,
		    struct nrs_bcache **out);
/* Close of NULL is a no-op.  No read may be in flight; prefetches still
 * running are waited for (a GET in flight ends within the store's
 * timeout), queued ones dropped.  The disk tier's files stay for the next
 * open. */
void nrs_bcache_close(struct nrs_bcache *c);
/*
 * Copy logical bytes [off, off + len) of the object h (which must lie within
 * [h->start, h->end)) into dst.  Every block is verified against the
 * object's CRC table before it is cached or copied, and the object's header
 * must name exactly h (stream, range, gen).  Returns 0, -EBADMSG (checksum
 * or header mismatch: logged with key, stream and offset, never cached),
 * -EPROTO (the object is a newer format version: logged), -ENOENT (object
 * missing), -EINVAL (h or the range is impossible), -ENOMEM, or a store
 * error.  dst is written only where the bytes verified; on an error its
 * contents are unspecified.  Thread safe; a block that readers miss while
 * another reader fetches it is waited for, not fetched again.
 */
int nrs_bcache_read(struct nrs_bcache *c, const struct nrs_objhdr *h,
		    uint64_t off, size_t len, void *dst);
/*
 * A hint: the n objects at next hold, in order, the bytes of h's stream
 * that follow h's (each next[i] starts at or before where the one before
 * it ends, and ends after), so that a sequential reader's prefetches run on
 * from h into them (bcache_prefetch.c).  Worth giving when a read ends
 * within NRS_BCACHE_FOLLOW bytes of h->end, naming up to
 * NRS_BCACHE_FOLLOW_MAX objects within NRS_BCACHE_FOLLOW bytes past it;
 * nothing is fetched for it unless a sequential read gets that near.  The
 * hint is cut at the first object that does not follow; the cache copies
 * what it keeps.
 */
#define NRS_BCACHE_FOLLOW	(64u << 20)
#define NRS_BCACHE_FOLLOW_MAX	8
void nrs_bcache_follow(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       const struct nrs_objhdr *next, size_t n);
/* Forget every cached block of the object, in memory and on disk (before
 * it is deleted).  A read running at the same time may cache a block again;
 * that is harmless, keys are never reused for other bytes. */
void nrs_bcache_forget(struct nrs_bcache *c, const struct nrs_objhdr *h);
void nrs_bcache_stats(struct nrs_bcache *c, struct nrs_bcache_stats *out);
/* Audit (tests): each tier's hash table, LRU list and byte count agree,
 * each tier is within its budget, and the bytes read ahead add up.  Takes
 * the cache's lock. */
bool nrs_bcache_check(struct nrs_bcache *c);
/* Wait until no prefetch is queued or running (tests: what a read set off
 * has landed or failed, and its blocks are on the disk tier). */
void nrs_bcache_drain(struct nrs_bcache *c);

#endif
