/*
 * errname.c - the errno name table (errname.h).  Where two names share a
 * value the first listed is the one nrs_errname gives.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/errname.h"

#define E(x) { #x, x }
static const struct {
	const char *name;
	int value;
} errnames[] = {
	E(EPERM),
	E(ENOENT),
	E(ESRCH),
	E(EINTR),
	E(EIO),
	E(ENXIO),
	E(E2BIG),
	E(EBADF),
	E(ECHILD),
	E(EAGAIN),
	E(ENOMEM),
	E(EACCES),
	E(EFAULT),
	E(EBUSY),
	E(EEXIST),
	E(EXDEV),
	E(ENODEV),
	E(ENOTDIR),
	E(EISDIR),
	E(EINVAL),
	E(ENFILE),
	E(EMFILE),
	E(ENOTTY),
	E(ETXTBSY),
	E(EFBIG),
	E(ENOSPC),
	E(ESPIPE),
	E(EROFS),
	E(EMLINK),
	E(EPIPE),
	E(EDOM),
	E(ERANGE),
	E(EDEADLK),
	E(ENAMETOOLONG),
	E(ENOLCK),
	E(ENOSYS),
	E(ENOTEMPTY),
	E(ELOOP),
	E(ENOMSG),
	E(ENODATA),
	E(ETIME),
	E(EPROTO),
	E(EBADMSG),
	E(EOVERFLOW),
	E(EUCLEAN),
	E(EOPNOTSUPP),
	E(ENOTCONN),
	E(ECONNABORTED),
	E(ECONNRESET),
	E(ETIMEDOUT),
	E(ESTALE),
	E(EDQUOT),
	E(ECANCELED),
	{ "ENOTSUP", ENOTSUP },	/* == EOPNOTSUPP: listed after it */
	{ "ENOATTR", ENODATA },
};
#undef E

const char *nrs_errname(int e)
{
	static __thread char other[16];
	size_t i;

	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (errnames[i].value == e)
			return errnames[i].name;
#ifdef HAVE_STRERRORNAME_NP
	{
		const char *n = strerrorname_np(e);

		if (n)
			return n;
	}
#endif
	snprintf(other, sizeof(other), "E%d", e);
	return other;
}

int nrs_errno_of(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (!strcmp(errnames[i].name, name))
			return errnames[i].value;
	return -1;
}
