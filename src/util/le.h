/*
 * le.h - little-endian integers in byte buffers, read and written byte by
 * byte (no struct is ever cast onto a buffer), for the formats this project
 * owns (walrec.c, objfmt.c).
 */
#ifndef NRS_LE_H
#define NRS_LE_H

#include <stdint.h>

static inline void nrs_le16_put(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void nrs_le32_put(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void nrs_le64_put(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint16_t nrs_le16_get(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t nrs_le32_get(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t nrs_le64_get(const unsigned char *p)
{
	return (uint64_t)nrs_le32_get(p) | (uint64_t)nrs_le32_get(p + 4) << 32;
}

#endif
