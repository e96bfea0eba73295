/*
 * main.c - the nereusfs daemon: options, recovery, mount, the request loop,
 * clean shutdown.  The only place that exits.
 *
 * Order matters:
 *  - Without -f the process forks *before* the core starts its threads (a
 *    fork keeps only the calling thread), and the parent waits until the
 *    child reports that the file system is mounted, or that it failed: the
 *    command's exit status says whether the mount is there, and the
 *    child's error messages reach the terminal until then.
 *  - The core recovers (DESIGN.md section 6) before the mount appears, so
 *    nothing can read a head that recovery is about to move.
 *  - At unmount the request loop ends first, then the core completes every
 *    pending append and stops.
 */
#include "config.h"

#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "failpoint.h"
#include "fuse_front.h"
#include "log.h"

/* Free space the WAL leaves for SQLite: its WAL grows by up to ~4 MiB
 * between checkpoints, and checkpoints may grow the database. */
#define DEFAULT_WAL_RESERVE	(64ull << 20)

struct options {
	char *data;
	char *segment_size;
	char *reserve;
	char *log_level;
};

#define OPT(t, f) { t, offsetof(struct options, f), 1 }
static const struct fuse_opt opt_spec[] = {
	OPT("data=%s", data),
	OPT("wal_segment_size=%s", segment_size),
	OPT("wal_reserve=%s", reserve),
	OPT("log=%s", log_level),
	FUSE_OPT_END
};

static void usage(const char *prog)
{
	printf("usage: %s [options] MOUNTPOINT\n\n"
	       "nereusfs options:\n"
	       "    -o data=DIR              data directory (default %s)\n"
	       "    -o wal_segment_size=N    bytes per WAL segment (default 64 MiB)\n"
	       "    -o wal_reserve=N         free bytes the WAL leaves to the metadata\n"
	       "                             store (default 64 MiB)\n"
	       "    -o log=LEVEL             error, warning, info (default), debug\n\n",
	       prog, "/var/lib/nereusfs, or ~/.local/share/nereusfs if not root");
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

static char *default_data_dir(void)
{
	const char *home = getenv("HOME");
	char *p = NULL;

	if (geteuid() == 0 || !home)
		return strdup("/var/lib/nereusfs");
	if (asprintf(&p, "%s/.local/share/nereusfs", home) < 0)
		return NULL;
	return p;
}

/*
 * Fork.  In the child, returns 0 with *fd the pipe on which to report the
 * mount.  In the parent, waits for that report and returns 1 with *status
 * the exit status (0: mounted; nothing, or anything else: failed).  -1 if
 * the fork itself failed.
 */
static int detach_start(int *fd, int *status)
{
	int pfd[2];
	pid_t pid;

	if (pipe(pfd) < 0) {
		perror("nereusfs: pipe");
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		perror("nereusfs: fork");
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid > 0) {
		char st = 1;

		close(pfd[1]);
		if (read(pfd[0], &st, 1) != 1)
			st = 1;
		close(pfd[0]);
		*status = st == 0 ? 0 : 1;
		return 1;
	}
	close(pfd[0]);
	if (setsid() < 0)
		perror("nereusfs: setsid");
	*fd = pfd[1];
	return 0;
}

/* Mounted: let the parent go, leave the terminal, log to syslog. */
static void detach_finish(int fd)
{
	char ok = 0;
	int nullfd;

	if (chdir("/") < 0)
		nrs_warn("chdir /: %s", strerror(errno));
	nrs_log_to_syslog();
	nullfd = open("/dev/null", O_RDWR);
	if (nullfd >= 0) {
		dup2(nullfd, STDIN_FILENO);
		dup2(nullfd, STDOUT_FILENO);
		dup2(nullfd, STDERR_FILENO);
		if (nullfd > STDERR_FILENO)
			close(nullfd);
	}
	if (write(fd, &ok, 1) != 1)
		nrs_warn("cannot tell the starting process that we mounted");
	close(fd);
}

/* -o NAME=VALUE as a number of bytes >= min: 0, or -EINVAL (said why). */
static int parse_bytes(const char *name, const char *s, uint64_t min,
		       uint64_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *end || *s == '-' || errno == ERANGE || v < min) {
		fprintf(stderr, "nereusfs: %s must be a number of bytes >= %"
			PRIu64 ", not '%s'\n", name, min, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_level(const char *s)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fo;
	struct nrs_core_opts co;
	struct options o = { 0 };
	struct fuse_session *se = NULL;
	struct fuse_loop_config *lc = NULL;
	struct nrs_core *c = NULL;
	int ret = 1, err, detach_fd = -1;

	if (fuse_opt_parse(&args, &o, opt_spec, NULL) != 0)
		return 1;
	if (fuse_parse_cmdline(&args, &fo) != 0)
		return 1;
	if (fo.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_args;
	}
	if (fo.show_version) {
		printf("nereusfs %s\n", PACKAGE_VERSION);
		fuse_lowlevel_version();
		ret = 0;
		goto out_args;
	}
	if (!fo.mountpoint) {
		fprintf(stderr, "usage: %s [options] MOUNTPOINT (--help for more)\n",
			argv[0]);
		goto out_args;
	}
	if (o.log_level) {
		int l = parse_level(o.log_level);

		if (l < 0) {
			fprintf(stderr, "nereusfs: bad log level '%s'\n", o.log_level);
			goto out_args;
		}
		nrs_log_set_level(l);
	} else if (fo.debug) {
		nrs_log_set_level(NRS_LOG_DEBUG);
	}
	memset(&co, 0, sizeof(co));
	if (!o.data)
		o.data = default_data_dir();
	if (!o.data) {
		fprintf(stderr, "nereusfs: out of memory\n");
		goto out_args;
	}
	if (o.data[0] != '/') {
		/* fuse_daemonize() changes to "/" */
		char *cwd = getcwd(NULL, 0), *abs = NULL;

		if (!cwd || asprintf(&abs, "%s/%s", cwd, o.data) < 0) {
			free(cwd);
			fprintf(stderr, "nereusfs: cannot resolve %s\n", o.data);
			goto out_args;
		}
		free(cwd);
		free(o.data);
		o.data = abs;
	}
	co.data_dir = o.data;
	co.wal_reserve = DEFAULT_WAL_RESERVE;
	if ((o.segment_size && parse_bytes("wal_segment_size", o.segment_size,
					   1u << 20, &co.wal_segment_size)) ||
	    (o.reserve && parse_bytes("wal_reserve", o.reserve, 0,
				      &co.wal_reserve)))
		goto out_args;
	/* The kernel checks permissions from the attributes we report. */
	if (fuse_opt_add_arg(&args, "-odefault_permissions,fsname=nereusfs,"
			     "subtype=nereusfs") != 0)
		goto out_args;

	if (!fo.foreground) {
		int r = detach_start(&detach_fd, &ret);

		if (r != 0)	/* the parent, done (ret), or no fork (1) */
			goto out_args;
	}
	/* tests only (failpoint.c); a spec that does not parse is fatal */
	if (nrs_failpoint_init() != 0)
		goto out_args;
	err = nrs_core_new(&co, &c);
	if (err) {
		fprintf(stderr, "nereusfs: cannot start on %s: %s\n", co.data_dir,
			strerror(-err));
		goto out_args;
	}
	se = nrs_fuse_session_new(&args, c);
	if (!se)
		goto out_core;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, fo.mountpoint) != 0)
		goto out_signals;
	nrs_info("mounted %s (data %s)", fo.mountpoint, co.data_dir);
	if (detach_fd >= 0) {
		detach_finish(detach_fd);
		detach_fd = -1;
	}
	if (fo.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		lc = fuse_loop_cfg_create();
		if (!lc) {
			ret = 1;
			goto out_unmount;
		}
		fuse_loop_cfg_set_clone_fd(lc, fo.clone_fd);
		fuse_loop_cfg_set_max_threads(lc, fo.max_threads ? fo.max_threads : 64);
		fuse_loop_cfg_set_idle_threads(lc, fo.max_idle_threads != UINT_MAX ?
					       fo.max_idle_threads : 16);
		ret = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	ret = ret != 0;
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	/* pending appends complete before the session goes away */
	nrs_core_free(c);
	c = NULL;
	fuse_session_destroy(se);
out_core:
	nrs_core_free(c);
	if (ret == 0)
		nrs_info("unmounted cleanly");
out_args:
	if (detach_fd >= 0)
		close(detach_fd);	/* the parent reads EOF: failed */
	free(fo.mountpoint);
	free(o.data);
	free(o.segment_size);
	free(o.reserve);
	free(o.log_level);
	fuse_opt_free_args(&args);
	return ret;
}
