/*
 * le.h - little-endian integers in byte buffers (no struct is ever cast
 * onto a buffer), for the formats this project owns (walrec.c, objfmt.c).
 * The 32- and 64-bit ones go through memcpy of the integer in host order,
 * byte-swapped first on a big-endian host: one load or store, at any
 * alignment, where a byte loop costs a dozen instructions a byte (the
 * append path encodes a WAL record header and checksums a streams row,
 * sqlite_crc.c, with them).
 */
#ifndef NRS_LE_H
#define NRS_LE_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NRS_LE32(v) __builtin_bswap32(v)
#define NRS_LE64(v) __builtin_bswap64(v)
#else
#define NRS_LE32(v) (v)
#define NRS_LE64(v) (v)
#endif

static inline void nrs_le16_put(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void nrs_le32_put(unsigned char *p, uint32_t v)
{
	uint32_t le = NRS_LE32(v);

	memcpy(p, &le, sizeof(le));
}

static inline void nrs_le64_put(unsigned char *p, uint64_t v)
{
	uint64_t le = NRS_LE64(v);

	memcpy(p, &le, sizeof(le));
}

static inline uint16_t nrs_le16_get(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t nrs_le32_get(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return NRS_LE32(v);
}

static inline uint64_t nrs_le64_get(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return NRS_LE64(v);
}

#endif
