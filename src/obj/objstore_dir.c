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
 * PUT PROTOCOL (crash consistent; the same key may be put again, objstore.h
 * promises the same bytes)
 *
 *   OD1 Write header + bytes to a new file in DIR/.tmp (O_EXCL), fsync it.
 *   OD2 Make the key's subdirectories that are missing.
 *   OD3 rename() the file into place over any old one, then fsync the
 *       object's directory and every directory above it up to DIR, so the
 *       whole path survives a crash (a directory another put made a moment
 *       ago is not durable before its maker's fsync, which may still be to
 *       come; a clean directory's fsync costs little).  Only then does
 *       put() return 0.
 *   A crash before OD3 leaves at most a file in .tmp (removed by the next
 *   open) and empty subdirectories; the key is absent or holds the old
 *   object.  After OD3's rename the object is whole.  OD2 and OD3 race with
 *   del() removing an emptied subdirectory: a step that fails with ENOENT
 *   for that reason is redone from OD2 (a bounded number of times).
 *
 * CONDITIONAL PUT (put_cond, objstore.h OC1): the etag of an object is the
 * hex of the SHA-256 in its header (put_cond computes it from the bytes;
 * an object put() without one has the etag "").  Both conditions hold
 * across processes sharing DIR (two daemons whose objects= name one
 * directory), by the kernel's guarantees, not by ours:
 *   OD4 absent (if_match NULL): OD1, then link(2) of the file to the key
 *       (never rename: a link fails EEXIST if the name exists, atomically),
 *       the .tmp name unlinked, the directories fsynced as OD3.
 *   OD5 if-match: an exclusive flock(2) of DIR/.lock (a dot-name, so no
 *       key) held around reading the stored header, comparing its etag,
 *       and OD3's rename; OD4 takes it too.  The lock is released by the
 *       kernel when a holder dies, so a crash never wedges the key.
 * put() and del() do not take the lock: the keys that are rewritten are
 * written by put_cond alone (objstore.h).
 *
 * head() checks the header: a file whose header is bad (magic, version,
 * CRC) or whose length disagrees with the file's size is reported with its
 * actual byte count and has_sha256 false, and logged: it proves nothing, so
 * the caller puts the same bytes again, which replaces it (DESIGN.md 6).
 * get() reads the bytes at 64 + off with pread and does not read the header:
 * every byte of an object is verified by its reader (objfmt.h).
 *
 * del() unlinks the file, fsyncs its directory, and then removes the
 * subdirectories it emptied (best effort, not fsynced: an empty directory
 * that comes back after a crash is harmless).
 *
 * nrs_objstore_dir_foreach() lists DIR for nereusfs-fsck, which looks for
 * files no row of the objects table names; the daemon never lists (a
 * listing is never a correctness input).  Since no key has a component
 * starting with '.', such names are skipped at every depth.
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
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "obj/objstore_dir_priv.h"
#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/le.h"
#include "util/log.h"

#define OBJ_VERSION	1
#define OBJ_HDR		64
#define OBJ_CRC_OFF	60
#define OBJ_HAS_SHA256	1u
#define TMP_DIR		".tmp"
#define LOCK_FILE	".lock"	/* OD5 */
#define TMP_NAME_MAX	48
#define PUT_TRIES	100	/* OD2/OD3 redone at most this often (races) */
#define WRITE_WINDOW	(1u << 20)	/* see pwritev_full */

static const unsigned char obj_magic[8] = "NRSDOBJ1";	/* no NUL */

_Static_assert(OBJ_CRC_OFF + 4 == OBJ_HDR, "the CRC ends the header");
_Static_assert(24 + NRS_SHA256_LEN + 4 == OBJ_CRC_OFF, "header layout");

/* Temporary file numbers, unique in the process across every store. */
static atomic_uint_fast64_t tmp_seq;

static struct dir_store *dir_of(struct nrs_objstore *s)
{
	return (struct dir_store *)s;
}

static void hdr_encode(unsigned char h[OBJ_HDR], uint64_t len,
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

/*
 * Write all of iov (which it consumes) at offset 0 on, in windows of
 * WRITE_WINDOW bytes whose writeback is started at once (a hint: errors
 * are the fsync's to report).  The fsync that follows then waits for less,
 * and an object's bytes reach the disk as they are written rather than in
 * one burst that the WAL's syncs on the same disk would queue behind.
 */
static int pwritev_full(int fd, struct iovec *iov, int cnt)
{
	off_t off = 0;

	while (cnt > 0) {
		struct iovec win[4];
		size_t want = 0;
		int wc = 0;
		ssize_t n;

		for (; wc < cnt && wc < 4 && want < WRITE_WINDOW; wc++) {
			win[wc] = iov[wc];
			if (win[wc].iov_len > WRITE_WINDOW - want)
				win[wc].iov_len = WRITE_WINDOW - want;
			want += win[wc].iov_len;
		}
		n = pwritev(fd, win, wc, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		(void)sync_file_range(fd, off, n, SYNC_FILE_RANGE_WRITE);
		off += n;
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int fsync_at(int base, const char *path)
{
	int fd = openat(base, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * Make every missing directory of path (relative to base, or absolute),
 * mode 0700, fsyncing the parent of each one made.  0 or a negative errno;
 * an existing non-directory shows up later, when it is opened.
 */
static int mkdirs_at(int base, const char *path)
{
	char *p = strdup(path);
	char *s;
	int rc = 0;

	if (!p)
		return -ENOMEM;
	s = p + (p[0] == '/');
	for (;;) {
		char *slash = strchr(s, '/');

		if (slash)
			*slash = '\0';
		if (*s && mkdirat(base, p, 0700) == 0) {
			char *up = strrchr(p, '/');

			if (!up) {
				rc = fsync_at(base, ".");
			} else if (up == p) {
				rc = fsync_at(base, "/");
			} else {
				*up = '\0';
				rc = fsync_at(base, p);
				*up = '/';
			}
		} else if (*s && errno != EEXIST) {
			rc = -errno;
		}
		if (rc < 0 || !slash)
			break;
		*slash = '/';
		s = slash + 1;
	}
	free(p);
	return rc;
}

/* OD1: a new file in .tmp holding header + bytes, fsynced; its name in
 * name.  0 or a negative errno (and then no file is left). */
static int write_tmp(struct dir_store *d, const void *buf, size_t len,
		     const unsigned char *sha256, char name[TMP_NAME_MAX])
{
	unsigned char h[OBJ_HDR];
	struct iovec iov[2];
	int fd, rc;

	do {
		snprintf(name, TMP_NAME_MAX, "%ld-%" PRIuFAST64, (long)getpid(),
			 atomic_fetch_add(&tmp_seq, 1));
		fd = openat(d->tmpfd, name,
			    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	} while (fd < 0 && errno == EEXIST);
	if (fd < 0)
		return -errno;
	hdr_encode(h, len, sha256);
	iov[0].iov_base = h;
	iov[0].iov_len = OBJ_HDR;
	iov[1].iov_base = (void *)buf;
	iov[1].iov_len = len;
	rc = pwritev_full(fd, iov, len ? 2 : 1);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(d->tmpfd, name, 0);
	return rc;
}

/*
 * OD2 + OD3 once (objstore_dir_priv.h): move srcfd's name (.tmp/name for
 * a put) to key and fsync the directories on its path.  -ENOENT when a
 * directory on the way was removed under us (retry).  noreplace (OD4,
 * OD6): link it instead, -EEXIST if key exists (name is left for the
 * caller to remove).
 */
int nrs_dirstore_place(struct dir_store *d, int srcfd, const char *name,
		       const char *key, bool noreplace)
{
	char *path = strdup(key);
	char *slash;
	int pfd = d->rootfd, rc = 0;

	if (!path)
		return -ENOMEM;
	slash = strrchr(path, '/');
	if (slash) {
		*slash = '\0';		/* path is now the parent directory */
		rc = mkdirs_at(d->rootfd, path);
		if (rc == 0) {
			pfd = openat(d->rootfd, path,
				     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (pfd < 0)
				rc = -errno;
		}
	}
	if (rc == 0 && noreplace &&
	    linkat(srcfd, name, pfd, slash ? slash + 1 : key, 0) < 0)
		rc = -errno;	/* OD4: EEXIST, atomically */
	else if (rc == 0 && !noreplace &&
		 renameat(srcfd, name, pfd, slash ? slash + 1 : key) < 0)
		rc = -errno;
	if (rc == 0 && fsync(pfd) < 0)
		rc = -errno;
	/* the directories above, deepest first, DIR last */
	while (rc == 0 && slash) {
		slash = strrchr(path, '/');
		if (slash)
			*slash = '\0';
		rc = fsync_at(d->rootfd, slash ? path : ".");
	}
	if (pfd >= 0 && pfd != d->rootfd)
		close(pfd);
	free(path);
	return rc;
}

static int dir_put(struct nrs_objstore *s, const char *key, const void *buf,
		   size_t len, const unsigned char md5[NRS_MD5_LEN],
		   const unsigned char sha256[NRS_SHA256_LEN])
{
	struct dir_store *d = dir_of(s);
	char name[TMP_NAME_MAX];
	int rc, tries = 0;

	(void)md5;	/* the bytes do not travel: nothing to check them on
			 * (wants_md5 false: the caller may pass NULL) */
	if (!nrs_objkey_is_valid(key) || (len && !buf))
		return -EINVAL;
	rc = write_tmp(d, buf, len, sha256, name);
	if (rc < 0) {
		nrs_warn("dir store %s: put %s: writing %zu bytes: %s", d->dir,
			 key, len, strerror(-rc));
		return rc;
	}
	do
		rc = nrs_dirstore_place(d, d->tmpfd, name, key, false);
	while (rc == -ENOENT && ++tries < PUT_TRIES);
	if (rc < 0) {
		/* After a failed fsync of the directory the object may or
		 * may not be there: objstore.h's uncertain put. */
		nrs_warn("dir store %s: put %s: %s", d->dir, key, strerror(-rc));
		unlinkat(d->tmpfd, name, 0);
	}
	return rc;
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
static void hex_of(char out[NRS_ETAG_MAX], const unsigned char *sha)
{
	static const char digit[] = "0123456789abcdef";

	_Static_assert(2 * NRS_SHA256_LEN < NRS_ETAG_MAX, "etag size");
	for (size_t i = 0; i < NRS_SHA256_LEN; i++) {
		out[2 * i] = digit[sha[i] >> 4];
		out[2 * i + 1] = digit[sha[i] & 15];
	}
	out[2 * NRS_SHA256_LEN] = '\0';
}

static int dir_head(struct nrs_objstore *s, const char *key,
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
		hex_of(m.etag, m.sha256);
	*out = m;
	return 0;
}

/* Does etag (quotes around it allowed) name the etag have? */
static bool etag_is(const char *have, const char *etag)
{
	size_t n = strlen(etag);

	if (n >= 2 && etag[0] == '"' && etag[n - 1] == '"') {
		etag++;
		n -= 2;
	}
	return *have && strlen(have) == n && memcmp(have, etag, n) == 0;
}

static int dir_put_cond(struct nrs_objstore *s, const char *key,
			const void *buf, size_t len,
			const unsigned char md5[NRS_MD5_LEN],
			const unsigned char sha256[NRS_SHA256_LEN],
			const char *if_match, char etag[NRS_ETAG_MAX])
{
	struct dir_store *d = dir_of(s);
	unsigned char sha[NRS_SHA256_LEN];
	char name[TMP_NAME_MAX];
	int rc, lockfd, tries = 0;

	(void)md5;
	(void)sha256;	/* the etag is of the bytes: computed here */
	if (!nrs_objkey_is_valid(key) || (len && !buf))
		return -EINVAL;
	rc = nrs_objfmt_digest(buf, len, sha, NULL);
	if (rc < 0)
		return rc;
	rc = write_tmp(d, buf, len, sha, name);	/* OD1 */
	if (rc < 0)
		return rc;
	lockfd = openat(d->rootfd, LOCK_FILE,
			O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {	/* OD5 */
		rc = -errno;
		goto out_tmp;
	}
	if (if_match) {
		struct nrs_obj_meta m;

		rc = dir_head(s, key, &m);
		if (rc == 0 && !etag_is(m.etag, if_match))
			rc = -ESTALE;	/* OD5: another content is there */
	}
	while (rc == 0) {	/* OD4 or OD3 */
		rc = nrs_dirstore_place(d, d->tmpfd, name, key, !if_match);
		if (rc != -ENOENT || ++tries >= PUT_TRIES)
			break;
		rc = 0;
	}
out_tmp:
	if (lockfd >= 0)
		close(lockfd);	/* and the lock with it */
	if (!if_match || rc < 0)
		unlinkat(d->tmpfd, name, 0);	/* linked, or not placed */
	if (rc == 0)
		hex_of(etag, sha);
	else if (rc != -EEXIST && rc != -ESTALE && rc != -ENOENT)
		nrs_warn("dir store %s: conditional put %s: %s", d->dir, key,
			 strerror(-rc));
	return rc;
}

static ssize_t dir_get(struct nrs_objstore *s, const char *key, uint64_t off,
		       void *buf, size_t len)
{
	struct dir_store *d = dir_of(s);
	uint64_t size = 0;
	ssize_t n;
	int fd = nrs_dirstore_open_read(d, key, &size);

	if (fd < 0)
		return fd;
	if (off >= size)
		n = 0;
	else
		n = nrs_pread_full(fd, buf, len, OBJ_HDR + off);
	close(fd);
	if (n < 0)
		nrs_warn("dir store %s: get %s at %" PRIu64 ": %s", d->dir, key,
			 off, strerror((int)-n));
	return n;
}

static int dir_del(struct nrs_objstore *s, const char *key)
{
	struct dir_store *d = dir_of(s);
	char *parent;
	char *slash;
	int rc;

	if (!nrs_objkey_is_valid(key))
		return -EINVAL;
	if (unlinkat(d->rootfd, key, 0) < 0) {
		rc = -errno;
		if (rc == -ENOENT || rc == -ENOTDIR || rc == -EISDIR)
			return 0;	/* no object under key */
		nrs_warn("dir store %s: delete %s: %s", d->dir, key,
			 strerror(-rc));
		return rc;
	}
	parent = strdup(key);
	if (!parent)
		return -ENOMEM;
	slash = strrchr(parent, '/');
	if (slash)
		*slash = '\0';
	rc = fsync_at(d->rootfd, slash ? parent : ".");
	if (rc == -ENOENT)
		rc = 0;	/* another del() removed it, so it was empty */
	else if (rc < 0)
		nrs_warn("dir store %s: delete %s: fsync of its directory: %s",
			 d->dir, key, strerror(-rc));
	/* Remove the directories the unlink emptied, deepest first; the
	 * first that is not empty (or gone) ends it. */
	while (rc == 0 && slash) {
		if (unlinkat(d->rootfd, parent, AT_REMOVEDIR) < 0)
			break;
		slash = strrchr(parent, '/');
		if (slash)
			*slash = '\0';
	}
	free(parent);
	return rc;
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
	.put = dir_put,
	.put_cond = dir_put_cond,
	.head = dir_head,
	.get = dir_get,
	.del = dir_del,
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
	.head = dir_head,
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
	rc = readonly ? 0 : mkdirs_at(AT_FDCWD, dir);
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
	rc = mkdirs_at(d->rootfd, TMP_DIR);
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

/* ---- the listing, for nereusfs-fsck only (objstore.h) ------------------- */

#define WALK_DEPTH_MAX	(NRS_OBJKEY_MAX / 2)	/* deeper: no key's path */

struct walk {
	int (*cb)(void *ctx, const struct nrs_objfile *of);
	void *ctx;
	char path[PATH_MAX];	/* below DIR, of the entry at hand */
};

/* Every entry below the directory fd (closed here), whose path below DIR
 * is w->path[0, len) ("" for DIR itself), depth components deep. */
static int walk_dir(struct walk *w, int fd, size_t len, int depth)
{
	DIR *dh = fdopendir(fd);
	int rc = 0;

	if (!dh) {
		rc = -errno;
		close(fd);
		return rc;
	}
	for (;;) {
		size_t n, at = len ? len + 1 : 0;
		struct dirent *e;
		struct stat st;

		errno = 0;
		e = readdir(dh);
		if (!e) {
			rc = -errno;
			break;
		}
		if (e->d_name[0] == '.')
			continue;	/* ".", "..", .tmp: no key's component */
		n = strlen(e->d_name);
		if (at + n >= sizeof(w->path)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (len)
			w->path[len] = '/';
		memcpy(w->path + at, e->d_name, n + 1);
		if (fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			rc = errno == ENOENT ? 0 : -errno;
		else if (S_ISDIR(st.st_mode) && depth >= WALK_DEPTH_MAX)
			rc = -ENAMETOOLONG;
		else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(dh), e->d_name, O_RDONLY |
					 O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

			rc = sub < 0 ? -errno : walk_dir(w, sub, at + n,
							 depth + 1);
		} else {
			struct nrs_objfile of = {
				.name = w->path, .is_reg = S_ISREG(st.st_mode),
				.size = (uint64_t)st.st_size,
				.mtime_ns = (int64_t)st.st_mtim.tv_sec *
					    1000000000 + st.st_mtim.tv_nsec,
			};

			rc = w->cb(w->ctx, &of);
		}
		w->path[len] = '\0';
		if (rc)
			break;
	}
	closedir(dh);
	return rc;
}

struct dir_store *nrs_dirstore_of(struct nrs_objstore *s)
{
	return s && (s->ops == &dir_ops || s->ops == &dir_ro_ops) ? dir_of(s)
								  : NULL;
}

int nrs_objstore_dir_foreach(struct nrs_objstore *s,
			     int (*cb)(void *ctx, const struct nrs_objfile *of),
			     void *ctx)
{
	struct dir_store *d;
	struct walk *w;
	int fd, rc;

	if (!s || (s->ops != &dir_ops && s->ops != &dir_ro_ops))
		return -EOPNOTSUPP;
	d = dir_of(s);
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->ctx = ctx;
	/* A description of its own: readdir moves its offset. */
	fd = openat(d->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = fd < 0 ? -errno : walk_dir(w, fd, 0, 1);
	free(w);
	return rc;
}
