/*
 * nereusfs-fsck - check a nereusfs data directory offline (man/nereusfs-fsck.8).
 *
 * The checks are src/fsck/fsck.c's F1..F30; this file does the I/O: it takes
 * DIR/lock (F1), reads meta.db read-only (F2), scans the WAL read-only and
 * opens the object store read-only (DIR/objects, which F26 lists, or --s3),
 * so without --repair not a byte of DIR (or of the bucket) changes.
 * --gc-grace-ms tells the lifecycle checks (F24, F26) the daemon's
 * gc_grace_ms.
 *
 * --repair makes only the repairs that cannot lose an acknowledged byte,
 * the ones the next mount would make anyway (recovery.c RC1, RC2):
 *   - cut a torn WAL tail, remove a segment torn at creation (F5) -- only
 *     when every committed byte has an intact copy (F9, F10, F20, F21),
 *     since a tail that held a committed record would be damage, not a
 *     crash artefact;
 *   - forget inodes with nlink 0 (F19).
 * Nothing of the object side: no object and no row is ever deleted or
 * written (the daemon settles prepared intents itself, materializer.c MZ6,
 * and GC drains what no state needs, lifecycle.c G1-G3); not even a
 * retired or unreferenced object (F25, F26), which an operator should
 * look at before deleting it by hand.
 * Then it checks again, and the exit status is that of the second check.
 *
 * Exit status: 0 clean (pending records, intents and objects awaiting GC
 * allowed), 1 inconsistencies found, 2 could not check (also: the object
 * store could not be read).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bg/lifecycle.h"
#include "fsck/fsck.h"
#include "meta/meta.h"
#include "obj/objstore.h"
#include "util/log.h"
#include "util/parse.h"
#include "wal/wal.h"

#define EXIT_CLEAN	0
#define EXIT_FOUND	1
#define EXIT_FAILED	2

static const char *prog = "nereusfs-fsck";
static bool verbose;

/* Where the objects are: S3 if s3_url, else DIR/objects; none with
 * no_objects. */
struct store_opts {
	bool no_objects;
	const char *objects_dir;	/* --objects: the daemon's -o objects= */
	const char *s3_url, *s3_credentials, *s3_ca;
	struct nrs_s3_opts s3;	/* --s3-region, --s3-style, --s3-signature */
	uint64_t gc_grace_ms;		/* F24, F26 */
};

static void print_line(void *ctx, enum nrs_fsck_sev sev, const char *line)
{
	(void)ctx;
	if (sev == NRS_FSCK_INFO && !verbose)
		return;
	printf("%s: %s\n", sev == NRS_FSCK_ERROR ? "error" :
	       sev == NRS_FSCK_PENDING ? "pending" :
	       sev == NRS_FSCK_WARNING ? "warning" : "info", line);
}

/* --gc-grace-ms: what the daemon's -o gc_grace_ms takes (main.c), with
 * the same parser (parse.h N1). */
static int parse_ms(const char *s, uint64_t *out)
{
	return nrs_parse_u64_range(s, 1, UINT64_MAX / 1000000, out);
}

static int fail(const char *what, const char *path, int err)
{
	fprintf(stderr, "%s: %s %s: %s\n", prog, what, path, strerror(-err));
	return EXIT_FAILED;
}

/* F1: shared to check (two checkers may run), exclusive to repair. */
static int lock_dir(const char *dir, bool repair, int *fd_out)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;	/* never mounted: nothing to exclude */
	if (fd < 0)
		return fail("cannot open", path, -errno);
	if (flock(fd, (repair ? LOCK_EX : LOCK_SH) | LOCK_NB) < 0) {
		int err = -errno;

		close(fd);
		if (err == -EWOULDBLOCK) {
			fprintf(stderr, "%s: %s is in use (%s is locked by a "
				"running nereusfs): unmount it first\n", prog,
				dir, path);
			return EXIT_FAILED;
		}
		return fail("cannot lock", path, err);
	}
	*fd_out = fd;
	return 0;
}

static int print_problem(void *ctx, const char *problem)
{
	nrs_fsck_say(ctx, NRS_FSCK_ERROR, "F2 meta.db: integrity_check: %s",
		     problem);
	return 0;
}

/* F2 and what F6-F19 need from meta.db. */
static int load_meta(const char *dir, struct nrs_fsck *f)
{
	char path[4096];
	struct nrs_meta *m = NULL;
	int err;

	snprintf(path, sizeof(path), "%s/meta.db", dir);
	err = nrs_meta_open_readonly(path, &m);
	if (err)
		return fail("cannot open the metadata", path, err);
	err = nrs_meta_integrity_check(m, print_problem, f) ?:
		nrs_meta_inode_foreach(m, nrs_fsck_add_inode, f) ?:
		nrs_meta_dirent_foreach(m, nrs_fsck_add_dirent, f) ?:
		nrs_meta_stream_foreach(m, nrs_fsck_add_stream, f) ?:
		nrs_meta_obj_foreach(m, 0, nrs_fsck_add_obj, f) ?:
		nrs_meta_sequences(m, &f->seq_inodes, &f->seq_streams) ?:
		nrs_meta_log_seq(m, &f->log_seq);
	f->have_seqs = f->have_log_seq = !err;
	nrs_meta_close(m);
	return err ? fail("cannot read the metadata", path, err) : 0;
}

static int load_wal(const char *dir, struct nrs_fsck *f)
{
	struct nrs_wal_local_opts o = {
		.read_only = true, .damage = nrs_fsck_add_damage,
		.damage_ctx = f,
	};
	struct nrs_wal *w = NULL;
	char path[4096];
	int err;

	snprintf(path, sizeof(path), "%s/wal", dir);
	err = nrs_wal_local_open(path, &o, &w);
	if (err == -ENOENT)
		return 0;	/* no append ever made */
	if (!err)
		err = nrs_wal_scan(w, nrs_fsck_add_rec, f);
	nrs_wal_close(w);
	return err ? fail("cannot scan the WAL", path, err) : 0;
}

/* F21's store, opened for reading only; *name says which, for messages. */
static int open_store(const char *dir, const struct store_opts *so,
		      struct nrs_fsck *f, char *name, size_t size)
{
	int err;

	if (so->s3_url) {
		snprintf(name, size, "%s", so->s3_url);
		struct nrs_s3_opts o = so->s3;

		o.url = so->s3_url;
		o.ca_file = so->s3_ca;
		err = nrs_objstore_s3_open_url(&o, so->s3_credentials,
					       &f->store);
		if (err == -ENOENT) {
			fprintf(stderr, "%s: no S3 credentials: set "
				"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or"
				" give --s3-credentials=FILE\n", prog);
			return EXIT_FAILED;
		}
		if (err == -EINVAL) {
			fprintf(stderr, "%s: %s is not a URL of the form "
				"http[s]://HOST[:PORT]/BUCKET\n", prog,
				so->s3_url);
			return EXIT_FAILED;
		}
		return err ? fail("cannot open the object store", name, err)
			   : 0;
	}
	if (so->objects_dir)
		snprintf(name, size, "%s", so->objects_dir);
	else
		snprintf(name, size, "%s/objects", dir);
	err = nrs_objstore_dir_open_readonly(name, &f->store);
	if (err == -ENOENT) {
		f->store_absent = true;	/* every committed object is missing */
		return 0;
	}
	return err ? fail("cannot open the object store", name, err) : 0;
}

/* Whether the object WAL of DIR ever wrote (its state file, wal_object_scan.c
 * OW6): then its objects are read from the store, also with --no-objects. */
static bool owal_used(const char *dir)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/owal/state", dir);
	return access(path, F_OK) == 0;
}

/* The object WAL's records, from the store (F3-F13 check them as the local
 * WAL's; a damaged WAL object is F4). */
static int load_owal(const char *dir, struct nrs_fsck *f)
{
	struct nrs_wal_object_opts o = {
		.store = f->store, .read_only = true,
		.damage = nrs_fsck_add_damage, .damage_ctx = f,
	};
	struct nrs_wal *w = NULL;
	char path[4096];
	int err;

	snprintf(path, sizeof(path), "%s/owal", dir);
	o.dir = path;
	err = nrs_wal_object_floor(path, &f->owal_floor);	/* F32 */
	f->have_owal_floor = err == 0;
	err = nrs_wal_object_open(&o, &w);
	if (!err)
		err = nrs_wal_scan(w, nrs_fsck_add_rec, f);
	nrs_wal_close(w);
	return err ? fail("cannot scan the object WAL of", path, err) : 0;
}

/* One whole check; *f is filled even when it fails. */
static int check(const char *dir, const struct store_opts *so,
		 struct nrs_fsck *f)
{
	char store[4096];
	int rc;

	nrs_fsck_init(f, print_line, NULL);
	f->ctx = f;
	f->gc_grace_ms = so->gc_grace_ms;
	rc = load_meta(dir, f) ?: load_wal(dir, f);
	if (!rc && (!so->no_objects || owal_used(dir)))
		rc = open_store(dir, so, f, store, sizeof(store));
	if (!rc && f->store && owal_used(dir))
		rc = load_owal(dir, f);
	if (!rc && so->no_objects) {	/* F21 and F23-F26 are skipped */
		nrs_obj_close(f->store);
		f->store = NULL;
		f->store_absent = false;
	}
	if (rc)
		return rc;
	rc = nrs_fsck_check(f);
	nrs_obj_close(f->store);
	f->store = NULL;
	if (rc == -ENOMEM)
		return fail("cannot check", dir, rc);
	if (rc)
		return fail("cannot read the objects in", store, rc);
	return 0;
}

static void say_repair(void *ctx, const struct nrs_wal_damage *d)
{
	(void)ctx;
	if (d->kind == NRS_WAL_TORN_TAIL)
		printf("repaired: cut the torn tail of wal/%016" PRIx64 ".seg at "
		       "byte %" PRIu64 " (%" PRIu64 " bytes)\n", d->seg,
		       d->start, d->end - d->start);
	else if (d->kind == NRS_WAL_TORN_SEGMENT)
		printf("repaired: removed wal/%016" PRIx64 ".seg, torn at "
		       "creation\n", d->seg);
}

static int ignore_rec(void *ctx, const struct nrs_wal_rec_info *ri)
{
	(void)ctx;
	(void)ri;
	return 0;
}

/* The scan recovery makes: it cuts what F5 found (wal_local_scan.c WS1,
 * WS5). */
static int cut_torn(const char *dir)
{
	struct nrs_wal_local_opts o = { .damage = say_repair };
	struct nrs_wal *w = NULL;
	char path[4096];
	int err;

	snprintf(path, sizeof(path), "%s/wal", dir);
	err = nrs_wal_local_open(path, &o, &w);
	if (!err)
		err = nrs_wal_scan(w, ignore_rec, NULL);
	nrs_wal_close(w);
	return err ? fail("cannot cut the torn tail in", path, err) : 0;
}

/* recovery.c RC1: forget every stream inode with nlink 0. */
static int forget_unlinked(const char *dir, const struct nrs_fsck *f)
{
	struct nrs_meta *m = NULL;
	char path[4096];
	int err;

	snprintf(path, sizeof(path), "%s/meta.db", dir);
	err = nrs_meta_open(path, &m);
	for (size_t i = 0; !err && i < f->ninodes; i++) {
		const struct nrs_attr *a = &f->inodes[i];

		if (a->nlink != 0 || !S_ISREG(a->mode))
			continue;
		err = nrs_meta_forget_inode(m, a->ino);
		if (!err)
			printf("repaired: forgot unlinked inode %" PRIu64
			       " (stream %" PRIu64 ")\n", a->ino, a->stream_id);
	}
	nrs_meta_close(m);
	return err ? fail("cannot forget unlinked inodes in", path, err) : 0;
}

static int repair(const char *dir, struct nrs_fsck *f, bool *did)
{
	int rc = 0;

	if (f->torn && !f->chains_intact)
		printf("not repaired: the torn WAL tail stays, because committed"
		       " bytes have no intact copy (a broken commit chain, or "
		       "a missing or damaged object) and the tail may hold "
		       "some: an operator must look (nereusfs-fsck(8))\n");
	else if (f->torn) {
		rc = cut_torn(dir);
		*did = true;
	}
	if (!rc && f->unlinked) {
		rc = forget_unlinked(dir, f);
		*did = true;
	}
	if (f->strays)
		printf("not repaired: %" PRIu64 " stored objects that nothing "
		       "will delete stay (retired but still stored, or "
		       "unreferenced): --repair deletes no object; look at "
		       "them, then delete them by hand (nereusfs-fsck(8))\n",
		       f->strays);
	return rc;
}

static void usage(FILE *to)
{
	fprintf(to, "usage: %s [--repair] [--no-objects] [--objects=DIR] "
		"[--gc-grace-ms=N] "
		"[--s3=URL [--s3-credentials=FILE] [--s3-ca=FILE] "
		"[--s3-region=R] [--s3-style=path|virtual] "
		"[--s3-signature=v4|v2]] [-v] "
		"DATADIR\n"
		"Check a nereusfs data directory while it is not mounted.\n"
		"  --repair     cut torn WAL tails and forget unlinked inodes\n"
		"               (never a committed byte, nothing of the\n"
		"               objects: no object is ever deleted), then\n"
		"               check again\n"
		"  --no-objects do not read, look up or list the objects\n"
		"               (their rows are still checked; the object\n"
		"               WAL's objects are read all the same)\n"
		"  --objects=DIR  the embedded store is in DIR (the daemon's\n"
		"               -o objects=DIR; default DATADIR/objects)\n"
		"  --gc-grace-ms=N  the daemon's -o gc_grace_ms (default\n"
		"               %d): a file in DATADIR/objects that no row\n"
		"               names and is older is an inconsistency\n"
		"  --s3=URL     the objects are in http[s]://HOST[:PORT]/BUCKET\n"
		"               (default: the directory DATADIR/objects)\n"
		"  --s3-credentials=FILE  a 0600 file with AWS_ACCESS_KEY_ID=\n"
		"               and AWS_SECRET_ACCESS_KEY= (default: those\n"
		"               environment variables)\n"
		"  --s3-ca=FILE CA certificates for https (default: system)\n"
		"  --s3-region=R, --s3-style=S, --s3-signature=V  as the\n"
		"               daemon's -o s3_region=, s3_style=, s3_signature=\n"
		"  -v           also print informational findings and the\n"
		"               log of the WAL scan\n"
		"Exit status: 0 clean, 1 inconsistencies, 2 could not check.\n",
		prog, NRS_GC_GRACE_MS_DEFAULT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "repair", no_argument, NULL, 'r' },
		{ "no-objects", no_argument, NULL, 'n' },
		{ "objects", required_argument, NULL, 'o' },
		{ "s3", required_argument, NULL, 's' },
		{ "s3-credentials", required_argument, NULL, 'c' },
		{ "s3-ca", required_argument, NULL, 'a' },
		{ "s3-region", required_argument, NULL, 'R' },
		{ "s3-style", required_argument, NULL, 'S' },
		{ "s3-signature", required_argument, NULL, 'V' },
		{ "gc-grace-ms", required_argument, NULL, 'g' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct store_opts so = { .gc_grace_ms = NRS_GC_GRACE_MS_DEFAULT };
	struct nrs_fsck f;
	bool do_repair = false, did = false;
	const char *dir;
	struct stat st;
	int c, rc, lock_fd = -1;

	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case 'r': do_repair = true; break;
		case 'n': so.no_objects = true; break;
		case 'o': so.objects_dir = optarg; break;
		case 's': so.s3_url = optarg; break;
		case 'c': so.s3_credentials = optarg; break;
		case 'a': so.s3_ca = optarg; break;
		case 'R':
		case 'S':
		case 'V':
			if (nrs_s3_opt_parse(&so.s3, c == 'R' ? "s3_region" :
					     c == 'S' ? "s3_style" :
					     "s3_signature", optarg) < 0) {
				fprintf(stderr, "%s: bad --s3-%s '%s'\n", prog,
					c == 'R' ? "region" : c == 'S' ? "style"
					: "signature", optarg);
				return EXIT_FAILED;
			}
			break;
		case 'g':
			if (parse_ms(optarg, &so.gc_grace_ms) < 0) {
				fprintf(stderr, "%s: --gc-grace-ms must be a "
					"number from 1 to %" PRIu64 ", not "
					"'%s'\n", prog, UINT64_MAX / 1000000,
					optarg);
				return EXIT_FAILED;
			}
			break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return EXIT_CLEAN;
		default: usage(stderr); return EXIT_FAILED;
		}
	}
	if (optind != argc - 1 ||
	    (!so.s3_url && (so.s3_credentials || so.s3_ca))) {
		usage(stderr);
		return EXIT_FAILED;
	}
	dir = argv[optind];
	/* The WAL scan logs what it finds; our lines say it with places. */
	nrs_log_set_level(verbose ? NRS_LOG_INFO : NRS_LOG_ERR - 1);
	if (stat(dir, &st) < 0)
		return fail("cannot check", dir, -errno);
	if (!S_ISDIR(st.st_mode))
		return fail("cannot check", dir, -ENOTDIR);
	rc = lock_dir(dir, do_repair, &lock_fd);
	if (rc)
		return rc;
	rc = check(dir, &so, &f);
	if (!rc && do_repair && f.errors)
		rc = repair(dir, &f, &did);
	if (!rc && did) {
		nrs_fsck_free(&f);
		printf("%s: checking again after the repairs\n", prog);
		rc = check(dir, &so, &f);
	}
	if (!rc) {
		printf("%s: %s: %" PRIu64 " inconsistencies, %" PRIu64
		       " pending, ", prog, dir, f.errors, f.pending);
		if (so.no_objects)
			printf("objects not read (--no-objects)\n");
		else
			printf("%" PRIu64 " objects verified\n",
			       f.objects_verified);
		rc = f.errors ? EXIT_FOUND : EXIT_CLEAN;
	}
	nrs_fsck_free(&f);
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}
