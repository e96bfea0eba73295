/*
 * objstore_dir_list.c - deleting from the embedded object store
 * (objstore_dir.c, whose top comment gives the directory layout) and
 * listing it for nereusfs-fsck.
 *
 * del() unlinks the file, fsyncs its directory, and then removes the
 * subdirectories it emptied (best effort, not fsynced: an empty directory
 * that comes back after a crash is harmless).
 *
 * nrs_objstore_dir_foreach() lists DIR for nereusfs-fsck, which looks for
 * files no row of the objects table names; the daemon never lists (a
 * listing is never a correctness input).  Since no key has a component
 * starting with '.', such names are skipped at every depth.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objstore.h"
#include "obj/objstore_dir_priv.h"
#include "util/log.h"

int nrs_dirstore_del(struct nrs_objstore *s, const char *key)
{
	struct dir_store *d = dir_of(s);
	char *parent;
	char *slash;
	int rc;

	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	if (unlinkat(d->rootfd, key, 0) < 0) {
		rc = -errno;
		if (rc == -ENOENT || rc == -ENOTDIR || rc == -EISDIR)
			return 0;	/* no object under key */
		nrs_warn("dir store %s: delete %s: %s", d->dir, key,
			 strerror(-rc));
		return rc;
	}
	parent = strdup(key);
	if (!parent)
		return -ENOMEM;
	slash = strrchr(parent, '/');
	if (slash)
		*slash = '\0';
	rc = nrs_dirstore_fsync_at(d->rootfd, slash ? parent : ".");
	if (rc == -ENOENT)
		rc = 0;	/* another del() removed it, so it was empty */
	else if (rc < 0)
		nrs_warn("dir store %s: delete %s: fsync of its directory: %s",
			 d->dir, key, strerror(-rc));
	/* Remove the directories the unlink emptied, deepest first; the
	 * first that is not empty (or gone) ends it. */
	while (rc == 0 && slash) {
		if (unlinkat(d->rootfd, parent, AT_REMOVEDIR) < 0)
			break;
		slash = strrchr(parent, '/');
		if (slash)
			*slash = '\0';
	}
	free(parent);
	return rc;
}

/* ---- the listing, for nereusfs-fsck only (objstore.h) ------------------- */

#define WALK_DEPTH_MAX	(NRS_OBJKEY_MAX / 2)	/* deeper: no key's path */

struct walk {
	int (*cb)(void *ctx, const struct nrs_objfile *of);
	void *ctx;
	char path[PATH_MAX];	/* below DIR, of the entry at hand */
};

/* Every entry below the directory fd (closed here), whose path below DIR
 * is w->path[0, len) ("" for DIR itself), depth components deep. */
static int walk_dir(struct walk *w, int fd, size_t len, int depth)
{
	DIR *dh = fdopendir(fd);
	int rc = 0;

	if (!dh) {
		rc = -errno;
		close(fd);
		return rc;
	}
	for (;;) {
		size_t n, at = len ? len + 1 : 0;
		struct dirent *e;
		struct stat st;

		errno = 0;
		e = readdir(dh);
		if (!e) {
			rc = -errno;
			break;
		}
		if (e->d_name[0] == '.')
			continue;	/* ".", "..", .tmp: no key's component */
		n = strlen(e->d_name);
		if (at + n >= sizeof(w->path)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (len)
			w->path[len] = '/';
		memcpy(w->path + at, e->d_name, n + 1);
		if (fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			rc = errno == ENOENT ? 0 : -errno;
		else if (S_ISDIR(st.st_mode) && depth >= WALK_DEPTH_MAX)
			rc = -ENAMETOOLONG;
		else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(dh), e->d_name, O_RDONLY |
					 O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

			rc = sub < 0 ? -errno : walk_dir(w, sub, at + n,
							 depth + 1);
		} else {
			struct nrs_objfile of = {
				.name = w->path, .is_reg = S_ISREG(st.st_mode),
				.size = (uint64_t)st.st_size,
				.mtime_ns = (int64_t)st.st_mtim.tv_sec *
					    1000000000 + st.st_mtim.tv_nsec,
			};

			rc = w->cb(w->ctx, &of);
		}
		w->path[len] = '\0';
		if (rc)
			break;
	}
	closedir(dh);
	return rc;
}

int nrs_objstore_dir_foreach(struct nrs_objstore *s,
			     int (*cb)(void *ctx, const struct nrs_objfile *of),
			     void *ctx)
{
	struct dir_store *d;
	struct walk *w;
	int fd, rc;

	d = nrs_dirstore_of(s);
	if (!d)
		return -EOPNOTSUPP;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->ctx = ctx;
	/* A description of its own: readdir moves its offset. */
	fd = openat(d->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = fd < 0 ? -errno : walk_dir(w, fd, 0, 1);
	free(w);
	return rc;
}
