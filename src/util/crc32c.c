/*
 * crc32c.c - CRC32C through Intel's ISA-L (libisal), which picks the
 * fastest kernel the CPU has (SSE4.2 crc32 instructions, PCLMUL folding).
 * ISA-L's crc32_iscsi() neither pre- nor post-inverts and takes an int
 * length, so this wrapper inverts and feeds it in bounded pieces.
 */
#include "config.h"

#include <isa-l/crc.h>
#include <limits.h>

#include "util/crc32c.h"

uint32_t nrs_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;

	while (len > 0) {
		size_t n = len > (size_t)INT_MAX / 2 ? (size_t)INT_MAX / 2 : len;

		c = crc32_iscsi((unsigned char *)p, (int)n, c);
		p += n;
		len -= n;
	}
	return ~c;
}
