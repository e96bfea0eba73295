/*
 * objstore_s3_v2tls.c - certificate verification for the requests libs3
 * makes on the V2 path of the S3 provider (objstore_s3_v2.c).
 *
 * libs3 2.0 turns certificate verification OFF: it sets
 * CURLOPT_SSL_VERIFYPEER to 0 on every request (seen by tracing its
 * curl_easy_setopt calls; its API has no way to change that, nor to name
 * a CA file).  https through it unchanged would encrypt but accept any
 * server.  So this file stands in for libcurl's curl_easy_setopt (see
 * TLS VERIFICATION below) and, for the requests objstore_s3_v2.c makes,
 * sets VERIFYPEER 1, VERIFYHOST 2 and, when opts->ca_file is given,
 * CURLOPT_CAINFO; otherwise the system's trust store is used (Debian's
 * libcurl-gnutls has no CA file of its own and asks GnuTLS, whose
 * default is /etc/ssl/certs/ca-certificates.crt).  A certificate that
 * does not verify, or names another host, fails the request with -EIO
 * (libs3's ServerFailedVerification), logged with curl's own message.
 *
 * TLS VERIFICATION
 *
 * libs3 calls libcurl's curl_easy_setopt through the PLT, so the definition
 * below, linked into the program, takes the place of libcurl's for it
 * (the way test_meta.c counts SQLite's fsyncs).  It passes every option on
 * to libcurl unchanged, by its type (long, pointer, function pointer,
 * curl_off_t: the type is the option number / 10000, curl's ABI), except
 * while this thread is starting one of our requests (between
 * nrs_s3v2_tls_begin() and nrs_s3v2_tls_end(): libs3 configures the curl
 * handle synchronously inside S3_put_object and friends, even with a
 * request context): then VERIFYPEER 0 becomes 1, and after CURLOPT_URL,
 * which libs3 sets on every request (it resets a reused handle first),
 * VERIFYPEER, VERIFYHOST, CAINFO and an error buffer are set.  Option
 * numbers are curl's, fixed since curl 7.0 (curl/curl.h): libcurl's
 * headers are not needed to build.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "obj/objstore_s3_priv.h"

/* libcurl's ABI (curl/curl.h) */
#define CURLOPT_SSL_VERIFYPEER	64
#define CURLOPT_SSL_VERIFYHOST	81
#define CURLOPT_URL		10002
#define CURLOPT_ERRORBUFFER	10010
#define CURLOPT_CAINFO		10065
#define CURLE_FAILED_INIT	2

/* The request libs3 is setting up in this thread: its CA file and error
 * buffer; setup_errbuf NULL: none. */
static __thread const char *setup_ca_file;
static __thread char *setup_errbuf;

void nrs_s3v2_tls_begin(const char *ca_file, char errbuf[CURL_ERROR_SIZE])
{
	setup_ca_file = ca_file;
	setup_errbuf = errbuf;
}

void nrs_s3v2_tls_end(void)
{
	setup_ca_file = NULL;
	setup_errbuf = NULL;
}

typedef int (*setopt_fn)(void *curl, int option, ...);
static setopt_fn real_setopt;
static pthread_once_t setopt_once = PTHREAD_ONCE_INIT;

static void setopt_resolve(void)
{
	real_setopt = (setopt_fn)dlsym(RTLD_NEXT, "curl_easy_setopt");
}

/* libcurl's curl_easy_setopt, for libs3 (TLS VERIFICATION above). */
int curl_easy_setopt(void *curl, int option, ...);
int curl_easy_setopt(void *curl, int option, ...)
{
	bool ours = setup_errbuf != NULL;
	va_list ap;
	int rc;

	pthread_once(&setopt_once, setopt_resolve);
	if (!real_setopt)
		return CURLE_FAILED_INIT;
	va_start(ap, option);
	switch (option / 10000) {
	case 0: {	/* long */
		long v = va_arg(ap, long);

		if (ours && option == CURLOPT_SSL_VERIFYPEER)
			v = 1;
		rc = real_setopt(curl, option, v);
		break;
	}
	case 2: {	/* function pointer */
		void (*f)(void) = va_arg(ap, void (*)(void));

		rc = real_setopt(curl, option, f);
		break;
	}
	case 3: {	/* curl_off_t, 64 bits */
		int64_t v = va_arg(ap, int64_t);

		rc = real_setopt(curl, option, v);
		break;
	}
	default: {	/* object or blob pointer */
		void *p = va_arg(ap, void *);

		rc = real_setopt(curl, option, p);
		break;
	}
	}
	va_end(ap);
	if (ours && option == CURLOPT_URL && rc == 0) {
		rc = real_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
		if (rc == 0)
			rc = real_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
		if (rc == 0 && setup_ca_file)
			rc = real_setopt(curl, CURLOPT_CAINFO, setup_ca_file);
		/* the buffer outlives every transfer of the handle that can
		 * write there: the next request resets the handle first. */
		if (rc == 0)
			rc = real_setopt(curl, CURLOPT_ERRORBUFFER, setup_errbuf);
	}
	return rc;
}
