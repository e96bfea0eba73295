/*
 * parse.h - the one strict decimal parser for numbers that come from a
 * user: the daemon's -o options (main.c), numeric user.nereus.* xattrs
 * (xattr.c) and the arguments of nereusctl and nereusfs-fsck.
 *
 * N1  A number is one or more ASCII digits and nothing else: no sign (so
 *     "-1" is not UINT64_MAX and "+5" is not 5), no space before or after,
 *     no base prefix ("0x10"), no unit suffix, no NUL inside; its value
 *     fits a uint64_t (18446744073709551616 is refused, never wrapped or
 *     clamped).  At most 20 digits (what UINT64_MAX takes); leading zeros
 *     within them are allowed ("007" is 7).
 *
 * strtoull(3) accepts all of the above that N1 refuses, which is why it
 * is used nowhere for user input.  Depends on nothing but libc, so the
 * tools link it as a source file.
 */
#ifndef NRS_PARSE_H
#define NRS_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define NRS_PARSE_DIGITS_MAX	20	/* digits of UINT64_MAX */

/*
 * Parse the len bytes at s (not NUL-terminated) as N1 says.  0 and *out
 * set; -EINVAL not a number; -ERANGE a number too large for uint64_t
 * (or of more than 20 digits).
 * *out is written only on success.
 */
int nrs_parse_u64(const void *s, size_t len, uint64_t *out);
/* The same for a NUL-terminated string. */
int nrs_parse_u64_str(const char *s, uint64_t *out);
/* ... and also -ERANGE when the value is not within [min, max]. */
int nrs_parse_u64_range(const char *s, uint64_t min, uint64_t max,
			uint64_t *out);

#endif
