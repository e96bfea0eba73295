/*
 * objstore.c - what every object store provider shares: the rule for keys
 * (objstore.h).  Keys are chosen by nereusfs (objfmt.h: "s/<id>/<range>"),
 * never by users, so the rule can be narrow: characters that need no
 * escaping in a URL path or a file name, and no component starting with
 * '.', which leaves ".tmp" and every other dot-name of the embedded store's
 * directory out of the key space (objstore_dir.c).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "obj/objstore.h"

static bool key_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool nrs_objkey_is_valid(const char *key)
{
	size_t n;
	bool at_start = true;	/* at the first character of a component */

	if (!key)
		return false;
	n = strnlen(key, NRS_OBJKEY_MAX);
	if (n == 0 || n >= NRS_OBJKEY_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];

		if (c == '/') {
			if (at_start)
				return false;	/* empty component */
			at_start = true;
			continue;
		}
		if (!key_char_ok(c) || (at_start && c == '.'))
			return false;
		at_start = false;
	}
	return !at_start;	/* no trailing '/' */
}

/* OB1 */
enum nrs_put_verdict nrs_put_decide(int head_err, const struct nrs_obj_meta *got,
				    uint64_t len,
				    const unsigned char sha256[NRS_SHA256_LEN])
{
	if (head_err == -ENOENT)
		return NRS_PUT_AGAIN;
	if (head_err)
		return NRS_PUT_LATER;
	if (got->length == len && got->has_sha256 &&
	    memcmp(got->sha256, sha256, NRS_SHA256_LEN) == 0)
		return NRS_PUT_PROVEN;
	return NRS_PUT_QUARANTINE;
}
