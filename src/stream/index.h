/*
 * index.h - the offset index of one stream: which physical copy holds each
 * committed logical range (DESIGN.md section 1, event 3).
 *
 * Entries are sorted by logical offset and do not overlap; a gap between two
 * entries is a committed range whose copy is missing (a read of it is EIO).
 * A WAL entry is one WAL record: [start, end) at (seg, off), generation 0.
 * An object entry is (part of) a materialized segment object of generation
 * gen >= 1 that holds [ostart, oend) (objfmt.h); its [start, end) lies
 * within that.  An adopted entry is one WAL record that stayed where the
 * WAL wrote it, in the segment file the embedded store took over as an
 * object (objstore_dir_adopt.c): read and verified as a WAL record, with
 * a generation gen >= 1 like an object's.  Objects only replace WAL entries from below (the
 * materializer works upwards from the stream's start), so within one
 * stream object entries come first, then WAL entries, whose segment numbers
 * never decrease with the offset.  The index is derived state: it is rebuilt
 * at mount from the published object generations, the heads and the commit
 * chain (DESIGN.md section 6), so it is never stored.
 *
 * Not thread safe: the owner (struct nrs_stream) guards it with its lock.
 */
#ifndef NRS_INDEX_H
#define NRS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum nrs_target_kind {
	NRS_TARGET_WAL = 1,	/* a local WAL record at (seg, off) */
	NRS_TARGET_OBJ = 2,	/* a segment object [ostart, oend), gen */
	NRS_TARGET_ADOPT = 3,	/* a WAL record at (seg, off) of the WAL
				 * segment the embedded store adopted in
				 * place (objfmt.h nrs_objfmt_adopt_key), gen */
};

struct nrs_index_ent {
	uint64_t start, end;	/* logical range [start, end) */
	uint64_t gen;		/* generation; 0 = the WAL copy */
	uint8_t kind;		/* enum nrs_target_kind */
	uint64_t seg, off;	/* WAL: where the record starts */
	uint64_t ostart, oend;	/* OBJ: the range the object holds */
};

struct nrs_index {
	struct nrs_index_ent *v;
	size_t n, cap;
};

/* Append e after the last entry: e->start >= last end (a larger start
 * leaves a gap), e->end > e->start.  -EINVAL otherwise, -ENOMEM. */
int nrs_index_append(struct nrs_index *ix, const struct nrs_index_ent *e);
/* Index of the first entry whose end is > off; ix->n if none. */
size_t nrs_index_find(const struct nrs_index *ix, uint64_t off);
/* Drop entries wholly below off (after a trim). */
void nrs_index_drop_below(struct nrs_index *ix, uint64_t off);
/*
 * Replace every entry overlapping [e->start, e->end) by e (an object entry):
 * the entries must lie within that range, except that the first may begin
 * below it (a record cut by an unaligned trim: its part below is never
 * read).  Returns the number of entries replaced (>= 1) and their record
 * bytes in *wal_bytes (nrs_walrec_total_len of each WAL entry), 0 if no
 * entry overlaps (nothing is inserted), -EINVAL if an entry reaches past
 * e->end, -ENOMEM.
 */
int nrs_index_replace(struct nrs_index *ix, const struct nrs_index_ent *e,
		      uint64_t *wal_bytes);
/* The first WAL entry's segment (the oldest one the stream needs), or
 * UINT64_MAX if it has none. */
uint64_t nrs_index_min_seg(const struct nrs_index *ix);
/* Copy up to max entries that overlap [off, end) into out; returns count. */
size_t nrs_index_collect(const struct nrs_index *ix, uint64_t off, uint64_t end,
			 struct nrs_index_ent *out, size_t max);
/* The most bytes of one text form (index.c X2): the xattr value limit. */
#define NRS_INDEX_TEXT_MAX	65536
/*
 * Text form for user.nereus.index of stream stream_id, from the range
 * holding offset from (or the first above it) on: "start end gen
 * target\n" per range, target "wal:SEG:OFF" (owal: "walobj:KEY:OFF", the
 * object WAL's key, X4), "obj:KEY" (objfmt.h) or "adopt:KEY:OFF" (an
 * adopted segment's key and the record's offset in it); gaps
 * are shown as target "missing"; adjacent WAL entries of one segment are
 * one line (X3).  At most NRS_INDEX_TEXT_MAX bytes: what does not fit is
 * counted in a last line "# N more ranges" (X2).  Returns the length
 * (copies when size > 0), -ERANGE if size is too small.
 */
ssize_t nrs_index_format(const struct nrs_index *ix, uint64_t stream_id,
			 bool owal, uint64_t from, char *buf, size_t size);
/* Audit: sorted, non-overlapping, non-empty entries. */
bool nrs_index_check(const struct nrs_index *ix);
void nrs_index_free(struct nrs_index *ix);

#endif
