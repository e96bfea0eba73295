/*
 * waitms.h - a background thread's nap: wait on a condition variable for up
 * to ms milliseconds, or until its owner's stop flag (protected by the
 * same mutex) is set.  Returns the stop flag.  The condition variable uses
 * the default clock, CLOCK_REALTIME: a clock step makes one nap longer or
 * shorter, never a wait without end (the flag is checked under the lock
 * before waiting, and the stopper signals after setting it).
 */
#ifndef NRS_WAITMS_H
#define NRS_WAITMS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* The CLOCK_REALTIME time ms milliseconds from now, for a timed wait. */
static inline void nrs_deadline_ms(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static inline bool nrs_wait_ms(pthread_cond_t *cv, pthread_mutex_t *lock,
			       const bool *stop, uint64_t ms)
{
	struct timespec ts;
	bool s;

	nrs_deadline_ms(&ts, ms);
	pthread_mutex_lock(lock);
	if (!*stop)
		pthread_cond_timedwait(cv, lock, &ts);
	s = *stop;
	pthread_mutex_unlock(lock);
	return s;
}

#endif
