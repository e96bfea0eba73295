/*
 * powerfail.h - the journal record of nrs-powerfail.so, read by
 * nrs-powerreplay.  The format is described at the top of
 * nrs-powerfail.c.
 */
#ifndef NRS_POWERFAIL_H
#define NRS_POWERFAIL_H

#include <stdint.h>

#define PF_MAGIC	"NPF1"

enum {
	PF_CREATE = 1,
	PF_WRITE = 2,
	PF_TRUNC = 3,
	PF_FALLOC = 4,
	PF_SYNC = 5,
	PF_UNLINK = 6,
	PF_RENAME = 7,
	PF_SFR = 8,
	PF_LINK = 9,
};

#define PF_F_DIR	1u	/* CREATE, SYNC: the file is a directory */
#define PF_F_DATASYNC	2u	/* SYNC: fdatasync rather than fsync */

struct pf_hdr {
	char magic[4];
	uint32_t type;
	uint64_t ts, dev, ino, off, len;
	uint32_t path_len, flags, total, reserved;
};

_Static_assert(sizeof(struct pf_hdr) == 64, "journal record header is 64 bytes");

/* Records are padded with zeros to a multiple of 8 bytes (total counts the
 * padding), so that every header in the journal is aligned. */
#define PF_ALIGN(n)	(((n) + 7u) & ~(size_t)7u)

#endif
