/*
 * leader.c - an example adapter in C: how a broker's partition leader uses
 * a nereusfs stream (nereusfs.h; build with
 *   cc $(pkg-config --cflags nereusfs) leader.c -o leader).
 *
 *   leader STREAM [BATCHES]
 *
 * The protocol, as a Kafka or Pulsar adapter would run it:
 *  1. A new leader opens the stream for writing and takes an epoch
 *     higher than any before it: NRS_IOC_BIND fences every older writer and
 *     binds this handle.  (Where the epoch comes from -- a controller, a
 *     ZooKeeper znode -- is the broker's business; here it is the stream's
 *     epoch + 1, read with NRS_IOC_SNAPSHOT.)
 *  2. It reads the head once (the snapshot) and from then on knows where
 *     each of its batches must land: it pwrite()s each batch at that
 *     offset on a handle opened without O_APPEND, a conditional append
 *     (DESIGN.md section 3), so a write that would land anywhere else
 *     fails ESPIPE instead of interleaving with another writer.  That is
 *     one FUSE request per batch, as many as a plain O_APPEND write;
 *     arming NRS_IOC_EXPECT before each write() would be two (README,
 *     Adapters).  NRS_IOC_EXPECT is for handles that must stay O_APPEND.
 *  3. On ESTALE it is no longer the leader: it stops appending at once.
 *     On ESPIPE someone else appended: it re-reads the head and decides
 *     (here: it stops; a real adapter would reconcile first).
 *
 * This program plays two leaders on one stream: leader A appends BATCHES
 * record batches, leader B takes over (fencing A) and appends its own, A
 * tries once more and must see ESTALE.  Then it reads the stream back:
 * A's batches followed by B's.  Exit 0 if all of that held, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L	/* pread, O_CLOEXEC under -std=c11 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "nereusfs.h"

#define BATCH_BYTES	512

struct leader {
	const char *name;
	int fd;
	uint64_t epoch;
	uint64_t next;		/* where the next batch must land */
};

static int leader_snapshot(int fd, struct nrs_ioc_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	return ioctl(fd, NRS_IOC_SNAPSHOT, s) < 0 ? -errno : 0;
}

/* Steps 1 and 2: open, fence-and-bind to epoch, learn the head. */
static int leader_start(struct leader *l, const char *path, uint64_t epoch)
{
	struct nrs_ioc_bind b = { .abi = NRS_IOC_ABI, .epoch = epoch };
	struct nrs_ioc_snapshot s;
	int err;

	l->fd = open(path, O_WRONLY | O_CLOEXEC);	/* no O_APPEND: step 2 */
	if (l->fd < 0)
		return -errno;
	if (ioctl(l->fd, NRS_IOC_BIND, &b) < 0 ||
	    (err = leader_snapshot(l->fd, &s)) != 0) {
		err = -errno;
		close(l->fd);
		return err;
	}
	l->epoch = epoch;
	l->next = s.head;
	printf("%s: leader at epoch %" PRIu64 ", head %" PRIu64 "\n", l->name,
	       epoch, s.head);
	return 0;
}

/* One record batch at exactly l->next; -ESTALE: deposed, -ESPIPE: the
 * head is not at l->next (someone else appended). */
static int leader_append(struct leader *l, const void *batch, size_t len)
{
	ssize_t n;

	if (l->next > (uint64_t)INT64_MAX)
		return -EFBIG;	/* no off_t reaches it */
	n = pwrite(l->fd, batch, len, (off_t)l->next);
	if (n < 0)
		return -errno;
	if ((size_t)n != len)
		return -EIO;	/* never: one write() is one append */
	l->next += len;
	return 0;
}

/* A stand-in for a Kafka record batch: who wrote it, and a pattern. */
static void make_batch(char *buf, const char *who, int seq)
{
	int n = snprintf(buf, BATCH_BYTES, "%s batch %d\n", who, seq);

	memset(buf + n, 'a' + seq % 26, BATCH_BYTES - (size_t)n - 1);
	buf[BATCH_BYTES - 1] = '\n';
}

/* Batches 0..batches-1 of this leader, each at its expected offset. */
static int leader_run(struct leader *l, int batches)
{
	char batch[BATCH_BYTES];
	int err;

	for (int i = 0; i < batches; i++) {
		make_batch(batch, l->name, i);
		if ((err = leader_append(l, batch, sizeof(batch))) != 0)
			return err;
	}
	printf("%s: appended %d batches, up to %" PRIu64 "\n", l->name,
	       batches, l->next);
	return 0;
}

static int check_stream(const char *path, uint64_t base, int batches)
{
	char want[BATCH_BYTES], got[BATCH_BYTES];
	uint64_t off = base;
	int fd = open(path, O_RDONLY | O_CLOEXEC), bad = 0;

	if (fd < 0)
		return -errno;
	for (int i = 0; i < 2 * batches && !bad; i++) {
		make_batch(want, i < batches ? "A" : "B", i % batches);
		if (pread(fd, got, sizeof(got), (off_t)off) != BATCH_BYTES ||
		    memcmp(want, got, sizeof(got)) != 0) {
			fprintf(stderr, "batch %d at %" PRIu64 " is not what "
				"was acknowledged\n", i, off);
			bad = 1;
		}
		off += BATCH_BYTES;
	}
	if (!bad && pread(fd, got, 1, (off_t)off) != 0) {
		fprintf(stderr, "bytes after B's last batch at %" PRIu64 "\n",
			off);
		bad = 1;
	}
	close(fd);
	return bad ? -EBADMSG : 0;
}

int main(int argc, char **argv)
{
	struct leader a = { .name = "A" }, b = { .name = "B" };
	struct nrs_ioc_snapshot s;
	char batch[BATCH_BYTES];
	int batches = argc > 2 ? atoi(argv[2]) : 10, err, fd;
	uint64_t base;

	if (argc < 2 || batches <= 0) {
		fprintf(stderr, "usage: leader STREAM [BATCHES]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || leader_snapshot(fd, &s) != 0) {
		perror(argv[1]);
		return 1;
	}
	close(fd);
	base = s.head;

	if ((err = leader_start(&a, argv[1], s.epoch + 1)) != 0 ||
	    (err = leader_run(&a, batches)) != 0)
		goto out_err;
	/* A new leader is elected: it fences A. */
	if ((err = leader_start(&b, argv[1], a.epoch + 1)) != 0 ||
	    (err = leader_run(&b, batches)) != 0)
		goto out_err;

	/* The deposed leader tries once more. */
	make_batch(batch, "A", batches);
	err = leader_append(&a, batch, sizeof(batch));
	if (err != -ESTALE) {
		fprintf(stderr, "A: an append after the fence gave %s, not "
			"ESTALE\n", err ? strerror(-err) : "success");
		return 1;
	}
	printf("A: fenced (ESTALE), stops\n");
	close(a.fd);
	close(b.fd);
	err = check_stream(argv[1], base, batches);
	if (err)
		goto out_err;
	printf("stream: A's %d batches then B's %d, nothing else\n", batches,
	       batches);
	return 0;
out_err:
	fprintf(stderr, "leader: %s\n", strerror(-err));
	return 1;
}
