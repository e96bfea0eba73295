/*
 * errname.h - the one table of errno values by their symbolic names: the
 * names NRS_FAILPOINTS accepts (failpoint.c), nereusctl's messages and the
 * test helpers' output ("ESPIPE", not "Illegal seek") and their "expect"
 * arguments.  Depends on nothing but libc, so nereusctl and the helpers
 * link it as a source file.
 */
#ifndef NRS_ERRNAME_H
#define NRS_ERRNAME_H

/* The name of e: the table's, else the C library's (strerrorname_np, where
 * there is one), else "E123" (then in a per-thread buffer that the next
 * call overwrites). */
const char *nrs_errname(int e);
/* The value of a name such as "ESPIPE" (ENOTSUP and EOPNOTSUPP are the
 * same value on Linux, as ENOATTR and ENODATA); -1 if unknown. */
int nrs_errno_of(const char *name);

#endif
