/*
 * s3_class.c - the error classes of S3 answers and what goes with them
 * (names, advice, errnos), and the region of an AWS host name: pure
 * functions, unit-tested on their own (s3_curl.h).  Which classes are
 * sent again (SR1) is s3_curl.c's.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "obj/s3_curl.h"
/* ---- classes (pure) ----------------------------------------------------- */

static const char *const class_names[NRS_S3C_COUNT] = {
	[NRS_S3C_OK] = "ok",
	[NRS_S3C_NOT_FOUND] = "not_found",
	[NRS_S3C_UNAVAILABLE] = "unavailable",
	[NRS_S3C_TIMEOUT] = "timeout",
	[NRS_S3C_THROTTLED] = "throttled",
	[NRS_S3C_SERVER] = "server",
	[NRS_S3C_CLOCK] = "clock_skew",
	[NRS_S3C_REGION] = "region",
	[NRS_S3C_SIGNATURE] = "signature",
	[NRS_S3C_KEY] = "access_key",
	[NRS_S3C_TOKEN] = "token",
	[NRS_S3C_DENIED] = "access_denied",
	[NRS_S3C_NO_BUCKET] = "no_bucket",
	[NRS_S3C_TLS] = "tls",
	[NRS_S3C_BAD_DIGEST] = "bad_digest",
	[NRS_S3C_OTHER] = "other",
	[NRS_S3C_PRECONDITION] = "precondition",
	[NRS_S3C_CONFLICT] = "conflict",
};

const char *nrs_s3_class_name(enum nrs_s3_class c)
{
	return (unsigned)c < NRS_S3C_COUNT ? class_names[c] : "other";
}

const char *nrs_s3_class_advice(enum nrs_s3_class c)
{
	switch (c) {
	case NRS_S3C_CLOCK:
		return "this machine's clock is off by more than 15 minutes: "
		       "set it right (NTP)";
	case NRS_S3C_REGION:
		return "the bucket is in another region: set -o s3_region= "
		       "to its region";
	case NRS_S3C_SIGNATURE:
		return "the secret key is wrong: check AWS_SECRET_ACCESS_KEY "
		       "(or the s3_credentials file), or try s3_signature=v2 "
		       "for a server that only takes V2";
	case NRS_S3C_KEY:
		return "the access key id is unknown to the store: check "
		       "AWS_ACCESS_KEY_ID (or the s3_credentials file)";
	case NRS_S3C_TOKEN:
		return "the session token is expired or wrong: renew "
		       "AWS_SESSION_TOKEN (or the s3_credentials file)";
	case NRS_S3C_DENIED:
		return "these credentials may not use the bucket: grant "
		       "s3:GetObject, s3:PutObject, s3:DeleteObject and "
		       "s3:ListBucket on it";
	case NRS_S3C_NO_BUCKET:
		return "there is no such bucket: create it, or fix the URL";
	case NRS_S3C_TLS:
		return "the server's certificate does not verify: fix the "
		       "server, or name its CA with -o s3_ca=FILE";
	default:
		return "";
	}
}

enum nrs_s3_class nrs_s3_classify(long http, const char *code,
				  enum nrs_s3_net net, bool is_object)
{
	static const struct {
		const char *code;
		enum nrs_s3_class cls;
	} codes[] = {
		{ "NoSuchKey", NRS_S3C_NOT_FOUND },
		{ "NoSuchBucket", NRS_S3C_NO_BUCKET },
		{ "RequestTimeout", NRS_S3C_TIMEOUT },
		{ "SlowDown", NRS_S3C_THROTTLED },
		{ "RequestTimeTooSkewed", NRS_S3C_CLOCK },
		{ "AuthorizationHeaderMalformed", NRS_S3C_REGION },
		{ "PermanentRedirect", NRS_S3C_REGION },
		{ "IllegalLocationConstraintException", NRS_S3C_REGION },
		{ "SignatureDoesNotMatch", NRS_S3C_SIGNATURE },
		{ "InvalidAccessKeyId", NRS_S3C_KEY },
		{ "ExpiredToken", NRS_S3C_TOKEN },
		{ "InvalidToken", NRS_S3C_TOKEN },
		{ "TokenRefreshRequired", NRS_S3C_TOKEN },
		{ "AccessDenied", NRS_S3C_DENIED },
		{ "BadDigest", NRS_S3C_BAD_DIGEST },
		{ "XAmzContentSHA256Mismatch", NRS_S3C_BAD_DIGEST },
		{ "InvalidDigest", NRS_S3C_BAD_DIGEST },
		{ "PreconditionFailed", NRS_S3C_PRECONDITION },
		{ "ConditionalRequestConflict", NRS_S3C_CONFLICT },
	};

	if (http == 0) {
		switch (net) {
		case NRS_S3_NET_TIMEOUT:
			return NRS_S3C_TIMEOUT;
		case NRS_S3_NET_TLS:
			return NRS_S3C_TLS;
		default:
			return NRS_S3C_UNAVAILABLE;
		}
	}
	if (http >= 200 && http < 300)
		return NRS_S3C_OK;
	if (code && *code)
		for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
			if (strcmp(code, codes[i].code) == 0)
				return codes[i].cls;
	if (http == 412)
		return NRS_S3C_PRECONDITION;
	if (http == 429 || http == 503)
		return NRS_S3C_THROTTLED;
	if (http >= 500)
		return NRS_S3C_SERVER;
	if (http == 404)
		return is_object ? NRS_S3C_NOT_FOUND : NRS_S3C_NO_BUCKET;
	if (http == 403)
		return NRS_S3C_DENIED;
	if (http == 301)
		return NRS_S3C_REGION;	/* a HEAD in the wrong region */
	return NRS_S3C_OTHER;
}

int nrs_s3_class_errno(enum nrs_s3_class c)
{
	switch (c) {
	case NRS_S3C_OK:
		return 0;
	case NRS_S3C_NOT_FOUND:
		return -ENOENT;
	case NRS_S3C_UNAVAILABLE:
		return -ECONNREFUSED;
	case NRS_S3C_TIMEOUT:
		return -ETIMEDOUT;
	case NRS_S3C_CLOCK:
	case NRS_S3C_REGION:
	case NRS_S3C_SIGNATURE:
	case NRS_S3C_KEY:
	case NRS_S3C_TOKEN:
	case NRS_S3C_DENIED:
		return -EACCES;
	case NRS_S3C_PRECONDITION:
		return -ESTALE;	/* objstore_s3_v4.c names which condition */
	default:	/* THROTTLED, SERVER, NO_BUCKET, TLS, BAD_DIGEST, OTHER */
		return -EIO;
	}
}

bool nrs_s3_host_region(const char *host, char *out, size_t n)
{
	static const char *const tails[] = {
		".amazonaws.com", ".amazonaws.com.cn",
	};
	const char *colon = strchr(host, ':');
	size_t hl = colon ? (size_t)(colon - host) : strlen(host);
	size_t end = 0, start, rl;

	for (size_t i = 0; i < 2 && !end; i++) {
		size_t tl = strlen(tails[i]);

		if (hl > tl && strncasecmp(host + hl - tl, tails[i], tl) == 0)
			end = hl - tl;	/* the region label ends here */
	}
	if (!end)
		return false;
	start = end;
	while (start > 0 && host[start - 1] != '.')
		start--;
	/* s3.REGION, BUCKET.s3.REGION, s3.dualstack.REGION or s3-REGION */
	if (start >= 3 && strncasecmp(host + start - 3, "s3.", 3) == 0)
		;
	else if (start >= 13 &&
		 strncasecmp(host + start - 13, "s3.dualstack.", 13) == 0)
		;
	else if (end - start > 3 && strncasecmp(host + start, "s3-", 3) == 0)
		start += 3;
	else
		return false;
	rl = end - start;
	if (rl == 0 || rl >= n)
		return false;
	for (size_t i = start; i < end; i++)
		if (!isalnum((unsigned char)host[i]) && host[i] != '-')
			return false;
	memcpy(out, host + start, rl);
	out[rl] = '\0';
	return true;
}
