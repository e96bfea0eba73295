/*
 * log.c - formatting of log lines: "nereusfs[pid]: LEVEL: message" on
 * standard error (the journal under systemd, which runs us with -f), or to
 * syslog once the daemon has detached from its terminal.  Level names are
 * the words an operator greps for.
 *
 *  LG3 A daemon about to detach logs to both.  Without -f, what is logged
 *      before the daemon detaches -- the recovery's progress (RP1,
 *      wal_object_scan.c), why a start failed -- goes to the terminal
 *      that started it and to syslog (nrs_log_to_syslog(true)), so that
 *      the log of a daemon holds its whole start, not only what came after
 *      the mount; once detached, to syslog alone (main.c).
 *
 * Much of what is logged comes from unprivileged users (names, xattr
 * names and values, the requests they make), so two rules hold for every
 * line, whoever calls:
 *
 *  LG1 One message is one line: every byte of the formatted message below
 *      0x20, 0x7f and above (control characters, and UTF-8 or any other
 *      non-ASCII byte) is written as \xNN, a backslash as \\.  A name
 *      holding a newline cannot forge a second line, nor an escape
 *      sequence drive the operator's terminal.
 *  LG2 One call site (its format string, compared by address) writes at
 *      most NRS_LOG_BURST lines in a window of NRS_LOG_WINDOW_S seconds; the rest
 *      are counted, and one line "... N more in the last 10 s: <the last
 *      of them>" says so when the window is over (at the next message of
 *      that site, at nrs_log_flush(), or when its slot is needed for
 *      another site).  20,000 bad setxattr calls, or a full disk refusing
 *      every append, cost a few lines, not one each.
 *
 * Thread safe: the rate table is under one mutex, held only to update it,
 * never across a write; a line is written with one write(2) (or one
 * syslog(3)) so concurrent lines stay whole.  No allocation.
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

#define LOG_MSG_MAX	1024		/* a formatted message, before LG1 */
#define LOG_LINE_MAX	(4 * LOG_MSG_MAX + 128)
#define LOG_SITES	256		/* call sites tracked at once (LG2): more
					 * than the daemon has */
#define LOG_LAST_MAX	256		/* kept of a suppressed message */

static int log_level = NRS_LOG_INFO;
static int use_syslog;
static int keep_stderr = 1;	/* LG3: also on standard error */
static const char *const level_names[] = { "error", "warning", "info", "debug" };

/* LG2: one call site's window.  All protected by rate_lock. */
struct site {
	const char *fmt;		/* NULL: free */
	int level;
	int64_t since_ns;		/* the window's start (monotonic) */
	unsigned int lines;		/* written in this window */
	uint64_t more;			/* suppressed in this window */
	char last[LOG_LAST_MAX];	/* the last suppressed message */
};

static pthread_mutex_t rate_lock = PTHREAD_MUTEX_INITIALIZER;
static struct site sites[LOG_SITES];	/* protected by rate_lock */

void nrs_log_set_level(int level)
{
	log_level = level;
}

void nrs_log_to_syslog(bool also_stderr)
{
	if (!use_syslog)
		openlog("nereusfs", LOG_PID, LOG_DAEMON);
	keep_stderr = also_stderr;
	use_syslog = 1;
}

size_t nrs_log_escape(char *out, size_t size, const char *in)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	if (size == 0)
		return 0;
	for (; *in; in++) {
		unsigned char ch = (unsigned char)*in;
		size_t need = ch < 0x20 || ch >= 0x7f ? 4 : ch == '\\' ? 2 : 1;

		if (n + need >= size)
			break;		/* cut before an escape, never inside */
		if (need == 4) {	/* LG1 */
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		} else if (need == 2) {
			out[n++] = '\\';
			out[n++] = '\\';
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n] = '\0';
	return n;
}

/* Write one already formatted message (raw: LG1 is applied here). */
static void emit(int level, const char *prefix, const char *msg)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char line[LOG_LINE_MAX];
	int n;
	size_t len;

	if (use_syslog) {
		nrs_log_escape(line, sizeof(line), msg);
		syslog(prio[level], "%s: %s%s", level_names[level], prefix, line);
		if (!keep_stderr)	/* LG3 */
			return;
	}
	n = snprintf(line, sizeof(line), "nereusfs[%ld]: %s: %s", (long)getpid(),
		     level_names[level], prefix);
	if (n < 0 || (size_t)n >= sizeof(line) - 1)
		return;
	len = (size_t)n;
	len += nrs_log_escape(line + len, sizeof(line) - len - 1, msg);
	line[len++] = '\n';
	/* A failed log write has nowhere to be reported. */
	if (write(STDERR_FILENO, line, len) < 0)
		return;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A summary of site s's suppressed lines, copied out so that it can be
 * written after rate_lock is released; resets the count.  Under rate_lock. */
struct summary {
	int level;
	uint64_t more;
	char prefix[64];
	char last[LOG_LAST_MAX];
};

static bool take_summary(struct site *s, struct summary *out)
{
	if (!s->fmt || s->more == 0)
		return false;
	out->level = s->level;
	out->more = s->more;
	snprintf(out->prefix, sizeof(out->prefix),
		 "... %llu more in the last %d s: ", (unsigned long long)s->more,
		 NRS_LOG_WINDOW_S);
	memcpy(out->last, s->last, sizeof(out->last));
	s->more = 0;
	return true;
}

static void write_summary(const struct summary *sm)
{
	emit(sm->level, sm->prefix, sm->last);
}

/* LG2: may this call of site fmt write its line?  Otherwise the message
 * is kept as the site's last.  *sm is set (return of *have) when a summary
 * of an earlier window is due first. */
static bool rate_ok(const char *fmt, int level, const char *msg,
		    struct summary *sm, bool *have)
{
	int64_t now = mono_ns();
	struct site *s = NULL, *oldest = &sites[0];
	bool ok;

	*have = false;
	pthread_mutex_lock(&rate_lock);
	for (int i = 0; i < LOG_SITES; i++) {
		if (sites[i].fmt == fmt) {
			s = &sites[i];
			break;
		}
		if (!sites[i].fmt || (oldest->fmt &&
				      sites[i].since_ns < oldest->since_ns))
			oldest = &sites[i];
	}
	if (!s) {			/* a new site takes a free or the oldest slot */
		*have = take_summary(oldest, sm);
		s = oldest;
		s->fmt = fmt;
		s->since_ns = now;
		s->lines = 0;
	} else if (now - s->since_ns >= (int64_t)NRS_LOG_WINDOW_S * 1000000000) {
		*have = take_summary(s, sm);
		s->since_ns = now;
		s->lines = 0;
	}
	s->level = level;
	ok = s->lines < NRS_LOG_BURST;
	if (ok) {
		s->lines++;
	} else {
		s->more++;
		snprintf(s->last, sizeof(s->last), "%s", msg);
	}
	pthread_mutex_unlock(&rate_lock);
	return ok;
}

void nrs_log_flush(bool all)
{
	int64_t now = mono_ns();

	for (int i = 0; i < LOG_SITES; i++) {
		struct summary sm;
		bool have = false;

		pthread_mutex_lock(&rate_lock);
		if (sites[i].fmt && (all || now - sites[i].since_ns >=
				     (int64_t)NRS_LOG_WINDOW_S * 1000000000))
			have = take_summary(&sites[i], &sm);
		pthread_mutex_unlock(&rate_lock);
		if (have)
			write_summary(&sm);
	}
}

void nrs_log(int level, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX];
	struct summary sm;
	bool have, ok;
	va_list ap;

	if (level > log_level)
		return;
	if (level < NRS_LOG_ERR || level > NRS_LOG_DEBUG)
		level = NRS_LOG_ERR;
	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
		msg[0] = '\0';
	va_end(ap);
	ok = rate_ok(fmt, level, msg, &sm, &have);
	if (have)
		write_summary(&sm);
	if (ok)
		emit(level, "", msg);
}
