/*
 * fsck.h - the checks of nereusfs-fsck over an in-memory copy of a data
 * directory's metadata and WAL records.
 *
 * The caller (tools/nereusfs-fsck.c, or a unit test) fills a struct
 * nrs_fsck through the nrs_fsck_add_* functions, whose signatures fit the
 * listing callbacks of meta.h and wal.h, then calls nrs_fsck_check(), which
 * reports every inconsistency through the report callback, one line each.
 * The only I/O happens through the object store the caller may lend (F21,
 * F23-F26).  The checks F1..F31 are listed at the top of fsck.c.
 */
#ifndef NRS_FSCK_H
#define NRS_FSCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"
#include "obj/objstore.h"
#include "wal/wal.h"

enum nrs_fsck_sev {
	NRS_FSCK_ERROR,		/* an inconsistency: exit status 1 */
	NRS_FSCK_PENDING,	/* work the next mount does (re-publish, GC):
				 * fine */
	NRS_FSCK_INFO,		/* said with -v only */
	NRS_FSCK_WARNING,	/* nothing inconsistent, but left for good
				 * (F32): said, the exit status kept */
};

/* line: "Fn where: what", no newline; valid during the call. */
typedef void (*nrs_fsck_report_cb)(void *ctx, enum nrs_fsck_sev sev,
				   const char *line);

struct nrs_fsck_dirent {
	uint64_t parent, ino;
	size_t len;			/* as stored, may exceed NRS_NAME_MAX */
	char name[NRS_NAME_MAX + 1];	/* the first bytes, NUL-terminated */
};

struct nrs_fsck {
	struct nrs_attr *inodes;		/* sorted by ino by check */
	size_t ninodes, icap;
	struct nrs_fsck_dirent *dirents;
	size_t ndirents, dcap;
	struct nrs_stream_row *streams;
	size_t nstreams, scap;
	struct nrs_wal_rec_info *recs;		/* sorted by lsn by check */
	size_t nrecs, rcap;
	uint64_t meta_recs;	/* META records seen (walrec.h): not
				 * stream data, left out of recs */
	/* F31: the highest META record's change number and where it is,
	 * and the META records whose payload fails its CRCs */
	uint64_t meta_seq_max;
	struct nrs_wal_pos meta_seq_max_pos;
	uint64_t meta_damaged;
	struct nrs_wal_pos meta_damaged_pos;	/* the first of them */
	/* F31, set by the caller (nrs_meta_log_seq) with have_log_seq: the
	 * number of the store's last logged change */
	bool have_log_seq;
	uint64_t log_seq;
	struct nrs_wal_damage *damage;		/* in log order */
	size_t ndamage, mcap;
	struct nrs_obj_row *objs;		/* sorted by check: stream,
						 * start, gen (recovery.h) */
	size_t nobjs, ocap;
	int oom;				/* -ENOMEM from add_damage */
	/* F30, set by the caller (nrs_meta_sequences) with have_seqs */
	bool have_seqs;
	struct nrs_meta_seq seq_inodes, seq_streams;

	/* F21, set by the caller before nrs_fsck_check: the store holding
	 * the objects (borrowed: it must outlive the check); or store_absent:
	 * there is no store (the embedded directory does not exist), so
	 * every committed object is missing.  Neither: F21 is skipped. */
	struct nrs_objstore *store;
	bool store_absent;
	/* F24, F26: the time now (CLOCK_REALTIME, ns) and the daemon's
	 * gc_grace_ms; nrs_fsck_init sets the clock's time and
	 * NRS_GC_GRACE_MS_DEFAULT. */
	int64_t now_ns;
	uint64_t gc_grace_ms;
	/* F32, set by the caller (nrs_wal_object_floor) with
	 * have_owal_floor: the object WAL's floor */
	bool have_owal_floor;
	uint64_t owal_floor;

	nrs_fsck_report_cb report;
	void *ctx;
	/* Results of nrs_fsck_check (and of nrs_fsck_say). */
	uint64_t errors, pending, warnings;
	/* Every committed byte has an intact copy, in the WAL (F9, F10) or
	 * in an object (F20, F21): only then may a torn tail be cut, since it
	 * cannot hold a committed record. */
	bool chains_intact;
	uint64_t torn;				/* F5 findings */
	uint64_t unlinked;			/* F19 findings */
	uint64_t objects_verified;		/* F21: fetched and intact */
	uint64_t strays;			/* F25, F26: stored objects
						 * nothing will delete */
	uint64_t owal_leftovers;		/* F32: WAL objects below
						 * the floor still stored */
};

void nrs_fsck_init(struct nrs_fsck *f, nrs_fsck_report_cb report, void *ctx);
/* Frees what the adds gathered; f can be initialised again. */
void nrs_fsck_free(struct nrs_fsck *f);

/* Each copies its argument; 0 or -ENOMEM. */
int nrs_fsck_add_inode(void *f, const struct nrs_attr *a);
int nrs_fsck_add_dirent(void *f, uint64_t parent, const void *name,
			size_t len, uint64_t ino);
int nrs_fsck_add_stream(void *f, const struct nrs_stream_row *s);
int nrs_fsck_add_rec(void *f, const struct nrs_wal_rec_info *ri);
/* A row of the objects table, any state (nrs_meta_obj_foreach). */
int nrs_fsck_add_obj(void *f, const struct nrs_obj_row *o);
/* A WAL damage callback (wal.h); a failed copy shows in check's result. */
void nrs_fsck_add_damage(void *f, const struct nrs_wal_damage *d);

/* Report one line (printf format), counting errors and pending ones. */
void nrs_fsck_say(struct nrs_fsck *f, enum nrs_fsck_sev sev,
		  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Run F3..F31 over what was added, F21 and F23-F26 through f->store (F26
 * lists it if it is an embedded store).  0 when the check ran, whatever it
 * found; -ENOMEM; or the error of a store that could not be read (anything
 * but a missing object, which is a finding): then the objects were not all
 * checked.
 */
int nrs_fsck_check(struct nrs_fsck *f);

#endif
