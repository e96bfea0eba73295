/*
 * attrmask.h - which attributes a setattr changes (core.h and meta.h).
 */
#ifndef NRS_ATTRMASK_H
#define NRS_ATTRMASK_H

#define NRS_SET_MODE	0x1
#define NRS_SET_UID	0x2
#define NRS_SET_GID	0x4
#define NRS_SET_ATIME	0x8
#define NRS_SET_MTIME	0x10
#define NRS_SET_KILLPRIV 0x20	/* clear what nrs_mode_killpriv clears, from
				 * the mode as stored (core_append.c K1) */
#define NRS_SET_SIZE	0x100	/* core only: streams refuse all but no-ops */

/*
 * K1 (core_append.c): the mode once a caller without CAP_FSETID wrote to the
 * file: S_ISUID goes, and S_ISGID when group-execute is set (without it,
 * S_ISGID marks mandatory locking, and stays), as the kernel's
 * setattr_should_drop_suidgid() does for local file systems.
 */
static inline unsigned int nrs_mode_killpriv(unsigned int mode)
{
	mode &= ~04000u;			/* S_ISUID */
	if ((mode & 02010u) == 02010u)		/* S_ISGID | S_IXGRP */
		mode &= ~02000u;
	return mode;
}

#endif
