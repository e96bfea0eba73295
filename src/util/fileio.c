/* fileio.c - file I/O loops shared by the modules that own files, and
 * the state directory check (DM2 of fileio.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/log.h"

ssize_t nrs_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done,
				  (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int nrs_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

int nrs_mkdir_durable(const char *dir)
{
	char parent[4096];
	char *slash;

	if (snprintf(parent, sizeof(parent), "%s", dir) >= (int)sizeof(parent))
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)		/* DM1 */
		return -errno;
	slash = strrchr(parent, '/');
	if (!slash)
		return nrs_fsync_dir(".");
	if (slash == parent)
		slash++;
	*slash = '\0';
	return nrs_fsync_dir(parent);
}

int nrs_file_replace(const char *path, const char *tmp, const char *dir,
		     const void *buf, size_t len)
{
	size_t done = 0;
	int fd, err = 0;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  0600);					/* DM1 */
	if (fd < 0)
		return -errno;
	while (!err && done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			err = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err) {
		(void)unlink(tmp);
		return err;
	}
	return nrs_fsync_dir(dir);
}

int nrs_dir_check_private(const char *path, const char *what)
{
	struct stat st;
	uid_t me = geteuid();

	if (stat(path, &st) < 0) {
		int err = -errno;

		nrs_err("%s %s: %s", what, path, strerror(-err));
		return err;
	}
	if (!S_ISDIR(st.st_mode)) {
		nrs_err("%s %s is not a directory", what, path);
		return -ENOTDIR;
	}
	if (st.st_mode & 077) {		/* DM2 */
		nrs_err("%s %s has mode %04o: other users could read or change"
			" the daemon's state; refusing it (run: chmod 700 %s)",
			what, path, (unsigned int)(st.st_mode & 07777), path);
		return -EPERM;
	}
	if (st.st_uid != me && st.st_uid != 0) {	/* DM2 */
		nrs_err("%s %s is owned by uid %u, not by this daemon's (%u) or"
			" root; refusing it (run: chown %u %s)", what, path,
			(unsigned int)st.st_uid, (unsigned int)me,
			(unsigned int)me, path);
		return -EPERM;
	}
	return 0;
}

int nrs_fs_room(int fd, uint64_t reserve, uint64_t need)
{
	struct statvfs sv;
	uint64_t avail;

	if (reserve == 0)
		return 0;
	if (fstatvfs(fd, &sv) < 0)
		return 0;	/* cannot tell: the write itself will say */
	if (sv.f_frsize != 0 && sv.f_bavail > UINT64_MAX / sv.f_frsize)
		return 0;	/* more than anyone reserves */
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	return avail < reserve || avail - reserve < need ? -ENOSPC : 0;
}

int nrs_fs_same(const char *a, const char *b)
{
	struct stat sa, sb;

	if (stat(a, &sa) < 0 || stat(b, &sb) < 0)
		return -errno;
	return sa.st_dev == sb.st_dev;
}
