/*
 * objstore.c - what every object store provider shares: the rule for keys
 * (objstore.h).  Keys are chosen by nereusfs (objfmt.h: "s/<id>/<range>"),
 * never by users, so the rule can be narrow: characters that need no
 * escaping in a URL path or a file name, and no component starting with
 * '.', which leaves ".tmp" and every other dot-name of the embedded store's
 * directory out of the key space (objstore_dir.c).
 *
 * And the probe of conditional writes (OC2, objstore.h): a store that
 * ignores If-None-Match (s3rver) answers 200 to both puts of the probe,
 * one that keeps it 412 to the second.  The key is random so that two
 * daemons probing one bucket at once never see each other's probe; the
 * bytes name the process, for whoever finds a probe a crash left behind.
 *
 * And the streaming GET of a store that has none (nrs_obj_get_stream):
 * get() into one buffer, handed to the sink whole.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "obj/objfmt.h"
#include "obj/objstore.h"
#include "util/log.h"

static bool key_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool nrs_objkey_is_valid(const char *key)
{
	size_t n;
	bool at_start = true;	/* at the first character of a component */

	if (!key)
		return false;
	n = strnlen(key, NRS_OBJKEY_MAX);
	if (n == 0 || n >= NRS_OBJKEY_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];

		if (c == '/') {
			if (at_start)
				return false;	/* empty component */
			at_start = true;
			continue;
		}
		if (!key_char_ok(c) || (at_start && c == '.'))
			return false;
		at_start = false;
	}
	return !at_start;	/* no trailing '/' */
}

/* OB1 */
enum nrs_put_verdict nrs_put_decide(int head_err, const struct nrs_obj_meta *got,
				    uint64_t len,
				    const unsigned char sha256[NRS_SHA256_LEN])
{
	if (head_err == -ENOENT)
		return NRS_PUT_AGAIN;
	if (head_err)
		return NRS_PUT_LATER;
	if (got->length == len && got->has_sha256 &&
	    memcmp(got->sha256, sha256, NRS_SHA256_LEN) == 0)
		return NRS_PUT_PROVEN;
	return NRS_PUT_QUARANTINE;
}

int nrs_obj_cond_supported(struct nrs_objstore *s)
{
	unsigned char rnd[8], sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	char key[NRS_OBJKEY_MAX], body[64], etag[NRS_ETAG_MAX];
	int n, rc, rc2;

	if (!s->ops->put_cond)
		return 0;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -errno;
	n = snprintf(key, sizeof(key), "owner-probe/");
	for (size_t i = 0; i < sizeof(rnd); i++)
		n += snprintf(key + n, sizeof(key) - (size_t)n, "%02x", rnd[i]);
	n = snprintf(body, sizeof(body), "nereusfs probe pid %ld\n",
		     (long)getpid());
	rc = nrs_objfmt_digest(body, (size_t)n, sha, md5);
	if (rc < 0)
		return rc;
	rc = nrs_obj_put_cond(s, key, body, (size_t)n, md5, sha, NULL, etag);
	if (rc == -EOPNOTSUPP)
		return 0;	/* a path without conditions (S3 V2) */
	if (rc < 0) {
		nrs_warn("%s store: probe of conditional writes: put %s: %s",
			 s->ops->name, key, strerror(-rc));
		return rc == -EEXIST ? -EIO : rc;
	}
	rc2 = nrs_obj_put_cond(s, key, body, (size_t)n, md5, sha, NULL, etag);
	if (rc2 == -EEXIST)
		rc = 1;		/* OC2: the second was refused */
	else if (rc2 == 0)
		rc = 0;		/* the condition was ignored */
	else
		rc = rc2;
	rc2 = nrs_obj_del(s, key);
	if (rc2 < 0)
		nrs_warn("%s store: probe of conditional writes: delete %s: %s "
			 "(harmless: delete it by hand)", s->ops->name, key,
			 strerror(-rc2));
	if (rc == 0)
		nrs_warn("%s store: ignores If-None-Match (a second conditional "
			 "put of %s succeeded): no compare-and-set", s->ops->name,
			 key);
	else if (rc < 0)
		nrs_warn("%s store: probe of conditional writes: %s",
			 s->ops->name, strerror(-rc));
	return rc;
}

ssize_t nrs_obj_get_buffered(struct nrs_objstore *s, const char *key,
			     uint64_t off, size_t len, nrs_obj_sink_fn sink,
			     void *arg)
{
	unsigned char *buf = malloc(len ? len : 1);
	ssize_t got;
	int err;

	if (!buf)
		return -ENOMEM;
	got = s->ops->get(s, key, off, buf, len);
	if (got > 0) {
		err = sink(arg, 0, buf, (size_t)got);
		if (err < 0)
			got = err;
	}
	free(buf);
	return got;
}

ssize_t nrs_obj_get_stream(struct nrs_objstore *s, const char *key,
			   uint64_t off, size_t len, nrs_obj_sink_fn sink,
			   void *arg)
{
	if (s->ops->get_stream)
		return s->ops->get_stream(s, key, off, len, sink, arg);
	return nrs_obj_get_buffered(s, key, off, len, sink, arg);
}
