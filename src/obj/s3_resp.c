/*
 * s3_resp.c - reading an answer, for one attempt (s3_curl.c): a GET's
 * body into the caller's buffer or, as it arrives, to the caller's sink, an error body kept for its <Code>, the
 * headers head() needs (Content-Length, x-amz-meta-sha256, ETag), and what
 * libcurl's result says about the connection.
 */
#include "config.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "obj/s3_curl.h"
#include "obj/s3_curl_priv.h"
long nrs_s3c_status_of(CURL *h)
{
	long st = 0;

	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
	return st;
}

size_t nrs_s3c_on_write(char *buf, size_t size, size_t nmemb,
			void *data)
{
	struct attempt *a = data;
	struct nrs_s3c_resp *o = a->out;
	size_t n = size * nmemb;
	long st = nrs_s3c_status_of(a->h);

	if (st >= 200 && st < 300) {
		if (a->r->method != NRS_S3C_GET)
			return n;	/* a PUT's or DELETE's small answer */
		if (n > a->r->dst_len - o->got) {
			o->too_long = true;
			return 0;	/* aborts the transfer */
		}
		if (a->r->sink) {
			int err = a->r->sink(a->r->sink_arg, o->got, buf, n);

			if (err < 0) {
				o->sink_err = err;
				return 0;	/* aborts the transfer */
			}
		} else {
			memcpy((char *)a->r->dst + o->got, buf, n);
		}
		o->got += n;
		return n;
	}
	if (n > ERRBODY_MAX - a->errlen)
		n = ERRBODY_MAX - a->errlen;	/* the rest is dropped */
	memcpy(a->errbody + a->errlen, buf, n);
	a->errlen += n;
	return size * nmemb;
}

/* Is line (of n bytes) the header name?  Then *val is its value. */
static bool header_is(const char *line, size_t n, const char *name,
		      const char **val, size_t *vlen)
{
	size_t nl = strlen(name);
	const char *v, *e = line + n;

	if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return false;
	v = line + nl + 1;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && isspace((unsigned char)e[-1]))
		e--;
	*val = v;
	*vlen = (size_t)(e - v);
	return true;
}

size_t nrs_s3c_on_header(char *buf, size_t size, size_t nitems,
			 void *data)
{
	struct attempt *a = data;
	struct nrs_s3c_resp *o = a->out;
	size_t n = size * nitems, vl;
	const char *v;

	if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		/* a new answer (after a 100 Continue, say): forget the
		 * headers of the one before */
		o->have_length = false;
		o->has_meta_sha256 = false;
		o->etag[0] = '\0';
		return n;
	}
	if (header_is(buf, n, "content-length", &v, &vl)) {
		uint64_t len = 0;
		bool ok = vl > 0 && vl <= 19;

		for (size_t i = 0; ok && i < vl; i++) {
			if (v[i] < '0' || v[i] > '9')
				ok = false;
			else
				len = len * 10 + (uint64_t)(v[i] - '0');
		}
		o->have_length = ok;
		o->content_length = ok ? len : 0;
	} else if (header_is(buf, n, "x-amz-meta-sha256", &v, &vl)) {
		if (vl >= sizeof(o->meta_sha256))
			vl = sizeof(o->meta_sha256) - 1;
		memcpy(o->meta_sha256, v, vl);
		o->meta_sha256[vl] = '\0';
		o->has_meta_sha256 = true;
	} else if (header_is(buf, n, "etag", &v, &vl)) {
		if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
			v++;
			vl -= 2;
		}
		if (vl >= sizeof(o->etag))
			vl = sizeof(o->etag) - 1;
		memcpy(o->etag, v, vl);
		o->etag[vl] = '\0';
	}
	return n;
}

/* The text of <tag>...</tag> in body into out (size n), or "". */
void nrs_s3c_xml_value(const char *body, const char *tag, char *out,
		       size_t n)
{
	char open[40], close[40];
	const char *p, *e;
	size_t l;

	out[0] = '\0';
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	p = strstr(body, open);
	if (!p)
		return;
	p += strlen(open);
	e = strstr(p, close);
	if (!e)
		return;
	l = (size_t)(e - p);
	if (l >= n)
		l = n - 1;
	memcpy(out, p, l);
	out[l] = '\0';
	for (size_t i = 0; i < l; i++)	/* for log lines: printable only */
		if (!isprint((unsigned char)out[i]))
			out[i] = '?';
}

enum nrs_s3_net nrs_s3c_net_of(CURLcode rc)
{
	switch (rc) {
	case CURLE_OK:
		return NRS_S3_NET_OK;
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return NRS_S3_NET_REFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
		return NRS_S3_NET_RESOLVE;
	case CURLE_OPERATION_TIMEDOUT:
		return NRS_S3_NET_TIMEOUT;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
		return NRS_S3_NET_TLS;
	default:
		return NRS_S3_NET_OTHER;
	}
}

