/*
 * log.h - one-line log messages to standard error (and so to the journal
 * under systemd), or syslog once the daemon detached (log.c LG3).  Thread safe; a message is written with one write(2).
 * Every message is escaped (control and non-ASCII bytes as \xNN) and each
 * call site is rate-limited (log.c LG1, LG2).
 */
#ifndef NRS_LOG_H
#define NRS_LOG_H

#include <stdbool.h>
#include <stddef.h>

/* LG2: lines one call site writes per window; the rest are summed up. */
#define NRS_LOG_BURST		10
#define NRS_LOG_WINDOW_S	10

enum nrs_log_level {
	NRS_LOG_ERR = 0,
	NRS_LOG_WARN = 1,
	NRS_LOG_INFO = 2,
	NRS_LOG_DEBUG = 3,
};

void nrs_log_set_level(int level);
/* From now on log to syslog (daemon facility), and also to standard error
 * if also_stderr (log.c LG3: a daemon that has not detached yet); may be
 * called again to change also_stderr. */
void nrs_log_to_syslog(bool also_stderr);
/* fmt must be a string that lives as long as the process (a literal):
 * its address names the call site (LG2). */
void nrs_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* LG2: write the "... N more" line of every call site whose window is
 * over (all: of every call site, at exit).  Called by a background tick. */
void nrs_log_flush(bool all);
/* LG1: in, escaped, into out (size > 0; always terminated, cut before an
 * escape that does not fit).  Returns the length written. */
size_t nrs_log_escape(char *out, size_t size, const char *in);

#define nrs_err(...)	nrs_log(NRS_LOG_ERR, __VA_ARGS__)
#define nrs_warn(...)	nrs_log(NRS_LOG_WARN, __VA_ARGS__)
#define nrs_info(...)	nrs_log(NRS_LOG_INFO, __VA_ARGS__)
#define nrs_debug(...)	nrs_log(NRS_LOG_DEBUG, __VA_ARGS__)

#endif
