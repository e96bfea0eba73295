/*
 * objstore_dir_adopt.c - files the embedded store (objstore_dir.c) takes
 * in place instead of copying them, the reads of a record in one, and the
 * holes punched in them once parts of them are dead: the store's half of writing once (README,
 * Architecture: a sealed WAL segment on the store's file system becomes an
 * object without its bytes being written again).
 *
 * An adopted file is not in the store's object format: it is the caller's
 * file byte for byte, a WAL segment whose own 64-byte header takes the
 * place of the store's (wal_local_seg.c).  get() reads every object at 64 +
 * off, so byte X of an adopted file is get(key, X - 64); punch() takes the
 * same offsets.  head() proves nothing of such a file (its header is not
 * the store's): what the bytes are is verified by their reader, record by
 * record (walrec.c: a checksummed header, a CRC32C per chunk; DESIGN.md
 * I6), and the caller records in its own metadata which key and offsets it
 * adopted (the row is durable before the link, DESIGN.md section 6).
 *
 *  OD6 Adopt.  The file at path becomes the object key by link(2), never
 *      by a copy: a link fails EXDEV across file systems, and the caller
 *      then copies (the point of a store elsewhere).  A key that already
 *      names the same file (same device and inode: the link of a try a
 *      crash cut short) is accepted and its directories synced again; a
 *      key naming anything else is -EEXIST, never replaced.  The key's
 *      directory and every one above it up to DIR are fsynced before 0 is
 *      returned, so a publication that rests on the name survives a power
 *      loss (I7).
 *  OD7 Punch.  punch(key, off, len) frees the bytes [off, off + len) of an
 *      object (fallocate PUNCH_HOLE, keeping the size: every other offset
 *      stays where it was) -- only while the file has no other name.  A
 *      file with a second link (the WAL's own name of the segment: its
 *      scan would take a hole for damage, wal_local_seg.c WD2) is
 *      refused, -EBUSY, nothing freed; the caller tries again once that
 *      name is gone.  A range past the end is -EINVAL.  The caller punches
 *      only bytes no one reads any more, after the read gate (I5).  A
 *      punch is not synced by itself (OD9).
 *  OD9 Durable holes.  punch_sync(key) fdatasyncs the file: every hole
 *      punched in it before is then durable.  Without it a power loss may
 *      bring the punched bytes back, and nobody punches them again once
 *      the caller has recorded them as freed (lifecycle.c G6 retires its
 *      rows only after this sync), so the space would stay taken until
 *      the whole file goes.  One sync covers any number of punches: the
 *      caller punches a file's dead records, then syncs it once.
 *  OD10 No read ahead across records.  get_slice(key, off, len, until)
 *      reads [off, off + len) of an adopted file as get() does, with the
 *      kernel's readahead off on that descriptor (POSIX_FADV_RANDOM) and
 *      [off, until) asked for at once instead (POSIX_FADV_WILLNEED, one
 *      large read): until is where the caller's reader stops wanting bytes
 *      of this file (reader.c: the end of the record).  A WAL object or
 *      segment interleaves records of several streams, and the kernel's
 *      own readahead (up to the device's read_ahead_kb, 8 MiB on some
 *      disks) would read the other streams' records with each one (issue
 *      16: twice the bytes it returned).  until NRS_OBJ_SLICE_ALL (the
 *      reader's stream goes on right after it in the file) gives no
 *      advice: the kernel's readahead then reads what the reader wants
 *      next.  The advice is a hint: its failure changes nothing but the
 *      speed, and is not reported; an until at or before off + len asks
 *      for nothing more than the read.  A store that is not the embedded
 *      one is read with its get().
 *  OD8 Numbers.  adopted_max() answers the highest segment number under
 *      w/ (names of 16 lower-case hex digits; anything else there is
 *      ignored), 0 for none, so that the WAL never numbers a new segment
 *      with a name the store already holds (wal.h first_seg).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objstore.h"
#include "obj/objstore_dir_priv.h"
#include "util/fileio.h"
#include "util/log.h"

#define ADOPT_TRIES	100	/* a race with del() emptying a directory */

/* OD6: fsync the directories of key's path, deepest first, DIR last. */
static int sync_dirs(struct dir_store *d, const char *key)
{
	char *path = strdup(key);
	char *slash;
	int rc = 0;

	if (!path)
		return -ENOMEM;
	do {
		int fd;

		slash = strrchr(path, '/');
		if (slash)
			*slash = '\0';
		fd = openat(d->rootfd, slash ? path : ".",
			    O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || fsync(fd) < 0)
			rc = -errno;
		if (fd >= 0)
			close(fd);
	} while (rc == 0 && slash);
	free(path);
	return rc;
}

/* Is key, in d, the file src (OD6: the link of an earlier try)? */
static bool names_file(struct dir_store *d, const char *key,
		       const struct stat *src)
{
	struct stat st;

	return fstatat(d->rootfd, key, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       st.st_dev == src->st_dev && st.st_ino == src->st_ino;
}

int nrs_objstore_dir_adopt(struct nrs_objstore *s, const char *key,
			   const char *path)
{
	struct dir_store *d = nrs_dirstore_of(s);
	struct stat src;
	int rc = -ENOENT;

	if (!d)
		return -EOPNOTSUPP;
	if (d->tmpfd < 0)
		return -EROFS;
	if (!nrs_objkey_is_valid(key) || !path)
		return -EINVAL;
	if (lstat(path, &src) < 0)
		return -errno;
	if (!S_ISREG(src.st_mode))
		return -EINVAL;		/* link(2) would link a symlink itself */
	for (int i = 0; i < ADOPT_TRIES && rc == -ENOENT; i++) {
		rc = nrs_dirstore_place(d, AT_FDCWD, path, key, true);
		if (rc == -ENOENT && lstat(path, &src) < 0)
			return -errno;	/* the file went, not a directory */
	}
	if (rc == -EEXIST && names_file(d, key, &src))
		rc = sync_dirs(d, key);		/* OD6: linked before */
	if (rc < 0 && rc != -EXDEV && rc != -EEXIST)
		nrs_warn("dir store %s: adopt %s as %s: %s", d->dir, path, key,
			 strerror(-rc));
	return rc;
}

/* key of the writable embedded store s, opened for writing into a
 * descriptor, its store into *dp (if dp); or a negative errno. */
static int open_object(struct nrs_objstore *s, const char *key,
		       struct dir_store **dp)
{
	struct dir_store *d = nrs_dirstore_of(s);
	int fd;

	if (!d)
		return -EOPNOTSUPP;
	if (d->tmpfd < 0)
		return -EROFS;
	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	fd = openat(d->rootfd, key, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOTDIR || errno == ELOOP ? -ENOENT : -errno;
	if (dp)
		*dp = d;
	return fd;
}

int nrs_objstore_dir_punch(struct nrs_objstore *s, const char *key,
			   uint64_t off, uint64_t len)
{
	struct dir_store *d;
	struct stat st;
	uint64_t size;
	int fd = open_object(s, key, &d), rc = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	size = (uint64_t)st.st_size > OBJ_HDR ? (uint64_t)st.st_size - OBJ_HDR
					       : 0;
	if (!S_ISREG(st.st_mode))
		rc = -ENOENT;
	else if (st.st_nlink > 1)
		rc = -EBUSY;		/* OD7: the WAL still names it */
	else if (off > size || len > size - off)
		rc = -EINVAL;
	else if (len > 0 &&
		 fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			   (off_t)(OBJ_HDR + off), (off_t)len) < 0)
		rc = -errno;
	if (rc < 0 && rc != -EBUSY && rc != -EINVAL)
		nrs_warn("dir store %s: punch %s: %s", d->dir, key,
			 strerror(-rc));
out_close:
	close(fd);
	return rc;
}

int nrs_objstore_dir_punch_sync(struct nrs_objstore *s, const char *key)
{
	int fd = open_object(s, key, NULL), rc = 0;

	if (fd < 0)
		return fd;
	if (fdatasync(fd) < 0)	/* OD9 (the caller logs a failure) */
		rc = -errno;
	close(fd);
	return rc;
}

int nrs_objstore_dir_adopted_stat(struct nrs_objstore *s, const char *key,
				  uint64_t *size, uint64_t *links)
{
	struct dir_store *d = nrs_dirstore_of(s);
	struct stat st;

	if (!d)
		return -EOPNOTSUPP;
	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	if (fstatat(d->rootfd, key, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOENT;
	*size = (uint64_t)st.st_size;
	*links = (uint64_t)st.st_nlink;
	return 0;
}

ssize_t nrs_objstore_dir_get_slice(struct nrs_objstore *s, const char *key,
				   uint64_t off, void *buf, size_t len,
				   uint64_t until)
{
	struct dir_store *d = nrs_dirstore_of(s);
	uint64_t size = 0;
	int fd;

	if (!d)
		return nrs_obj_get(s, key, off, buf, len);
	fd = nrs_dirstore_open_read(d, key, &size);
	if (fd < 0)
		return fd;
	if (off < size && until != NRS_OBJ_SLICE_ALL) {	/* OD10 */
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
		if (until > size)
			until = size;
		if (until > off && until - off > len)
			(void)posix_fadvise(fd, (off_t)(OBJ_HDR + off),
					    (off_t)(until - off),
					    POSIX_FADV_WILLNEED);
	}
	return nrs_dirstore_read_close(d, key, fd, size, off, buf, len);
}

/* OD8: a name nrs_objfmt_adopt_key makes (16 lower-case hex digits). */
static bool seg_name(const char *name, uint64_t *no)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; name[i]; i++) {
		char c = name[i];

		if (i >= 16 || !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
		v = v << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	*no = v;
	return i == 16;
}

int nrs_objstore_dir_adopted_max(struct nrs_objstore *s, uint64_t *max)
{
	struct dir_store *d = nrs_dirstore_of(s);
	struct dirent *de;
	DIR *dh;
	int fd;

	*max = 0;
	if (!d)
		return -EOPNOTSUPP;
	fd = openat(d->rootfd, "w", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	dh = fdopendir(fd);
	if (!dh) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(dh)) != NULL) {
		uint64_t no;

		if (seg_name(de->d_name, &no) && no > *max)
			*max = no;
	}
	closedir(dh);
	return 0;
}
