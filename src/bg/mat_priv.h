/*
 * mat_priv.h - what the files of the materializer share, and nothing
 * outside src/bg/ may include: the materializer, its workers and the jobs
 * they pass, what a new generation replaces, and the functions one file
 * calls in another.  The rules are at the top of each file:
 *
 *   materializer.c  start and stop, pauses, the start-up cleanup (MZ6)
 *   mat_plan.c      the choice of streams and of each object's range (MZ1)
 *   mat_worker.c    the worker threads and the jobs they pass (MZ9,
 *                   MW1-MW4)
 *   mat_object.c    one object: build, intent, upload, proof, quarantine,
 *                   publication (MZ2-MZ4)
 *   mat_adopt.c     write once: WAL records adopted in place as
 *                   generations, and their orphans (MZ10-MZ12)
 *   compaction.c    compaction (CP1-CP3)
 *   cleaning.c      which adopted file compaction cleans (CL1-CL3)
 */
#ifndef NRS_MAT_PRIV_H
#define NRS_MAT_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bg/materializer.h"
#include "bg/walgc.h"
#include "meta/meta.h"
#include "obj/objstore.h"

struct nrs_index_ent;
struct nrs_stream;

#define MAX_COMPACT		64	/* objects merged at most at once */
#define NRS_ADOPT_MIN		(256u << 10)	/* MZ10: the smallest record
						 * adopted */
#define NRS_ADOPT_MAX		64	/* records adopted at most at once */

struct worker;

struct nrs_mat {
	const struct nrs_services *svc;
	struct nrs_mat_opts o;
	struct worker *workers;
	unsigned int nworkers;		/* started */

	pthread_mutex_t lock;
	pthread_cond_t cond;		/* stopping */
	pthread_cond_t idle;		/* stopping, or a stream released */
	bool stopping;			/* protected by lock */
	bool orphans_done;		/* protected by lock */
	/* MZ6: the prepared rows found at start; owned by the thread that
	 * cleans them (orphans_done) */
	struct nrs_obj_row *orphans;
	size_t norphans;
	size_t orphans_next;		/* the first not removed yet */
	struct nrs_walgc walgc[2];	/* MZ5, MZ7 (walgc.c): the local
					 * WAL's, the object WAL's */
	int nwalgc;
	/* write once (mat_adopt.c): MZ12's lock, held across a link and
	 * across an orphan's look at the rows and its file's deletion */
	pthread_mutex_t adopt_lock;
	/* cleaning.c (CL3): the adopted segment whose live generations
	 * compaction copies out, 0: none */
	_Atomic uint64_t clean_seg;
	int64_t clean_at_ns;		/* protected by lock: the last choice */
	uint64_t clean_cursor;		/* protected by lock: segments at or
					 * below it were looked at */
	bool adopt_off;			/* protected by adopt_lock: a link
					 * was refused for good (MZ11) */
};

struct pick {
	const struct nrs_mat *m;
	uint64_t now, best_pending;
	uint64_t best;		/* stream id, 0: none */
};

/* What a new generation replaces: WAL records (materialize) or whole
 * smaller objects of the stream (compact). */
struct olds {
	uint64_t gen[MAX_COMPACT];
	size_t n;
	uint64_t bytes;		/* their object bytes */
	int64_t ctime_ns;	/* the newest of their intents' times */
};

/*
 * An object between MZ2 and MZ4: built (read, recorded as an intent, sealed,
 * digested) by a worker's builder, then uploaded, proven and published by
 * its uploader (MW1-MW4 at the top).
 */
struct job {
	struct nrs_stream *st;	/* busy; its reference goes with `last` */
	struct nrs_obj_row o;	/* prepared: gen, length, sha256 */
	struct olds olds;	/* what it replaces (compaction) */
	unsigned char *buf;	/* the object, o.length bytes, owned; NULL:
				 * no object, only the release (err) */
	struct nrs_obj_row *rows;	/* write once (MZ11): the prepared rows
					 * of the records adopted, owned, in
					 * offset order, o.start and o.end
					 * their range; NULL: a copy */
	size_t nrows;
	unsigned char md5[NRS_MD5_LEN];
	bool has_md5;		/* the store wants one (objstore.h) */
	bool last;		/* the stream is released after it (MW3) */
	int err;		/* buf NULL: why the builder gave up */
};

/* One materializer thread: a builder and the uploader it hands to. */
struct worker {
	struct nrs_mat *m;
	pthread_t builder, uploader;
	bool has_uploader;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job slot;	/* protected by lock, while full */
	bool full;		/* protected by lock: a job in the uploader's
				 * hands, until it is done with it (MW2) */
	bool quit;		/* protected by lock: no more jobs (MW4) */
	uint64_t broken;	/* protected by lock: a stream whose chain
				 * failed (MW3), 0: none */
	int broken_err;		/* protected by lock: why */
	int last_err;		/* protected by lock: of the last job done */
};

/* materializer.c */
bool nrs_mat_stopping(struct nrs_mat *m);
bool nrs_mat_nap(struct nrs_mat *m, uint64_t ms);
/* A builder with nothing to do: wait up to ms for a stream to be released
 * (by any uploader) or for the stop. */
void nrs_mat_idle_wait(struct nrs_mat *m, uint64_t ms);
uint64_t nrs_mat_backoff_ms(const struct nrs_mat *m, unsigned int attempt);
void nrs_mat_release(struct nrs_mat *m, struct nrs_stream *st, int err);
/* MZ6: delete the orphans found at start; 0 when all are gone. */
int nrs_mat_clean_orphans(struct nrs_mat *m);

/* mat_plan.c (MZ1) */
/* What the next object of a stream is: none, copied, adopted (MZ10), or
 * nothing yet (the record waits for its segment to be sealed). */
enum nrs_plan { NRS_PLAN_NONE, NRS_PLAN_COPY, NRS_PLAN_ADOPT, NRS_PLAN_WAIT };
/* Where the next object of st starts (past `materialized`, the start and
 * from); under st->lock. */
uint64_t nrs_mat_next_from(const struct nrs_stream *st, uint64_t from);
/* Are the bytes of st above nrs_mat_next_from(st, from) worth an object
 * now?  Under st->lock. */
bool nrs_mat_worth(const struct nrs_mat *m, const struct nrs_stream *st,
		   uint64_t from, uint64_t now);
/* A due stream, marked busy, with a reference; NULL if none. */
struct nrs_stream *nrs_mat_pick(struct nrs_mat *m);
/* Is a stream other than id due?  Not under any stream's lock. */
bool nrs_mat_other_due(struct nrs_mat *m, uint64_t id);
/* The plan of st from `from` (MZ1, MZ10): [*a, *b), or the segment it
 * waits for in *wait_seg; takes st->lock. */
enum nrs_plan nrs_mat_plan_of(struct nrs_mat *m, struct nrs_stream *st,
			      uint64_t from, uint64_t *a, uint64_t *b,
			      uint64_t *wait_seg);

/* mat_worker.c (MW1-MW4) */
void nrs_mat_hand(struct worker *w, const struct job *j);
int nrs_mat_drain(struct worker *w);
/* A worker's threads; on failure nothing of it is left running. */
int nrs_mat_worker_start(struct nrs_mat *m, struct worker *w);

/* mat_object.c */
int nrs_mat_build(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
		  uint64_t b, const struct olds *olds, struct job *out);
int nrs_mat_finish(struct nrs_mat *m, struct job *j);

void nrs_mat_apply(const struct nrs_services *svc, struct nrs_stream *st,
		   const struct nrs_obj_row *o, const struct olds *olds);

/* mat_adopt.c */
bool nrs_mat_adopt_on(struct nrs_mat *m, const struct nrs_stream *st);
enum nrs_plan nrs_mat_adopt_kind(const struct nrs_index_ent *e, bool on,
				 uint64_t below);
bool nrs_mat_adopt_seal(struct nrs_mat *m, uint64_t seg);
int nrs_mat_adopt_build(struct nrs_mat *m, struct nrs_stream *st, uint64_t a,
			uint64_t b, struct job *out);
int nrs_mat_adopt_finish(struct nrs_mat *m, struct job *j);
void nrs_mat_adopt_drop(struct nrs_mat *m, struct job *j);
int nrs_mat_adopt_orphan(struct nrs_mat *m, size_t i);

/* compaction.c */
bool nrs_mat_compact_some(struct worker *w);

/* cleaning.c: choose the adopted file to clean (CL1-CL3), at most every
 * second; is e a generation of it? */
void nrs_mat_clean_choose(struct nrs_mat *m);
bool nrs_mat_clean_wants(const struct nrs_mat *m,
			 const struct nrs_index_ent *e);

#endif
