/*
 * fsckdir.h - the fsck unit tests' fixture (test_fsck.c, test_fsck_adopt.c):
 * an nrs_fsck whose report lines are recorded in a buffer behind it, and,
 * for the object side (F20-F26), a data directory built with the real
 * modules: meta.db by src/meta/sqlite*.c, objects in the embedded store.
 * Stream 1 ("/k/s") has head OBJ_HEAD; the WAL holds only LSN 3,
 * [OBJ_WAL_BASE, OBJ_HEAD), in segment 2 (load() makes it by hand).
 */
#ifndef NRS_TEST_FSCKDIR_H
#define NRS_TEST_FSCKDIR_H

#include <stdbool.h>
#include <stdint.h>

#include "fsck/fsck.h"
#include "meta/meta.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"

struct out {
	char text[8192];
	size_t len;
};

#define OBJ_HEAD	300000
#define OBJ_WAL_BASE	200000	/* LSN 3, the one record left in the WAL */

/* An nrs_fsck and its output buffer (as above), then the directory. */
struct objdir {
	struct nrs_fsck f;
	struct out out;
	char dir[64];
	char path[512];		/* scratch */
	struct nrs_meta *m;	/* open while building */
	struct nrs_objstore *store;
	uint64_t sid;
	int64_t now_ns;		/* if set, the check's clock (F24, F26) */
	uint64_t grace_ms;	/* if set, the check's gc_grace_ms */
};

/* The report callback: the line appended to the struct out behind f (ctx). */
void record(void *ctx, enum nrs_fsck_sev sev, const char *line);
/* Run the check (it must succeed); the report's text. */
const char *run(struct nrs_fsck *f);
/* d->dir/rel, in d->path. */
const char *at(struct objdir *d, const char *rel);
/* Store an object of stream sid holding [start, end) under a recorded
 * intent (mat_object.c MZ3); its key in key, its SHA-256 in sha; returns
 * its generation, still prepared. */
uint64_t store_object(struct objdir *d, uint64_t start, uint64_t end,
		      char key[NRS_OBJKEY_MAX],
		      unsigned char sha[NRS_SHA256_LEN]);
/* store_object, then published as a committed generation (MZ4). */
uint64_t put_object(struct objdir *d, uint64_t start, uint64_t end,
		    char key[NRS_OBJKEY_MAX]);
int setup_objdir(void **state);
int teardown_objdir(void **state);
/* What nereusfs-fsck loads (tools/nereusfs-fsck.c), with the WAL record
 * LSN 3 made by hand; the store opened for reading only, as the tool does,
 * unless store is false (--no-objects). */
void load(struct objdir *d, bool store);
/* Load, check, and expect that many errors and each wanted string. */
const char *check_objdir(struct objdir *d, bool store, uint64_t errors,
			 const char *want1, const char *want2);

#endif
