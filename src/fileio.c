/* fileio.c - file I/O loops shared by the modules that own files. */
#include "config.h"

#include <errno.h>
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
