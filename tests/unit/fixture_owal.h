/*
 * fixture_owal.h - the scratch directory of the object WAL's unit tests:
 * root = $TMPDIR/NAME.XXXXXX (fixture.h), the embedded directory store
 * open on root/objects, and root/owal free for the WAL's state directory
 * (struct nrs_wal_object_opts dir).  A test that wraps the store (faults)
 * wraps f->store; the WAL must be closed before the fixture.
 */
#ifndef NRS_TEST_FIXTURE_OWAL_H
#define NRS_TEST_FIXTURE_OWAL_H

struct nrs_objstore;
struct nrs_wal;
struct nrs_wal_pos;

struct nrs_fixture_owal {
	char root[4096], objs[4200], state[4200];
	struct nrs_objstore *store;	/* the directory store on objs */
};

/* Fill *f: the directory, the store open.  0 or -errno; on failure
 * nothing is left behind. */
int nrs_fixture_owal_open(struct nrs_fixture_owal *f, const char *name);

/* Close the store, remove root and everything in it: 0 or the removal's
 * -errno. */
int nrs_fixture_owal_close(struct nrs_fixture_owal *f);

/* Write a batch of one append (one record of 1000 bytes, stream 9) to w:
 * *pos where it went, *end just past it.  0 or nrs_wal_write's -errno. */
int nrs_fixture_owal_batch(struct nrs_wal *w, struct nrs_wal_pos *pos,
			   struct nrs_wal_pos *end);

#endif
