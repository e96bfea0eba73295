/*
 * owner_id.c - this data directory's owner id (owner.h), in the file
 * DIR/owner-id:
 *
 *     <32 lower-case hex digits>[ owner]\n
 *
 * The id is 128 random bits (getrandom), made at the first mount that
 * opens an owner record, and never changed.  " owner" is added once the
 * directory has owned a bucket, so that a later mount can tell "I owned
 * it and someone took it" (fenced) from "I never did" (a fresh
 * directory).  Both writes go through a temporary file, fsync and
 * rename (and the directory's fsync): the file is whole or absent.
 *
 * Why a file of the data directory and not a setting of the metadata
 * store: the id must name this directory, never travel.  The metadata is
 * copied to the bucket by checkpoints and restored by recovery on another
 * host, which must not come back believing it is the old owner.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "owner/owner.h"
#include "util/fileio.h"
#include "util/log.h"

#define ID_FILE		"owner-id"
#define LINE_MAX_LEN	64

static int id_write(const char *dir, const char *id, bool owner)
{
	char path[4096], tmp[4096], line[LINE_MAX_LEN];
	int rc, n;

	n = snprintf(line, sizeof(line), "%s%s\n", id, owner ? " owner" : "");
	if ((size_t)snprintf(path, sizeof(path), "%s/" ID_FILE, dir) >=
	    sizeof(path) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/." ID_FILE ".tmp", dir) >=
	    sizeof(tmp))
		return -ENAMETOOLONG;
	rc = nrs_file_replace(path, tmp, dir, line, (size_t)n);
	if (rc < 0)
		nrs_err("cannot write %s: %s", path, strerror(-rc));
	return rc;
}

static bool is_hex_id(const char *s)
{
	for (int i = 0; i < NRS_OWNER_ID_LEN; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int nrs_owner_id_load(const char *dir, char id[NRS_OWNER_ID_LEN + 1],
		      bool *was_owner)
{
	char path[4096], line[LINE_MAX_LEN + 1];
	unsigned char rnd[16];
	ssize_t n;
	int fd, rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/" ID_FILE, dir) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		n = nrs_pread_full(fd, line, LINE_MAX_LEN, 0);
		close(fd);
		if (n < 0)
			return (int)n;
		line[n] = '\0';
		if (n < NRS_OWNER_ID_LEN + 1 || !is_hex_id(line) ||
		    (strcmp(line + NRS_OWNER_ID_LEN, "\n") != 0 &&
		     strcmp(line + NRS_OWNER_ID_LEN, " owner\n") != 0)) {
			nrs_err("%s is damaged: it must hold 32 hex digits (this "
				"data directory's owner id)", path);
			return -EUCLEAN;
		}
		memcpy(id, line, NRS_OWNER_ID_LEN);
		id[NRS_OWNER_ID_LEN] = '\0';
		*was_owner = line[NRS_OWNER_ID_LEN] == ' ';
		return 0;
	}
	if (errno != ENOENT) {
		rc = -errno;
		nrs_err("cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -errno;
	for (int i = 0; i < 16; i++)
		snprintf(id + 2 * i, 3, "%02x", rnd[i]);
	rc = id_write(dir, id, false);
	if (rc == 0)
		*was_owner = false;
	return rc;
}

int nrs_owner_id_mark_owner(const char *dir, const char *id)
{
	return id_write(dir, id, true);
}
