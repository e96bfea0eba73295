/*
 * nrs-walrec - append one WAL record, formatted by the project's own
 * encoder (src/wal/walrec.c), to the end of a local WAL segment file: damage
 * for the integration tests that a byte editor could not make (a record
 * whose CRCs all verify but whose fields no daemon writes).
 *
 *	nrs-walrec SEGFILE LSN STREAM BASE PREV_LSN EPOCH DATA
 *
 * Numbers are decimal or 0x hex, all 64-bit unsigned.  The record holds
 * DATA as one append.  Prints "ok OFFSET" (where the record starts); exits
 * 1 with a message on failure (the encoder refuses a record that would
 * fail walrec.c WV3).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wal/walrec.h"

static int num(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	return errno || end == s || *end ? -EINVAL : 0;
}

int main(int argc, char **argv)
{
	struct nrs_walrec r = { .kind = NRS_WALREC_DATA, .n_appends = 1 };
	unsigned char hdr[NRS_WALREC_FIXED + 4 * 16], pad[NRS_WALREC_ALIGN] = { 0 };
	struct iovec iov;
	size_t len, total;
	ssize_t hl;
	struct stat sb;
	int fd;

	if (argc != 8 || num(argv[2], &r.lsn) || num(argv[3], &r.stream_id) ||
	    num(argv[4], &r.base) || num(argv[5], &r.prev_lsn) ||
	    num(argv[6], &r.epoch)) {
		fprintf(stderr, "usage: nrs-walrec SEGFILE LSN STREAM BASE "
			"PREV_LSN EPOCH DATA\n");
		return 2;
	}
	len = strlen(argv[7]);
	if (len == 0 || len > 16 * NRS_WALREC_CHUNK) {
		fprintf(stderr, "nrs-walrec: DATA must be 1 to 1 MiB\n");
		return 2;
	}
	r.len = (uint32_t)len;
	iov.iov_base = argv[7];
	iov.iov_len = len;
	hl = nrs_walrec_encode_hdr(&r, &iov, 1, hdr, sizeof(hdr));
	if (hl < 0) {
		fprintf(stderr, "nrs-walrec: the encoder refuses it: %s\n",
			strerror((int)-hl));
		return 1;
	}
	total = nrs_walrec_total_len(r.len);
	fd = open(argv[1], O_WRONLY);
	if (fd < 0 || fstat(fd, &sb) < 0 ||
	    pwrite(fd, hdr, (size_t)hl, sb.st_size) != hl ||
	    pwrite(fd, argv[7], len, sb.st_size + hl) != (ssize_t)len ||
	    pwrite(fd, pad, total - (size_t)hl - len,
		   sb.st_size + hl + (off_t)len) !=
		    (ssize_t)(total - (size_t)hl - len) ||
	    fsync(fd) < 0) {
		fprintf(stderr, "nrs-walrec: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	close(fd);
	printf("ok %jd\n", (intmax_t)sb.st_size);
	return 0;
}
