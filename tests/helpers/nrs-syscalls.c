/*
 * nrs-syscalls - run a sequence of system calls and print what each did.
 *
 *	nrs-syscalls STEP [-- STEP]...
 *	STEP:	[expect RESULT] OP ARG...
 *
 * Each step prints one line: "ok" plus the op's result fields, or the errno
 * name ("ESPIPE").  A step prefixed by "expect RESULT" (RESULT is "ok" or
 * errno names joined by '|', e.g. "EPERM|EACCES") makes a mismatch fatal:
 * the message goes to stderr and the exit status is 1.  Otherwise the exit
 * status is 0 whatever the calls returned (2 on usage errors).
 *
 * File descriptors live in slots named by one lower-case letter, opened by
 * "open" and kept across steps, so one run can interleave two handles.  An
 * op that takes a slot also takes a path (anything that is not a single
 * letter): it then opens the path for the one step, with the flags noted
 * below, and a failed open is the step's result.
 *
 * Data is printed with bytes outside printable ASCII, and '\', escaped as
 * \xNN (\n for a newline), so "no trailing newline" is visible.
 *
 *   open S PATH FLAGS [MODE]	FLAGS: rdonly,wronly,rdwr,append,creat,
 *				excl,trunc,direct,sync,dsync,nonblock
 *   close S
 *   write S DATA		-> ok N			(path: O_WRONLY)
 *   append S DATA		-> ok N			(path: O_WRONLY|O_APPEND|O_CREAT)
 *   writen S SIZE [CHAR]	one write of SIZE bytes	(path: as append)
 *   writefile S FILE [SKEW]	one write of FILE's whole content from a buffer
 *				SKEW bytes past a page boundary (default 0)
 *				(path: as append)
 *   pwrite S OFF DATA		-> ok N			(path: O_WRONLY)
 *   read S LEN			-> ok N DATA		(path: O_RDONLY)
 *   pread S OFF LEN		-> ok N DATA		(path: O_RDONLY)
 *   lseek S OFF set|cur|end	-> ok POS
 *   fstat S, stat PATH		-> ok size= blocks= ino= mode= nlink= uid= gid= mtime=S.NS
 *   ftruncate S LEN		(path: O_WRONLY);  truncate PATH LEN
 *   fallocate S OFF LEN [keep|punch]		(path: O_WRONLY)
 *   fsync S, fdatasync S			(path: O_RDONLY)
 *   mmap S OFF LEN shared-rw|shared-ro|private-ro
 *				-> ok (rw), ok N DATA (ro: the mapped bytes)
 *				(path: O_RDWR for rw, O_RDONLY for ro)
 *   link OLD NEW, symlink TARGET NEW, mknod PATH fifo|chr|blk|sock|reg,
 *   mkdir PATH [MODE], rmdir PATH, unlink PATH,
 *   rename OLD NEW [noreplace|exchange]
 *   setxattr PATH NAME VALUE [create|replace|both]
 *   setxattrn PATH NAME SIZE [create|replace|both]	(SIZE bytes of 'v')
 *   getxattr PATH NAME, fgetxattr S NAME	-> ok N VALUE
 *   listxattr PATH		-> ok NAME... (in the order returned)
 *   removexattr PATH NAME
 *   sleep MS
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "util/errname.h"
#include "util/grow.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static int slots[26];
static int step_fd = -1;	/* opened for this step only */

/* The result line being built. */
static char *out;
static size_t out_len, out_cap;

static void out_add(const char *s, size_t n)
{
	if (nrs_grow((void **)&out, &out_cap, out_len + n + 1, 1)) {
		errno = ENOMEM;
		perror("nrs-syscalls");
		exit(2);
	}
	memcpy(out + out_len, s, n);
	out_len += n;
	out[out_len] = '\0';
}

static void outf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void outf(const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		out_add(tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* " N DATA" with escapes (no trailing space when empty). */
static void out_data(const unsigned char *p, size_t n)
{
	char e[5];
	size_t i;

	outf(" %zu", n);
	if (n)
		out_add(" ", 1);
	for (i = 0; i < n; i++) {
		if (p[i] == '\\')
			out_add("\\\\", 2);
		else if (p[i] == '\n')
			out_add("\\n", 2);
		else if (p[i] >= 0x20 && p[i] < 0x7f)
			out_add((const char *)&p[i], 1);
		else {
			snprintf(e, sizeof(e), "\\x%02x", p[i]);
			out_add(e, 4);
		}
	}
}

static void usage(const char *why)
{
	fprintf(stderr, "nrs-syscalls: %s\n(see the comment at the top of nrs-syscalls.c)\n", why);
	exit(2);
}

static bool is_slot(const char *s)
{
	return s[0] >= 'a' && s[0] <= 'z' && s[1] == '\0';
}

static int slot_index(const char *s)
{
	if (!is_slot(s))
		usage("a slot is one lower-case letter");
	return s[0] - 'a';
}

/*
 * The descriptor for a slot, or the path opened with flags for this step.
 * Returns the fd, or -errno of the open.
 */
static int get_fd(const char *arg, int flags)
{
	if (is_slot(arg)) {
		if (slots[arg[0] - 'a'] < 0)
			return -EBADF;
		return slots[arg[0] - 'a'];
	}
	step_fd = open(arg, flags, 0644);
	if (step_fd < 0) {
		int e = errno;

		fprintf(stderr, "nrs-syscalls: (open %s failed)\n", arg);
		return -e;
	}
	return step_fd;
}

static long long num(const char *s)
{
	char *end;
	long long v;

	errno = 0;
	if (s[0] == '-')
		v = strtoll(s, &end, 0);
	else
		v = (long long)strtoull(s, &end, 0);
	if (errno || end == s || *end)
		usage("bad number");
	return v;
}

static int parse_open_flags(const char *s)
{
	static const struct {
		const char *name;
		int flag;
	} names[] = {
		{ "rdonly", O_RDONLY }, { "wronly", O_WRONLY }, { "rdwr", O_RDWR },
		{ "append", O_APPEND }, { "creat", O_CREAT }, { "excl", O_EXCL },
		{ "trunc", O_TRUNC }, { "direct", O_DIRECT }, { "sync", O_SYNC },
		{ "dsync", O_DSYNC }, { "nonblock", O_NONBLOCK },
	};
	char *copy = strdup(s), *tok, *save = NULL;
	int flags = 0;
	size_t i;

	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(tok, names[i].name))
				break;
		if (i == sizeof(names) / sizeof(names[0]))
			usage("unknown open flag");
		flags |= names[i].flag;
	}
	free(copy);
	return flags;
}

static int xattr_flags(int argc, char **argv, int i)
{
	if (argc <= i)
		return 0;
	if (!strcmp(argv[i], "create"))
		return XATTR_CREATE;
	if (!strcmp(argv[i], "replace"))
		return XATTR_REPLACE;
	if (!strcmp(argv[i], "both"))	/* the kernel passes both on */
		return XATTR_CREATE | XATTR_REPLACE;
	if (!strcmp(argv[i], "0"))
		return 0;
	usage("xattr flags: create, replace, both or 0");
	return 0;
}

static void out_stat(const struct stat *st)
{
	outf(" size=%lld blocks=%lld ino=%llu mode=0%o nlink=%lu uid=%u gid=%u mtime=%lld.%09ld",
	     (long long)st->st_size, (long long)st->st_blocks,
	     (unsigned long long)st->st_ino, (unsigned)st->st_mode,
	     (unsigned long)st->st_nlink, (unsigned)st->st_uid,
	     (unsigned)st->st_gid, (long long)st->st_mtim.tv_sec,
	     st->st_mtim.tv_nsec);
}

static int do_write(int fd, const void *p, size_t n)
{
	ssize_t r = write(fd, p, n);

	if (r < 0)
		return errno;
	outf(" %zd", r);
	return 0;
}

static int do_read(int fd, long long off, size_t len, bool positional)
{
	unsigned char *buf = malloc(len ? len : 1);
	ssize_t r;

	if (!buf)
		return ENOMEM;
	r = positional ? pread(fd, buf, len, (off_t)off) : read(fd, buf, len);
	if (r < 0) {
		int e = errno;

		free(buf);
		return e;
	}
	out_data(buf, (size_t)r);
	free(buf);
	return 0;
}

/* The kernel splits a direct write at page boundaries of the user buffer,
 * so where the buffer starts matters: skew it on purpose. */
static int do_writefile(int fd, const char *file, size_t skew)
{
	void *mem;
	unsigned char *buf;
	struct stat st;
	ssize_t n;
	int lfd, e;

	lfd = open(file, O_RDONLY);
	if (lfd < 0 || fstat(lfd, &st) < 0)
		usage("writefile: cannot read the local file");
	if (posix_memalign(&mem, 4096, (size_t)st.st_size + skew + 1))
		return ENOMEM;
	buf = (unsigned char *)mem + skew;
	n = read(lfd, buf, (size_t)st.st_size);
	close(lfd);
	if (n != st.st_size)
		usage("writefile: short read of the local file");
	e = do_write(fd, buf, (size_t)n);
	free(mem);
	return e;
}

static int do_mmap(int argc, char **argv)
{
	bool rw, shared;
	long long off, len;
	unsigned char *p;
	int fd;

	if (argc != 5)
		usage("mmap S OFF LEN MODE");
	off = num(argv[2]);
	len = num(argv[3]);
	if (!strcmp(argv[4], "shared-rw"))
		rw = true, shared = true;
	else if (!strcmp(argv[4], "shared-ro"))
		rw = false, shared = true;
	else if (!strcmp(argv[4], "private-ro"))
		rw = false, shared = false;
	else
		usage("mmap mode: shared-rw, shared-ro or private-ro");
	fd = get_fd(argv[1], rw ? O_RDWR : O_RDONLY);
	if (fd < 0)
		return -fd;
	p = mmap(NULL, (size_t)len, PROT_READ | (rw ? PROT_WRITE : 0),
		 shared ? MAP_SHARED : MAP_PRIVATE, fd, (off_t)off);
	if (p == MAP_FAILED)
		return errno;
	if (!rw)
		out_data(p, (size_t)len);
	munmap(p, (size_t)len);
	return 0;
}

static int do_mknod(int argc, char **argv)
{
	mode_t type;

	if (argc != 3)
		usage("mknod PATH TYPE");
	if (!strcmp(argv[2], "fifo"))
		type = S_IFIFO;
	else if (!strcmp(argv[2], "chr"))
		type = S_IFCHR;
	else if (!strcmp(argv[2], "blk"))
		type = S_IFBLK;
	else if (!strcmp(argv[2], "sock"))
		type = S_IFSOCK;
	else if (!strcmp(argv[2], "reg"))
		type = S_IFREG;
	else
		usage("mknod type: fifo, chr, blk, sock or reg");
	return mknod(argv[1], type | 0644, makedev(1, 3)) < 0 ? errno : 0;
}

static int do_getxattr(const char *path, int fd, const char *name)
{
	ssize_t n;
	char *buf;

	n = fd >= 0 ? fgetxattr(fd, name, NULL, 0) : getxattr(path, name, NULL, 0);
	if (n < 0)
		return errno;
	buf = malloc((size_t)n + 1);
	if (!buf)
		return ENOMEM;
	n = fd >= 0 ? fgetxattr(fd, name, buf, (size_t)n) :
		      getxattr(path, name, buf, (size_t)n);
	if (n < 0) {
		int e = errno;

		free(buf);
		return e;
	}
	out_data((unsigned char *)buf, (size_t)n);
	free(buf);
	return 0;
}

static int do_listxattr(const char *path)
{
	ssize_t n, i;
	char *buf;

	n = listxattr(path, NULL, 0);
	if (n < 0)
		return errno;
	buf = malloc((size_t)n + 1);
	if (!buf)
		return ENOMEM;
	n = listxattr(path, buf, (size_t)n);
	if (n < 0) {
		int e = errno;

		free(buf);
		return e;
	}
	for (i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		outf(" %s", buf + i);
	free(buf);
	return 0;
}

#define NEED(n, what) do { if (argc != (n)) usage(what); } while (0)
#define NEED2(a, b, what) do { if (argc != (a) && argc != (b)) usage(what); } while (0)
#define FD(arg, flags) do { fd = get_fd((arg), (flags)); if (fd < 0) return -fd; } while (0)
#define SYS(call) ((call) < 0 ? errno : 0)

/* Run one op; 0 on success (fields in out), else the errno. */
static int run(int argc, char **argv)
{
	const char *op = argv[0];
	struct stat st;
	off_t pos;
	int fd, i, flags;

	if (!strcmp(op, "open")) {
		NEED2(4, 5, "open S PATH FLAGS [MODE]");
		i = slot_index(argv[1]);
		if (slots[i] >= 0)
			close(slots[i]);
		fd = open(argv[2], parse_open_flags(argv[3]),
			  argc == 5 ? (mode_t)strtoul(argv[4], NULL, 8) : 0644);
		slots[i] = fd;
		return fd < 0 ? errno : 0;
	}
	if (!strcmp(op, "close")) {
		NEED(2, "close S");
		i = slot_index(argv[1]);
		fd = slots[i];
		slots[i] = -1;
		return SYS(close(fd));
	}
	if (!strcmp(op, "write")) {
		NEED(3, "write S DATA");
		FD(argv[1], O_WRONLY);
		return do_write(fd, argv[2], strlen(argv[2]));
	}
	if (!strcmp(op, "append")) {
		NEED(3, "append S DATA");
		FD(argv[1], O_WRONLY | O_APPEND | O_CREAT);
		return do_write(fd, argv[2], strlen(argv[2]));
	}
	if (!strcmp(op, "writen")) {
		size_t n;
		char *buf;
		int e;

		NEED2(3, 4, "writen S SIZE [CHAR]");
		FD(argv[1], O_WRONLY | O_APPEND | O_CREAT);
		n = (size_t)num(argv[2]);
		buf = malloc(n + 1);
		if (!buf)
			return ENOMEM;
		memset(buf, argc == 4 ? argv[3][0] : 'x', n);
		e = do_write(fd, buf, n);
		free(buf);
		return e;
	}
	if (!strcmp(op, "writefile")) {
		NEED2(3, 4, "writefile S FILE [SKEW]");
		FD(argv[1], O_WRONLY | O_APPEND | O_CREAT);
		return do_writefile(fd, argv[2], argc == 4 ? (size_t)num(argv[3]) % 4096 : 0);
	}
	if (!strcmp(op, "pwrite")) {
		ssize_t r;

		NEED(4, "pwrite S OFF DATA");
		FD(argv[1], O_WRONLY);
		r = pwrite(fd, argv[3], strlen(argv[3]), (off_t)num(argv[2]));
		if (r < 0)
			return errno;
		outf(" %zd", r);
		return 0;
	}
	if (!strcmp(op, "read")) {
		NEED(3, "read S LEN");
		FD(argv[1], O_RDONLY);
		return do_read(fd, 0, (size_t)num(argv[2]), false);
	}
	if (!strcmp(op, "pread")) {
		NEED(4, "pread S OFF LEN");
		FD(argv[1], O_RDONLY);
		return do_read(fd, num(argv[2]), (size_t)num(argv[3]), true);
	}
	if (!strcmp(op, "lseek")) {
		int whence;

		NEED(4, "lseek S OFF set|cur|end");
		if (!strcmp(argv[3], "set"))
			whence = SEEK_SET;
		else if (!strcmp(argv[3], "cur"))
			whence = SEEK_CUR;
		else if (!strcmp(argv[3], "end"))
			whence = SEEK_END;
		else
			usage("lseek whence: set, cur or end");
		FD(argv[1], O_RDONLY);
		pos = lseek(fd, (off_t)num(argv[2]), whence);
		if (pos < 0)
			return errno;
		outf(" %lld", (long long)pos);
		return 0;
	}
	if (!strcmp(op, "fstat") || !strcmp(op, "stat")) {
		NEED(2, "fstat S | stat PATH");
		if (op[0] == 'f') {
			FD(argv[1], O_RDONLY);
			if (fstat(fd, &st) < 0)
				return errno;
		} else if (stat(argv[1], &st) < 0) {
			return errno;
		}
		out_stat(&st);
		return 0;
	}
	if (!strcmp(op, "ftruncate")) {
		NEED(3, "ftruncate S LEN");
		FD(argv[1], O_WRONLY);
		return SYS(ftruncate(fd, (off_t)num(argv[2])));
	}
	if (!strcmp(op, "truncate")) {
		NEED(3, "truncate PATH LEN");
		return SYS(truncate(argv[1], (off_t)num(argv[2])));
	}
	if (!strcmp(op, "fallocate")) {
		NEED2(4, 5, "fallocate S OFF LEN [keep|punch]");
		flags = 0;
		if (argc == 5 && !strcmp(argv[4], "keep"))
			flags = FALLOC_FL_KEEP_SIZE;
		else if (argc == 5 && !strcmp(argv[4], "punch"))
			flags = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE;
		else if (argc == 5)
			usage("fallocate mode: keep or punch");
		FD(argv[1], O_WRONLY);
		return SYS(fallocate(fd, flags, (off_t)num(argv[2]),
				     (off_t)num(argv[3])));
	}
	if (!strcmp(op, "fsync") || !strcmp(op, "fdatasync")) {
		NEED(2, "fsync S | fdatasync S");
		FD(argv[1], O_RDONLY);
		return SYS(op[1] == 's' ? fsync(fd) : fdatasync(fd));
	}
	if (!strcmp(op, "mmap"))
		return do_mmap(argc, argv);
	if (!strcmp(op, "link")) {
		NEED(3, "link OLD NEW");
		return SYS(link(argv[1], argv[2]));
	}
	if (!strcmp(op, "symlink")) {
		NEED(3, "symlink TARGET NEW");
		return SYS(symlink(argv[1], argv[2]));
	}
	if (!strcmp(op, "mknod"))
		return do_mknod(argc, argv);
	if (!strcmp(op, "mkdir")) {
		NEED2(2, 3, "mkdir PATH [MODE]");
		return SYS(mkdir(argv[1], argc == 3 ? (mode_t)strtoul(argv[2], NULL, 8) : 0755));
	}
	if (!strcmp(op, "rmdir")) {
		NEED(2, "rmdir PATH");
		return SYS(rmdir(argv[1]));
	}
	if (!strcmp(op, "unlink")) {
		NEED(2, "unlink PATH");
		return SYS(unlink(argv[1]));
	}
	if (!strcmp(op, "rename")) {
		NEED2(3, 4, "rename OLD NEW [noreplace|exchange]");
		flags = 0;
		if (argc == 4 && !strcmp(argv[3], "noreplace"))
			flags = RENAME_NOREPLACE;
		else if (argc == 4 && !strcmp(argv[3], "exchange"))
			flags = RENAME_EXCHANGE;
		else if (argc == 4)
			usage("rename flags: noreplace or exchange");
		return SYS(syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD,
				   argv[2], flags));
	}
	if (!strcmp(op, "setxattr")) {
		NEED2(4, 5, "setxattr PATH NAME VALUE [create|replace]");
		return SYS(setxattr(argv[1], argv[2], argv[3], strlen(argv[3]),
				    xattr_flags(argc, argv, 4)));
	}
	if (!strcmp(op, "setxattrn")) {
		size_t n;
		char *buf;
		int e;

		NEED2(4, 5, "setxattrn PATH NAME SIZE [create|replace]");
		n = (size_t)num(argv[3]);
		buf = malloc(n + 1);
		if (!buf)
			return ENOMEM;
		memset(buf, 'v', n);
		e = SYS(setxattr(argv[1], argv[2], buf, n, xattr_flags(argc, argv, 4)));
		free(buf);
		return e;
	}
	if (!strcmp(op, "getxattr")) {
		NEED(3, "getxattr PATH NAME");
		return do_getxattr(argv[1], -1, argv[2]);
	}
	if (!strcmp(op, "fgetxattr")) {
		NEED(3, "fgetxattr S NAME");
		FD(argv[1], O_RDONLY);
		return do_getxattr(NULL, fd, argv[2]);
	}
	if (!strcmp(op, "listxattr")) {
		NEED(2, "listxattr PATH");
		return do_listxattr(argv[1]);
	}
	if (!strcmp(op, "removexattr")) {
		NEED(3, "removexattr PATH NAME");
		return SYS(removexattr(argv[1], argv[2]));
	}
	if (!strcmp(op, "sleep")) {
		struct timespec ts;
		long long ms;

		NEED(2, "sleep MS");
		ms = num(argv[1]);
		ts.tv_sec = ms / 1000;
		ts.tv_nsec = (ms % 1000) * 1000000;
		nanosleep(&ts, NULL);
		return 0;
	}
	usage("unknown op");
	return EINVAL;
}

/* Does the result (0 or errno) match "ok" or "ENAME|ENAME..."? */
static bool matches(const char *expect, int e)
{
	char *copy, *tok, *save = NULL;
	bool hit = false;
	int v;

	copy = strdup(expect);
	for (tok = strtok_r(copy, "|", &save); tok && !hit; tok = strtok_r(NULL, "|", &save)) {
		if (!strcmp(tok, "ok")) {
			hit = e == 0;
			continue;
		}
		v = nrs_errno_of(tok);
		if (v < 0)
			usage("unknown errno name in expect");
		hit = e == v;
	}
	free(copy);
	return hit;
}

int main(int argc, char **argv)
{
	int i, start, end, nstep = 0, e;
	const char *expect;

	for (i = 0; i < 26; i++)
		slots[i] = -1;
	if (argc < 2)
		usage("no step");
	for (start = 1; start < argc; start = end + 1) {
		for (end = start; end < argc && strcmp(argv[end], "--"); end++)
			;
		nstep++;
		expect = NULL;
		if (end - start >= 2 && !strcmp(argv[start], "expect")) {
			expect = argv[start + 1];
			start += 2;
		}
		if (start >= end)
			usage("empty step");
		out_len = 0;
		out_add("", 0);
		step_fd = -1;
		errno = 0;
		e = run(end - start, argv + start);
		if (step_fd >= 0)
			close(step_fd);
		if (e)
			printf("%s\n", nrs_errname(e));
		else
			printf("ok%s\n", out);
		fflush(stdout);
		if (expect && !matches(expect, e)) {
			fprintf(stderr, "nrs-syscalls: step %d (%s %s): expected %s, got %s\n",
				nstep, argv[start], end - start > 1 ? argv[start + 1] : "",
				expect, e ? nrs_errname(e) : "ok");
			return 1;
		}
	}
	for (i = 0; i < 26; i++)
		if (slots[i] >= 0)
			close(slots[i]);
	free(out);
	return 0;
}
