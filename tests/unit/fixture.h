/*
 * fixture.h - the unit tests' scratch directory, one way for all of them.
 *
 * A test that needs files makes a fresh directory NAME.XXXXXX under
 * $TMPDIR (under /tmp when TMPDIR is unset or empty: `make check` runs
 * with the TMPDIR of the caller, so parallel trees never meet), and
 * removes it with everything in it when done.  No cmocka here: setups
 * that report failure by returning -1 use it as well as those that
 * assert.
 */
#ifndef NRS_TEST_FIXTURE_H
#define NRS_TEST_FIXTURE_H

#include <stddef.h>

/* Make the directory $TMPDIR/NAME.XXXXXX and write its path into dir
 * (size bytes).  0, or -ENAMETOOLONG (the path does not fit) or mkdtemp's
 * -errno; dir is undefined then. */
int nrs_fixture_mkdtemp(char *dir, size_t size, const char *name);

/* Remove path and everything under it, depth first, never following a
 * symbolic link.  0 or the first failure's -errno (-ENOENT: no path). */
int nrs_fixture_rmtree(const char *path);

#endif
