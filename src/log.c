/*
 * log.c - formatting of log lines: "nereusfs[pid]: LEVEL: message" on
 * standard error (the journal under systemd, which runs us with -f), or to
 * syslog once the daemon has detached from its terminal.  Level names are
 * the words an operator greps for.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"

static int log_level = NRS_LOG_INFO;
static int use_syslog;
static const char *const level_names[] = { "error", "warning", "info", "debug" };

void nrs_log_set_level(int level)
{
	log_level = level;
}

void nrs_log_to_syslog(void)
{
	openlog("nereusfs", LOG_PID, LOG_DAEMON);
	use_syslog = 1;
}

void nrs_log(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n, m;

	if (level > log_level)
		return;
	if (level < NRS_LOG_ERR || level > NRS_LOG_DEBUG)
		level = NRS_LOG_ERR;
	if (use_syslog) {
		static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO,
					    LOG_DEBUG };

		va_start(ap, fmt);
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
		syslog(prio[level], "%s: %s", level_names[level], line);
		return;
	}
	n = snprintf(line, sizeof(line), "nereusfs[%ld]: %s: ", (long)getpid(),
		     level_names[level]);
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write keeps concurrent lines whole; a failed log write has
	 * nowhere to be reported. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
