/*
 * parse.h - the one strict decimal parser for numbers that come from a
 * user: the daemon's -o options (main.c), numeric user.nereus.* xattrs
 * (xattr.c), the arguments of nereusctl and nereusfs-fsck and the index
 * lines nereusctl reads; and its hex sibling for the generation in an
 * object key (fsck).
 *
 * N1  A number is one or more ASCII digits and nothing else: no sign (so
 *     "-1" is not UINT64_MAX and "+5" is not 5), no space before or after,
 *     no base prefix ("0x10"), no unit suffix, no NUL inside; its value
 *     fits a uint64_t (18446744073709551616 is refused, never wrapped or
 *     clamped).  At most 20 digits (what UINT64_MAX takes); leading zeros
 *     within them are allowed ("007" is 7).
 *
 * N2  A hexadecimal field of a name we wrote ourselves (an object key's
 *     "-g<gen>", written "%016" PRIx64) is one to 16 lowercase hex digits
 *     and nothing else; fsck reads it back from the store's listing.
 *
 * strtoull(3) accepts all of the above that N1 and N2 refuse, which is
 * why it is used nowhere in src/ and tools/.  Depends on nothing but libc, so the
 * tools link it as a source file.
 */
#ifndef NRS_PARSE_H
#define NRS_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define NRS_PARSE_DIGITS_MAX	20	/* digits of UINT64_MAX */
#define NRS_PARSE_XDIGITS_MAX	16	/* hex digits of UINT64_MAX */

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
/*
 * Parse the len bytes at s as N2 says.  0 and *out set; -EINVAL not
 * lowercase hex digits; -ERANGE more than 16 of them.  *out is written
 * only on success.
 */
int nrs_parse_x64(const void *s, size_t len, uint64_t *out);

#endif
