/* parse.c - the strict decimal and hex parsers (parse.h, rules N1, N2). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "util/parse.h"

int nrs_parse_u64(const void *s, size_t len, uint64_t *out)
{
	const unsigned char *p = s;
	uint64_t v = 0;
	bool big;

	if (len == 0)
		return -EINVAL;
	big = len > NRS_PARSE_DIGITS_MAX;	/* N1: at most 20 digits */
	for (size_t i = 0; i < len; i++) {
		unsigned int d;

		if (p[i] < '0' || p[i] > '9')	/* N1: digits only */
			return -EINVAL;
		d = p[i] - '0';
		if (v > (UINT64_MAX - d) / 10)	/* N1: no wrap */
			big = true;
		else
			v = v * 10 + d;
	}
	if (big)
		return -ERANGE;
	*out = v;
	return 0;
}

int nrs_parse_u64_str(const char *s, uint64_t *out)
{
	return nrs_parse_u64(s, strlen(s), out);
}

int nrs_parse_u64_range(const char *s, uint64_t min, uint64_t max,
			uint64_t *out)
{
	uint64_t v;
	int err = nrs_parse_u64_str(s, &v);

	if (err)
		return err;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int nrs_parse_x64(const void *s, size_t len, uint64_t *out)
{
	const unsigned char *p = s;
	uint64_t v = 0;

	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned int d;

		if (p[i] >= '0' && p[i] <= '9')		/* N2 */
			d = p[i] - '0';
		else if (p[i] >= 'a' && p[i] <= 'f')	/* N2: lowercase */
			d = p[i] - 'a' + 10;
		else
			return -EINVAL;
		v = v << 4 | d;
	}
	if (len > NRS_PARSE_XDIGITS_MAX)		/* N2: no wrap */
		return -ERANGE;
	*out = v;
	return 0;
}
