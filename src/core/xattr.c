/*
 * xattr.c - the table of user.nereus.* names and their value parsers.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "core/xattr.h"
#include "meta/meta.h"
#include "util/parse.h"

#define S NRS_XA_ON_STREAM
#define D NRS_XA_ON_DIR
#define R NRS_XA_READ
#define W NRS_XA_WRITE

static const struct nrs_xattr_desc table[NRS_XA_COUNT] = {
	[NRS_XA_ID] = { NRS_XATTR_PREFIX "id", S | R },
	[NRS_XA_HEAD] = { NRS_XATTR_PREFIX "head", S | R },
	[NRS_XA_VERSION] = { NRS_XATTR_PREFIX "version", S | R },
	[NRS_XA_START] = { NRS_XATTR_PREFIX "start", S | R },
	[NRS_XA_TRIM] = { NRS_XATTR_PREFIX "trim", S | W },
	[NRS_XA_EPOCH] = { NRS_XATTR_PREFIX "epoch", S | R | W },
	[NRS_XA_PROFILE] = { NRS_XATTR_PREFIX "profile", S | D | R | W },
	[NRS_XA_RET_BYTES] = { NRS_XATTR_PREFIX "retention.bytes", S | D | R | W },
	[NRS_XA_RET_MS] = { NRS_XATTR_PREFIX "retention.ms", S | D | R | W },
	[NRS_XA_MATERIALIZED] = { NRS_XATTR_PREFIX "materialized", S | R },
	[NRS_XA_WAL_BYTES] = { NRS_XATTR_PREFIX "wal_bytes", S | R },
	[NRS_XA_INDEX] = { NRS_XATTR_PREFIX "index", S | R },
};

int nrs_xattr_lookup(const char *name)
{
	if (strncmp(name, NRS_XATTR_PREFIX, sizeof(NRS_XATTR_PREFIX) - 1) != 0)
		return NRS_XA_NONE;
	for (int i = 0; i < NRS_XA_COUNT; i++)
		if (strcmp(name, table[i].name) == 0)
			return i;
	return NRS_XA_UNKNOWN;
}

const struct nrs_xattr_desc *nrs_xattr_desc(int id)
{
	return id >= 0 && id < NRS_XA_COUNT ? &table[id] : NULL;
}

bool nrs_xattr_applies(int id, bool is_dir)
{
	const struct nrs_xattr_desc *d = nrs_xattr_desc(id);

	return d && (d->flags & (is_dir ? NRS_XA_ON_DIR : NRS_XA_ON_STREAM));
}

/* N1 of parse.h; every failure is -EINVAL (ERANGE means "buffer too
 * small" to a getxattr caller). */
int nrs_xattr_parse_u64(const void *val, size_t len, uint64_t *out)
{
	return nrs_parse_u64(val, len, out) ? -EINVAL : 0;
}

bool nrs_xattr_is_forever(const void *val, size_t len)
{
	return len == 2 && memcmp(val, "-1", 2) == 0;
}

static const char *const profile_names[] = {
	[NRS_PROFILE_LOCAL_WAL] = "local-wal",
	[NRS_PROFILE_OBJECT_WAL] = "object-wal",
};

const char *nrs_profile_name(int profile)
{
	if (profile == NRS_PROFILE_LOCAL_WAL || profile == NRS_PROFILE_OBJECT_WAL)
		return profile_names[profile];
	return NULL;
}

int nrs_xattr_parse_profile(const void *val, size_t len, int *profile)
{
	for (int p = NRS_PROFILE_LOCAL_WAL; p <= NRS_PROFILE_OBJECT_WAL; p++) {
		const char *n = profile_names[p];

		if (len == strlen(n) && memcmp(val, n, len) == 0) {
			*profile = p;
			return 0;
		}
	}
	return -EINVAL;
}

int nrs_xattr_parse_index_page(const char *name, uint64_t *from)
{
	static const char prefix[] = NRS_XATTR_PREFIX "index.";
	uint64_t v;
	int err;

	if (strncmp(name, prefix, sizeof(prefix) - 1) != 0)
		return -EINVAL;
	name += sizeof(prefix) - 1;
	err = nrs_xattr_parse_u64(name, strlen(name), &v);
	if (err)
		return err;
	if (from)
		*from = v;
	return 0;
}
