/*
 * nrs-powerreplay - rebuild the directory a power loss would leave, from a
 * journal of nrs-powerfail.so.
 *
 *	nrs-powerreplay -c JOURNAL
 *	nrs-powerreplay [-u SEED] [-L PREFIX] JOURNAL K OUTDIR
 *
 * -c prints N, the number of whole records in JOURNAL (a torn last record,
 * what a kill -9 of the recorded process can leave, is ignored).
 *
 * Otherwise: the power went off after records 0..K-1 had returned and
 * before record K did (0 <= K <= N).  OUTDIR (empty, or created) receives
 * what the disk holds then, under the model below, and the program prints
 *
 *	cut K of N before TS
 *
 * TS being record K's timestamp as 20 decimal digits (all nines for K = N):
 * an acknowledgement stamped (same clock, same format) below TS happened
 * before the cut, so whatever the daemon made durable for it is in OUTDIR
 * (the reasoning is at the top of nrs-powerfail.c).  Exit 0; 1 on a bad
 * journal; 2 on usage or local errors.
 *
 * THE DURABILITY MODEL (deliberately stricter than ext4 or XFS)
 *
 *  PR1 File contents.  fsync or fdatasync of a file (record i) makes every
 *     WRITE, TRUNC and FALLOC of that inode recorded before i durable:
 *     data and size.  Nothing else does: not sync_file_range (it starts
 *     writeback, it promises nothing), not close, not a sync of another
 *     file or of the directory, not time.
 *  PR2 Names.  CREATE, UNLINK and RENAME change a directory; the change is
 *     durable once that directory is fsynced or fdatasynced (a later SYNC
 *     record of the directory itself).  An fsync of the new file does not
 *     make its name durable.  A RENAME is durable as a whole at the first
 *     sync of the directory holding the new name; until then the old name
 *     stands.  The recorded directory itself exists and is durable.
 *  PR3 At the cut, OUTDIR holds each name PR2 made durable whose parent
 *     directories are durable too, with the contents PR1 made durable for
 *     its inode (a durable name of an inode never synced is an empty
 *     file).  A name whose unlink is not durable brings its inode back.
 *  PR4 With -u SEED, a disk that wrote some unsynced sectors on its own:
 *     each WRITE, TRUNC and FALLOC after the inode's last sync (and before
 *     the cut) is, independently, dropped (1/2), applied whole (1/4), or
 *     applied sector by sector, each 512-byte sector of its range kept
 *     with probability 1/2 (1/4): torn writes, holes of zeros.  They are
 *     applied in journal order, interleaved with the durable ones.
 *  PR6 Links and holes.  LINK gives an inode another name, a change of
 *     the new name's directory (PR2); the inode keeps its contents (PR1
 *     of that inode, whichever name wrote or synced it), and OUTDIR holds
 *     the names of one inode as hard links of one file.  A FALLOC that
 *     punches a hole (FALLOC_FL_PUNCH_HOLE) zeroes its range when applied,
 *     as the real call does.
 *  PR5 Process crashes are no event of the disk.  A journal may hold the
 *     calls of several processes that ran one after another on the
 *     directory, each crash (kill -9, a crash failpoint) followed by a
 *     restart that reads what the page cache kept (nrs-powerfail.c,
 *     SEVERAL PROCESSES).  PR1-PR4 apply across them unchanged: a later
 *     process's sync of an inode makes the earlier processes' writes of
 *     it durable too, and an earlier write no later sync covered is lost
 *     at a cut however much the later processes relied on it.
 *
 * -L PREFIX is the negative control: a disk that lies, ignoring every sync
 * of a file whose path starts with PREFIX (say "wal/"); PREFIX "/" means
 * the recorded directory itself, and nothing below it.  A test runs it to
 * show that its checks do catch lost acknowledged data.
 *
 * The model ignores what only a broken disk does (reordering synced
 * writes, corrupting synced sectors) and metadata other than names and
 * sizes (modes, times, xattrs: nereusfs keeps none in its data directory).
 * sync(2) and syncfs(2) are not recorded, so the model takes them for no
 * sync at all (stricter again; nereusfs does not call them).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "powerfail.h"
#include "util/grow.h"
#include "util/parse.h"

#define SECTOR 512

struct obj {
	uint64_t dev, ino;
	bool is_dir, bound;	/* bound: (dev, ino) currently names it */
	long last_sync;		/* record index, -1: never */
};

struct entry {
	char *path;
	long obj;
};

struct names {
	struct entry *v;
	size_t n, cap;
};

static const unsigned char *base;
static size_t size;
static const struct pf_hdr **recs;
static size_t nrecs;
static long *rec_obj;		/* per record: its inode object, or -1 */
static bool *ns_done;		/* per record: namespace change applied */
static struct obj *objs;
static size_t nobjs, cap_objs;
static struct names cur, dur;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static const char *liar;	/* -L: syncs of paths with this prefix ignored */

static void die(const char *what)
{
	fprintf(stderr, "nrs-powerreplay: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void xgrow(void **arr, size_t *cap, size_t want, size_t sz)
{
	int err = nrs_grow(arr, cap, want, sz);

	if (err) {
		errno = -err;
		die("realloc");
	}
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p)
		die("calloc");
	return p;
}

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static const char *rec_path(const struct pf_hdr *h)
{
	return (const char *)(h + 1);
}

/* -L: is this sync one the lying disk ignores? */
static bool lies_about(const struct pf_hdr *h)
{
	size_t n = strlen(liar);

	if (strcmp(liar, "/") == 0)
		return h->path_len == 0;
	return h->path_len >= n && memcmp(rec_path(h), liar, n) == 0;
}

/* Split the journal into whole records. */
static int load(const char *file)
{
	struct stat st;
	size_t off = 0, cap = 0;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0)
		die(file);
	size = (size_t)st.st_size;
	if (size) {
		base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (base == MAP_FAILED)
			die("mmap");
	}
	close(fd);
	while (off < size) {
		const struct pf_hdr *h = (const void *)(base + off);

		if (size - off < sizeof(*h) || size - off < h->total)
			break;	/* torn last record */
		if (memcmp(h->magic, PF_MAGIC, 4) != 0 ||
		    h->total != PF_ALIGN(sizeof(*h) + h->path_len +
				(h->type == PF_WRITE ? h->len : 0))) {
			fprintf(stderr, "nrs-powerreplay: %s: bad record at byte %zu\n",
				file, off);
			return -1;
		}
		xgrow((void **)&recs, &cap, nrecs + 1, sizeof(*recs));
		recs[nrecs++] = h;
		off += h->total;
	}
	if (off < size)
		fprintf(stderr, "nrs-powerreplay: ignoring a torn last record (%zu bytes)\n",
			size - off);
	return 0;
}

static long find_obj(uint64_t dev, uint64_t ino)
{
	for (size_t i = nobjs; i-- > 0;)
		if (objs[i].bound && objs[i].dev == dev && objs[i].ino == ino)
			return (long)i;
	return -1;
}

static long new_obj(uint64_t dev, uint64_t ino, bool is_dir)
{
	long old = find_obj(dev, ino);

	if (old >= 0)
		objs[old].bound = false;	/* the inode number was reused */
	xgrow((void **)&objs, &cap_objs, nobjs + 1, sizeof(*objs));
	objs[nobjs] = (struct obj){ dev, ino, is_dir, true, -1 };
	return (long)nobjs++;
}

static struct entry *lookup(struct names *t, const char *path)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].path, path) == 0)
			return &t->v[i];
	return NULL;
}

static void set_name(struct names *t, const char *path, long obj)
{
	struct entry *e = lookup(t, path);

	if (e) {
		e->obj = obj;
		return;
	}
	xgrow((void **)&t->v, &t->cap, t->n + 1, sizeof(*t->v));
	t->v[t->n].path = strdup(path);
	if (!t->v[t->n].path)
		die("strdup");
	t->v[t->n++].obj = obj;
}

static void drop_name(struct names *t, const char *path)
{
	struct entry *e = lookup(t, path);

	if (e) {
		free(e->path);
		*e = t->v[--t->n];
	}
}

/* The directory holding path (a copy; "" for the top). */
static char *parent_of(const char *path, size_t len)
{
	char *p = strndup(path, len), *slash;

	if (!p)
		die("strndup");
	slash = strrchr(p, '/');
	if (slash)
		*slash = '\0';
	else
		p[0] = '\0';
	return p;
}

/* The path of record h (RENAME: the old name), a copy. */
static char *path_copy(const struct pf_hdr *h)
{
	char *p = strndup(rec_path(h), h->path_len);

	if (!p)
		die("strndup");
	return p;
}

/* The new name of RENAME record h, a copy. */
static char *new_name(const struct pf_hdr *h)
{
	size_t la = strnlen(rec_path(h), h->path_len);
	char *p;

	if (la == h->path_len)
		la--;		/* no separator: an empty new name */
	p = strndup(rec_path(h) + la + 1, h->path_len - la - 1);
	if (!p)
		die("strndup");
	return p;
}

/* The directory whose sync makes namespace record i durable (PR2). */
static char *ns_dir(const struct pf_hdr *h)
{
	const char *p = rec_path(h);

	if (h->type == PF_RENAME) {
		char *q = new_name(h), *d = parent_of(q, strlen(q));

		free(q);
		return d;
	}
	return parent_of(p, h->path_len);
}

/* Namespace record i becomes durable. */
static void apply_ns(size_t i)
{
	const struct pf_hdr *h = recs[i];
	char *p = path_copy(h), *q;

	switch (h->type) {
	case PF_CREATE:
	case PF_LINK:
		set_name(&dur, p, rec_obj[i]);
		break;
	case PF_UNLINK:
		drop_name(&dur, p);
		break;
	case PF_RENAME:
		/* rec_obj: the inode the old name had when it was renamed */
		q = new_name(h);
		set_name(&dur, q, rec_obj[i]);
		if (lookup(&dur, p) && lookup(&dur, p)->obj == rec_obj[i])
			drop_name(&dur, p);
		free(q);
		break;
	}
	free(p);
}

/* A sync of directory dir (record i) makes the earlier changes of its
 * names durable, in journal order (PR2). */
static void sync_dir(size_t i, const char *dir)
{
	for (size_t j = 0; j < i; j++) {
		char *d;

		if (ns_done[j] || (recs[j]->type != PF_CREATE &&
				   recs[j]->type != PF_LINK &&
				   recs[j]->type != PF_UNLINK &&
				   recs[j]->type != PF_RENAME))
			continue;
		d = ns_dir(recs[j]);
		if (strcmp(d, dir) == 0) {
			apply_ns(j);
			ns_done[j] = true;
		}
		free(d);
	}
}

/* Pass 1: inode objects, syncs and the durable names at the cut. */
static void pass1(size_t k)
{
	for (size_t i = 0; i < k; i++) {
		const struct pf_hdr *h = recs[i];
		char *p;
		struct entry *e;
		long o;

		rec_obj[i] = -1;
		switch (h->type) {
		case PF_CREATE:
			p = path_copy(h);
			o = new_obj(h->dev, h->ino, h->flags & PF_F_DIR);
			rec_obj[i] = o;
			set_name(&cur, p, o);
			free(p);
			break;
		case PF_LINK:	/* PR6 */
			p = path_copy(h);
			o = find_obj(h->dev, h->ino);
			if (o < 0)	/* linked in from outside: unknown */
				o = new_obj(h->dev, h->ino, false);
			rec_obj[i] = o;
			set_name(&cur, p, o);
			free(p);
			break;
		case PF_UNLINK:
			p = path_copy(h);
			drop_name(&cur, p);
			free(p);
			break;
		case PF_RENAME:
			p = path_copy(h);
			e = lookup(&cur, p);
			rec_obj[i] = e ? e->obj : -1;
			if (e) {
				char *q = new_name(h);

				o = e->obj;
				drop_name(&cur, p);
				set_name(&cur, q, o);
				free(q);
			}
			free(p);
			break;
		case PF_WRITE:
		case PF_TRUNC:
		case PF_FALLOC:
		case PF_SYNC:
			o = find_obj(h->dev, h->ino);
			if (o < 0 && h->path_len == 0)
				break;	/* the recorded directory itself */
			if (o < 0) {
				/* existed before the journal: contents unknown */
				fprintf(stderr, "nrs-powerreplay: record %zu: unknown file %.*s\n",
					i, (int)h->path_len, rec_path(h));
				o = new_obj(h->dev, h->ino, h->flags & PF_F_DIR);
			}
			rec_obj[i] = o;
			if (h->type != PF_SYNC)
				break;
			if (liar && lies_about(h))
				break;
			if (!objs[o].is_dir) {
				objs[o].last_sync = (long)i;	/* PR1 */
				break;
			}
			p = path_copy(h);
			sync_dir(i, p);
			free(p);
			break;
		default:
			break;
		}
		/* a SYNC of the top directory: path "", no object */
		if (h->type == PF_SYNC && h->path_len == 0 &&
		    (h->flags & PF_F_DIR) && !(liar && lies_about(h)))
			sync_dir(i, "");
	}
}

static void xpwrite(int fd, const void *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, (off_t)off);

		if (n < 0)
			die("pwrite");
		buf = (const char *)buf + n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
}

/* Apply data record h to fd; torn: only a random subset of sectors. */
static void apply_data(int fd, const struct pf_hdr *h, bool torn)
{
	const unsigned char *data = (const unsigned char *)rec_path(h) + h->path_len;
	struct stat st;

	switch (h->type) {
	case PF_WRITE:
		if (!torn) {
			xpwrite(fd, data, h->len, h->off);
			break;
		}
		for (uint64_t s = h->off; s < h->off + h->len;) {
			uint64_t e = (s / SECTOR + 1) * SECTOR;

			if (e > h->off + h->len)
				e = h->off + h->len;
			if (rnd() & 1)
				xpwrite(fd, data + (s - h->off), e - s, s);
			s = e;
		}
		break;
	case PF_TRUNC:
		if (ftruncate(fd, (off_t)h->off) < 0)
			die("ftruncate");
		break;
	case PF_FALLOC:
		if (h->flags & FALLOC_FL_PUNCH_HOLE) {		/* PR6 */
			if (fallocate(fd, FALLOC_FL_PUNCH_HOLE |
				      FALLOC_FL_KEEP_SIZE, (off_t)h->off,
				      (off_t)h->len) < 0)
				die("fallocate");
			break;
		}
		/* else only the size matters to the model; zeros read the same */
		if ((h->flags & FALLOC_FL_KEEP_SIZE) == 0 &&
		    fstat(fd, &st) == 0 && (uint64_t)st.st_size < h->off + h->len &&
		    ftruncate(fd, (off_t)(h->off + h->len)) < 0)
			die("ftruncate");
		break;
	}
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->path,
		      ((const struct entry *)b)->path);
}

/* An earlier name of the inode of dur.v[i] that pass2 wrote, or NULL. */
static const char *made_before(size_t i, const bool *made)
{
	for (size_t j = 0; j < i; j++)
		if (made[j] && dur.v[j].obj == dur.v[i].obj)
			return dur.v[j].path;
	return NULL;
}

/* Pass 2: write OUTDIR (PR3, PR4, PR6). */
static void pass2(size_t k, const char *out, bool unsynced)
{
	bool *made = xcalloc(dur.n, sizeof(*made));

	if (dur.n)	/* a cut before the first name: nothing, and no array */
		qsort(dur.v, dur.n, sizeof(*dur.v), cmp_entry);
	for (size_t i = 0; i < dur.n; i++) {
		const struct entry *e = &dur.v[i];
		char path[8192], first[8192];
		char *par = parent_of(e->path, strlen(e->path));
		struct entry *pe = par[0] ? lookup(&dur, par) : NULL;
		const char *other;
		int fd;

		/* PR3: a durable name under a directory that is not, or
		 * under one whose own parent is not (sorted: parents come
		 * first, and made[] says whether they were written) */
		if (par[0] && (!pe || !objs[pe->obj].is_dir ||
			       !made[pe - dur.v])) {
			free(par);
			continue;
		}
		free(par);
		snprintf(path, sizeof(path), "%s/%s", out, e->path);
		made[i] = true;
		if (objs[e->obj].is_dir) {
			if (mkdir(path, 0700) < 0)
				die(path);
			continue;
		}
		other = made_before(i, made);
		if (other) {	/* PR6: one more name of a file written */
			snprintf(first, sizeof(first), "%s/%s", out, other);
			if (link(first, path) < 0)
				die(path);
			continue;
		}
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			die(path);
		for (size_t j = 0; j < k; j++) {
			const struct pf_hdr *h = recs[j];

			if (rec_obj[j] != e->obj || (h->type != PF_WRITE &&
			    h->type != PF_TRUNC && h->type != PF_FALLOC))
				continue;
			if ((long)j < objs[e->obj].last_sync) {
				apply_data(fd, h, false);	/* PR1 */
			} else if (unsynced) {
				uint64_t r = rnd() & 3;		/* PR4 */

				if (r >= 2)
					continue;
				apply_data(fd, h, r == 1 && h->type == PF_WRITE);
			}
		}
		if (close(fd) < 0)
			die(path);
	}
	free(made);
}

static void usage(void)
{
	fprintf(stderr, "usage: nrs-powerreplay -c JOURNAL\n"
			"       nrs-powerreplay [-u SEED] [-L PREFIX] JOURNAL K OUTDIR\n");
	exit(2);
}

int main(int argc, char **argv)
{
	bool count = false, unsynced = false;
	uint64_t k;
	int c;

	while ((c = getopt(argc, argv, "cu:L:")) != -1) {
		switch (c) {
		case 'c':
			count = true;
			break;
		case 'u':
			unsynced = true;
			rng ^= strtoull(optarg, NULL, 0) * 0x5851f42d4c957f2dull;
			if (!rng)
				rng = 1;
			break;
		case 'L':
			liar = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind + (count ? 1 : 3) != argc)
		usage();
	if (load(argv[optind]) < 0)
		return 1;
	if (count) {
		printf("%zu\n", nrecs);
		return 0;
	}
	if (nrs_parse_u64_range(argv[optind + 1], 0, nrecs, &k))
		usage();
	if (mkdir(argv[optind + 2], 0700) < 0 && errno != EEXIST)
		die(argv[optind + 2]);
	rec_obj = xcalloc(nrecs, sizeof(*rec_obj));
	ns_done = xcalloc(nrecs, sizeof(*ns_done));
	pass1((size_t)k);
	pass2((size_t)k, argv[optind + 2], unsynced);
	if (k < nrecs)
		printf("cut %" PRIu64 " of %zu before %020" PRIu64 "\n", k, nrecs,
		       recs[k]->ts);
	else
		printf("cut %" PRIu64 " of %zu before 99999999999999999999\n", k,
		       nrecs);
	return 0;
}
