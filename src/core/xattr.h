/*
 * xattr.h - the user.nereus.* names of DESIGN.md section 4: which exist,
 * where they apply, who may read or write them, and how values are parsed.
 *
 * Values are ASCII: numbers in plain decimal without sign, spaces or a
 * trailing newline; profiles by name.  A bad value is -EINVAL.
 */
#ifndef NRS_XATTR_H
#define NRS_XATTR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NRS_XATTR_PREFIX	"user.nereus."

enum nrs_xattr_id {
	NRS_XA_ID,
	NRS_XA_HEAD,
	NRS_XA_VERSION,
	NRS_XA_START,
	NRS_XA_TRIM,
	NRS_XA_EPOCH,
	NRS_XA_PROFILE,
	NRS_XA_RET_BYTES,
	NRS_XA_RET_MS,
	NRS_XA_MATERIALIZED,
	NRS_XA_WAL_BYTES,
	NRS_XA_INDEX,
	NRS_XA_COUNT,
	NRS_XA_UNKNOWN = -1,	/* under the prefix, but no such name */
	NRS_XA_NONE = -2,	/* not under the prefix: an ordinary name */
};

#define NRS_XA_ON_STREAM	0x1
#define NRS_XA_ON_DIR		0x2
#define NRS_XA_READ		0x4
#define NRS_XA_WRITE		0x8

struct nrs_xattr_desc {
	const char *name;	/* full name, with the prefix */
	unsigned int flags;
};

/* The id of name: an enum value, NRS_XA_UNKNOWN or NRS_XA_NONE. */
int nrs_xattr_lookup(const char *name);
const struct nrs_xattr_desc *nrs_xattr_desc(int id);
/* Does attribute id apply to a directory (is_dir) or a stream? */
bool nrs_xattr_applies(int id, bool is_dir);

/*
 * Is name "user.nereus.index.OFF" (OFF a decimal u64 as below)?  0 and
 * *from = OFF (when from is not NULL), -EINVAL if not.
 */
int nrs_xattr_parse_index_page(const char *name, uint64_t *from);
/* Parse a decimal u64 as parse.h's N1 says (1..20 digits, no sign, no
 * spaces, no overflow); -EINVAL otherwise. */
int nrs_xattr_parse_u64(const void *val, size_t len, uint64_t *out);
/* Is a retention value Kafka's "-1" (keep forever, stored as 0)?  Checked
 * before the number is parsed; every other negative is -EINVAL there. */
bool nrs_xattr_is_forever(const void *val, size_t len);
/* Parse a profile name into enum nrs_profile (not UNSET). */
int nrs_xattr_parse_profile(const void *val, size_t len, int *profile);
/* The name of a profile ("local-wal"), or NULL for UNSET/unknown. */
const char *nrs_profile_name(int profile);

#endif
