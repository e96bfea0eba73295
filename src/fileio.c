/* fileio.c - file I/O loops shared by the modules that own files. */
#include "config.h"

#include <errno.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fileio.h"

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
