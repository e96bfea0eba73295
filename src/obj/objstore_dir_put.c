/*
 * objstore_dir_put.c - how the embedded object store (objstore_dir.c, whose
 * top comment gives the directory layout and the object file format) puts
 * an object: unconditionally (put) and conditionally (put_cond), with the
 * rules OD1-OD5.  nrs_dirstore_place (OD2-OD3) is shared with the files
 * adopted in place (objstore_dir_adopt.c, OD6).
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
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "util/log.h"

#define LOCK_FILE	".lock"	/* OD5 */
#define TMP_NAME_MAX	48
#define PUT_TRIES	100	/* OD2/OD3 redone at most this often (races) */
#define WRITE_WINDOW	(1u << 20)	/* see pwritev_full */

/* Temporary file numbers, unique in the process across every store. */
static atomic_uint_fast64_t tmp_seq;

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

int nrs_dirstore_fsync_at(int base, const char *path)
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
int nrs_dirstore_mkdirs_at(int base, const char *path)
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
				rc = nrs_dirstore_fsync_at(base, ".");
			} else if (up == p) {
				rc = nrs_dirstore_fsync_at(base, "/");
			} else {
				*up = '\0';
				rc = nrs_dirstore_fsync_at(base, p);
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
	nrs_dirstore_hdr_encode(h, len, sha256);
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
		rc = nrs_dirstore_mkdirs_at(d->rootfd, path);
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
		rc = nrs_dirstore_fsync_at(d->rootfd, slash ? path : ".");
	}
	if (pfd >= 0 && pfd != d->rootfd)
		close(pfd);
	free(path);
	return rc;
}

int nrs_dirstore_put(struct nrs_objstore *s, const char *key,
		     const void *buf, size_t len,
		     const unsigned char md5[NRS_MD5_LEN],
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

int nrs_dirstore_put_cond(struct nrs_objstore *s, const char *key,
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

		rc = nrs_dirstore_head(s, key, &m);
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
		nrs_dirstore_etag_of(etag, sha);
	else if (rc != -EEXIST && rc != -ESTALE && rc != -ENOENT)
		nrs_warn("dir store %s: conditional put %s: %s", d->dir, key,
			 strerror(-rc));
	return rc;
}
