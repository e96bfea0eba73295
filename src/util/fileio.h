/*
 * fileio.h - file I/O loops shared by the modules that own files (the
 * local WAL, the embedded object store, the metadata store), the one
 * free-space check they share (the reserve, wal_local_append.c WA5 and
 * meta_sqlite.c MS1), and the rule for the modes of the daemon's state.
 *
 * DM1  Every state file is created 0600 and every state directory 0700,
 *     given explicitly at creation and so whatever the umask (SQLite's
 *     database is created by us first: SQLite gives its -wal and -shm the
 *     database file's mode).
 * DM2  A state directory that others can read, write or enter (any group
 *     or other bit), or that another user owns, is refused at start, with
 *     a message naming its mode and the fix -- as sshd's StrictModes.
 */
#ifndef NRS_FILEIO_H
#define NRS_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Read up to len bytes at off, short only at end of file (EINTR and
 * short reads are retried).  Bytes read, or a negative errno. */
ssize_t nrs_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* fsync(2) of the directory dir (what makes a name created, renamed or
 * removed in it durable).  0 or a negative errno. */
int nrs_fsync_dir(const char *dir);

/* mkdir(2) of the state directory dir (0700, DM1) if it is not there,
 * then fsync(2) of its parent, also when dir existed: a daemon that
 * crashed after its mkdir may have left the name only in the page cache,
 * and a power cut would then take dir away with every file in it.
 * 0 or a negative errno. */
int nrs_mkdir_durable(const char *dir);

/*
 * Replace the file path with the len bytes of buf so that a crash leaves
 * the old file or the new one whole: write them to tmp (created 0600,
 * DM1; a leftover is truncated), fsync it, rename it over path, fsync
 * dir (the directory of both).  On failure tmp is removed and path is as
 * it was, or already the new file if only the last fsync failed.  0 or a
 * negative errno.
 */
int nrs_file_replace(const char *path, const char *tmp, const char *dir,
		     const void *buf, size_t len);

/* DM2: 0 if the directory path (what: "data directory") is private to
 * this user; else -EPERM, -ENOTDIR or the errno of stat, logged with
 * the mode, the owner and the command that fixes it. */
int nrs_dir_check_private(const char *path, const char *what);

/*
 * The reserve check: 0 if writing need more bytes to the file system that
 * holds fd leaves at least reserve bytes free for unprivileged users
 * (f_bavail), -ENOSPC if not.  reserve 0 is no limit; a file system whose
 * free space cannot be told (fstatvfs fails) passes: the write itself
 * will say.
 */
int nrs_fs_room(int fd, uint64_t reserve, uint64_t need);

/*
 * Whether the paths a and b lie on one file system (the same st_dev):
 * 1 if they do, 0 if not, -errno if either cannot be stat'ed.  What makes
 * the embedded object store's second write of a materialized byte land on
 * the WAL's disk (core_obj.c CO1).
 */
int nrs_fs_same(const char *a, const char *b);

#endif
