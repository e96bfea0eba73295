/*
 * objstore_dir.c - the embedded object store: one file per object under a
 * directory (DATA/objects by default, DESIGN.md section 7), for a host with
 * no bucket.  It keeps the rules of objstore.h: an object is whole or
 * absent after a crash, head() proves length and SHA-256, every call is
 * thread safe.
 *
 * DIRECTORY
 *
 *     DIR/KEY         the object stored under KEY; each '/' of the key is a
 *                     subdirectory (mode 0700), made on demand
 *     DIR/.tmp/       files being written by put(), named "<pid>-<n>"
 *
 * Keys never have a component starting with '.' (nrs_objkey_is_valid), so
 * ".tmp" and anything in it can never be taken for an object, and neither
 * can any other dot-name someone leaves in DIR.
 *
 * OBJECT FILE FORMAT (integers little-endian, le.h)
 *
 *     0   u8   magic[8]   "NRSDOBJ1"
 *     8   u32  version    1
 *    12   u32  hdr_len    64
 *    16   u64  length     bytes of the object
 *    24   u8   sha256[32] as given to put() (zero when none was given)
 *    56   u32  flags      bit 0: sha256 was given; other bits zero
 *    60   u32  crc        CRC32C of bytes 0..59
 *    64   the object's bytes, length of them, to the end of the file
 *
 * The SHA-256 lives in the header of the object's own file rather than in a
 * sidecar: one file, one rename, so the object and its proof appear and
 * disappear together and can never disagree after a crash.  The price is
 * that the file is not the object byte for byte (its bytes start at 64).
 *
 * head() checks the header: a file whose header is bad (magic, version,
 * CRC) or whose length disagrees with the file's size is reported with its
 * actual byte count and has_sha256 false, and logged: it proves nothing, so
 * the caller puts the same bytes again, which replaces it (DESIGN.md 6).
 * get() reads the bytes at 64 + off with pread and does not read the header:
 * every byte of an object is verified by its reader (objfmt.h).
 *
 *
 * Files adopted in place (a WAL segment taken as an object without a
 * copy, OD6), the holes punched in them (OD7) and the reads of a record
 * in one without the kernel reading ahead into others (OD10):
 * objstore_dir_adopt.c.
 *
 * One process opens a store directory at a time (the daemon holds the data
 * directory's lock): open() empties DIR/.tmp, which would break another
 * opener's put in progress.  The read-only open (nereusfs-fsck, under a
 * shared hold of that lock) creates, removes and writes nothing: .tmp is
 * left as it is, put() and del() fail with EROFS.
 *
 * The put protocol (OD1-OD5) is in objstore_dir_put.c; del() and the
 * listing are in objstore_dir_list.c; what the three share is declared in
 * objstore_dir_priv.h.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objstore.h"
#include "obj/objstore_dir_priv.h"
#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/le.h"
#include "util/log.h"

#define OBJ_VERSION	1
#define OBJ_CRC_OFF	60
#define OBJ_HAS_SHA256	1u
#define TMP_DIR		".tmp"

static const unsigned char obj_magic[8] = "NRSDOBJ1";	/* no NUL */

_Static_assert(OBJ_CRC_OFF + 4 == OBJ_HDR, "the CRC ends the header");
_Static_assert(24 + NRS_SHA256_LEN + 4 == OBJ_CRC_OFF, "header layout");

/* objstore_dir_priv.h: the header of an object of len bytes. */
void nrs_dirstore_hdr_encode(unsigned char h[OBJ_HDR], uint64_t len,
			     const unsigned char *sha256)
{
	memset(h, 0, OBJ_HDR);
	memcpy(h, obj_magic, sizeof(obj_magic));
	nrs_le32_put(h + 8, OBJ_VERSION);
	nrs_le32_put(h + 12, OBJ_HDR);
	nrs_le64_put(h + 16, len);
	if (sha256) {
		memcpy(h + 24, sha256, NRS_SHA256_LEN);
		nrs_le32_put(h + 56, OBJ_HAS_SHA256);
	}
	nrs_le32_put(h + OBJ_CRC_OFF, nrs_crc32c(0, h, OBJ_CRC_OFF));
}

/* Does h hold a header this code wrote?  Its length in *len if so. */
static bool hdr_decode(const unsigned char h[OBJ_HDR], uint64_t *len)
{
	if (memcmp(h, obj_magic, sizeof(obj_magic)) != 0 ||
	    nrs_le32_get(h + OBJ_CRC_OFF) != nrs_crc32c(0, h, OBJ_CRC_OFF) ||
	    nrs_le32_get(h + 8) != OBJ_VERSION ||
	    nrs_le32_get(h + 12) != OBJ_HDR ||
	    (nrs_le32_get(h + 56) & ~OBJ_HAS_SHA256) != 0)
		return false;
	*len = nrs_le64_get(h + 16);
	return true;
}

/* objstore_dir_priv.h: the object file under key, for reading. */
int nrs_dirstore_open_read(struct dir_store *d, const char *key,
			   uint64_t *len)
{
	struct stat st;
	int fd;

	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	fd = openat(d->rootfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int rc = -errno;

		return rc == -ENOTDIR || rc == -ELOOP ? -ENOENT : rc;
	}
	if (fstat(fd, &st) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;	/* a subdirectory of keys, not an object */
	}
	*len = (uint64_t)st.st_size > OBJ_HDR ? (uint64_t)st.st_size - OBJ_HDR
					       : 0;
	return fd;
}

/* The etag of an object whose SHA-256 is sha (OD4). */
void nrs_dirstore_etag_of(char out[NRS_ETAG_MAX], const unsigned char *sha)
{
	static const char digit[] = "0123456789abcdef";

	_Static_assert(2 * NRS_SHA256_LEN < NRS_ETAG_MAX, "etag size");
	for (size_t i = 0; i < NRS_SHA256_LEN; i++) {
		out[2 * i] = digit[sha[i] >> 4];
		out[2 * i + 1] = digit[sha[i] & 15];
	}
	out[2 * NRS_SHA256_LEN] = '\0';
}

int nrs_dirstore_head(struct nrs_objstore *s, const char *key,
		      struct nrs_obj_meta *out)
{
	struct dir_store *d = dir_of(s);
	unsigned char h[OBJ_HDR];
	struct nrs_obj_meta m = { 0 };
	uint64_t hdr_len;
	ssize_t n;
	int fd = nrs_dirstore_open_read(d, key, &m.length);

	if (fd < 0)
		return fd;
	n = nrs_pread_full(fd, h, OBJ_HDR, 0);
	close(fd);
	if (n < 0) {
		nrs_warn("dir store %s: head %s: %s", d->dir, key,
			 strerror((int)-n));
		return (int)n;
	}
	if (n == OBJ_HDR && hdr_decode(h, &hdr_len) && hdr_len == m.length) {
		m.has_sha256 = (nrs_le32_get(h + 56) & OBJ_HAS_SHA256) != 0;
		memcpy(m.sha256, h + 24, NRS_SHA256_LEN);
	} else {
		nrs_err("dir store %s: object %s: bad header or length (%" PRIu64
			" bytes after it): no proof of its content", d->dir, key,
			m.length);
	}
	if (!m.has_sha256)
		memset(m.sha256, 0, NRS_SHA256_LEN);
	else
		nrs_dirstore_etag_of(m.etag, m.sha256);
	*out = m;
	return 0;
}

ssize_t nrs_dirstore_read_close(struct dir_store *d, const char *key, int fd,
				uint64_t size, uint64_t off, void *buf,
				size_t len)
{
	ssize_t n = off >= size ? 0 : nrs_pread_full(fd, buf, len, OBJ_HDR + off);

	close(fd);
	if (n < 0)
		nrs_warn("dir store %s: get %s at %" PRIu64 ": %s", d->dir, key,
			 off, strerror((int)-n));
	return n;
}

static ssize_t dir_get(struct nrs_objstore *s, const char *key, uint64_t off,
		       void *buf, size_t len)
{
	struct dir_store *d = dir_of(s);
	uint64_t size = 0;
	int fd = nrs_dirstore_open_read(d, key, &size);

	if (fd < 0)
		return fd;
	return nrs_dirstore_read_close(d, key, fd, size, off, buf, len);
}

static void dir_close(struct nrs_objstore *s)
{
	struct dir_store *d = dir_of(s);

	if (d->tmpfd >= 0)
		close(d->tmpfd);
	close(d->rootfd);
	free(d->dir);
	free(d);
}

static const struct nrs_objstore_ops dir_ops = {
	.name = "dir",
	.wants_md5 = false,	/* put() never looks at it */
	.put = nrs_dirstore_put,
	.put_cond = nrs_dirstore_put_cond,
	.head = nrs_dirstore_head,
	.get = dir_get,
	.del = nrs_dirstore_del,
	.close = dir_close,
};

static int ro_put(struct nrs_objstore *s, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	(void)s;
	(void)key;
	(void)buf;
	(void)len;
	(void)md5;
	(void)sha256;
	return -EROFS;
}

static int ro_del(struct nrs_objstore *s, const char *key)
{
	(void)s;
	(void)key;
	return -EROFS;
}

/* Read only (nrs_objstore_dir_open_readonly): no .tmp, no writes. */
static const struct nrs_objstore_ops dir_ro_ops = {
	.name = "dir",
	.wants_md5 = false,
	.put = ro_put,
	.head = nrs_dirstore_head,
	.get = dir_get,
	.del = ro_del,
	.close = dir_close,
};

/* Remove what puts interrupted by a crash left in .tmp. */
static int clear_tmp(struct dir_store *d)
{
	int fd = dup(d->tmpfd);
	struct dirent *e;
	DIR *dh;
	int n = 0;

	if (fd < 0)
		return -errno;
	dh = fdopendir(fd);
	if (!dh) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	while ((e = readdir(dh)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (unlinkat(d->tmpfd, e->d_name, 0) == 0)
			n++;
	}
	closedir(dh);
	if (n)
		nrs_info("dir store %s: removed %d unfinished puts", d->dir, n);
	return 0;
}

static int dir_open(const char *dir, bool readonly, struct nrs_objstore **out)
{
	struct dir_store *d;
	int rc;

	if (!dir || !*dir)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->base.ops = readonly ? &dir_ro_ops : &dir_ops;
	d->rootfd = d->tmpfd = -1;
	d->dir = strdup(dir);
	if (!d->dir) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = readonly ? 0 : nrs_dirstore_mkdirs_at(AT_FDCWD, dir);
	if (rc < 0)
		goto out_log;
	d->rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->rootfd < 0) {
		rc = -errno;
		if (readonly)
			goto out_free;	/* the caller says it better */
		goto out_log;
	}
	if (readonly) {
		*out = &d->base;
		return 0;
	}
	rc = nrs_dirstore_mkdirs_at(d->rootfd, TMP_DIR);
	if (rc < 0)
		goto out_log;
	d->tmpfd = openat(d->rootfd, TMP_DIR,
			  O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (d->tmpfd < 0) {
		rc = -errno;
		goto out_log;
	}
	rc = clear_tmp(d);
	if (rc < 0)
		goto out_log;
	*out = &d->base;
	return 0;

out_log:
	nrs_err("dir store %s: open: %s", dir, strerror(-rc));
	if (d->tmpfd >= 0)
		close(d->tmpfd);
	if (d->rootfd >= 0)
		close(d->rootfd);
out_free:
	free(d->dir);
	free(d);
	return rc;
}

int nrs_objstore_dir_open(const char *dir, struct nrs_objstore **out)
{
	return dir_open(dir, false, out);
}

int nrs_objstore_dir_open_readonly(const char *dir, struct nrs_objstore **out)
{
	return dir_open(dir, true, out);
}

struct dir_store *nrs_dirstore_of(struct nrs_objstore *s)
{
	return s && (s->ops == &dir_ops || s->ops == &dir_ro_ops) ? dir_of(s)
								  : NULL;
}
