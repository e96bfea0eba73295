/*
 * test_objstore_cond.c - conditional puts (objstore.h OC1) and their probe
 * (OC2): the embedded store's compare-and-set (objstore_dir_put.c OD4, OD5),
 * also raced by several processes sharing its directory, and, with
 * NRS_S3_URL set (tests/unit/test_objstore_s3.sh), an S3 server: moto
 * (NRS_S3_CHECKS=v4) keeps If-None-Match and If-Match, s3rver ignores
 * them, and the probe must tell the two apart.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "obj/objfmt.h"
#include "obj/objstore.h"

#define RACERS	6
#define ROUNDS	8

struct fx {
	char root[PATH_MAX];
	char dir[PATH_MAX + 16];
	struct nrs_objstore *st;
	bool s3;
};

static int setup_dir(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	assert_int_equal(nrs_fixture_mkdtemp(f->root, sizeof(f->root),
					     "test_objstore_cond"), 0);
	snprintf(f->dir, sizeof(f->dir), "%s/objects", f->root);
	assert_int_equal(nrs_objstore_dir_open(f->dir, &f->st), 0);
	*state = f;
	return 0;
}

static int setup_s3(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const char *style = getenv("NRS_S3_STYLE");
	struct nrs_s3_opts o = {
		.url = getenv("NRS_S3_URL"),
		.access_key = getenv("NRS_S3_ACCESS_KEY"),
		.secret_key = getenv("NRS_S3_SECRET_KEY"),
		.timeout_ms = 10000,
		.style = style && strcmp(style, "virtual") == 0 ?
			 NRS_S3_VIRTUAL : NRS_S3_PATH,
	};

	if (!f)
		return -1;
	assert_int_equal(nrs_fixture_mkdtemp(f->root, sizeof(f->root),
					     "test_objstore_cond"), 0);
	f->s3 = true;
	assert_int_equal(nrs_objstore_s3_open(&o, &f->st), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int rc;

	nrs_obj_close(f->st);
	rc = nrs_fixture_rmtree(f->root);
	free(f);
	return rc;
}

/* Does the server keep conditions (moto, NRS_S3_CHECKS=v4)? */
static bool server_keeps_conditions(void)
{
	const char *v = getenv("NRS_S3_CHECKS");

	return v && strcmp(v, "v4") == 0;
}

static int put_c(struct nrs_objstore *st, const char *key, const char *text,
		 const char *if_match, char etag[NRS_ETAG_MAX])
{
	unsigned char sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	size_t len = strlen(text);

	assert_int_equal(nrs_objfmt_digest(text, len, sha, md5), 0);
	return nrs_obj_put_cond(st, key, text, len, md5, sha, if_match, etag);
}

static void assert_holds(struct nrs_objstore *st, const char *key,
			 const char *text, const char *etag)
{
	char buf[256];
	struct nrs_obj_meta m;
	ssize_t n = nrs_obj_get(st, key, 0, buf, sizeof(buf) - 1);

	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, text);
	assert_int_equal(nrs_obj_head(st, key, &m), 0);
	if (etag)
		assert_string_equal(m.etag, etag);
}

/* A key of this process (runs against one bucket never meet). */
static const char *key_of(char buf[NRS_OBJKEY_MAX], const char *name)
{
	snprintf(buf, NRS_OBJKEY_MAX, "cond-%ld/%s", (long)getpid(), name);
	return buf;
}

/* OC1 on one store: both conditions, and what each refusal is. */
static void test_conditions(void **state)
{
	struct fx *f = *state;
	char key[NRS_OBJKEY_MAX], e1[NRS_ETAG_MAX], e2[NRS_ETAG_MAX], e3[NRS_ETAG_MAX];
	char quoted[NRS_ETAG_MAX + 2];

	key_of(key, "rec");
	assert_int_equal(put_c(f->st, key, "one", "0123abcd", e1), -ENOENT);
	assert_int_equal(put_c(f->st, key, "one", NULL, e1), 0);
	assert_true(e1[0] != '\0');
	assert_holds(f->st, key, "one", e1);
	assert_int_equal(put_c(f->st, key, "two", NULL, e2), -EEXIST);
	assert_holds(f->st, key, "one", e1);
	assert_int_equal(put_c(f->st, key, "two", e1, e2), 0);
	assert_string_not_equal(e1, e2);
	assert_holds(f->st, key, "two", e2);
	/* the old etag is refused, and leaves the object as it is */
	assert_int_equal(put_c(f->st, key, "three", e1, e3), -ESTALE);
	assert_holds(f->st, key, "two", e2);
	/* an etag in quotes, as S3 shows it, names the same content */
	if (!f->s3) {
		snprintf(quoted, sizeof(quoted), "\"%s\"", e2);
		assert_int_equal(put_c(f->st, key, "three", quoted, e3), 0);
		assert_holds(f->st, key, "three", e3);
	}
	assert_int_equal(nrs_obj_del(f->st, key), 0);
}

/* OD4: the etag of the embedded store is the hex SHA-256 of the bytes. */
static void test_dir_etag(void **state)
{
	struct fx *f = *state;
	unsigned char sha[NRS_SHA256_LEN];
	char etag[NRS_ETAG_MAX], want[2 * NRS_SHA256_LEN + 1];

	assert_int_equal(put_c(f->st, "r", "abc", NULL, etag), 0);
	assert_int_equal(nrs_objfmt_digest("abc", 3, sha, NULL), 0);
	for (int i = 0; i < NRS_SHA256_LEN; i++)
		snprintf(want + 2 * i, 3, "%02x", sha[i]);
	assert_string_equal(etag, want);
}

/* OC2: the embedded store keeps conditions; the probe leaves nothing. */
static void test_dir_probe(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX * 2];

	assert_int_equal(nrs_obj_cond_supported(f->st), 1);
	snprintf(path, sizeof(path), "%s/owner-probe", f->dir);
	assert_int_equal(access(path, F_OK), -1);
}

/*
 * Run RACERS processes that each try body "racer N" under key with the
 * condition (if_match NULL: absent); returns how many won (exit 0), each
 * loser having got refuse.
 */
static int race(struct nrs_objstore *st, const char *key, const char *if_match,
		int refuse)
{
	pid_t pid[RACERS];
	int won = 0;

	for (int i = 0; i < RACERS; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			char body[32], etag[NRS_ETAG_MAX];
			int rc;

			/* bytes of their own: the same bytes again would
			 * keep the etag, and so the condition */
			snprintf(body, sizeof(body), "racer %d%s", i,
				 if_match ? " again" : "");
			rc = put_c(st, key, body, if_match, etag);
			_exit(rc == 0 ? 0 : rc == refuse ? 1 : 2);
		}
	}
	for (int i = 0; i < RACERS; i++) {
		int ws;

		assert_int_equal(waitpid(pid[i], &ws, 0), pid[i]);
		assert_true(WIFEXITED(ws));
		assert_true(WEXITSTATUS(ws) <= 1);
		won += WEXITSTATUS(ws) == 0;
	}
	return won;
}

/* OD4, OD5 across processes: exactly one of the racers wins each round. */
static void test_dir_race(void **state)
{
	struct fx *f = *state;

	for (int r = 0; r < ROUNDS; r++) {
		char key[32];
		struct nrs_obj_meta m;

		snprintf(key, sizeof(key), "race/%d", r);
		assert_int_equal(race(f->st, key, NULL, -EEXIST), 1);
		assert_int_equal(nrs_obj_head(f->st, key, &m), 0);
		assert_int_equal(race(f->st, key, m.etag, -ESTALE), 1);
	}
}

/*
 * OD5: the compare of if-match happens under DIR/.lock.  A child's put
 * waits while the test holds the lock, and compares only once it has it:
 * the content the test put meanwhile makes it -ESTALE.
 */
static void test_dir_lock(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX * 2], etag[NRS_ETAG_MAX];
	struct timespec pause = { 0, 300 * 1000000 };
	int lockfd, ws;
	pid_t pid;

	assert_int_equal(put_c(f->st, "rec", "one", NULL, etag), 0);
	snprintf(path, sizeof(path), "%s/.lock", f->dir);
	lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(lockfd >= 0);
	assert_int_equal(flock(lockfd, LOCK_EX), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char e2[NRS_ETAG_MAX];
		int rc;

		close(lockfd);	/* the parent's hold, not ours */
		rc = put_c(f->st, "rec", "child", etag, e2);

		_exit(rc == -ESTALE ? 0 : 1);
	}
	nanosleep(&pause, NULL);
	assert_int_equal(waitpid(pid, &ws, WNOHANG), 0);	/* it waits */
	assert_int_equal(nrs_obj_put(f->st, "rec", "other", 5, NULL, NULL), 0);
	close(lockfd);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	assert_holds(f->st, "rec", "other", NULL);
}

/* OC2 against a server: moto keeps the conditions, s3rver ignores them. */
static void test_s3_probe(void **state)
{
	struct fx *f = *state;
	char key[NRS_OBJKEY_MAX], e1[NRS_ETAG_MAX], e2[NRS_ETAG_MAX];

	assert_int_equal(nrs_obj_cond_supported(f->st),
			 server_keeps_conditions() ? 1 : 0);
	if (server_keeps_conditions()) {
		test_conditions(state);
		return;
	}
	/* s3rver: the second absent-put overwrites, as the probe saw */
	key_of(key, "ignored");
	assert_int_equal(put_c(f->st, key, "one", NULL, e1), 0);
	assert_int_equal(put_c(f->st, key, "two", NULL, e2), 0);
	assert_holds(f->st, key, "two", NULL);
	assert_int_equal(nrs_obj_del(f->st, key), 0);
}

int main(void)
{
	const struct CMUnitTest dir_tests[] = {
		cmocka_unit_test_setup_teardown(test_conditions, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_etag, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_probe, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_race, setup_dir,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_lock, setup_dir,
						teardown),
	};
	const struct CMUnitTest s3_tests[] = {
		cmocka_unit_test_setup_teardown(test_s3_probe, setup_s3,
						teardown),
	};

	if (getenv("NRS_S3_URL"))
		return cmocka_run_group_tests(s3_tests, NULL, NULL);
	return cmocka_run_group_tests(dir_tests, NULL, NULL);
}
