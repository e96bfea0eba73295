/*
 * checkpoint.h - metadata checkpoints in the object store (issue 15): the
 * store side (write with proof, find without a listing, read verified,
 * restore into an empty data directory; rules KP1-KP7 at the top of
 * checkpoint.c) and the service that takes them while the daemon runs
 * (ckpt_service.c).  The formats are ckptfmt.c's.
 */
#ifndef NRS_CHECKPOINT_H
#define NRS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "bg/ckptfmt.h"
#include "obj/objstore.h"

/* -o checkpoint_ms and checkpoint_bytes unless given (ckpt_service.c). */
#define NRS_CKPT_MS_DEFAULT	60000
#define NRS_CKPT_BYTES_DEFAULT	(256ull << 20)

/* ---- the store side (checkpoint.c) ---------------------------------- */

/*
 * KP2, one attempt: PUT key, then HEAD it.  0: proven (exact length and
 * SHA-256); -EAGAIN: not proven (the store did not answer, or has no
 * object yet): PUT the same bytes again later; -EBADMSG: the key holds
 * other bytes (quarantine: never use it, never write it again).  md5 may
 * be NULL when the store does not want one.
 */
int nrs_ckpt_put_proven(struct nrs_objstore *s, const char *key,
			const void *buf, size_t len,
			const unsigned char md5[NRS_MD5_LEN],
			const unsigned char sha256[NRS_SHA256_LEN]);
/* KP3: rewrite ckpt/latest as p, proven as KP2 does (0, -EAGAIN,
 * -EBADMSG: another writer's pointer is there now). */
int nrs_ckpt_put_pointer(struct nrs_objstore *s, const struct nrs_ckpt_ptr *p);
/*
 * KP4: the highest seq under which a checkpoint exists, without a
 * listing: the pointer's seq, then HEAD of seq+1, seq+2, ... until one is
 * missing.  *top 0: none.  *ptr_seq (NULL ok): what the pointer said (0:
 * no pointer).  -EUCLEAN: the pointer is damaged (logged: never guess);
 * other errors: the store did not answer (nothing can be told).
 */
int nrs_ckpt_find(struct nrs_objstore *s, uint64_t *top, uint64_t *ptr_seq);
/*
 * KP5: read checkpoint seq whole and verify it: its SHA-256 against the
 * store's metadata, then every CRC of the format.  *obj (malloc'd, the
 * caller frees it) holds the object, *db points at the database inside
 * it, *h is its header.  -ENOENT, -EUCLEAN (damaged: logged), -EPROTO,
 * or the store's error.
 */
int nrs_ckpt_read(struct nrs_objstore *s, uint64_t seq, struct nrs_ckpt_hdr *h,
		  void **obj, const void **db);
/*
 * KP6: the newest usable checkpoint: nrs_ckpt_find, then nrs_ckpt_read of
 * top, top - 1, ... (a damaged one is logged and passed over) down to the
 * first missing one.  As nrs_ckpt_read; -ENOENT: no checkpoint at all;
 * -EUCLEAN: there are some, none usable.
 */
int nrs_ckpt_load(struct nrs_objstore *s, struct nrs_ckpt_hdr *h, void **obj,
		  const void **db);
/*
 * For recovery: install the newest usable checkpoint (KP6) as
 * data_dir/meta.db, which must not exist (meta.h nrs_meta_install, SN2:
 * -EEXIST).  *covered and *epoch (NULL ok) are its header's.  -ENOENT: no
 * checkpoint in the store.
 */
int nrs_ckpt_restore(struct nrs_objstore *s, const char *data_dir,
		     uint64_t *covered, uint64_t *epoch);

/* ---- the service (ckpt_service.c) ----------------------------------- */

struct nrs_services;
struct nrs_ckpt;

struct nrs_ckpt_opts {
	uint64_t interval_ms;	/* a checkpoint this often; 0: not on time */
	uint64_t bytes;		/* ... or once the object WAL wrote this many
				 * bytes since the last; 0: not on bytes */
	uint64_t grace_ms;	/* KP7: old checkpoints go after this */
	/* The object-WAL position every record below which is in the store
	 * when it returns (read before the snapshot starts); NULL: 0,
	 * "nothing of the object WAL is covered". */
	uint64_t (*covered)(void *ctx);
	/* The owner epoch; NULL: 0. */
	uint64_t (*epoch)(void *ctx);
	void *ctx;
};

/* Start the thread (svc: services.h, alive and unchanged until stop).
 * Both triggers 0: nothing is started, *out is NULL, 0 is returned. */
int nrs_ckpt_start(const struct nrs_services *svc,
		   const struct nrs_ckpt_opts *o, struct nrs_ckpt **out);
/* Stop it between two steps (NULL ok). */
void nrs_ckpt_stop(struct nrs_ckpt *k);
/* The object WAL wrote n more bytes (the bytes trigger).  NULL ok; any
 * thread, no lock held by the caller is needed. */
void nrs_ckpt_wal_bytes(struct nrs_ckpt *k, uint64_t n);
/*
 * The covered position of the last checkpoint proven stored (0: none yet;
 * NULL, no service: UINT64_MAX): the object WAL's GC deletes nothing at or
 * above it (walgc.c MZ8), so a recovery from that checkpoint finds every
 * record it needs.
 */
uint64_t nrs_ckpt_covered(struct nrs_ckpt *k);
/*
 * KC3: return once a checkpoint whose snapshot began after the call is
 * proven stored (or a snapshot after it found the database as the last
 * one holds it), at most timeout_ms (-ETIMEDOUT; -ESHUTDOWN when
 * stopping).  Calls at once share one checkpoint.  NULL ok (0).
 */
int nrs_ckpt_sync(struct nrs_ckpt *k, uint64_t timeout_ms);
/* Ask for a checkpoint now (as the triggers do).  NULL ok. */
void nrs_ckpt_kick(struct nrs_ckpt *k);

#endif
