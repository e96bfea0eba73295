/*
 * fixture_meta.h - a SQLite meta store in a scratch directory, for the
 * unit tests of the store, its change log and what replays it.
 *
 * nrs_fixture_meta_open makes a fresh directory (fixture.h), opens
 * DIR/meta.db in it and, if asked, sets a change-log sink that keeps a
 * copy of every change the store hands out, in order, in log[] (at most
 * NRS_FIXTURE_MAXLOG; past that one a change is counted in lost, not
 * kept).  path2 (DIR/restored.db) is a free name for a second database.
 * A failed open leaves nothing behind: no store, no directory.
 */
#ifndef NRS_TEST_FIXTURE_META_H
#define NRS_TEST_FIXTURE_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nrs_meta;

#define NRS_FIXTURE_MAXLOG	64

struct nrs_fixture_change {
	uint64_t seq;
	void *p;			/* a copy of the change, malloc'd */
	size_t len;
};

struct nrs_fixture_meta {
	char dir[64];
	char path[128], path2[128];	/* DIR/meta.db, DIR/restored.db */
	struct nrs_meta *m;
	struct nrs_fixture_change log[NRS_FIXTURE_MAXLOG];
	size_t n;			/* changes kept in log[] */
	size_t lost;			/* changes past NRS_FIXTURE_MAXLOG */
};

/* Fill *f (zeroed first): the directory $TMPDIR/NAME.XXXXXX, the store
 * open at f->path, the sink set when capture is true.  0 or -errno. */
int nrs_fixture_meta_open(struct nrs_fixture_meta *f, const char *name,
			  bool capture);

/* Close the store (if open), free the captured changes, remove the
 * directory and everything in it. */
void nrs_fixture_meta_close(struct nrs_fixture_meta *f);

/* The same on the heap, for a cmocka setup's state: NULL on failure
 * (nothing left behind); free closes it first.  free(NULL) does nothing. */
struct nrs_fixture_meta *nrs_fixture_meta_new(const char *name, bool capture);
void nrs_fixture_meta_free(struct nrs_fixture_meta *f);

#endif
