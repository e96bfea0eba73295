/*
 * objstore_s3_open.c - opening an S3 store (objstore_s3.c): the URL
 * (http[s]://HOST[:PORT]/BUCKET[/], HOST a name, an IPv4 address or
 * [IPv6]), the s3_ options (region, addressing style, signature), the
 * region to sign for, the credentials (the environment, or a file of
 * NAME=value lines that no other user may read or write), and the probe
 * of the bucket at mount (PROBE, above nrs_objstore_s3_open_url).  The
 * bucket name is checked by libs3's rules for both paths
 * (nrs_s3v2_bucket_ok).  Secrets are wiped before they are freed.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "obj/objstore.h"
#include "obj/objstore_s3_priv.h"
#include "obj/s3_curl.h"
#include "util/log.h"

#define DEFAULT_TIMEOUT_MS	30000
#define CREDS_FILE_MAX		(64u << 10)
#define DEFAULT_REGION		"us-east-1"
#define PROBE_KEY		"nereusfs-probe"

void nrs_s3st_free_secret(char *v)
{
	if (v)
		explicit_bzero(v, strlen(v));
	free(v);
}


/* ---- the URL and the options ------------------------------------------ */

/* Is [p, end) a port number, 1 to 65535? */
static bool port_ok(const char *p, const char *end)
{
	unsigned long v = 0;

	if (p == end || end - p > 5)
		return false;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v >= 1 && v <= 65535;
}

/* Is [p, end) HOST[:PORT], HOST a name, an IPv4 address or [IPv6]? */
static bool host_ok(const char *p, const char *end)
{
	const char *q = p;

	if (p == end || end - p > HOST_MAX)
		return false;
	if (*p == '[') {
		for (q = p + 1; q < end && *q != ']'; q++)
			if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
				return false;
		if (q == end || q == p + 1)
			return false;
		q++;	/* past ']' */
	} else {
		for (; q < end && *q != ':'; q++)
			if (!isalnum((unsigned char)*q) && *q != '.' && *q != '-')
				return false;
		if (q == p)
			return false;
	}
	if (q == end)
		return true;
	return *q == ':' && port_ok(q + 1, end);
}

/* http[s]://HOST[:PORT]/BUCKET[/] into s's protocol, host and bucket. */
static int parse_url(const char *url, struct s3_store *s)
{
	const char *p, *slash, *end;

	if (strncmp(url, "http://", 7) == 0) {
		s->https = false;
		p = url + 7;
	} else if (strncmp(url, "https://", 8) == 0) {
		s->https = true;
		p = url + 8;
	} else {
		return -EINVAL;
	}
	slash = strchr(p, '/');
	if (!slash || !host_ok(p, slash))
		return -EINVAL;
	end = slash + 1 + strlen(slash + 1);
	if (end > slash + 1 && end[-1] == '/')
		end--;	/* one trailing '/' is allowed */
	s->host = strndup(p, (size_t)(slash - p));
	s->bucket = strndup(slash + 1, (size_t)(end - slash - 1));
	if (!s->host || !s->bucket)
		return -ENOMEM;
	if (!*s->bucket || strchr(s->bucket, '/') ||
	    !nrs_s3v2_bucket_ok(s->bucket, false))
		return -EINVAL;
	return 0;
}

/* Is r a region name: 1 to REGION_MAX - 1 of [a-z0-9-]? */
static bool region_ok(const char *r)
{
	size_t n = strlen(r);

	if (n == 0 || n >= REGION_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!islower((unsigned char)r[i]) && !isdigit((unsigned char)r[i]) &&
		    r[i] != '-')
			return false;
	return true;
}

int nrs_s3_opt_parse(struct nrs_s3_opts *o, const char *name,
		     const char *value)
{
	if (strcmp(name, "s3_region") == 0) {
		if (!value || !region_ok(value))
			return -EINVAL;
		o->region = value;
	} else if (strcmp(name, "s3_style") == 0) {
		if (value && strcmp(value, "path") == 0)
			o->style = NRS_S3_PATH;
		else if (value && strcmp(value, "virtual") == 0)
			o->style = NRS_S3_VIRTUAL;
		else
			return -EINVAL;
	} else if (strcmp(name, "s3_signature") == 0) {
		if (value && strcmp(value, "v4") == 0)
			o->signature = NRS_S3_V4;
		else if (value && strcmp(value, "v2") == 0)
			o->signature = NRS_S3_V2;
		else
			return -EINVAL;
	} else {
		return -ENOENT;
	}
	return 0;
}

/*
 * The region to sign for (REGION below): o->region if given (it wins
 * over the host name, with a warning when the two differ), else the one
 * an AWS host name names, else us-east-1.
 */
static int pick_region(const struct nrs_s3_opts *o, const char *host,
		       char out[REGION_MAX])
{
	char from_host[REGION_MAX];
	bool named = nrs_s3_host_region(host, from_host, sizeof(from_host));

	if (o->region) {
		if (!region_ok(o->region)) {
			nrs_err("s3 %s: s3_region=%s is not a region name "
				"(lower-case letters, digits and '-')", o->url,
				o->region);
			return -EINVAL;
		}
		if (named && strcmp(from_host, o->region) != 0)
			nrs_warn("s3 %s: the host names region %s; signing for "
				 "s3_region=%s as told", o->url, from_host,
				 o->region);
		snprintf(out, REGION_MAX, "%s", o->region);
	} else {
		snprintf(out, REGION_MAX, "%s", named ? from_host : DEFAULT_REGION);
	}
	return 0;
}

int nrs_objstore_s3_open(const struct nrs_s3_opts *o, struct nrs_objstore **out)
{
	struct s3_store *s;
	int rc;

	if (!o || !o->url || !o->access_key || !*o->access_key ||
	    !o->secret_key || !*o->secret_key || o->timeout_ms < 0 ||
	    (o->style != NRS_S3_PATH && o->style != NRS_S3_VIRTUAL) ||
	    (o->signature != NRS_S3_V4 && o->signature != NRS_S3_V2))
		return -EINVAL;
	if (o->signature == NRS_S3_V2 && o->style == NRS_S3_VIRTUAL) {
		nrs_err("s3 %s: s3_signature=v2 takes s3_style=path only",
			o->url);
		return -EINVAL;
	}
	if (o->ca_file && access(o->ca_file, R_OK) < 0) {
		rc = -errno;
		nrs_err("s3 %s: CA file %s: %s", o->url, o->ca_file,
			strerror(-rc));
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &nrs_s3st_ops;
	pthread_mutex_init(&s->cred_lock, NULL);
	s->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
	s->url = strdup(o->url);
	s->access = strdup(o->access_key);
	s->secret = strdup(o->secret_key);
	s->ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
	if (!s->url || !s->access || !s->secret ||
	    (o->ca_file && !s->ca_file)) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = parse_url(o->url, s);
	if (rc == 0 && o->style == NRS_S3_VIRTUAL &&
	    !nrs_s3v2_bucket_ok(s->bucket, true)) {
		nrs_err("s3 %s: bucket %s cannot be a host name: use "
			"s3_style=path", o->url, s->bucket);
		rc = -EINVAL;
		goto out_free;
	}
	if (rc < 0) {
		if (rc == -EINVAL)
			nrs_err("s3: %s is not http[s]://HOST[:PORT]/BUCKET",
				o->url);
		goto out_free;
	}
	rc = pick_region(o, s->host, s->region);
	if (rc < 0)
		goto out_free;
	if (o->signature == NRS_S3_V4) {
		struct nrs_s3c_opts co = {
			.https = s->https,
			.host = s->host, .bucket = s->bucket,
			.virtual_style = o->style == NRS_S3_VIRTUAL,
			.region = s->region, .access = s->access,
			.secret = s->secret, .token = o->session_token,
			.ca_file = s->ca_file, .timeout_ms = s->timeout_ms,
		};

		rc = nrs_s3c_new(&co, &s->v4);
		if (rc < 0)
			goto out_free;
		*out = &s->base;
		return 0;
	}
	if (o->session_token && *o->session_token)
		nrs_warn("s3 %s: s3_signature=v2 sends no session token",
			 o->url);
	rc = nrs_s3v2_open(s);
	if (rc < 0)
		goto out_free;
	*out = &s->base;
	return 0;

out_free:
	nrs_s3st_store_free(s);
	return rc;
}

/* ---- credentials ------------------------------------------------------ */

/* Strip leading and trailing blanks (and a CR) of [*p, *end). */
static void trim(const char **p, const char **end)
{
	while (*p < *end && isspace((unsigned char)**p))
		(*p)++;
	while (*end > *p && isspace((unsigned char)(*end)[-1]))
		(*end)--;
}

/*
 * The whole of a credentials file, NUL-terminated, in *text (the caller
 * wipes and frees it), its length in *len.  Logged: -EPERM if another user
 * could read or write it, or it is not a regular file; -EINVAL if longer
 * than CREDS_FILE_MAX; an open or read error.
 */
static int creds_read(const char *file, char **text, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	ssize_t n = 0;
	int fd, rc = 0;

	/* Not O_NOFOLLOW: mounted secrets are often links to the file. */
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode) || (st.st_mode & 0066) != 0) {
		nrs_err("s3 credentials %s: must be a regular file no other user "
			"can read or write (mode 0600), not %04o", file,
			(unsigned)(st.st_mode & 07777));
		rc = -EPERM;
	} else if (st.st_size > (off_t)CREDS_FILE_MAX) {
		nrs_err("s3 credentials %s: longer than %u bytes", file,
			CREDS_FILE_MAX);
		rc = -EINVAL;
	} else if (!(buf = calloc(1, (size_t)st.st_size + 1))) {
		rc = -ENOMEM;
	} else if ((n = pread(fd, buf, (size_t)st.st_size, 0)) < 0) {
		rc = -errno;
	}
	if (rc == 0 && (!buf || n < 0))
		rc = -EIO;	/* errno was 0 */
	if (rc != 0 && rc != -EPERM && rc != -EINVAL)
		nrs_err("s3 credentials %s: %s", file, strerror(-rc));
	if (fd >= 0)
		close(fd);
	if (rc != 0) {
		free(buf);
		return rc;
	}
	*text = buf;
	*len = (size_t)n;
	return 0;
}

/* The value of "NAME=value" lines in [p, end) (the last one wins); NULL
 * if there is none, or no memory (*rc then -ENOMEM). */
static char *creds_value(const char *p, const char *end, const char *name,
			 int *rc)
{
	size_t nl = strlen(name);
	char *v = NULL;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *lend = eol ? eol : end;

		trim(&p, &lend);
		if ((size_t)(lend - p) > nl + 1 && memcmp(p, name, nl) == 0 &&
		    p[nl] == '=') {
			free(v);
			v = strndup(p + nl + 1, (size_t)(lend - p) - nl - 1);
			if (!v) {
				*rc = -ENOMEM;
				return NULL;
			}
		}
		p = eol ? eol + 1 : end;
	}
	return v;
}

int nrs_s3_credentials(const char *file, char **access, char **secret,
		       char **token)
{
	char *a = NULL, *k = NULL, *t = NULL, *text;
	size_t len;
	int rc = 0;

	if (!file) {
		const char *ea = getenv("AWS_ACCESS_KEY_ID");
		const char *ek = getenv("AWS_SECRET_ACCESS_KEY");
		const char *et = getenv("AWS_SESSION_TOKEN");

		if (!ea || !*ea || !ek || !*ek)
			return -ENOENT;
		a = strdup(ea);
		k = strdup(ek);
		if (et && *et)
			t = strdup(et);
		if (!a || !k || (et && *et && !t))
			rc = -ENOMEM;
	} else {
		rc = creds_read(file, &text, &len);
		if (rc != 0)
			return rc;
		a = creds_value(text, text + len, "AWS_ACCESS_KEY_ID", &rc);
		k = creds_value(text, text + len, "AWS_SECRET_ACCESS_KEY", &rc);
		t = creds_value(text, text + len, "AWS_SESSION_TOKEN", &rc);
		explicit_bzero(text, len);
		free(text);
		if (rc == 0 && (!a || !k)) {
			nrs_err("s3 credentials %s: needs the lines "
				"AWS_ACCESS_KEY_ID=... and "
				"AWS_SECRET_ACCESS_KEY=...", file);
			rc = -ENOENT;
		}
	}
	if (rc < 0) {
		free(a);
		nrs_s3st_free_secret(k);
		nrs_s3st_free_secret(t);
		return rc;
	}
	*access = a;
	*secret = k;
	*token = t;
	return 0;
}

/*
 * PROBE: at mount, one GET of PROBE_KEY (a key nereusfs never writes;
 * bytes 0-0) through the store's own path.  Absent (404 NoSuchKey) or
 * present, the credentials, region and bucket work.  A definite refusal
 * (403 of any kind, a region error, NoSuchBucket, a clock skew, a
 * certificate) fails the mount: nothing would ever materialize.  No
 * answer, or a 5xx, is a warning: the mount goes on (appends of local-wal
 * streams never wait for the bucket).  An AccessDenied on a missing key
 * is a refusal too: without s3:ListBucket S3 answers 403 for every missing
 * key, and the proof of an uncertain upload (DESIGN.md 6) needs 404.
 * With V2 the probe is a head() through libs3, whose answers are coarser
 * (-EACCES refuses).
 */
static int probe(struct s3_store *s)
{
	unsigned char b;
	struct nrs_s3c_req r = {
		.method = NRS_S3C_GET, .key = PROBE_KEY, .dst = &b,
		.dst_len = 1,
	};
	struct nrs_s3c_resp o;
	int err;

	if (!s->v4) {
		struct nrs_obj_meta m;

		err = nrs_s3v2_head(&s->base, PROBE_KEY, &m);
		if (err == 0 || err == -ENOENT)
			return 0;
		if (err == -EACCES) {
			nrs_err("S3 %s: the store refuses these credentials "
				"(signature V2): check the keys, or use "
				"s3_signature=v4", s->url);
			return err;
		}
		nrs_warn("S3 %s: the store did not answer the probe (%s): "
			 "mounting anyway, objects wait", s->url, strerror(-err));
		return 0;
	}
	err = nrs_s3c_run(s->v4, &r, &o);
	if (err < 0)
		return err;
	switch (o.cls) {
	case NRS_S3C_OK:
	case NRS_S3C_NOT_FOUND:
		return 0;
	case NRS_S3C_UNAVAILABLE:
	case NRS_S3C_TIMEOUT:
	case NRS_S3C_THROTTLED:
	case NRS_S3C_SERVER:
	case NRS_S3C_OTHER:
		nrs_warn("S3 %s: the store did not answer the probe (%s%s%s): "
			 "mounting anyway, objects wait", s->url,
			 nrs_s3_class_name(o.cls), o.message[0] ? ": " : "",
			 o.message);
		return 0;
	default:
		break;
	}
	atomic_fetch_add_explicit(&s->errors[o.cls], 1, memory_order_relaxed);
	if (o.cls == NRS_S3C_REGION && o.region[0])
		nrs_err("S3 %s: refused: the bucket is in region %s, not %s: "
			"set -o s3_region=%s", s->url, o.region, s->region,
			o.region);
	else
		nrs_err("S3 %s: refused (HTTP %ld %s, %s): %s", s->url, o.http,
			o.code[0] ? o.code : "", nrs_s3_class_name(o.cls),
			nrs_s3_class_advice(o.cls));
	return o.cls == NRS_S3C_NO_BUCKET ? -ENXIO : -EACCES;
}

int nrs_objstore_s3_open_url(const struct nrs_s3_opts *o,
			     const char *cred_file, struct nrs_objstore **out)
{
	struct nrs_s3_opts so = *o;
	char *access = NULL, *secret = NULL, *token = NULL;
	struct nrs_objstore *st;
	int err;

	err = nrs_s3_credentials(cred_file, &access, &secret, &token);
	if (err) {
		/* The daemon's words: nereusfs-fsck says its own. */
		nrs_err("S3 %s: no credentials (%s): set AWS_ACCESS_KEY_ID and"
			" AWS_SECRET_ACCESS_KEY or -o s3_credentials=FILE",
			o->url, strerror(-err));
		return err;
	}
	so.access_key = access;
	so.secret_key = secret;
	so.session_token = token;
	err = nrs_objstore_s3_open(&so, &st);
	if (err)
		nrs_err("S3 %s: %s", o->url, err == -EINVAL ?
			"not a URL of the form http[s]://HOST[:PORT]/BUCKET, "
			"or bad s3_ options (see above)" : strerror(-err));
	free(access);
	nrs_s3st_free_secret(secret);
	nrs_s3st_free_secret(token);
	if (err)
		return err;
	if (cred_file && s3_of(st)->v4) {	/* SC1 */
		struct s3_store *s = s3_of(st);

		s->cred_file = strdup(cred_file);
		if (!s->cred_file || stat(cred_file, &s->cred_st) < 0) {
			err = s->cred_file ? -errno : -ENOMEM;
			nrs_obj_close(st);
			return err;
		}
		s->cred_checked_ms = nrs_s3st_now_ms();
	}
	err = probe(s3_of(st));
	if (err) {
		nrs_obj_close(st);
		return err;
	}
	*out = st;
	return 0;
}
