/*
 * fsck_obj.c - nereusfs-fsck's checks of every objects row and of the
 * store the caller lends (fsck.c lists them): a needed committed object
 * is stored and verifies (F21), prepared rows are pending (F22), and the
 * lifecycle's rows and files agree with lifecycle.c G1-G4 (F23-F26), and
 * no WAL object is left below the object WAL's floor (F32).  The only I/O
 * of fsck: head(), get() and the listing of an embedded store.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsck/fsck.h"
#include "fsck/fsck_priv.h"
#include "obj/objfmt.h"
#include "owner/owner.h"
#include "stream/recovery.h"
#include "util/log.h"
#include "util/parse.h"
#include "wal/wal.h"

/* What the object of row o must say it holds. */
static struct nrs_objhdr obj_hdr(const struct nrs_obj_row *o)
{
	return (struct nrs_objhdr){
		.stream_id = o->stream_id, .start = o->start, .end = o->end,
		.gen = o->gen,
	};
}

/* ---- F21, F22: every row of the objects table -------------------------- */

/* Why nrs_objfmt_verify() refused buf (len bytes, the length its row says)
 * that should hold h: a phrase for a finding. */
static void explain_bad_object(const unsigned char *buf, size_t len,
			       const struct nrs_objhdr *h, int err,
			       char *why, size_t size)
{
	struct nrs_objinfo oi;
	uint32_t bad = 0, first = 0;
	int perr;

	if (err == -EPROTO) {
		snprintf(why, size, "it is in a newer object format than this "
			 "nereusfs-fsck reads");
		return;
	}
	perr = nrs_objfmt_parse(buf, len, NULL, &oi);
	if (perr == -EBADMSG) {
		snprintf(why, size, "its header fails its CRC32C");
		return;
	}
	if (perr) {
		snprintf(why, size, "its header holds fields no writer "
			 "produces");
		return;
	}
	if (err == -EUCLEAN) {
		snprintf(why, size, "its header names stream %" PRIu64 " [%"
			 PRIu64 ", %" PRIu64 ") gen %" PRIu64 " instead",
			 oi.h.stream_id, oi.h.start, oi.h.end, oi.h.gen);
		return;
	}
	if (nrs_objfmt_verify_table(&oi, buf + NRS_OBJ_FIXED)) {
		snprintf(why, size, "its block table fails its CRC32C");
		return;
	}
	for (uint32_t i = oi.nblocks; i-- > 0;) {
		size_t at = nrs_objfmt_hdr_len(h->end - h->start) +
			    (size_t)i * NRS_OBJ_BLOCK;

		if (nrs_objfmt_verify_block(&oi, buf + NRS_OBJ_FIXED, i,
					    buf + at,
					    nrs_objfmt_block_len(&oi, i))) {
			bad++;
			first = i;
		}
	}
	if (bad)
		snprintf(why, size, "%" PRIu32 " of its %" PRIu32 " payload "
			 "blocks fail their CRC32C, the first holding bytes [%"
			 PRIu64 ", %" PRIu64 ")", bad, oi.nblocks,
			 h->start + (uint64_t)first * NRS_OBJ_BLOCK,
			 h->start + (uint64_t)first * NRS_OBJ_BLOCK +
			 nrs_objfmt_block_len(&oi, first));
	else
		snprintf(why, size, "it fails verification (%s)",
			 strerror(-err));
}

/*
 * F21 for committed row o; what is "object KEY (stream ...)".  0 when the
 * object was judged (whatever was found), else the error of a store that
 * could not be read, or -ENOMEM.
 */
static int check_object(struct nrs_fsck *f, const struct nrs_obj_row *o,
			const char *key, const char *what)
{
	struct nrs_objhdr h = obj_hdr(o);
	unsigned char sha[NRS_SHA256_LEN], *buf;
	struct nrs_obj_meta meta;
	char why[200];
	ssize_t n;
	int err;

	err = f->store ? nrs_obj_head(f->store, key, &meta) : -ENOENT;
	if (err == -ENOENT)
		goto missing;
	if (err)
		return err;
	if (meta.length != o->length) {
		ERR(f, "F21 %s: holds %" PRIu64 " bytes, its row says %" PRIu64,
		    what, meta.length, o->length);
		goto lost;
	}
	buf = malloc(o->length);
	if (!buf)
		return -ENOMEM;
	n = nrs_obj_get(f->store, key, 0, buf, o->length);
	if (n == -ENOENT) {
		free(buf);
		goto missing;
	}
	if (n < 0) {
		free(buf);
		return (int)n;
	}
	if ((uint64_t)n != o->length) {
		ERR(f, "F21 %s: a read of it ended after %zd of its %" PRIu64
		    " bytes", what, n, o->length);
		free(buf);
		goto lost;
	}
	err = nrs_objfmt_verify(buf, (size_t)n, &h);
	if (err) {
		explain_bad_object(buf, (size_t)n, &h, err, why, sizeof(why));
		free(buf);
		ERR(f, "F21 %s: %s: reads of it fail", what, why);
		goto lost;
	}
	err = nrs_objfmt_digest(buf, (size_t)n, sha, NULL);
	free(buf);
	if (err)
		return err;
	if (memcmp(sha, o->sha256, NRS_SHA256_LEN) != 0) {
		ERR(f, "F21 %s: its SHA-256 is not the one its row recorded "
		    "when it was published", what);
		goto lost;
	}
	if (!meta.has_sha256 ||
	    memcmp(meta.sha256, o->sha256, NRS_SHA256_LEN) != 0)
		ERR(f, "F21 %s: its bytes are intact, but the store %s", what,
		    meta.has_sha256 ? "keeps another SHA-256 for it"
				    : "keeps no valid SHA-256 for it");
	else
		f->objects_verified++;
	return 0;

missing:
	ERR(f, "F21 %s: missing from the object store%s: committed bytes [%"
	    PRIu64 ", %" PRIu64 ") have no copy there", what, f->store ? "" :
	    " (there is no object directory: are the objects in S3?)",
	    o->start, o->end);
lost:
	f->chains_intact = false;
	return 0;
}

/* ---- F23-F26: the lifecycle (lifecycle.c G1-G4) ------------------------ */

/* Milliseconds from time (ns, a row's mtime or a file's) to f->now_ns; 0
 * for a time in the future. */
static uint64_t age_ms(const struct nrs_fsck *f, int64_t time)
{
	return f->now_ns > time ? (uint64_t)(f->now_ns - time) / 1000000 : 0;
}

/* "850 ms", "12.3 s", "4 min 5 s", "3 h 20 min", "2 d 5 h", into buf. */
static const char *ms_str(uint64_t ms, char *buf, size_t size)
{
	uint64_t sec = ms / 1000;

	if (ms < 1000)
		snprintf(buf, size, "%" PRIu64 " ms", ms);
	else if (sec < 60)
		snprintf(buf, size, "%" PRIu64 ".%" PRIu64 " s", sec,
			 ms % 1000 / 100);
	else if (sec < 3600)
		snprintf(buf, size, "%" PRIu64 " min %" PRIu64 " s", sec / 60,
			 sec % 60);
	else if (sec < 86400)
		snprintf(buf, size, "%" PRIu64 " h %" PRIu64 " min", sec / 3600,
			 sec % 3600 / 60);
	else
		snprintf(buf, size, "%" PRIu64 " d %" PRIu64 " h", sec / 86400,
			 sec % 86400 / 3600);
	return buf;
}

/* Whether the store holds an object under a key. */
enum presence {
	NOT_LOOKED,	/* no store lent (--no-objects), or no key */
	STORED,
	GONE,
};

/* HEAD key in f->store (the object's length in *len if len is not NULL):
 * 0, or the error of a store that cannot be read.  An adopted file (a row
 * with seg >= 1) is looked for with a read instead (fsck_adopt.c). */
static int look_up(struct nrs_fsck *f, const struct nrs_obj_row *o,
		   const char *key, bool have_key, enum presence *p,
		   uint64_t *len)
{
	struct nrs_obj_meta meta;
	bool stored;
	int err;

	*p = NOT_LOOKED;
	if (!have_key || (!f->store && !f->store_absent))
		return 0;
	if (o->seg) {
		err = nrs_fsck_adopted_presence(f, key, &stored);
		if (!err)
			*p = stored ? STORED : GONE;
		return err;
	}
	err = f->store ? nrs_obj_head(f->store, key, &meta) : -ENOENT;
	if (err == -ENOENT) {
		*p = GONE;
		return 0;
	}
	if (err)
		return err;
	*p = STORED;
	if (len)
		*len = meta.length;
	return 0;
}

static const char *presence_str(enum presence p)
{
	switch (p) {
	case STORED:	return "; its object is still stored";
	case GONE:	return "; its object is already gone from the store";
	default:	return "";
	}
}

/*
 * G1: why no published state needs committed row o (s: its stream's index
 * in f->streams, or -1), into buf; NULL if one does.  A generation wholly
 * covered by a newer committed one is not among these: the daemon never
 * leaves one (compaction moves the generations it replaces to draining in
 * the transaction that publishes the new one), its GC would not drain it,
 * and the next mount reads only one of the two: F20 reports the overlap.
 */
static const char *unneeded_why(const struct nrs_fsck *f,
				const struct nrs_obj_row *o, ssize_t s,
				char *buf, size_t size)
{
	if (s < 0)
		return "its stream is gone";
	if (f->streams[s].unlinked)
		return "its stream is unlinked: once the next mount (or "
		       "--repair) forgets it (F19), GC drains it";
	if (o->end > f->streams[s].start)
		return NULL;
	snprintf(buf, size, "it lies wholly below the stream's start %" PRIu64,
		 f->streams[s].start);
	return buf;
}

/* F23: a committed row no published state needs (why). */
static int check_unneeded(struct nrs_fsck *f, const struct nrs_obj_row *o,
			  const char *key, bool have_key, const char *what,
			  const char *why)
{
	enum presence p;
	int err = look_up(f, o, key, have_key, &p, NULL);

	if (err)
		return err;
	nrs_fsck_say(f, NRS_FSCK_PENDING, "F23 %s: no published state needs "
		     "it (%s): awaiting GC, which moves it to draining and "
		     "deletes it gc_grace_ms later%s", what, why,
		     presence_str(p));
	return 0;
}

/* F24: draining row o. */
static int check_draining(struct nrs_fsck *f, const struct nrs_obj_row *o,
			  const char *key, bool have_key, const char *what)
{
	uint64_t ms = age_ms(f, o->mtime_ns);
	char age[32], left[32];
	enum presence p;
	int err = look_up(f, o, key, have_key, &p, NULL);

	if (err)
		return err;
	ms_str(ms, age, sizeof(age));
	if (ms >= f->gc_grace_ms)
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F24 %s: awaiting GC since "
			     "%s ago, longer than the grace period (%" PRIu64
			     " ms), only because no daemon runs: the first GC "
			     "pass after the next mount deletes it%s", what, age,
			     f->gc_grace_ms, presence_str(p));
	else
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F24 %s: awaiting GC since "
			     "%s ago: deleted when its grace period (%" PRIu64
			     " ms) is over, in %s%s", what, age, f->gc_grace_ms,
			     ms_str(f->gc_grace_ms - ms, left, sizeof(left)),
			     presence_str(p));
	if (p == GONE)
		nrs_fsck_say(f, NRS_FSCK_INFO, "F24 %s: a crash came between "
			     "its delete and its retirement (lifecycle.c G3): "
			     "GC retires the row", what);
	return 0;
}

/* F25: a retired row: its object must be gone. */
static int check_retired(struct nrs_fsck *f, const struct nrs_obj_row *o,
			 const char *key, bool have_key, const char *what)
{
	enum presence p;
	uint64_t len = 0;
	int err = look_up(f, o, key, have_key, &p, &len);

	if (err)
		return err;
	if (p != STORED) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F25 %s: %s", what,
			     p == GONE ? "deleted by GC" : "not looked up");
		return 0;
	}
	f->strays++;
	ERR(f, "F25 %s: retired but still stored (%" PRIu64 " bytes): a GC "
	    "bug (lifecycle.c G2 deletes the object before it retires the "
	    "row), and nothing will delete it now: delete it by hand "
	    "(--repair deletes no object)", what, len);
	return 0;
}

/* A row of f->objs by its generation. */
struct gen_at {
	uint64_t gen;
	size_t i;
};

static int cmp_gen(const void *a, const void *b)
{
	const struct gen_at *x = a, *y = b;

	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

#define OWAL_SHOW_MAX	16	/* F32: keys one warning names */

/* F26's listing: the rows by generation, to find the one a file's name
 * might be the key of; F32's keys below the floor. */
struct listing {
	struct nrs_fsck *f;
	struct gen_at *bygen;
	char below[640];		/* F32: the keys named, escaped */
	size_t below_len;
	const struct nrs_fsck_segs *segs;
};

/* F32: is name a key of the object WAL, and if it is a WAL object below
 * the floor, counted and (the first OWAL_SHOW_MAX) named? */
static bool owal_key(struct listing *l, const char *name)
{
	struct nrs_fsck *f = l->f;
	uint64_t seg = 0;
	enum nrs_owkey kind;
	char esc[4 * NRS_OBJKEY_MAX];

	if (!f->have_owal_floor)
		return false;			/* F26 judges it */
	kind = nrs_wal_object_key_kind(name, &seg);
	if (kind == NRS_OWKEY_NONE)
		return false;
	if (kind != NRS_OWKEY_OBJECT || seg >= f->owal_floor ||
	    nrs_fsck_segs_live(l->segs, NRS_ADOPT_OWAL | seg))
		return true;	/* kept by design (a live row names it:
				 * OW18), or F3-F6's to check */
	if (f->owal_leftovers++ < OWAL_SHOW_MAX) {
		nrs_log_escape(esc, sizeof(esc), name);
		l->below_len += (size_t)snprintf(l->below + l->below_len,
			sizeof(l->below) - l->below_len, "%s%s",
			l->below_len ? ", " : "", esc);
		if (l->below_len >= sizeof(l->below))
			l->below_len = sizeof(l->below) - 1;
	}
	return true;
}

/* F32, once the listing ran. */
static void report_leftovers(const struct listing *l)
{
	struct nrs_fsck *f = l->f;
	uint64_t n = f->owal_leftovers;

	if (n == 0)
		return;
	nrs_fsck_say(f, NRS_FSCK_WARNING, "F32 %" PRIu64 " WAL object%s of the"
		     " object WAL below its floor %016" PRIx64 " still stored (a"
		     " DELETE of its GC failed, or a crash came between the"
		     " floor and the DELETE): %s%s; no scan reads %s; the next"
		     " mount deletes what its gc record (owal/gc) owes, any"
		     " other stays: delete %s by hand then", n,
		     n == 1 ? "" : "s", f->owal_floor, l->below,
		     n > OWAL_SHOW_MAX ? ", ..." : "", n == 1 ? "it" : "them",
		     n == 1 ? "it" : "them");
}

/* Is name the key of a row (any state: a retired one's is F25's)? */
static bool is_named(const struct listing *l, const char *name)
{
	const char *g = strrchr(name, 'g');
	char key[NRS_OBJKEY_MAX];
	struct nrs_objhdr h;
	uint64_t gen;
	ssize_t i;

	/* The generation ends a key ("-g<hex>"); the whole key is compared. */
	if (!g || g == name || g[-1] != '-' ||
	    nrs_parse_x64(g + 1, strlen(g + 1), &gen))	/* parse.h N2 */
		return false;
	i = BSEARCH(l->bygen, l->f->nobjs, gen, gen);
	if (i < 0)
		return false;
	h = obj_hdr(&l->f->objs[l->bygen[i].i]);
	return nrs_objfmt_key(key, &h) > 0 && strcmp(key, name) == 0;
}

/* F26 for one file of the embedded store. */
static int check_file(void *ctx, const struct nrs_objfile *of)
{
	struct listing *l = ctx;
	struct nrs_fsck *f = l->f;
	uint64_t ms = age_ms(f, of->mtime_ns);
	char age[32];

	if (of->is_reg && is_named(l, of->name))
		return 0;
	if (of->is_reg && owal_key(l, of->name))		/* F32 */
		return 0;
	if (of->is_reg && nrs_fsck_adopted_file(f, l->segs, of))
		return 0;	/* w/<seg>: named, or the WAL's (fsck_adopt.c) */
	/* checkpoints are no segment objects: their keys and their own
	 * keeping rules are bg/ckptfmt.c's and checkpoint.c's (KP7) */
	if (of->is_reg && strncmp(of->name, "ckpt/", 5) == 0)
		return 0;
	if (of->is_reg && nrs_owner_key_is_ours(of->name))
		return 0;	/* the owner record or a probe: no stream's */
	ms_str(ms, age, sizeof(age));
	if (ms < f->gc_grace_ms) {
		nrs_fsck_say(f, NRS_FSCK_PENDING, "F26 objects/%s: no row of the"
			     " objects table names it, but it was written only %s"
			     " ago, within the grace period (%" PRIu64 " ms)",
			     of->name, age, f->gc_grace_ms);
		return 0;
	}
	f->strays++;
	ERR(f, "F26 objects/%s: an unreferenced object: no row of the objects "
	    "table names it%s, and it was written %s ago (a file of %" PRIu64
	    " bytes): nothing will delete it: look, then delete it by hand "
	    "(--repair deletes no object)", of->name, of->is_reg ? "" :
	    " (and it is not even a regular file)", age, of->size);
	return 0;
}

/* F26: every file of the embedded store is named by a row.  A bucket is
 * never listed (its unreferenced objects are found only through rows). */
static int check_unreferenced(struct nrs_fsck *f,
			      const struct nrs_fsck_segs *segs)
{
	struct listing l = { .f = f, .segs = segs };
	int err;

	if (!f->store)
		return 0;
	l.bygen = malloc((f->nobjs + 1) * sizeof(*l.bygen));
	if (!l.bygen)
		return -ENOMEM;
	for (size_t i = 0; i < f->nobjs; i++)
		l.bygen[i] = (struct gen_at){ .gen = f->objs[i].gen, .i = i };
	if (f->nobjs > 1)
		qsort(l.bygen, f->nobjs, sizeof(*l.bygen), cmp_gen);
	err = nrs_objstore_dir_foreach(f->store, check_file, &l);
	free(l.bygen);
	if (!err)
		report_leftovers(&l);
	if (err == -EOPNOTSUPP) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F26 the %s store is not listed:"
			     " objects no row names are not looked for",
			     f->store->ops->name);
		if (f->have_owal_floor)
			nrs_fsck_say(f, NRS_FSCK_INFO, "F32 nor WAL objects"
				     " below the object WAL's floor");
		err = 0;
	}
	return err;
}

/* F20 (rows), F21 (through f->store), F22-F25, over every row; F26. */
int nrs_fsck_check_objects(struct nrs_fsck *f, const struct ns *ns)
{
	char path[512], key[NRS_OBJKEY_MAX], what[900], why[100], at[48];
	struct nrs_fsck_segs segs;
	int err = nrs_fsck_segs_build(f, &segs);

	if (err)
		return err;
	for (size_t i = 0; i < f->nobjs && !err; i++) {
		const struct nrs_obj_row *o = &f->objs[i];
		struct nrs_objhdr h = obj_hdr(o);
		ssize_t s = stream_at(f, o->stream_id);
		const char *state = nrs_meta_obj_state_name(o->state), *unneeded;
		bool have_key = (o->seg ? nrs_objfmt_adopt_key(key, o->seg)
					: nrs_objfmt_key(key, &h)) >= 0;

		if (!have_key)
			snprintf(key, sizeof(key), "generation %" PRIu64, o->gen);
		at[0] = '\0';
		if (o->seg)
			snprintf(at, sizeof(at), " at byte %" PRIu64, o->off);
		snprintf(what, sizeof(what), "object %s%s (stream %" PRIu64 " (%s)"
			 ", bytes [%" PRIu64 ", %" PRIu64 "), %s)", key, at,
			 o->stream_id, s < 0 ? "gone" : f->streams[s].unlinked ?
			 "unlinked" : nrs_fsck_path_of(f, ns, f->streams[s].ino,
						       path, sizeof(path)),
			 o->start, o->end, state ? state : "?");
		switch (o->state) {
		case NRS_OBJ_PREPARED:
			nrs_fsck_say(f, NRS_FSCK_PENDING, "F22 %s: an upload "
				     "intent: the next mount deletes the object "
				     "(if it was stored) and the row", what);
			continue;
		case NRS_OBJ_QUARANTINED:
			nrs_fsck_say(f, NRS_FSCK_INFO, "F22 %s: its key held "
				     "other bytes: it is never read or written "
				     "again", what);
			continue;
		case NRS_OBJ_DRAINING:
			err = check_draining(f, o, key, have_key, what);
			break;
		case NRS_OBJ_RETIRED:
			err = o->seg ? nrs_fsck_check_retired_adopted(f, &segs,
								      o, key,
								      what)
				     : check_retired(f, o, key, have_key, what);
			break;
		case NRS_OBJ_COMMITTED:
			if (!nrs_recover_obj_is_possible(o)) {	/* RD3 */
				ERR(f, "F20 %s: an impossible row (gen %" PRIu64
				    ", %" PRIu64 " bytes): no materializer wrote"
				    " it", what, o->gen, o->length);
				continue;
			}
			unneeded = unneeded_why(f, o, s, why, sizeof(why));
			if (unneeded)
				err = check_unneeded(f, o, key, have_key, what,
						     unneeded);
			else if (o->seg && (f->store || f->store_absent))
				err = nrs_fsck_check_adopted(f, o, key, what);
			else if (f->store || f->store_absent)
				err = check_object(f, o, key, what);
			break;
		default:
			ERR(f, "F20 %s: unknown state %d", what, o->state);
			continue;
		}
	}
	if (!err)
		err = check_unreferenced(f, &segs);
	nrs_fsck_segs_free(&segs);
	return err;
}
