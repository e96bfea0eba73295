/*
 * nereusctl - administer and script nereusfs streams from a shell, through
 * the same interfaces an adapter uses: the ioctls of nereusfs.h, the
 * user.nereus.* xattrs, write() and pread().  nereusctl(8) is the manual.
 *
 * Exit status: 0 done; 1 an operation failed (the message names the errno);
 * 2 usage; 3 ESTALE (fenced: the stream's epoch is higher); 4 ESPIPE (the
 * stream's head is not the expected offset).  Scripts branch on 3 and 4.
 *
 * The command line is parsed once, by getopt_long, so options go anywhere
 * ("stat --json PATH" and "stat PATH --json" are the same); then the
 * command table (commands[]) says how many operands each command takes
 * and which options it accepts.  A new command is one entry there.
 * Numbers go through the daemon's own strict parser (parse.h N1).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "nereusfs.h"
#include "util/errname.h"
#include "util/parse.h"

#define EXIT_FAIL	1
#define EXIT_USAGE	2
#define EXIT_STALE	3
#define EXIT_SPIPE	4

#define MAX_APPEND	(1u << 20)	/* the mount's max write: one append */
#define TAIL_POLL_NS	100000000L	/* tail -f: 100 ms between polls */

static const char *prog = "nereusctl";

static const char usage_text[] =
	"usage: %1$s stat PATH [--json]\n"
	"       %1$s fence PATH EPOCH\n"
	"       %1$s trim PATH OFFSET\n"
	"       %1$s append PATH [--expect OFFSET]   (stdin, at most 1 MiB)\n"
	"       %1$s tail [-f] PATH\n"
	"       %1$s status MOUNT\n"
	"       %1$s index PATH\n"
	"       %1$s --help | --version\n"
	"Options may come anywhere on the line.  Exit status: 0 done,\n"
	"1 failed, 2 usage, 3 ESTALE (fenced), 4 ESPIPE (not at the offset).\n";

static void usage(void)
{
	fprintf(stderr, usage_text, prog);
	exit(EXIT_USAGE);
}

/* Report a failed operation; returns the exit status it maps to. */
static int fail(const char *what, const char *path, int e)
{
	fprintf(stderr, "%s: %s %s: %s (%s)\n", prog, what, path, nrs_errname(e),
		strerror(e));
	if (e == ESTALE)
		return EXIT_STALE;
	if (e == ESPIPE)
		return EXIT_SPIPE;
	return EXIT_FAIL;
}

/* The END of an index line "START END ..." (index.c X2, X3) that ends at
 * nl: both decimal (parse.h N1), else -EPROTO. */
static int index_line_end(const char *p, const char *nl, uint64_t *end)
{
	const char *sp = memchr(p, ' ', (size_t)(nl - p)), *e;
	uint64_t start;

	if (!sp || nrs_parse_u64(p, (size_t)(sp - p), &start))
		return -EPROTO;
	e = memchr(sp + 1, ' ', (size_t)(nl - sp - 1));
	if (!e)
		e = nl;
	if (nrs_parse_u64(sp + 1, (size_t)(e - sp - 1), end))
		return -EPROTO;
	return 0;
}

/* A decimal uint64_t (parse.h N1); exits with usage otherwise. */
static uint64_t parse_u64(const char *what, const char *s)
{
	uint64_t v;
	int err = nrs_parse_u64_str(s, &v);

	if (err) {
		fprintf(stderr, "%s: %s: %s: '%s'\n", prog, what,
			err == -ERANGE ? "too large for 64 bits"
				       : "not a decimal number", s);
		exit(EXIT_USAGE);
	}
	return v;
}

static int snapshot(int fd, struct nrs_ioc_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	if (ioctl(fd, NRS_IOC_SNAPSHOT, s) < 0)
		return errno;
	return s->abi == NRS_IOC_ABI ? 0 : EPROTO;
}

/* JSON string body: quotes, backslashes and control bytes escaped. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static int cmd_stat(const char *path, bool json)
{
	struct nrs_ioc_snapshot s;
	int fd = open(path, O_RDONLY | O_CLOEXEC), e;

	if (fd < 0)
		return fail("open", path, errno);
	e = snapshot(fd, &s);
	close(fd);
	if (e)
		return fail("snapshot", path, e);
	if (json) {
		printf("{\"path\": ");
		json_str(path);
		printf(", \"head\": %" PRIu64 ", \"version\": %" PRIu64
		       ", \"start\": %" PRIu64 ", \"epoch\": %" PRIu64 "}\n",
		       s.head, s.version, s.start, s.epoch);
	} else {
		printf("head %" PRIu64 "\nversion %" PRIu64 "\nstart %" PRIu64
		       "\nepoch %" PRIu64 "\n", s.head, s.version, s.start,
		       s.epoch);
	}
	return 0;
}

/* Fence and bind a handle: the stream's epoch becomes epoch (ESTALE if
 * it is higher already); the handle closes at once. */
static int cmd_fence(const char *path, uint64_t epoch)
{
	struct nrs_ioc_bind b = { .abi = NRS_IOC_ABI, .epoch = epoch };
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return fail("open", path, errno);
	if (ioctl(fd, NRS_IOC_BIND, &b) < 0)
		rc = fail("fence", path, errno);
	close(fd);
	return rc;
}

static int cmd_trim(const char *path, const char *offset)
{
	(void)parse_u64("OFFSET", offset);
	if (setxattr(path, "user.nereus.trim", offset, strlen(offset), 0) < 0)
		return fail("trim", path, errno);
	return 0;
}

/* All of stdin as one write(): one atomic append (at most 1 MiB). */
static int cmd_append(const char *path, bool expect, uint64_t off)
{
	size_t len = 0;
	void *buf;
	ssize_t n;
	int fd, rc = 0;

	/* page-aligned: the handle uses direct I/O */
	if (posix_memalign(&buf, 4096, MAX_APPEND + 1))
		return fail("allocate", "buffer", ENOMEM);
	while (len <= MAX_APPEND) {
		n = read(STDIN_FILENO, (char *)buf + len, MAX_APPEND + 1 - len);
		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = fail("read", "stdin", errno);
			goto out_free;
		}
		len += (size_t)n;
	}
	if (len > MAX_APPEND) {
		fprintf(stderr, "%s: append %s: stdin holds more than %u bytes, "
			"the most one atomic append takes (EFBIG)\n", prog, path,
			MAX_APPEND);
		rc = EXIT_FAIL;
		goto out_free;
	}
	if (len == 0)
		goto out_free;		/* nothing to append */
	fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0) {
		rc = fail("open", path, errno);
		goto out_free;
	}
	if (expect) {
		struct nrs_ioc_expect e = { .abi = NRS_IOC_ABI, .offset = off };

		if (ioctl(fd, NRS_IOC_EXPECT, &e) < 0) {
			rc = fail("expect", path, errno);
			goto out_close;
		}
	}
	n = write(fd, buf, len);
	if (n < 0)
		rc = fail("append", path, errno);
	else if ((size_t)n != len)	/* never: one write is one append */
		rc = fail("append (short write)", path, EIO);
out_close:
	close(fd);
out_free:
	free(buf);
	return rc;
}

static bool write_all(const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(STDOUT_FILENO, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* Copy the stream to stdout from its start; with follow, poll for more
 * until killed.  A trim that overtakes the reader skips to the new start. */
static int cmd_tail(const char *path, bool follow)
{
	static char buf[1 << 16];
	const struct timespec poll = { 0, TAIL_POLL_NS };
	struct nrs_ioc_snapshot s;
	uint64_t off;
	int fd = open(path, O_RDONLY | O_CLOEXEC), e;

	if (fd < 0)
		return fail("open", path, errno);
	e = snapshot(fd, &s);
	if (e)
		goto out_fail;
	off = s.start;
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), (off_t)off);

		if (n > 0) {
			if (!write_all(buf, (size_t)n)) {
				e = errno;
				close(fd);
				return fail("write", "stdout", e);
			}
			off += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ENODATA) {
			e = errno;
			goto out_fail;
		}
		if (n < 0) {		/* trimmed under us */
			e = snapshot(fd, &s);
			if (e)
				goto out_fail;
			if (s.start > off) {
				off = s.start;
				continue;
			}
		}
		if (!follow)
			break;
		nanosleep(&poll, NULL);
	}
	close(fd);
	return 0;
out_fail:
	close(fd);
	return fail("tail", path, e);
}

/*
 * The whole offset index.  user.nereus.index stops at 64 KiB with a line
 * "# N more ranges" (index.c X2); user.nereus.index.OFF goes on from the
 * range holding OFF, so page from the end of the last range printed.
 */
static int cmd_index(const char *path)
{
	static char buf[(1 << 16) + 1];	/* the xattr value limit, and a NUL */
	char name[64];
	uint64_t from = 0, end = 0;

	for (;;) {
		bool more = false;
		ssize_t n;
		char *p, *nl;

		snprintf(name, sizeof(name), "user.nereus.index.%" PRIu64, from);
		n = getxattr(path, name, buf, sizeof(buf) - 1);
		if (n < 0)
			return fail("index", path, errno);
		buf[n] = '\0';
		for (p = buf; *p; p = nl + 1) {
			uint64_t e;

			nl = strchr(p, '\n');
			if (!nl)
				return fail("index (a line without newline)", path,
					    EPROTO);
			if (p[0] == '#') {
				more = true;
				break;
			}
			if (index_line_end(p, nl, &e))
				return fail("index (a bad line)", path, EPROTO);
			if (!write_all(p, (size_t)(nl + 1 - p)))
				return fail("write", "stdout", errno);
			end = e;
		}
		if (!more)
			return 0;
		if (end <= from)	/* no progress: never from a daemon */
			return fail("index (no progress)", path, EPROTO);
		from = end;
	}
}

static int cmd_status(const char *mount)
{
	char path[4096];
	char buf[65536];
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/.nereus/status", mount) >=
	    (int)sizeof(path))
		return fail("status", mount, ENAMETOOLONG);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open", path, errno);
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (!write_all(buf, (size_t)n)) {
			n = -1;
			break;
		}
	}
	if (n < 0) {
		int e = errno;

		close(fd);
		return fail("read", path, e);
	}
	close(fd);
	return 0;
}

/* What the command line said, once getopt_long has read it. */
struct ctl_args {
	char **arg;		/* the command's operands */
	bool json, follow, expect;
	const char *expect_off;
};

#define OPT_JSON	0x1
#define OPT_FOLLOW	0x2
#define OPT_EXPECT	0x4

static int run_stat(const struct ctl_args *a)
{
	return cmd_stat(a->arg[0], a->json);
}

static int run_fence(const struct ctl_args *a)
{
	return cmd_fence(a->arg[0], parse_u64("EPOCH", a->arg[1]));
}

static int run_trim(const struct ctl_args *a)
{
	return cmd_trim(a->arg[0], a->arg[1]);
}

static int run_append(const struct ctl_args *a)
{
	return cmd_append(a->arg[0], a->expect,
			  a->expect ? parse_u64("OFFSET", a->expect_off) : 0);
}

static int run_tail(const struct ctl_args *a)
{
	return cmd_tail(a->arg[0], a->follow);
}

static int run_status(const struct ctl_args *a)
{
	return cmd_status(a->arg[0]);
}

static int run_index(const struct ctl_args *a)
{
	return cmd_index(a->arg[0]);
}

static const struct ctl_cmd {
	const char *name;
	int nargs;		/* operands after the command's name */
	unsigned int opts;	/* OPT_* it accepts */
	int (*run)(const struct ctl_args *a);
} commands[] = {
	{ "stat", 1, OPT_JSON, run_stat },
	{ "fence", 2, 0, run_fence },
	{ "trim", 2, 0, run_trim },
	{ "append", 1, OPT_EXPECT, run_append },
	{ "tail", 1, OPT_FOLLOW, run_tail },
	{ "status", 1, 0, run_status },
	{ "index", 1, 0, run_index },
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "follow", no_argument, NULL, 'f' },
		{ "expect", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_args a = { 0 };
	const struct ctl_cmd *cmd = NULL;
	unsigned int given = 0;
	int c;

	signal(SIGPIPE, SIG_IGN);
	opterr = 0;		/* our message, then the usage */
	while ((c = getopt_long(argc, argv, "fhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': a.json = true; given |= OPT_JSON; break;
		case 'f': a.follow = true; given |= OPT_FOLLOW; break;
		case 'e':
			a.expect = true;
			a.expect_off = optarg;
			given |= OPT_EXPECT;
			break;
		case 'h':
			printf(usage_text, prog);
			return 0;
		case 'V':
			printf("nereusctl %s\n", PACKAGE_VERSION);
			return 0;
		default:
			fprintf(stderr, "%s: unknown option or missing value: "
				"'%s'\n", prog, argv[optind - 1]);
			usage();
		}
	}
	if (optind >= argc)
		usage();
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[optind]);
		usage();
	}
	if (argc - optind - 1 != cmd->nargs) {
		fprintf(stderr, "%s: %s takes %d operand%s\n", prog, cmd->name,
			cmd->nargs, cmd->nargs == 1 ? "" : "s");
		usage();
	}
	if (given & ~cmd->opts) {
		unsigned int bad = given & ~cmd->opts;

		fprintf(stderr, "%s: %s does not take %s\n", prog, cmd->name,
			bad & OPT_JSON ? "--json" :
			bad & OPT_FOLLOW ? "-f" : "--expect");
		usage();
	}
	a.arg = argv + optind + 1;
	return cmd->run(&a);
}
