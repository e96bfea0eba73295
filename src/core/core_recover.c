/*
 * core_recover.c - `-o recover`: a data directory rebuilt from the bucket
 * alone (issue 15; DESIGN.md sections 5 and 6), before the usual start-up
 * recovery (stream/recovery.c) runs on it.
 *
 *  RB1 Only into an empty data directory, or one a killed recovery left.
 *      A data directory that holds a database, without the marker
 *      DATA/recovering that says a recovery began there and did not
 *      finish, keeps its own state: recover then only takes the bucket's
 *      ownership (core_owner.c).  Else it writes that marker (durably)
 *      before anything else and
 *      removes it only once the start-up recovery has published what it
 *      found.  So a recovery killed at any point runs again from the
 *      start of what it had not done, and converges: the checkpoint's
 *      install is atomic (meta.h nrs_meta_install, SN2) and is skipped
 *      once done; the scan and re-publication are pure functions of the
 *      store (recovery.c, RC3-RC6).
 *  RB2 From the last checkpoint, then the object WAL.  The newest usable
 *      checkpoint (checkpoint.h nrs_ckpt_restore, KP6) becomes meta.db;
 *      the object WAL is scanned from the position it covers (walgc.c MZ8
 *      kept every object from there on), its runs found by their markers
 *      (wal_object.c OW11): every object-wal append acknowledged since is
 *      re-published by RC3 if its stream was in the checkpoint.  A bucket
 *      with no checkpoint gives an empty namespace (logged).
 *  RB3 What cannot come back is said.  local-wal streams are host-bound:
 *      their local WAL is gone, so each comes back as of the checkpoint,
 *      readable up to what was materialized; the range above that reads
 *      EIO (never other bytes) and is logged per stream, with the total,
 *      once the start-up recovery ran (nrs_core_recover_report).
 *
 * Progress (wal_object_scan.c RP1): the checkpoint counts as one object
 * read, of its database's size; the object WAL's scan adds each object it
 * reads, the start-up recovery the streams it loads; the done line comes
 * once that recovery ran.  A mount without recover shows the same lines,
 * prefixed "recovery", only when its scan took a second or more.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bg/checkpoint.h"
#include "core/core_priv.h"
#include "meta/meta.h"
#include "stream/stream.h"
#include "stream/table.h"
#include "util/fileio.h"
#include "util/log.h"
#include "wal/wal.h"

#define MARKER	"recovering"

static int path_of(char *buf, size_t size, const char *dir, const char *rel)
{
	return snprintf(buf, size, "%s/%s", dir, rel) >= (int)size ?
	       -ENAMETOOLONG : 0;
}

static bool exists(const char *dir, const char *rel)
{
	char p[4096];

	return path_of(p, sizeof(p), dir, rel) == 0 && access(p, F_OK) == 0;
}

/* RB1: DATA/recovering, durably (the file and its directory). */
static int mark(const char *dir)
{
	char p[4096];
	int fd, err = path_of(p, sizeof(p), dir, MARKER);

	if (err)
		return err;
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err ? err : nrs_fsync_dir(dir);
}

int nrs_core_recover_bucket(struct nrs_core *c, const struct nrs_core_opts *o)
{
	uint64_t covered = 0, epoch = 0;
	char owal[4096];
	int err;

	(void)o;
	if (exists(c->data_dir, "meta.db") && !exists(c->data_dir, MARKER)) {
		nrs_info("recover: %s holds a database: it keeps its own state"
			 " (only the bucket's ownership is taken, core_owner.c)",
			 c->data_dir);				/* RB1 */
		return 0;
	}
	err = mark(c->data_dir);
	if (err) {
		nrs_err("recover: cannot write %s/%s: %s", c->data_dir, MARKER,
			strerror(-err));
		return err;
	}
	c->recovering = true;
	c->progress.what = "recover";
	nrs_wal_progress_tick(&c->progress, false);	/* RP1: the start */
	if (exists(c->data_dir, "meta.db")) {
		nrs_info("recover: resuming the recovery begun in %s",
			 c->data_dir);
		return 0;
	}
	nrs_info("recover: rebuilding %s from the %s store", c->data_dir,
		 c->store->ops->name);
	err = nrs_ckpt_restore(c->store, c->data_dir, &covered, &epoch); /* RB2 */
	if (err == -ENOENT) {
		nrs_warn("recover: the store holds no checkpoint: the namespace"
			 " starts empty, and WAL objects name no stream");
		return 0;
	}
	if (err) {
		nrs_err("recover: cannot restore the latest checkpoint: %s",
			strerror(-err));
		return err;
	}
	err = path_of(owal, sizeof(owal), c->data_dir, "meta.db");
	if (!err) {
		struct stat sb;

		c->progress.objects++;			/* RP1 */
		if (stat(owal, &sb) == 0)
			c->progress.bytes += (uint64_t)sb.st_size;
		nrs_wal_progress_tick(&c->progress, false);
		err = path_of(owal, sizeof(owal), c->data_dir, "owal");
	}
	if (!err)
		err = nrs_wal_object_state_init(owal, covered);
	if (err && err != -EEXIST) {
		nrs_err("recover: cannot set up %s: %s", owal, strerror(-err));
		return err;
	}
	nrs_info("recover: checkpoint installed (object WAL covered up to "
		 "%016" PRIx64 "); scanning the object WAL from there", covered);
	return 0;
}

struct lost {
	uint64_t streams, bytes, all;
};

/* RB3: a local-wal stream's range above what its objects hold. */
static void count_lost(void *ctx, struct nrs_stream *st)
{
	struct lost *l = ctx;
	uint64_t from = nrs_stream_mat_point(st);

	l->all++;
	if (st->profile == NRS_PROFILE_OBJECT_WAL || st->head <= from)
		return;
	nrs_err("recover: stream %" PRIu64 " (local-wal) could not be brought"
		" back above offset %" PRIu64 ": bytes [%" PRIu64 ", %" PRIu64
		") were only in the lost host's WAL; reads of them fail EIO",
		st->id, from, from, st->head);
	l->streams++;
	l->bytes += st->head - from;
}

int nrs_core_recover_report(struct nrs_core *c)
{
	struct lost l = { 0, 0, 0 };
	char p[4096];
	int err;

	if (c->recovering || c->progress.lines)	/* RP1: the done line */
		nrs_wal_progress_tick(&c->progress, true);
	if (!c->recovering)
		return 0;
	nrs_streams_each(&c->streams, count_lost, &l);
	nrs_info("recover: done: %" PRIu64 " streams; %" PRIu64 " bytes of %"
		 PRIu64 " local-wal streams not brought back", l.all, l.bytes,
		 l.streams);
	err = path_of(p, sizeof(p), c->data_dir, MARKER);
	if (!err && unlink(p) < 0)
		err = -errno;
	c->recovering = false;
	return err;
}
