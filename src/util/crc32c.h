/*
 * crc32c.h - CRC32C (Castagnoli), the checksum of Kafka record batches and
 * of every WAL record and object block here (DESIGN.md I6).
 *
 * nrs_crc32c(0, buf, n) is the standard CRC32C of buf ("123456789" gives
 * 0xe3069283), and it extends: crc(a || b) == nrs_crc32c(crc(a), b, |b|).
 */
#ifndef NRS_CRC32C_H
#define NRS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t nrs_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
