/*
 * main.c - the nereusfs daemon: options, recovery, mount, the request loop,
 * clean shutdown.  The only place that exits.
 *
 * Order matters:
 *  - Without -f the process forks *before* the core starts its threads (a
 *    fork keeps only the calling thread), and the parent waits until the
 *    child reports that the file system is mounted, or that it failed: the
 *    command's exit status says whether the mount is there, and the
 *    child's messages reach the terminal until then, and syslog too
 *    (log.c LG3).
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

#include "core/core.h"
#include "fuse/fuse_front.h"
#include "owner/owner.h"
#include "util/failpoint.h"
#include "util/log.h"
#include "util/parse.h"

/* Free space the WAL leaves for SQLite: its WAL grows by up to ~4 MiB
 * between checkpoints, and checkpoints may grow the database. */
#define DEFAULT_WAL_RESERVE	(64ull << 20)

/* The WAL may hold this much while the object store cannot take it. */
#define DEFAULT_WAL_BUDGET	(4ull << 30)

/* Numeric -o options: name, where the value goes, smallest value. */
enum num_opt {
	NO_SEGMENT_SIZE, NO_RESERVE, NO_BUDGET, NO_CACHE, NO_DISK_CACHE,
	NO_MAT_BYTES, NO_MAT_AGE, NO_OBJECT_SIZE, NO_MAT_THREADS, NO_GC_GRACE,
	NO_COMPACT, NO_COMMIT_LEAD, NO_OWAL_BYTES, NO_OWAL_LINGER,
	NO_OWAL_INFLIGHT, NO_OWAL_TIMEOUT, NO_CKPT_MS, NO_CKPT_BYTES,
	NO_OWNER_LEASE, NO_COUNT
};

static const struct {
	const char *name;
	uint64_t min, max;
} num_opts[NO_COUNT] = {
	[NO_SEGMENT_SIZE] = { "wal_segment_size", 1u << 20, UINT64_MAX },
	[NO_RESERVE] = { "wal_reserve", 0, UINT64_MAX },
	[NO_BUDGET] = { "wal_budget", 0, UINT64_MAX },
	[NO_CACHE] = { "cache_size", 1u << 20, UINT64_MAX },
	[NO_DISK_CACHE] = { "disk_cache_size", 1u << 20, UINT64_MAX },
	[NO_MAT_BYTES] = { "materialize_bytes", 1, UINT64_MAX },
	[NO_MAT_AGE] = { "materialize_age_ms", 1, UINT64_MAX / 1000000 },
	[NO_OBJECT_SIZE] = { "object_size", 4096, UINT32_MAX },
	[NO_MAT_THREADS] = { "materializers", 1, 64 },
	[NO_GC_GRACE] = { "gc_grace_ms", 1, UINT64_MAX / 1000000 },
	[NO_COMPACT] = { "compact_size", 0, UINT32_MAX },
	[NO_COMMIT_LEAD] = { "commit_lead", 0, 1 },
	[NO_OWAL_BYTES] = { "object_wal_bytes", 4096, 1u << 30 },
	[NO_OWAL_LINGER] = { "object_wal_linger_ms", 0, 60000 },
	[NO_OWAL_INFLIGHT] = { "object_wal_inflight", 1, 64 },
	[NO_OWAL_TIMEOUT] = { "object_wal_timeout_ms", 100,
			      UINT64_MAX / 1000000 },
	[NO_CKPT_MS] = { "checkpoint_ms", 0, UINT64_MAX / 1000000 },
	[NO_CKPT_BYTES] = { "checkpoint_bytes", 0, UINT64_MAX },
	[NO_OWNER_LEASE] = { "owner_lease_ms", NRS_OWNER_LEASE_MIN_MS,
			     NRS_OWNER_LEASE_MAX_MS },
};

struct options {
	char *data;
	char *num[NO_COUNT];
	char *s3, *s3_credentials, *s3_ca, *disk_cache, *objects;
	char *s3_region, *s3_style, *s3_signature;
	char *log_level;
	char *write_once;
	int recover;
};

#define OPT(t, f) { t, offsetof(struct options, f), 1 }
static const struct fuse_opt opt_spec[] = {
	OPT("data=%s", data),
	OPT("wal_segment_size=%s", num[NO_SEGMENT_SIZE]),
	OPT("wal_reserve=%s", num[NO_RESERVE]),
	OPT("wal_budget=%s", num[NO_BUDGET]),
	OPT("cache_size=%s", num[NO_CACHE]),
	OPT("disk_cache_size=%s", num[NO_DISK_CACHE]),
	OPT("materialize_bytes=%s", num[NO_MAT_BYTES]),
	OPT("materialize_age_ms=%s", num[NO_MAT_AGE]),
	OPT("object_size=%s", num[NO_OBJECT_SIZE]),
	OPT("materializers=%s", num[NO_MAT_THREADS]),
	OPT("gc_grace_ms=%s", num[NO_GC_GRACE]),
	OPT("compact_size=%s", num[NO_COMPACT]),
	OPT("commit_lead=%s", num[NO_COMMIT_LEAD]),
	OPT("object_wal_bytes=%s", num[NO_OWAL_BYTES]),
	OPT("object_wal_linger_ms=%s", num[NO_OWAL_LINGER]),
	OPT("object_wal_inflight=%s", num[NO_OWAL_INFLIGHT]),
	OPT("object_wal_timeout_ms=%s", num[NO_OWAL_TIMEOUT]),
	OPT("objects=%s", objects),
	OPT("checkpoint_ms=%s", num[NO_CKPT_MS]),
	OPT("checkpoint_bytes=%s", num[NO_CKPT_BYTES]),
	OPT("owner_lease_ms=%s", num[NO_OWNER_LEASE]),
	OPT("recover", recover),
	OPT("s3=%s", s3),
	OPT("s3_credentials=%s", s3_credentials),
	OPT("s3_ca=%s", s3_ca),
	OPT("s3_region=%s", s3_region),
	OPT("s3_style=%s", s3_style),
	OPT("s3_signature=%s", s3_signature),
	OPT("disk_cache=%s", disk_cache),
	OPT("log=%s", log_level),
	OPT("write_once=%s", write_once),
	FUSE_OPT_END
};

static void usage(const char *prog)
{
	printf("usage: %s [options] MOUNTPOINT\n\n"
	       "nereusfs options:\n"
	       "    -o data=DIR              data directory (default %s)\n"
	       "    -o wal_segment_size=N    bytes per WAL segment (default 64 MiB)\n"
	       "    -o wal_reserve=N         free bytes the WAL leaves to the metadata\n"
	       "                             store (default 5%% of the file system,\n"
	       "                             at least 4 MiB, at most 64 MiB)\n"
	       "    -o wal_budget=N          most bytes the WAL holds before appends\n"
	       "                             fail ENOSPC (default 4 GiB, 0: no limit)\n"
	       "    -o s3=URL                objects go to http[s]://HOST[:PORT]/BUCKET\n"
	       "                             (default: the directory DIR/objects)\n"
	       "    -o recover               take the bucket over from another daemon\n"
	       "                             that owns it; an empty data directory is\n"
	       "                             rebuilt from it: the last checkpoint, then\n"
	       "                             the object WAL (README, Profiles)\n"
	       "    -o objects=DIR           the embedded store's directory (default\n"
	       "                             DATA/objects): another disk, a shared mount\n"
	       "    -o s3_credentials=FILE   0600 file with AWS_ACCESS_KEY_ID= and\n"
	       "                             AWS_SECRET_ACCESS_KEY= (default: environment)\n"
	       "    -o s3_ca=FILE            CA certificates for https (default: system)\n"
	       "    -o s3_region=REGION      region to sign for (default: the one an AWS\n"
	       "                             host name names, else us-east-1)\n"
	       "    -o s3_style=path|virtual HOST/BUCKET/KEY or BUCKET.HOST/KEY (path)\n"
	       "    -o s3_signature=v4|v2    AWS signature version (default v4)\n"
	       "    -o materialize_bytes=N   materialize a stream once N bytes wait\n"
	       "                             (default 4 MiB)\n"
	       "    -o materialize_age_ms=N  ... or once the oldest waited N ms (5000)\n"
	       "    -o object_size=N         most payload bytes per object (16 MiB)\n"
	       "    -o materializers=N       materializer threads (default 2)\n"
	       "    -o gc_grace_ms=N         unneeded objects are deleted after N ms\n"
	       "                             (default 60000)\n"
	       "    -o compact_size=N        merge objects below N/4 bytes into objects\n"
	       "                             of at most N (default 64 MiB, 0: off)\n"
	       "    -o write_once=auto|off   auto: large WAL records become objects in\n"
	       "                             place when the embedded store shares the\n"
	       "                             WAL's file system (default auto)\n"
	       "    -o checkpoint_ms=N       a checkpoint of the metadata in the object\n"
	       "                             store every N ms (default 60000, 0: off)\n"
	       "    -o checkpoint_bytes=N    ... and after N bytes of object WAL\n"
	       "                             (default 256 MiB, 0: off)\n"
	       "    -o cache_size=N          memory block cache bytes (default 128 MiB)\n"
	       "    -o disk_cache=DIR        a disk block cache in DIR (default none)\n"
	       "    -o disk_cache_size=N     its size in bytes (default 1 GiB)\n"
	       "    -o commit_lead=0|1       an append to an idle pipeline is committed\n"
	       "                             by the thread that received it (default 1)\n"
	       "    -o object_wal_bytes=N    object-wal: PUT a WAL object once it holds\n"
	       "                             N bytes (default 512 KiB)\n"
	       "    -o object_wal_linger_ms=N  ... or N ms after its first append (5)\n"
	       "    -o object_wal_inflight=N WAL objects PUT at once (default 8)\n"
	       "    -o object_wal_timeout_ms=N an object-wal append not proven stored\n"
	       "                             after N ms fails ETIMEDOUT (30000)\n"
	       "    -o owner_lease_ms=N      the bucket owner's lease (default 15000,\n"
	       "                             30 to 60000)\n"
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
	nrs_log_to_syslog(false);	/* log.c LG3: syslog alone now */
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

/* Numeric -o option i, if given, into *out: 0, or -EINVAL (said why).
 * Plain decimal only (parse.h N1): no sign, space, prefix or suffix. */
static int parse_num(const struct options *o, enum num_opt i, uint64_t *out)
{
	const char *s = o->num[i];

	if (!s)
		return 0;
	if (nrs_parse_u64_range(s, num_opts[i].min, num_opts[i].max, out)) {
		fprintf(stderr, "nereusfs: %s must be a decimal number from %"
			PRIu64 " to %" PRIu64 ", not '%s'\n", num_opts[i].name,
			num_opts[i].min, num_opts[i].max, s);
		return -EINVAL;
	}
	return 0;
}

/* The s3_region, s3_style and s3_signature options into co->s3. */
static int parse_s3(const struct options *o, struct nrs_core_opts *co)
{
	static const char *const what[] = {
		"s3_region", "a region name such as eu-central-1",
		"s3_style", "path or virtual",
		"s3_signature", "v4 or v2",
	};
	const char *vals[] = { o->s3_region, o->s3_style, o->s3_signature };

	for (size_t i = 0; i < 3; i++) {
		if (!vals[i])
			continue;
		if (nrs_s3_opt_parse(&co->s3, what[2 * i], vals[i]) < 0) {
			fprintf(stderr, "nereusfs: %s must be %s, not '%s'\n",
				what[2 * i], what[2 * i + 1], vals[i]);
			return -EINVAL;
		}
	}
	return 0;
}

/* Every numeric option into co. */
static int parse_nums(const struct options *o, struct nrs_core_opts *co)
{
	uint64_t threads = 0, lead = 1, inflight = 0;
	int err;

	err = parse_num(o, NO_SEGMENT_SIZE, &co->wal_segment_size) ?:
	      parse_num(o, NO_RESERVE, &co->wal_reserve) ?:
	      parse_num(o, NO_BUDGET, &co->wal_budget) ?:
	      parse_num(o, NO_CACHE, &co->cache_size) ?:
	      parse_num(o, NO_DISK_CACHE, &co->disk_cache_size) ?:
	      parse_num(o, NO_MAT_BYTES, &co->mat_min_bytes) ?:
	      parse_num(o, NO_MAT_AGE, &co->mat_max_age_ms) ?:
	      parse_num(o, NO_OBJECT_SIZE, &co->object_size) ?:
	      parse_num(o, NO_MAT_THREADS, &threads) ?:
	      parse_num(o, NO_GC_GRACE, &co->gc_grace_ms) ?:
	      parse_num(o, NO_COMPACT, &co->compact_size) ?:
	      parse_num(o, NO_COMMIT_LEAD, &lead) ?:
	      parse_num(o, NO_OWAL_BYTES, &co->owal_bytes) ?:
	      parse_num(o, NO_OWAL_LINGER, &co->owal_linger_ms) ?:
	      parse_num(o, NO_OWAL_INFLIGHT, &inflight) ?:
	      parse_num(o, NO_OWAL_TIMEOUT, &co->owal_timeout_ms) ?:
	      parse_num(o, NO_CKPT_MS, &co->ckpt_ms) ?:
	      parse_num(o, NO_CKPT_BYTES, &co->ckpt_bytes) ?:
	      parse_num(o, NO_OWNER_LEASE, &co->owner_lease_ms);
	co->recover = o->recover != 0;
	co->mat_threads = (unsigned int)threads;
	co->owal_inflight = (unsigned int)inflight;
	co->owal_linger_set = o->num[NO_OWAL_LINGER] != NULL;
	/* checkpoint_*=0: off (0 in co is the default) */
	if (o->num[NO_CKPT_MS] && co->ckpt_ms == 0)
		co->ckpt_ms = UINT64_MAX;
	if (o->num[NO_CKPT_BYTES] && co->ckpt_bytes == 0)
		co->ckpt_bytes = UINT64_MAX;
	co->no_commit_lead = lead == 0;
	if (err || !o->num[NO_COMPACT])
		return err;
	if (co->compact_size == 0) {
		co->compact_size = UINT64_MAX;	/* compact_size=0: off */
	} else if (co->compact_size < 4096) {
		fprintf(stderr, "nereusfs: compact_size must be 0 (off) or at"
			" least 4096\n");
		return -EINVAL;
	}
	return err;
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
	if (!o.data[0]) {
		fprintf(stderr, "nereusfs: data= needs a directory\n");
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
	co.wal_reserve = DEFAULT_WAL_RESERVE;	/* at most: WA5 scales it */
	co.wal_reserve_auto = !o.num[NO_RESERVE];
	co.wal_budget = DEFAULT_WAL_BUDGET;
	co.s3_url = o.s3;
	co.s3_credentials = o.s3_credentials;
	co.s3_ca_file = o.s3_ca;
	if (parse_s3(&o, &co))
		goto out_args;
	co.disk_cache = o.disk_cache;
	/* The daemon runs in "/" once detached: a relative path would name
	 * another directory than the one the admin meant (nereusfs(8)). */
	if (o.disk_cache && o.disk_cache[0] != '/') {
		fprintf(stderr, "nereusfs: disk_cache must be an absolute path,"
			" not '%s'\n", o.disk_cache);
		goto out_args;
	}
	co.objects_dir = o.objects;
	if (o.objects && (o.objects[0] != '/' || o.s3)) {
		fprintf(stderr, "nereusfs: objects must be an absolute path,"
			" and names the embedded store (not with s3=): '%s'\n",
			o.objects);
		goto out_args;
	}
	if (parse_nums(&o, &co))
		goto out_args;
	if (o.write_once && strcmp(o.write_once, "auto") != 0 &&
	    strcmp(o.write_once, "off") != 0) {
		fprintf(stderr, "nereusfs: write_once must be auto or off, not"
			" '%s'\n", o.write_once);
		goto out_args;
	}
	co.write_once = !o.write_once || strcmp(o.write_once, "auto") == 0;
	/* The kernel checks permissions from the attributes we report. */
	if (fuse_opt_add_arg(&args, "-odefault_permissions,fsname=nereusfs,"
			     "subtype=nereusfs") != 0)
		goto out_args;

	if (!fo.foreground) {
		int r = detach_start(&detach_fd, &ret);

		if (r != 0)	/* the parent, done (ret), or no fork (1) */
			goto out_args;
		/* log.c LG3: the start (recovery's progress, RP1) reaches
		 * syslog too, not only the terminal the parent lends us */
		nrs_log_to_syslog(true);
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
	/* pending appends complete before the session goes away; exit 0
	 * only once the data directory is durable (core.c U1) */
	if (nrs_core_close(c) != 0)
		ret = 1;
	c = NULL;
	fuse_session_destroy(se);
out_core:
	nrs_core_free(c);
	nrs_log_flush(true);	/* what the rate limit held back (log.c LG2) */
	if (ret == 0)
		nrs_info("unmounted cleanly");
out_args:
	if (detach_fd >= 0)
		close(detach_fd);	/* the parent reads EOF: failed */
	free(fo.mountpoint);
	free(o.data);
	for (int i = 0; i < NO_COUNT; i++)
		free(o.num[i]);
	free(o.s3);
	free(o.s3_credentials);
	free(o.s3_ca);
	free(o.s3_region);
	free(o.s3_style);
	free(o.s3_signature);
	free(o.disk_cache);
	free(o.objects);
	free(o.log_level);
	free(o.write_once);
	fuse_opt_free_args(&args);
	return ret;
}
