/*
 * wal_object_gcrec.c - the object WAL's gc record: the DELETEs a reclaim
 * owes (wal_object_gc.c OWG3 says when it is written, read and dropped).
 *
 * FORMAT, file DIR/gc beside the state file (OW6), all integers
 * little-endian, 32 + 8 n bytes:
 *
 *   0       magic "NRSOWGC1"
 *   8       u32 version (1)
 *   12      u32 n: segments owed, 1 to OW_OWED_MAX
 *   16      u64 floor: the floor the reclaim that wrote it records next;
 *           every segment below it
 *   24      n x u64 seg, strictly ascending, each run << 40 | seq with
 *           run and seq >= 1
 *   24+8n   u32 CRC32C of [0, 24 + 8n)
 *   28+8n   u32 0
 *
 * It is replaced whole (nrs_file_replace: a temporary file DIR/gc.tmp,
 * fsync, rename, fsync of DIR) and removed once nothing is owed.  A file
 * that fails any check -- its length, magic, version, n, CRC, order, a
 * segment of no run the state file names -- is damage: reported and
 * ignored (its objects leak, nothing needed is deleted), never a size or
 * an index: n sizes nothing before the length and the CRC agree with it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/le.h"
#include "util/log.h"
#include "wal/wal_object_priv.h"

#define GC_MAGIC	"NRSOWGC1"
#define GC_VERSION	1u
#define GC_FIXED	32u		/* bytes besides the segments */
#define GC_LEN_MAX	(GC_FIXED + 8u * OW_OWED_MAX)

/* The checks of the FORMAT on the len bytes of b; 0 or -EUCLEAN. */
static int gc_check(const unsigned char *b, size_t len, uint64_t last_run,
		    uint64_t *floor, size_t *n)
{
	uint32_t cnt;
	uint64_t prev = 0;

	if (len < GC_FIXED || memcmp(b, GC_MAGIC, 8) != 0 ||
	    nrs_le32_get(b + 8) != GC_VERSION)
		return -EUCLEAN;
	cnt = nrs_le32_get(b + 12);
	if (cnt == 0 || cnt > OW_OWED_MAX || len != GC_FIXED + 8u * cnt)
		return -EUCLEAN;
	if (nrs_le32_get(b + 24 + 8u * cnt) !=
	    nrs_crc32c(0, b, 24 + 8u * cnt) ||
	    nrs_le32_get(b + 28 + 8u * cnt) != 0)
		return -EUCLEAN;
	*floor = nrs_le64_get(b + 16);
	for (uint32_t i = 0; i < cnt; i++) {
		uint64_t seg = nrs_le64_get(b + 24 + 8u * i);

		if (seg <= prev || seg >= *floor || ow_seq_of(seg) == 0 ||
		    ow_run_of(seg) == 0 || ow_run_of(seg) > last_run)
			return -EUCLEAN;
		prev = seg;
	}
	*n = cnt;
	return 0;
}

int ow_gc_read(const char *path, uint64_t last_run, uint64_t *segs,
	       size_t *n)
{
	unsigned char *b;
	uint64_t floor = 0;
	size_t cnt = 0;
	ssize_t got;
	int fd, err;

	*n = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	b = malloc(GC_LEN_MAX + 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	got = nrs_pread_full(fd, b, GC_LEN_MAX + 1, 0);	/* one more: too long */
	close(fd);
	err = got < 0 ? (int)got : gc_check(b, (size_t)got, last_run, &floor,
					    &cnt);
	for (size_t i = 0; !err && i < cnt; i++)
		segs[i] = nrs_le64_get(b + 24 + 8 * i);
	free(b);
	if (!err)
		*n = cnt;
	return err;
}

int ow_gc_write(const char *path, const char *dir, uint64_t floor,
		const uint64_t *segs, size_t n)
{
	char tmp[4096];
	unsigned char *b;
	size_t len = GC_FIXED + 8 * n;
	int err;

	if (n == 0) {
		/* a removal that a crash undoes only sends DELETEs below the
		 * floor again, which find nothing (OWG3) */
		if (unlink(path) != 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	if (n > OW_OWED_MAX)
		return -EOVERFLOW;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	b = calloc(1, len);
	if (!b)
		return -ENOMEM;
	memcpy(b, GC_MAGIC, 8);
	nrs_le32_put(b + 8, GC_VERSION);
	nrs_le32_put(b + 12, (uint32_t)n);
	nrs_le64_put(b + 16, floor);
	for (size_t i = 0; i < n; i++)
		nrs_le64_put(b + 24 + 8 * i, segs[i]);
	nrs_le32_put(b + 24 + 8 * n, nrs_crc32c(0, b, 24 + 8 * n));
	err = nrs_file_replace(path, tmp, dir, b, len);
	free(b);
	return err;
}
