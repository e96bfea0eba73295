/*
 * errname.h - errno values by their symbolic names, for the test helpers'
 * output ("ESPIPE", not "Illegal seek") and their "expect" arguments.
 */
#ifndef NRS_TEST_ERRNAME_H
#define NRS_TEST_ERRNAME_H

/* The name of e ("E123" for one not in the table; static buffer). */
const char *nrs_errname(int e);
/* The value of a name such as "ESPIPE" (ENOTSUP and EOPNOTSUPP are the
 * same value on Linux, as ENOATTR and ENODATA); -1 if unknown. */
int nrs_errno_of(const char *name);

#endif
