/*
 * objstore.c - what every object store provider shares: the rule for keys
 * (objstore.h).  Keys are chosen by nereusfs (objfmt.h: "s/<id>/<range>"),
 * never by users, so the rule can be narrow: characters that need no
 * escaping in a URL path or a file name, and no component starting with
 * '.', which leaves ".tmp" and every other dot-name of the embedded store's
 * directory out of the key space (objstore_dir.c).
 */
#include "config.h"

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
