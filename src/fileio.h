/*
 * fileio.h - file I/O loops shared by the modules that own files (the
 * local WAL, the embedded object store).
 */
#ifndef NRS_FILEIO_H
#define NRS_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read up to len bytes at off, short only at end of file (EINTR and
 * short reads are retried).  Bytes read, or a negative errno. */
ssize_t nrs_pread_full(int fd, void *buf, size_t len, uint64_t off);

#endif
