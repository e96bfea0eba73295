/*
 * fsck_adopt.c - nereusfs-fsck's checks of the generations the embedded
 * store holds in place (README, "Write once on the embedded store"): an
 * objects row with seg >= 1 names one WAL record at byte off of the file
 * objects/w/<seg> (objfmt.h nrs_objfmt_adopt_key), WAL segment seg linked
 * into the store (objstore_dir_adopt.c OD6); the rest of the row (stream,
 * start, end) says which record that must be.  fsck_obj.c calls these for
 * F21, F25 and F26 on such rows and files.  The only I/O: the store's
 * get(), never head() (it proves nothing of an adopted file).
 *
 *  F21 (adopted) A committed adopted generation a published state needs:
 *      its file exists and is long enough to hold the record; at off a
 *      WAL record header decodes (walrec.c: magic, header CRC, WV3) and
 *      names the row's stream, base start and length end - start; every
 *      payload chunk passes its CRC32C (DESIGN.md I6: what the reader's
 *      RA1 checks).  Before that, F20: the row is possible (recovery_index.c
 *      RD3, which bounds the record's length).
 *  F25 (adopted) A retired adopted row's record was punched out (lifecycle.c
 *      G6), which is not looked at (a file system without holes keeps the
 *      bytes).  But a file every row of which is retired must be gone: G7
 *      deletes it before it retires the last of them, and nothing deletes
 *      it later.  Said once per file.
 *      A WAL object (mat_adopt.c MZ13) at or above the object WAL's
 *      floor is still the WAL's, not G7's to delete (lifecycle.c G9).
 *  F26 (adopted) A file w/<seg> that no row names (any state): pending
 *      while the WAL still holds records of segment seg (the file is the
 *      WAL's own segment, linked by an adoption that a crash or an orphan
 *      row's deletion left unnamed: the next adoption from it names it
 *      again, OD6); an error once the WAL's records of it are gone, as
 *      for any unreferenced object.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsck/fsck.h"
#include "fsck/fsck_priv.h"
#include "obj/objfmt.h"
#include "util/parse.h"
#include "wal/walrec.h"


static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool has_u64(const uint64_t *v, size_t n, uint64_t x)
{
	return n > 0 && bsearch(&x, v, n, sizeof(*v), cmp_u64) != NULL;
}

static int sorted(uint64_t **v, size_t n)
{
	if (n > 1)
		qsort(*v, n, sizeof(**v), cmp_u64);
	return 0;
}

int nrs_fsck_segs_build(const struct nrs_fsck *f, struct nrs_fsck_segs *s)
{
	memset(s, 0, sizeof(*s));
	s->named = malloc((f->nobjs + 1) * sizeof(*s->named));
	s->live = malloc((f->nobjs + 1) * sizeof(*s->live));
	s->wal = malloc((f->nrecs + 1) * sizeof(*s->wal));
	if (!s->named || !s->live || !s->wal) {
		nrs_fsck_segs_free(s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < f->nobjs; i++) {
		const struct nrs_obj_row *o = &f->objs[i];

		if (o->seg == 0)
			continue;
		s->named[s->nnamed++] = o->seg;
		if (o->state == NRS_OBJ_PREPARED ||
		    o->state == NRS_OBJ_COMMITTED ||
		    o->state == NRS_OBJ_DRAINING)
			s->live[s->nlive++] = o->seg;
	}
	for (size_t i = 0; i < f->nrecs; i++)
		if (!f->recs[i].object)
			s->wal[s->nwal++] = f->recs[i].pos.seg;
	return sorted(&s->named, s->nnamed) | sorted(&s->live, s->nlive) |
	       sorted(&s->wal, s->nwal);
}

void nrs_fsck_segs_free(struct nrs_fsck_segs *s)
{
	free(s->named);
	free(s->live);
	free(s->wal);
	s->named = s->live = s->wal = NULL;
}

/* Why the bytes buf (n of them, at possible row o's off) are not its
 * record, into why: 1; 0 if they are. */
static int record_why(const struct nrs_obj_row *o, const unsigned char *buf,
		      size_t n, char *why, size_t size)
{
	struct nrs_walrec r;
	uint32_t bad = 0;
	size_t hl;
	int err = nrs_walrec_decode_hdr(buf, n, &r);

	if (err == -ENODATA) {
		snprintf(why, size, "the file ends inside the record's header");
		return 1;
	}
	if (err) {
		snprintf(why, size, "no WAL record header there (%s)",
			 err == -EBADMSG ? "its magic or CRC is wrong"
					 : "impossible fields");
		return 1;
	}
	if (r.kind != NRS_WALREC_DATA || r.stream_id != o->stream_id ||
	    r.base != o->start || r.len != o->end - o->start) {
		snprintf(why, size, "the record there is stream %" PRIu64
			 " [%" PRIu64 ", %" PRIu64 ")", r.stream_id, r.base,
			 r.base + r.len);
		return 1;
	}
	hl = nrs_walrec_hdr_len(r.len);
	if (n < hl + r.len) {
		snprintf(why, size, "the file ends %zu bytes into the record's "
			 "%zu", n, hl + r.len);
		return 1;
	}
	if (nrs_walrec_verify_chunks(buf, &r, 0, nrs_walrec_nchunks(r.len),
				     buf + hl, &bad) != 0) {
		snprintf(why, size, "its payload chunk %" PRIu32 " (bytes [%"
			 PRIu64 ", ...)) fails its CRC32C", bad,
			 r.base + (uint64_t)bad * NRS_WALREC_CHUNK);
		return 1;
	}
	return 0;
}

int nrs_fsck_check_adopted(struct nrs_fsck *f, const struct nrs_obj_row *o,
			   const char *key, const char *what)
{
	size_t want = nrs_walrec_total_len((uint32_t)(o->end - o->start));
	unsigned char *buf;
	char why[200];
	ssize_t n;
	bool bad;

	if (!f->store)
		goto missing;
	buf = malloc(want);
	if (!buf)
		return -ENOMEM;
	n = nrs_obj_get(f->store, key, o->off - NRS_OBJ_ADOPT_HDR, buf, want);
	bad = n >= 0 && record_why(o, buf, (size_t)n, why, sizeof(why));
	free(buf);
	if (n == -ENOENT)
		goto missing;
	if (n < 0)
		return (int)n;
	if (bad) {
		ERR(f, "F21 %s: %s: reads of it fail", what, why);
		goto lost;
	}
	f->objects_verified++;
	return 0;

missing:
	ERR(f, "F21 %s: its file is missing from the object store%s: "
	    "committed bytes [%" PRIu64 ", %" PRIu64 ") have no copy there",
	    what, f->store ? "" : " (there is no object directory)", o->start,
	    o->end);
lost:
	f->chains_intact = false;
	return 0;
}

int nrs_fsck_adopted_presence(struct nrs_fsck *f, const char *key,
			      bool *stored)
{
	unsigned char b;
	ssize_t n = f->store ? nrs_obj_get(f->store, key, 0, &b, 1) : -ENOENT;

	*stored = n >= 0;
	return n >= 0 || n == -ENOENT ? 0 : (int)n;
}

bool nrs_fsck_segs_live(const struct nrs_fsck_segs *s, uint64_t seg)
{
	return has_u64(s->live, s->nlive, seg);
}

int nrs_fsck_check_retired_adopted(struct nrs_fsck *f,
				   const struct nrs_fsck_segs *s,
				   const struct nrs_obj_row *o,
				   const char *key, const char *what)
{
	bool stored = false;
	int err;

	if (has_u64(s->live, s->nlive, o->seg) || (!f->store &&
						   !f->store_absent)) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F25 %s: punched out of its "
			     "file by GC", what);
		return 0;
	}
	err = nrs_fsck_adopted_presence(f, key, &stored);
	if (err)
		return err;
	if (!stored) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F25 %s: its file deleted by GC",
			     what);
		return 0;
	}
	if (o->seg & NRS_ADOPT_OWAL && (!f->have_owal_floor ||
	    (o->seg & ~NRS_ADOPT_OWAL) >= f->owal_floor)) {
		nrs_fsck_say(f, NRS_FSCK_INFO, "F25 %s: its WAL object is still"
			     " the object WAL's (lifecycle.c G9)", what);
		return 0;
	}
	/* said once per file: by its highest generation, whichever row it is */
	for (size_t i = 0; i < f->nobjs; i++)
		if (f->objs[i].seg == o->seg && f->objs[i].gen > o->gen)
			return 0;
	f->strays++;
	ERR(f, "F25 %s: every row naming objects/%s is retired, but the file "
	    "is still stored: a GC bug (lifecycle.c G7 deletes it before it "
	    "retires the last row), and nothing will delete it now: delete it "
	    "by hand (--repair deletes no object)", what, key);
	return 0;
}

bool nrs_fsck_adopted_file(struct nrs_fsck *f, const struct nrs_fsck_segs *s,
			   const struct nrs_objfile *of)
{
	char key[NRS_OBJKEY_MAX];
	uint64_t seg;

	if (strncmp(of->name, "w/", 2) != 0 ||
	    nrs_parse_x64(of->name + 2, strlen(of->name + 2), &seg) ||
	    seg == 0 || nrs_objfmt_adopt_key(key, seg) < 0 ||
	    strcmp(key, of->name) != 0)
		return false;	/* no key of an adopted file */
	if (has_u64(s->named, s->nnamed, seg))
		return true;
	if (!has_u64(s->wal, s->nwal, seg))
		return false;	/* an unreferenced object (F26) */
	nrs_fsck_say(f, NRS_FSCK_PENDING, "F26 objects/%s: no row names it, "
		     "but the WAL still holds segment %" PRIu64 ": the WAL's "
		     "own segment, linked by an adoption not (or no longer) "
		     "recorded, not an error while the WAL holds it", of->name,
		     seg);
	return true;
}
