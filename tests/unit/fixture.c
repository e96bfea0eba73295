/* fixture.c - the unit tests' scratch directory (fixture.h). */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fixture.h"

int nrs_fixture_mkdtemp(char *dir, size_t size, const char *name)
{
	const char *base = getenv("TMPDIR");
	int n;

	if (!base || !*base)
		base = "/tmp";
	n = snprintf(dir, size, "%s/%s.XXXXXX", base, name);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (!mkdtemp(dir))
		return -errno;
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int type,
		  struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	return remove(path) ? errno : 0;	/* > 0 stops the walk */
}

int nrs_fixture_rmtree(const char *path)
{
	int rc = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	if (rc > 0)
		return -rc;
	return rc < 0 ? -errno : 0;
}
