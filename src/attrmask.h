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
#define NRS_SET_SIZE	0x100	/* core only: streams refuse all but no-ops */

#endif
