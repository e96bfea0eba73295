/*
 * fileio.h - file I/O loops shared by the modules that own files (the
 * local WAL, the embedded object store, the metadata store), and the one
 * free-space check they share (the reserve, wal_local.c A5 and
 * meta_sqlite.c S1).
 */
#ifndef NRS_FILEIO_H
#define NRS_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read up to len bytes at off, short only at end of file (EINTR and
 * short reads are retried).  Bytes read, or a negative errno. */
ssize_t nrs_pread_full(int fd, void *buf, size_t len, uint64_t off);

/*
 * The reserve check: 0 if writing need more bytes to the file system that
 * holds fd leaves at least reserve bytes free for unprivileged users
 * (f_bavail), -ENOSPC if not.  reserve 0 is no limit; a file system whose
 * free space cannot be told (fstatvfs fails) passes: the write itself
 * will say.
 */
int nrs_fs_room(int fd, uint64_t reserve, uint64_t need);

#endif
