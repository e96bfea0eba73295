/*
 * core.c - the stream core's life cycle: the data directory, the start of
 * the stores, the WAL, recovery and the pipelines, and the clean close.
 * Handles and reads are in core_handle.c, appends and fences in
 * core_append.c, namespace operations in core_ns.c, xattrs in
 * core_xattr.c, the virtual files in core_virtual.c, the object side and
 * the services seam in core_obj.c, recovery in stream/recovery.c, the
 * stream table in stream/table.c.
 *
 * Data directory layout (DESIGN.md section 7), every file 0600 and every
 * directory 0700 (fileio.h DM1), the directory itself refused at start if
 * anyone else may read or write it (DM2), and its own name made durable
 * at every start (DM3):
 *   DIR/lock      flock(2)ed by the daemon that owns the directory
 *   DIR/meta.db   the metadata store (meta_sqlite.c)
 *   DIR/wal/      local WAL segments (wal_local.c)
 *   DIR/objects/  the embedded object store (objstore_dir.c), unless -o s3
 *
 *  DM3 The data directory's name is durable before anything in it is
 *     acknowledged: it is made (or found) and its parent fsynced at every
 *     start (nrs_mkdir_durable), since a run that made it may have died
 *     before that sync, and a power cut would then take the directory
 *     and every acknowledged byte in it.  A parent the daemon may not
 *     read (EACCES, EPERM: an operator's choice) is logged and the mount
 *     goes on, if the directory exists.
 *
 * Clean close (U1).  nrs_core_close() stops every thread, then makes the
 * data directory durable before it reports success, so that a power loss
 * after a clean unmount finds exactly what the daemon left (DESIGN.md I7):
 * the WAL's segments and directory (wal.h sync_all: by then already
 * durable, each batch synced when acknowledged and each cut by WA7, so
 * this is the check that the log is whole, -EIO for a broken one),
 * meta.db once SQLite has checkpointed and closed it (its -wal and -shm
 * files then are gone, and so must their names be), DIR/objects (each
 * object is synced by its put, the subdirectories a delete emptied are
 * not) and DIR itself (the names lock, meta.db, wal, objects).  The
 * daemon exits 0 only then.
 *
 * The commit hook the pipelines get (commit_hook) drops the kernel's
 * cached page holding the old head: core_handle.c says why (page cache).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "commit/pipeline.h"
#include "core/core_priv.h"
#include "obj/bcache.h"
#include "obj/objstore.h"
#include "stream/recovery.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/sat.h"
#include "wal/wal.h"

static void commit_hook(void *ctx, struct nrs_stream *st, uint64_t old_head)
{
	struct nrs_core *c = ctx;

	if (c->inval)
		c->inval(c->inval_ctx, st->ino, old_head & ~(uint64_t)4095);
}

void nrs_core_set_inval(struct nrs_core *c, nrs_inval_fn fn, void *ctx)
{
	c->inval = fn;
	c->inval_ctx = ctx;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int lock_data_dir(const char *dir, int *fd_out)
{
	char path[4096];
	int fd, err;

	if (snprintf(path, sizeof(path), "%s/lock", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		close(fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}

/*
 * WA5 at mount: the reserve of the WAL, scaled down to the file system of
 * the data directory unless the admin gave one, and a warning (log and
 * /.nereus/status) when it leaves no room for appends: a file system no
 * larger than the reserve (every append fails ENOSPC), or one with less
 * free space than it (until space is freed); a reserve scaled down is
 * said too, as SQLite's room on the disk is then small.
 */
static void choose_reserve(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct statvfs sv;
	uint64_t fs, avail;

	c->wal_reserve = o->wal_reserve;
	if (statvfs(c->data_dir, &sv) < 0) {
		nrs_warn("statvfs %s: %s: wal_reserve stays %" PRIu64,
			 c->data_dir, strerror(errno), c->wal_reserve);
		return;
	}
	fs = (uint64_t)sv.f_blocks * sv.f_frsize;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (o->wal_reserve_auto) {
		c->wal_reserve = nrs_wal_reserve_scaled(o->wal_reserve, fs);
		c->reserve_scaled = c->wal_reserve < o->wal_reserve;
	}
	if (c->wal_reserve == 0)
		return;
	if (fs <= c->wal_reserve) {
		c->space_warning = "fs_smaller_than_reserve";
		nrs_warn("the file system of %s holds %" PRIu64 " bytes, no more"
			 " than wal_reserve (%" PRIu64 "): every append will fail"
			 " ENOSPC; use a larger file system or a smaller -o"
			 " wal_reserve", c->data_dir, fs, c->wal_reserve);
	} else if (avail <= c->wal_reserve) {
		c->space_warning = "free_below_reserve";
		nrs_warn("the file system of %s has %" PRIu64 " bytes free, no"
			 " more than wal_reserve (%" PRIu64 "): appends fail"
			 " ENOSPC until space is freed", c->data_dir, avail,
			 c->wal_reserve);
	} else if (c->reserve_scaled) {
		c->space_warning = "reserve_scaled";
		nrs_warn("the file system of %s is small (%" PRIu64 " bytes):"
			 " wal_reserve scaled down from %" PRIu64 " to %" PRIu64
			 " (5%%, at least 4 MiB; -o wal_reserve sets it)",
			 c->data_dir, fs, o->wal_reserve, c->wal_reserve);
	}
}

int nrs_core_new(const struct nrs_core_opts *o, struct nrs_core **out)
{
	struct nrs_wal_local_opts wo = {
		.segment_size = o->wal_segment_size,
		.reserve = o->wal_reserve,
		.budget = o->wal_budget,
	};
	pthread_rwlockattr_t ga;
	struct nrs_recover_env rec;
	struct nrs_pipeline_cfg pc;
	struct nrs_core *c;
	char path[4096];
	uint64_t next_lsn = 1;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->lock_fd = -1;
	nrs_metrics_init(&c->metrics);
	pthread_mutex_init(&c->admin, NULL);
	pthread_mutex_init(&c->mlock, NULL);
	pthread_cond_init(&c->mcond, NULL);
	pthread_mutex_init(&c->hlock, NULL);
	nrs_pool_init(&c->ar_pool, NRS_AR_BLOCK, NRS_AR_POOL_MAX);
	nrs_streams_init(&c->streams);
	/* the reclaimer must get through a steady stream of readers */
	pthread_rwlockattr_init(&ga);
	pthread_rwlockattr_setkind_np(&ga,
		PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&c->gate, &ga);
	pthread_rwlockattr_destroy(&ga);
	c->started_ns = nrs_now_real_ns();
	c->owal_timeout_ms = o->owal_timeout_ms ? o->owal_timeout_ms : 30000;
	c->data_dir = strdup(o->data_dir);
	if (!c->data_dir) {
		err = -ENOMEM;
		goto out_free;
	}
	err = nrs_mkdir_durable(o->data_dir);			/* DM3 */
	if ((err == -EACCES || err == -EPERM) && is_dir(o->data_dir)) {
		nrs_warn("cannot sync the directory holding %s (%s): a power"
			 " cut soon after its creation may lose it",
			 o->data_dir, strerror(-err));
		err = 0;
	}
	if (err) {
		nrs_err("cannot create data directory %s: %s", o->data_dir,
			strerror(-err));
		goto out_free;
	}
	err = nrs_dir_check_private(o->data_dir, "data directory");	/* DM2 */
	if (err)
		goto out_free;
	err = lock_data_dir(o->data_dir, &c->lock_fd);
	if (err) {
		nrs_err("cannot lock data directory %s: %s", o->data_dir,
			err == -EBUSY ? "another nereusfs is using it"
				      : strerror(-err));
		goto out_free;
	}
	choose_reserve(c, o);		/* WA5 */
	wo.reserve = c->wal_reserve;
	err = nrs_core_store_open(c, o);
	if (!err && o->recover)
		err = nrs_core_recover_bucket(c, o);	/* RB1, RB2 */
	if (err)
		goto out_free;
	snprintf(path, sizeof(path), "%s/meta.db", o->data_dir);
	err = nrs_meta_open(path, &c->meta);
	if (err) {
		nrs_err("cannot open metadata %s: %s", path, strerror(-err));
		goto out_free;
	}
	/* Metadata growth stops at twice the WAL's reserve (meta_sqlite.c
	 * MS1): a user filling the disk through names and xattrs leaves
	 * appends wal_reserve bytes, and removals the rest. */
	err = nrs_meta_set_reserve(c->meta, nrs_sat_mul(c->wal_reserve, 2));
	if (err) {
		nrs_err("metadata %s: %s", path, strerror(-err));
		goto out_free;
	}
	err = nrs_core_wal_first_seg(c, o, &wo.first_seg);	/* CO3 */
	if (err)
		goto out_free;
	snprintf(path, sizeof(path), "%s/wal", o->data_dir);
	err = nrs_wal_local_open(path, &wo, &c->wal);
	if (err) {
		nrs_err("cannot open WAL %s: %s", path, strerror(-err));
		goto out_free;
	}
	err = nrs_core_obj_open(c, o);
	if (err)
		goto out_free;
	rec = (struct nrs_recover_env){
		.meta = c->meta,
		.wal = c->wal,
		.owal = c->owal,
		.streams = &c->streams,
		.data_dir = c->data_dir,
		.progress = &c->progress,		/* RP1 */
	};
	if (!c->progress.what)
		c->progress.what = "recovery";
	err = nrs_recover(&rec, &next_lsn);
	if (!err)
		err = nrs_core_recover_report(c);	/* RB3 */
	if (err)
		goto out_free;
	/* One pipeline per WAL (pipeline.c PL7): a batch that waits for
	 * the bucket never holds a local-wal batch behind it. */
	atomic_init(&c->lsn, next_lsn);
	memset(&pc, 0, sizeof(pc));
	pc.wal = c->wal;
	pc.meta = c->meta;
	pc.metrics = &c->metrics;
	pc.lsn_source = &c->lsn;
	pc.max_batch_bytes = o->max_batch_bytes;
	pc.lead = !o->no_commit_lead;
	pc.hook = commit_hook;
	pc.hook_ctx = c;
	pc.put = nrs_stream_put;
	err = nrs_pipeline_start(&pc, &c->pipe);
	if (!err && c->owal) {
		pc.wal = c->owal;
		pc.fence_records = true;	/* PL9: epochs in the bucket */
		err = nrs_pipeline_start(&pc, &c->opipe);
	}
	if (err)
		goto out_free;
	err = nrs_core_obj_start(c, o) ?:
	      nrs_core_metalog_start(c);		/* NS1 */
	if (err)
		goto out_free;
	*out = c;
	return 0;
out_free:
	nrs_core_free(c);
	return err;
}

/* fsync DIR/rel ("" for DIR); a missing one is fine unless must. */
static int sync_entry(const char *dir, const char *rel, bool must)
{
	char path[4096];
	int fd, err = 0;

	if (snprintf(path, sizeof(path), "%s%s%s", dir, *rel ? "/" : "", rel) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT && !must ? 0 : -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (err)
		nrs_err("clean close: fsync of %s: %s", path, strerror(-err));
	return err;
}

/* U1, once SQLite is closed: files before the directory naming them. */
static int sync_data_dir(const char *dir)
{
	static const char *const files[] = {
		"meta.db", "meta.db-wal", "objects", "wal", "",
	};
	int err = 0;

	for (size_t i = 0; !err && i < sizeof(files) / sizeof(files[0]); i++)
		err = sync_entry(dir, files[i], i == 0 || !*files[i]);
	return err;
}

static int core_free(struct nrs_core *c, bool sync)
{
	int err = 0;

	nrs_core_metalog_stop(c);
	nrs_core_obj_close(c);
	nrs_pipeline_stop(c->pipe);
	nrs_pipeline_stop(c->opipe);
	/* handles the kernel did not release before the session ended */
	while (c->handles)
		nrs_core_release(c, c->handles);
	nrs_streams_destroy(&c->streams);
	if (c->bcache)
		nrs_bcache_close(c->bcache);
	nrs_wal_close(c->owal);		/* before the store it PUTs to */
	nrs_core_owner_close(c);	/* the fencing store, then its store */
	nrs_obj_close(c->store);
	if (sync && c->wal)
		err = nrs_wal_sync_all(c->wal);		/* U1 */
	nrs_wal_close(c->wal);
	nrs_meta_close(c->meta);
	if (sync && !err)
		err = sync_data_dir(c->data_dir);	/* U1 */
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	pthread_rwlock_destroy(&c->gate);
	pthread_mutex_destroy(&c->admin);
	pthread_mutex_destroy(&c->mlock);
	pthread_cond_destroy(&c->mcond);
	pthread_mutex_destroy(&c->hlock);
	nrs_pool_destroy(&c->ar_pool);	/* the pipelines completed them all */
	free(c->data_dir);
	free(c);
	return err;
}

void nrs_core_free(struct nrs_core *c)
{
	if (c)
		(void)core_free(c, false);
}

int nrs_core_close(struct nrs_core *c)
{
	return c ? core_free(c, true) : 0;
}

int nrs_core_statfs(struct nrs_core *c, struct statvfs *out)
{
	if (statvfs(c->data_dir, out) < 0)
		return -errno;
	out->f_namemax = NRS_NAME_MAX;
	return 0;
}


