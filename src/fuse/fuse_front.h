/*
 * fuse_front.h - the FUSE low-level front (fuse_front.c).  Only main.c and
 * fuse_front.c include FUSE headers.
 */
#ifndef NRS_FUSE_FRONT_H
#define NRS_FUSE_FRONT_H

struct fuse_args;
struct fuse_session;
struct nrs_core;

/* A session whose requests go to c (which must outlive it). */
struct fuse_session *nrs_fuse_session_new(struct fuse_args *args,
					  struct nrs_core *c);

#endif
