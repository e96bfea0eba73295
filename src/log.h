/*
 * log.h - one-line log messages to standard error (and so to the journal
 * under systemd).  Thread safe; a message is written with one write(2).
 */
#ifndef NRS_LOG_H
#define NRS_LOG_H

enum nrs_log_level {
	NRS_LOG_ERR = 0,
	NRS_LOG_WARN = 1,
	NRS_LOG_INFO = 2,
	NRS_LOG_DEBUG = 3,
};

void nrs_log_set_level(int level);
/* From now on log to syslog (daemon facility) instead of standard error. */
void nrs_log_to_syslog(void);
void nrs_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define nrs_err(...)	nrs_log(NRS_LOG_ERR, __VA_ARGS__)
#define nrs_warn(...)	nrs_log(NRS_LOG_WARN, __VA_ARGS__)
#define nrs_info(...)	nrs_log(NRS_LOG_INFO, __VA_ARGS__)
#define nrs_debug(...)	nrs_log(NRS_LOG_DEBUG, __VA_ARGS__)

#endif
