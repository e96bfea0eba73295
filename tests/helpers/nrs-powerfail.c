/*
 * nrs-powerfail.so - record every mutating file-system call a process makes
 * under one directory, so that nrs-powerreplay can rebuild what a disk
 * would hold after a power loss at any point (in the spirit of SQLite's
 * crash-simulation layer, src/test6.c).
 *
 *	NRS_PF_DIR=DATADIR NRS_PF_JOURNAL=FILE [NRS_PF_KILL=KILLFILE] \
 *	LD_PRELOAD=.../nrs-powerfail.so nereusfs -f -o data=DATADIR MNT
 *
 * Without both variables every call is passed through and nothing is
 * recorded.  DATADIR must exist and be empty when the first recorded
 * process starts (the replayer knows only what it saw written); later
 * processes on the same DATADIR continue the same FILE (SEVERAL
 * PROCESSES, below).  FILE and KILLFILE must lie outside DATADIR.  Under an
 * ASan build of the daemon, add verify_asan_link_order=0 to ASAN_OPTIONS.
 *
 * WHAT IS INTERPOSED
 *
 * open/open64/openat/openat64/creat/creat64 (a descriptor whose file, by
 * /proc/self/fd, lies in DATADIR is tracked, with its device and inode),
 * close, write, writev, pwrite/pwrite64, pwritev/pwritev64, ftruncate/
 * ftruncate64, fallocate/fallocate64, fsync, fdatasync, sync_file_range,
 * rename/renameat/renameat2, link/linkat, unlink/unlinkat/rmdir,
 * mkdir/mkdirat; and
 * raise and kill, for a process's SIGKILL of itself (Q1, below).  Every
 * call is passed through to the next definition (dlsym(RTLD_NEXT)); only a
 * successful call that touched a file in DATADIR is recorded.  Calls libc
 * makes internally (closedir, fclose, ...) are not seen, so before a
 * tracked descriptor is recorded its device and inode are checked again
 * (fstat): a number reused behind our back is dropped, never misattributed.
 * Not interposed, because nereusfs and SQLite do not use them on the data
 * directory: truncate(2) by path, posix_fallocate, symlink, mmap'ed
 * writes, io_uring, O_DIRECT semantics.
 *
 * JOURNAL FORMAT (host byte order; the journal is read on the same machine)
 *
 * Records back to back, each one write(2) on an O_APPEND descriptor, made
 * and appended under one process-wide mutex, so journal order is the order
 * in which the calls *returned* and timestamps never decrease:
 *
 *     0  u8   magic[4]  "NPF1"
 *     4  u32  type      PF_CREATE 1, PF_WRITE 2, PF_TRUNC 3, PF_FALLOC 4,
 *                       PF_SYNC 5, PF_UNLINK 6, PF_RENAME 7, PF_SFR 8,
 *                       PF_LINK 9 (a new name of an existing inode: the
 *                       object store's put and adoption, link(2))
 *     8  u64  ts        CLOCK_MONOTONIC ns, read after the call returned
 *    16  u64  dev       st_dev of the file (CREATE/WRITE/TRUNC/FALLOC/SYNC/
 *                       LINK)
 *    24  u64  ino       st_ino of the file
 *    32  u64  off       WRITE/FALLOC: file offset; TRUNC: the new size
 *    40  u64  len       WRITE: bytes of data that follow; FALLOC: length
 *    48  u32  path_len  bytes of path that follow (no NUL)
 *    52  u32  flags     CREATE/SYNC: 1 if the file is a directory;
 *                       SYNC: 2 if it was fdatasync; FALLOC: the mode
 *    56  u32  total     64 + path_len + len (WRITE) rounded up to 8
 *    60  u32  reserved  0
 *    64  path           relative to DATADIR ("" is DATADIR itself); RENAME:
 *                       "OLD\0NEW"
 *        data           WRITE only: the bytes written (len)
 *        padding        zeros up to total, so every header is 8-aligned
 *
 * A record is whole when the file holds all of its total bytes and its
 * magic is right; a kill -9 from outside can leave the last record torn:
 * the replayer ignores it, and a process that continues the journal (see
 * SEVERAL PROCESSES) first cuts it off.  CREATE is written only when the
 * call created the name (open with O_CREAT of a name that did not exist,
 * mkdir); an open with O_TRUNC of an existing file also writes TRUNC 0.  A
 * failed call, and in particular a failed fsync, records nothing: it made
 * nothing durable.
 *
 * SEVERAL PROCESSES, ONE JOURNAL (crash, recovery, power cut)
 *
 * A process crash loses nothing the kernel holds: the page cache keeps
 * every write, synced or not, and the next daemon on the same directory
 * reads it.  Only a power cut drops what was never synced.  So the daemons
 * that run one after another on DATADIR (crash, restart, recovery, more
 * appends, ...) are recorded into one journal: each later process opens
 * FILE with O_APPEND and continues it (DATADIR is empty only when the
 * first one starts), and the journal is one history of the disk.  The
 * replayer needs no notion of a crash: a phase-2 fdatasync of a segment
 * makes the phase-1 writes of that inode durable too (PR1 of
 * nrs-powerreplay.c), and phase-1 writes that no later sync covered are
 * dropped at a cut, even though phase 2 read and relied on them -- the
 * bug class this models (issue 12).
 *
 * For that, a crash must fall between two recorded calls: a thread killed
 * after its pwritev returned but before its record was written would
 * leave bytes in the page cache that the journal does not know, and a
 * later sync would make them durable on the real disk but not in the
 * replay.  So while recording, every interposed call holds a read lock of
 * one rwlock from before it enters the kernel until its record is written,
 * and the two ways this layer lets a process crash take the write lock
 * first, then SIGKILL the process (Q1):
 *
 *  Q1 raise(SIGKILL), kill(getpid(), SIGKILL) (the daemon's crash
 *     failpoints, src/util/failpoint.c), and a kill request: once the file
 *     named by NRS_PF_KILL exists (checked every 2 ms by a thread started
 *     when the first file of DATADIR is opened), the process is killed so.
 *     A test asks for "kill -9 under load" by creating that file.  If the
 *     write lock is not had within 5 s (a call blocked in the kernel), the
 *     process is killed anyway and "nrs-powerfail: killed unquiesced" is
 *     written to standard error, for the test to refuse the journal.
 *
 * What this cannot model: a kill that lands inside one write(2), leaving a
 * prefix of it in the page cache (a torn write that no power cut caused).
 * t0300 covers torn WAL writes with its short-write failpoint.
 *
 * THE SHARED CLOCK
 *
 * ts is read after the call returned.  nrs-appender -T stamps each ack line
 * with the same clock after write(2) returned.  A daemon acknowledges an
 * append only after the fdatasync that made it durable returned, so that
 * fdatasync's record has ts < the ack's stamp; an ack whose stamp is below
 * record K's ts therefore depends only on records before K.  The clock is
 * the machine's, so it holds across the processes of one journal.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "powerfail.h"

#define FD_SLOTS	4096

struct slot {
	bool used, is_dir;
	dev_t dev;
	ino_t ino;
	char *rel;		/* path relative to the directory */
};

/* All protected by lock (pthread mutexes take no file descriptors). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[FD_SLOTS];
static int journal_fd = -1;
static char dir[PATH_MAX];	/* canonical; empty: recording off */
static size_t dir_len;
static bool inited;
static bool watching;		/* the kill-request thread runs */

/* Q1: held shared by every interposed call while recording, from before
 * the real call to after its record; held exclusive by a crash. */
static pthread_rwlock_t quiesce;
static pthread_once_t quiesce_once = PTHREAD_ONCE_INIT;

#define REAL(type, name, args)						\
	static type (*real_##name) args;				\
	static type (*get_##name(void)) args				\
	{								\
		type (*f) args = __atomic_load_n(&real_##name,		\
						 __ATOMIC_ACQUIRE);	\
		if (!f) {						\
			*(void **)&f = dlsym(RTLD_NEXT, #name);		\
			__atomic_store_n(&real_##name, f,		\
					 __ATOMIC_RELEASE);		\
		}							\
		return f;						\
	}

REAL(int, open, (const char *, int, ...))
REAL(int, openat, (int, const char *, int, ...))
REAL(int, close, (int))
REAL(ssize_t, write, (int, const void *, size_t))
REAL(ssize_t, writev, (int, const struct iovec *, int))
REAL(ssize_t, pwrite, (int, const void *, size_t, off_t))
REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t))
REAL(int, ftruncate, (int, off_t))
REAL(int, fallocate, (int, int, off_t, off_t))
REAL(int, fsync, (int))
REAL(int, fdatasync, (int))
REAL(int, sync_file_range, (int, off_t, off_t, unsigned int))
REAL(int, renameat2, (int, const char *, int, const char *, unsigned int))
REAL(int, unlinkat, (int, const char *, int))
REAL(int, linkat, (int, const char *, int, const char *, int))
REAL(int, mkdirat, (int, const char *, mode_t))
REAL(int, raise, (int))
REAL(int, kill, (pid_t, int))

/* Cut a torn last record off the journal a killed process left, so that
 * this process continues it with whole records (SEVERAL PROCESSES). */
static void cut_torn(int fd, const char *name)
{
	struct stat st;
	struct pf_hdr h;
	uint64_t off = 0;

	if (fstat(fd, &st) < 0)
		return;
	while (off < (uint64_t)st.st_size) {
		if ((uint64_t)st.st_size - off < sizeof(h) ||
		    pread(fd, &h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) ||
		    memcmp(h.magic, PF_MAGIC, 4) != 0 || h.total < sizeof(h) ||
		    (uint64_t)st.st_size - off < h.total)
			break;
		off += h.total;
	}
	if (off == (uint64_t)st.st_size)
		return;
	fprintf(stderr, "nrs-powerfail: %s: cutting a torn last record (%ju bytes at %ju)\n",
		name, (uintmax_t)((uint64_t)st.st_size - off), (uintmax_t)off);
	if (get_ftruncate()(fd, (off_t)off) < 0) {
		fprintf(stderr, "nrs-powerfail: %s: %s\n", name, strerror(errno));
		abort();
	}
}

/* Under lock.  Reads the environment once. */
static bool recording(void)
{
	const char *d, *j;

	if (inited)
		return journal_fd >= 0;
	inited = true;
	d = getenv("NRS_PF_DIR");
	j = getenv("NRS_PF_JOURNAL");
	if (!d || !j || !realpath(d, dir)) {
		dir[0] = '\0';
		return false;
	}
	dir_len = strlen(dir);
	journal_fd = get_open()(j, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC,
				0644);
	if (journal_fd < 0) {
		fprintf(stderr, "nrs-powerfail: %s: %s\n", j, strerror(errno));
		abort();	/* a test tool: never run silently unrecorded */
	}
	cut_torn(journal_fd, j);
	return true;
}

static void quiesce_init(void)
{
	pthread_rwlockattr_t a;

	/* a crash waiting for the lock holds off new calls (Q1) */
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&quiesce, &a);
	pthread_rwlockattr_destroy(&a);
}

/* Before an interposed call: true (and the read lock taken, Q1) when
 * recording; release with leave(). */
static bool enter(void)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = recording();
	pthread_mutex_unlock(&lock);
	if (!r)
		return false;
	pthread_once(&quiesce_once, quiesce_init);
	pthread_rwlock_rdlock(&quiesce);
	return true;
}

static void leave(bool entered)
{
	if (entered)
		pthread_rwlock_unlock(&quiesce);
}

/* Q1: kill this process between two recorded calls.  The caller holds no
 * read lock of quiesce. */
static void crash_quiesced(void)
{
	struct timespec t;

	pthread_once(&quiesce_once, quiesce_init);
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += 5;
	if (pthread_rwlock_timedwrlock(&quiesce, &t) != 0) {
		static const char msg[] = "nrs-powerfail: killed unquiesced\n";

		if (get_write()(2, msg, sizeof(msg) - 1) < 0) {
			/* nothing more to say it with */
		}
	}
	get_kill()(getpid(), SIGKILL);
	_exit(137);	/* not reached */
}

/* The kill-request thread (Q1). */
static void *watch_kill(void *arg)
{
	const char *file = arg;
	struct timespec t = { 0, 2000000 };

	for (;;) {
		if (access(file, F_OK) == 0)
			crash_quiesced();
		nanosleep(&t, NULL);
	}
	return NULL;
}

/* Under lock, recording: start the kill-request thread once, when the
 * first file of the directory is opened (not earlier: an interposed call
 * may come from a sanitizer's or libc's start-up). */
static void start_watch(void)
{
	const char *k = getenv("NRS_PF_KILL");
	pthread_t t;
	sigset_t all, old;

	if (watching || !k || !*k)
		return;
	watching = true;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* signals go elsewhere */
	if (pthread_create(&t, NULL, watch_kill, (void *)k) != 0) {
		fprintf(stderr, "nrs-powerfail: cannot start the kill thread\n");
		abort();
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_detach(t);
}

int raise(int sig)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = recording();
	pthread_mutex_unlock(&lock);
	if (r && sig == SIGKILL)
		crash_quiesced();
	return get_raise()(sig);
}

int kill(pid_t pid, int sig)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = recording();
	pthread_mutex_unlock(&lock);
	if (r && sig == SIGKILL && pid == getpid())
		crash_quiesced();
	return get_kill()(pid, sig);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The part of canonical path ABS below the directory, or NULL. */
static const char *below(const char *abs)
{
	if (strncmp(abs, dir, dir_len) != 0)
		return NULL;
	if (abs[dir_len] == '\0')
		return abs + dir_len;
	if (abs[dir_len] == '/')
		return abs + dir_len + 1;
	return NULL;
}

/* Under lock, recording.  Appends one whole record; data may be spread
 * over iov (at most len bytes of it are taken). */
static void emit(uint32_t type, uint32_t flags, dev_t dev, ino_t ino,
		 uint64_t off, uint64_t len, const char *path, size_t path_len,
		 const struct iovec *iov, int iovcnt)
{
	struct pf_hdr h;
	size_t total = PF_ALIGN(sizeof(h) + path_len + (type == PF_WRITE ? len : 0));
	unsigned char *buf = calloc(1, total), *p;
	uint64_t left = type == PF_WRITE ? len : 0;
	size_t done = 0;

	if (!buf) {
		fprintf(stderr, "nrs-powerfail: out of memory\n");
		abort();
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, PF_MAGIC, 4);
	h.type = type;
	h.ts = now_ns();
	h.dev = (uint64_t)dev;
	h.ino = (uint64_t)ino;
	h.off = off;
	h.len = len;
	h.path_len = (uint32_t)path_len;
	h.flags = flags;
	h.total = (uint32_t)total;
	memcpy(buf, &h, sizeof(h));
	p = buf + sizeof(h);
	memcpy(p, path, path_len);
	p += path_len;
	for (int i = 0; i < iovcnt && left; i++) {
		size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;

		memcpy(p, iov[i].iov_base, n);
		p += n;
		left -= n;
	}
	while (done < total) {
		ssize_t n = get_write()(journal_fd, buf + done, total - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "nrs-powerfail: journal write: %s\n",
				strerror(errno));
			abort();
		}
		done += (size_t)n;
	}
	free(buf);
}

/* Under lock.  The slot of tracked descriptor fd, still naming the file it
 * was opened on, or NULL (and the slot dropped if the number was reused by
 * a call we do not see). */
static struct slot *tracked(int fd)
{
	struct slot *s;
	struct stat st;

	if (fd < 0 || fd >= FD_SLOTS || !slots[fd].used)
		return NULL;
	s = &slots[fd];
	if (fstat(fd, &st) < 0 || st.st_dev != s->dev || st.st_ino != s->ino) {
		free(s->rel);
		memset(s, 0, sizeof(*s));
		return NULL;
	}
	return s;
}

/* After a successful open: track fd if its file is in the directory, and
 * record its creation (created) or truncation. */
static void opened(int fd, bool created, bool truncated)
{
	char link[64], abs[PATH_MAX];
	const char *rel;
	struct stat st;
	ssize_t n;
	int saved = errno;

	pthread_mutex_lock(&lock);
	if (!recording() || fd < 0)
		goto out;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, abs, sizeof(abs) - 1);
	if (n < 0)
		goto out;
	abs[n] = '\0';
	rel = below(abs);
	if (!rel || fstat(fd, &st) < 0)
		goto out;
	if (fd >= FD_SLOTS) {
		fprintf(stderr, "nrs-powerfail: descriptor %d not tracked\n", fd);
		abort();
	}
	free(slots[fd].rel);
	slots[fd].used = true;
	slots[fd].is_dir = S_ISDIR(st.st_mode);
	slots[fd].dev = st.st_dev;
	slots[fd].ino = st.st_ino;
	slots[fd].rel = strdup(rel);
	start_watch();
	if (created)
		emit(PF_CREATE, slots[fd].is_dir, st.st_dev, st.st_ino, 0, 0,
		     rel, strlen(rel), NULL, 0);
	else if (truncated && S_ISREG(st.st_mode))
		emit(PF_TRUNC, 0, st.st_dev, st.st_ino, 0, 0, rel, strlen(rel),
		     NULL, 0);
out:
	pthread_mutex_unlock(&lock);
	errno = saved;
}

static bool exists_at(int dirfd, const char *path)
{
	struct stat st;
	int saved = errno;
	bool r = fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;

	errno = saved;
	return r;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	bool in = enter();
	bool existed = (flags & O_CREAT) ? exists_at(dirfd, path) : true;
	int fd = get_openat()(dirfd, path, flags, mode);

	if (fd >= 0)
		opened(fd, !existed, (flags & O_TRUNC) != 0);
	leave(in);
	return fd;
}

/* The mode argument of an open that has one (after parameter LAST). */
#define MODE_ARG(flags, last) __extension__ ({				\
	mode_t m_ = 0;							\
	if ((flags) & (O_CREAT | O_TMPFILE)) {				\
		va_list ap_;						\
		va_start(ap_, last);					\
		m_ = (mode_t)va_arg(ap_, int);				\
		va_end(ap_);						\
	}								\
	m_;								\
})

int open(const char *path, int flags, ...)
{
	return do_openat(AT_FDCWD, path, flags, MODE_ARG(flags, flags));
}

int open64(const char *path, int flags, ...)
{
	return do_openat(AT_FDCWD, path, flags, MODE_ARG(flags, flags));
}

int openat(int dirfd, const char *path, int flags, ...)
{
	return do_openat(dirfd, path, flags, MODE_ARG(flags, flags));
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	return do_openat(dirfd, path, flags, MODE_ARG(flags, flags));
}

int creat(const char *path, mode_t mode)
{
	return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode)
{
	return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int close(int fd)
{
	pthread_mutex_lock(&lock);
	if (fd >= 0 && fd < FD_SLOTS && slots[fd].used) {
		free(slots[fd].rel);
		memset(&slots[fd], 0, sizeof(slots[fd]));
	}
	pthread_mutex_unlock(&lock);
	return get_close()(fd);
}

/* After n > 0 bytes of iov were written at off (-1: at the position the
 * descriptor had, now advanced by n). */
static void wrote(int fd, const struct iovec *iov, int iovcnt, ssize_t n,
		  off_t off)
{
	struct slot *s;
	int saved = errno;

	if (n <= 0)
		return;
	pthread_mutex_lock(&lock);
	if (recording() && (s = tracked(fd)) != NULL) {
		if (off < 0)
			off = lseek(fd, 0, SEEK_CUR) - n;
		emit(PF_WRITE, 0, s->dev, s->ino, (uint64_t)off, (uint64_t)n,
		     s->rel, strlen(s->rel), iov, iovcnt);
	}
	pthread_mutex_unlock(&lock);
	errno = saved;
}

ssize_t write(int fd, const void *buf, size_t count)
{
	bool in = enter();
	ssize_t n = get_write()(fd, buf, count);
	struct iovec iov = { (void *)buf, count };

	wrote(fd, &iov, 1, n, -1);
	leave(in);
	return n;
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	bool in = enter();
	ssize_t n = get_writev()(fd, iov, iovcnt);

	wrote(fd, iov, iovcnt, n, -1);
	leave(in);
	return n;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
	bool in = enter();
	ssize_t n = get_pwrite()(fd, buf, count, off);
	struct iovec iov = { (void *)buf, count };

	wrote(fd, &iov, 1, n, off);
	leave(in);
	return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t off)
{
	return pwrite(fd, buf, count, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	bool in = enter();
	ssize_t n = get_pwritev()(fd, iov, iovcnt, off);

	wrote(fd, iov, iovcnt, n, off);
	leave(in);
	return n;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off64_t off)
{
	return pwritev(fd, iov, iovcnt, off);
}

/* After a successful call on fd: one record without data. */
static void changed(int fd, uint32_t type, uint32_t flags, uint64_t off,
		    uint64_t len)
{
	struct slot *s;
	int saved = errno;

	pthread_mutex_lock(&lock);
	if (recording() && (s = tracked(fd)) != NULL) {
		if (type == PF_SYNC)
			flags |= s->is_dir ? PF_F_DIR : 0;
		emit(type, flags, s->dev, s->ino, off, len, s->rel,
		     strlen(s->rel), NULL, 0);
	}
	pthread_mutex_unlock(&lock);
	errno = saved;
}

int ftruncate(int fd, off_t len)
{
	bool in = enter();
	int r = get_ftruncate()(fd, len);

	if (r == 0)
		changed(fd, PF_TRUNC, 0, (uint64_t)len, 0);
	leave(in);
	return r;
}

int ftruncate64(int fd, off64_t len)
{
	return ftruncate(fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	bool in = enter();
	int r = get_fallocate()(fd, mode, off, len);

	if (r == 0)
		changed(fd, PF_FALLOC, (uint32_t)mode, (uint64_t)off,
			(uint64_t)len);
	leave(in);
	return r;
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	return fallocate(fd, mode, off, len);
}

int fsync(int fd)
{
	bool in = enter();
	int r = get_fsync()(fd);

	if (r == 0)
		changed(fd, PF_SYNC, 0, 0, 0);
	leave(in);
	return r;
}

int fdatasync(int fd)
{
	bool in = enter();
	int r = get_fdatasync()(fd);

	if (r == 0)
		changed(fd, PF_SYNC, PF_F_DATASYNC, 0, 0);
	leave(in);
	return r;
}

int sync_file_range(int fd, off_t off, off_t len, unsigned int flags)
{
	bool in = enter();
	int r = get_sync_file_range()(fd, off, len, flags);

	if (r == 0)
		changed(fd, PF_SFR, flags, (uint64_t)off, (uint64_t)len);
	leave(in);
	return r;
}

/* The path of name PATH (relative to dirfd) relative to the directory, in
 * out, or false when it is not in the directory.  The last component need
 * not exist; its parent is canonicalized. */
static bool resolve(int dirfd, const char *path, char *out, size_t size)
{
	char full[PATH_MAX * 2], parent[PATH_MAX], canon[PATH_MAX];
	const char *base, *rel;
	char *slash;
	size_t len;

	if (path[0] == '/') {
		snprintf(full, sizeof(full), "%s", path);
	} else if (dirfd == AT_FDCWD) {
		if (!getcwd(parent, sizeof(parent)))
			return false;
		snprintf(full, sizeof(full), "%s/%s", parent, path);
	} else {
		char link[64];
		ssize_t n;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
		n = readlink(link, parent, sizeof(parent) - 1);
		if (n < 0)
			return false;
		parent[n] = '\0';
		snprintf(full, sizeof(full), "%s/%s", parent, path);
	}
	len = strlen(full);
	while (len > 1 && full[len - 1] == '/')
		full[--len] = '\0';
	slash = strrchr(full, '/');
	if (!slash)
		return false;
	*slash = '\0';
	base = slash + 1;
	if (!realpath(full[0] ? full : "/", canon))
		return false;
	rel = below(canon);
	if (!rel)
		return false;
	snprintf(out, size, "%s%s%s", rel, rel[0] ? "/" : "", base);
	return true;
}

static void namespace_op(uint32_t type, uint32_t flags, int dirfd,
			 const char *path, int dirfd2, const char *path2)
{
	char a[PATH_MAX], b[PATH_MAX], both[PATH_MAX * 2 + 1];
	bool in_a, in_b = false;
	struct stat st;
	int saved = errno;

	pthread_mutex_lock(&lock);
	if (!recording())
		goto out;
	in_a = resolve(dirfd, path, a, sizeof(a));
	if (type == PF_RENAME && path2)
		in_b = resolve(dirfd2, path2, b, sizeof(b));
	if (type == PF_RENAME && (in_a || in_b)) {
		size_t la, lb;

		if (!in_a || !in_b) {
			fprintf(stderr, "nrs-powerfail: rename across the directory boundary not modelled\n");
			abort();
		}
		la = strlen(a);
		lb = strlen(b);
		memcpy(both, a, la + 1);
		memcpy(both + la + 1, b, lb);
		emit(PF_RENAME, 0, 0, 0, 0, 0, both, la + 1 + lb, NULL, 0);
	} else if ((type == PF_CREATE || type == PF_LINK) && in_a) {
		if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
			emit(type, flags, st.st_dev, st.st_ino, 0, 0, a,
			     strlen(a), NULL, 0);
	} else if (type == PF_UNLINK && in_a) {
		emit(PF_UNLINK, flags, 0, 0, 0, 0, a, strlen(a), NULL, 0);
	}
out:
	pthread_mutex_unlock(&lock);
	errno = saved;
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd,
	      const char *newpath, unsigned int flags)
{
	bool in = enter();
	int r = get_renameat2()(olddirfd, oldpath, newdirfd, newpath, flags);

	if (r == 0)
		namespace_op(PF_RENAME, 0, olddirfd, oldpath, newdirfd, newpath);
	leave(in);
	return r;
}

int renameat(int olddirfd, const char *oldpath, int newdirfd,
	     const char *newpath)
{
	return renameat2(olddirfd, oldpath, newdirfd, newpath, 0);
}

int rename(const char *oldpath, const char *newpath)
{
	return renameat2(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

int unlinkat(int dirfd, const char *path, int flags)
{
	bool in = enter();
	int r = get_unlinkat()(dirfd, path, flags);

	if (r == 0)
		namespace_op(PF_UNLINK, 0, dirfd, path, -1, NULL);
	leave(in);
	return r;
}

int linkat(int olddirfd, const char *oldpath, int newdirfd,
	   const char *newpath, int flags)
{
	bool in = enter();
	int r = get_linkat()(olddirfd, oldpath, newdirfd, newpath, flags);

	if (r == 0)
		namespace_op(PF_LINK, 0, newdirfd, newpath, -1, NULL);
	leave(in);
	return r;
}

int link(const char *oldpath, const char *newpath)
{
	return linkat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

int unlink(const char *path)
{
	return unlinkat(AT_FDCWD, path, 0);
}

int rmdir(const char *path)
{
	return unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
	bool in = enter();
	int r = get_mkdirat()(dirfd, path, mode);

	if (r == 0)
		namespace_op(PF_CREATE, PF_F_DIR, dirfd, path, -1, NULL);
	leave(in);
	return r;
}

int mkdir(const char *path, mode_t mode)
{
	return mkdirat(AT_FDCWD, path, mode);
}
