/*
 * bcache_disk.c - the disk tier of the block cache (bcache.c): verified
 * blocks kept as files in a local directory, indexed in memory, checked
 * again whenever they are read (B2).
 *
 * Disk (optional, disk_dir): write-through.  Every block that verified after
 * a GET is also written to disk_dir as one file (the tier is inclusive: it
 * holds what memory holds and more, being larger).  Written when fetched,
 * rather than when evicted from memory, so that the write is done by the
 * thread that did the GET, outside the lock, and the eviction path (under
 * the lock) never does I/O.  A prefetched block is in memory (and may be
 * read from there) before its file is written; nrs_bcache_drain() returns
 * once both are done.  Files are not fsynced: the tier is a cache and
 * a torn file fails its check.  Bounded by disk_bytes (file data counted),
 * LRU.  The header and table are not kept on disk: one small GET refetches
 * them.
 *
 *   disk_dir/.lock       flock()ed while open: one cache per directory
 *   disk_dir/SSSSSSSSSSSSSSSS-AAAAAAAAAAAAAAAA-EEEEEEEEEEEEEEEE-
 *            GGGGGGGGGGGGGGGG-IIIIIIII.blk
 *                        block IIIIIIII of the object (stream, start, end,
 *                        gen), lower-case hex, the block's bytes only
 *   disk_dir/.tmp-PID-N  a block being written; renamed into place
 *
 * Start-up with an existing disk_dir REUSES it: files named as above are
 * indexed (in directory order, as the least recently used) and trusted for
 * nothing but their name: each is verified again when read (B2).  Leftover
 * .tmp- files and our names with an impossible size are removed; any other
 * file is left alone (the directory is the administrator's).
 *
 * A disk file that fails its check, vanished, or cannot be read is dropped
 * from the index (and, if bad, unlinked) and the block is fetched from the
 * store again: the reader sees the store's verified bytes, never the disk's
 * rot and never an error of the disk tier.  Failing disk writes are logged
 * once and otherwise ignored.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/bcache_priv.h"
#include "util/fileio.h"
#include "util/log.h"


static void disk_name(char name[DISK_NAME_MAX], const struct nrs_objhdr *h,
		      uint32_t idx)
{
	snprintf(name, DISK_NAME_MAX,
		 "%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64 "-%016" PRIx64
		 "-%08" PRIx32 BLK_SUFFIX,
		 h->stream_id, h->start, h->end, h->gen, idx);
}

/* The object and block a file name of ours names; false if it is not one
 * (exactly what disk_name() writes, for a possible range). */
static bool disk_parse(const char *name, struct nrs_objhdr *h, uint32_t *idx)
{
	char again[DISK_NAME_MAX];

	if (sscanf(name, "%16" SCNx64 "-%16" SCNx64 "-%16" SCNx64 "-%16" SCNx64
		   "-%8" SCNx32, &h->stream_id, &h->start, &h->end, &h->gen,
		   idx) != 5)
		return false;
	if (!nrs_objfmt_hdr_is_valid(h) ||
	    *idx >= nrs_objfmt_nblocks(h->end - h->start))
		return false;
	disk_name(again, h, *idx);
	return strcmp(again, name) == 0;
}

/* Unlink the files of a victim list built under the lock, and free it.
 * Called without the lock (B4). */
void nrs_bc_disk_reap(struct nrs_bcache *c, struct ent *victims)
{
	char name[DISK_NAME_MAX];

	while (victims) {
		struct ent *next = victims->hnext;

		disk_name(name, &victims->h, victims->idx);
		if (unlinkat(c->dir_fd, name, 0) < 0 && errno != ENOENT)
			nrs_debug("bcache: unlink %s: %s", name,
				  strerror(errno));
		free(victims);
		victims = next;
	}
}

/* Remove d from the disk index onto *victims. */
void nrs_bc_disk_drop(struct nrs_bcache *c, struct ent *d,
		      struct ent **victims)
{
	nrs_bc_tier_del(&c->disk, d);
	d->hnext = *victims;
	*victims = d;
}

/* Evict disk entries until cost more bytes fit (B5); evicted entries go
 * onto *victims for nrs_bc_disk_reap(). */
static bool disk_make_room(struct nrs_bcache *c, uint64_t cost,
			   struct ent **victims)
{
	if (cost > c->disk.budget)
		return false;
	while (c->disk.bytes + cost > c->disk.budget && c->disk.lru)
		nrs_bc_disk_drop(c, c->disk.lru, victims);
	return true;
}

/* Index a file of len bytes for block (h, idx); takes the lock. */
static void disk_index(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint32_t idx, size_t len)
{
	struct ent *d = nrs_bc_ent_new(h, idx, 0), *victims = NULL, *old;
	bool indexed = false;

	pthread_mutex_lock(&c->lock);
	old = nrs_bc_tier_find(&c->disk, h, idx);
	if (old) {
		nrs_bc_tier_touch(&c->disk, old);
		indexed = true;
	} else if (d && disk_make_room(c, len, &victims)) {
		d->len = (uint32_t)len;
		nrs_bc_tier_add(&c->disk, d, len);
		d = NULL;
		indexed = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (!indexed) {
		/* No memory to index it: it must not stay untracked, out of
		 * the budget's reach. */
		char name[DISK_NAME_MAX];

		disk_name(name, h, idx);
		unlinkat(c->dir_fd, name, 0);
	}
	free(d);
	nrs_bc_disk_reap(c, victims);
}

static void disk_warn(struct nrs_bcache *c, const char *what, int err)
{
	bool first;

	pthread_mutex_lock(&c->lock);
	first = !c->disk_warned;
	c->disk_warned = true;
	pthread_mutex_unlock(&c->lock);
	if (first)
		nrs_warn("bcache: disk tier: %s: %s (further failures are "
			 "logged at debug level)", what, strerror(-err));
	else
		nrs_debug("bcache: disk tier: %s: %s", what, strerror(-err));
}

/* Store a verified block in the disk tier (best effort; no lock held). */
void nrs_bc_disk_store(struct nrs_bcache *c, const struct nrs_objhdr *h,
		       uint32_t idx, const unsigned char *data, size_t len)
{
	char tmp[64], name[DISK_NAME_MAX];
	bool have;
	uint64_t seq;
	ssize_t n;
	int fd, err;

	pthread_mutex_lock(&c->lock);
	have = nrs_bc_tier_find(&c->disk, h, idx) != NULL;
	seq = ++c->tmp_seq;
	pthread_mutex_unlock(&c->lock);
	if (have || len > c->disk.budget)
		return;

	snprintf(tmp, sizeof(tmp), TMP_PREFIX "%ld-%" PRIu64, (long)getpid(),
		 seq);
	disk_name(name, h, idx);
	fd = openat(c->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
		    O_NOFOLLOW, 0600);
	if (fd < 0) {
		disk_warn(c, "create", -errno);
		return;
	}
	/* One write: a short one (a full disk) just leaves the block out. */
	n = write(fd, data, len);
	err = n == (ssize_t)len ? 0 : n < 0 ? -errno : -ENOSPC;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && renameat(c->dir_fd, tmp, c->dir_fd, name) < 0)
		err = -errno;
	if (err) {
		unlinkat(c->dir_fd, tmp, 0);
		disk_warn(c, "write", err);
		return;
	}
	disk_index(c, h, idx, len);
}

/*
 * Read block idx of r's object from disk into a new entry, verified (B2).
 * 0 with *out set, or an error after which the block is no longer indexed
 * (a bad file is also unlinked); -ENOMEM is the only error worth more than
 * a fetch from the store.  No lock held.
 */
int nrs_bc_disk_load(struct nrs_bcache *c, const struct req *r, uint32_t idx,
		     struct ent **out)
{
	const struct nrs_objinfo *oi = &r->hdr->info;
	size_t len = nrs_objfmt_block_len(oi, idx), got = 0;
	char name[DISK_NAME_MAX];
	struct ent *e, *d, *victims = NULL;
	struct stat st;
	int fd, err = 0;

	e = nrs_bc_ent_new(r->h, idx, len);
	if (!e)
		return -ENOMEM;
	disk_name(name, r->h, idx);
	fd = openat(c->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		err = -errno;
	else if (fstat(fd, &st) < 0)
		err = -errno;
	else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != len)
		err = -EBADMSG;
	while (!err && got < len) {
		ssize_t n = pread(fd, e->data + got, len - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			err = n < 0 ? -errno : -EBADMSG;
		else
			got += (size_t)n;
	}
	if (fd >= 0)
		close(fd);
	if (!err)
		err = nrs_objfmt_verify_block(oi, r->hdr->data + NRS_OBJ_FIXED,
					      idx, e->data, len);

	pthread_mutex_lock(&c->lock);
	d = nrs_bc_tier_find(&c->disk, r->h, idx);
	if (!err) {
		c->st.disk_hits++;
		if (d)
			nrs_bc_tier_touch(&c->disk, d);
	} else {
		if (err == -EBADMSG)
			c->st.bad_blocks++;
		if (d)
			nrs_bc_disk_drop(c, d, &victims);
	}
	pthread_mutex_unlock(&c->lock);

	if (err == -EBADMSG)
		nrs_warn("bcache: disk tier: %s fails its check (stream %"
			 PRIu64 " offset %" PRIu64 "); fetching it again",
			 name, r->h->stream_id,
			 r->h->start + (uint64_t)idx * NRS_OBJ_BLOCK);
	else if (err)
		nrs_debug("bcache: disk tier: %s: %s", name, strerror(-err));
	nrs_bc_disk_reap(c, victims);	/* a bad or unreadable file goes */
	if (err) {
		free(e);
		return err;
	}
	*out = e;
	return 0;
}

/*
 * Open or create disk_dir, lock it (-EBUSY: another cache has it), and
 * index the blocks an earlier run left there (see the top of this file).
 * Runs before any other thread can reach c; the caller logs a failure.
 */
int nrs_bc_disk_open(struct nrs_bcache *c, const char *dir)
{
	struct nrs_objhdr h;
	struct ent *victims = NULL;
	struct dirent *de;
	uint32_t idx;
	DIR *d;
	int err;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)	/* fileio.h DM1 */
		return -errno;
	err = nrs_dir_check_private(dir, "disk cache directory");	/* DM2 */
	if (err)
		return err;
	c->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dir_fd < 0)
		return -errno;
	c->lock_fd = openat(c->dir_fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC |
			    O_NOFOLLOW, 0600);
	if (c->lock_fd < 0)
		return -errno;
	if (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	err = nrs_bc_tier_init(&c->disk, c->disk.budget);
	if (err)
		return err;

	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct stat st;
		struct ent *e;

		if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
			unlinkat(c->dir_fd, de->d_name, 0);
			continue;
		}
		if (!disk_parse(de->d_name, &h, &idx))
			continue;	/* not ours */
		if (fstatat(c->dir_fd, de->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
		    st.st_size > NRS_OBJ_BLOCK) {
			unlinkat(c->dir_fd, de->d_name, 0);
			continue;
		}
		e = nrs_bc_ent_new(&h, idx, 0);
		if (!e) {
			err = -ENOMEM;
			break;
		}
		e->len = (uint32_t)st.st_size;
		if (!disk_make_room(c, e->len, &victims)) {
			free(e);
			continue;
		}
		nrs_bc_tier_add(&c->disk, e, e->len);
	}
	closedir(d);
	nrs_bc_disk_reap(c, victims);
	return err;
}

