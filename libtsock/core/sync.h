/* Mutexes and condition variables on the monotonic clock, with absolute deadlines, so that a
 * wall-clock jump never shortens or stretches a timeout. */
#ifndef TSOCK_SYNC_H
#define TSOCK_SYNC_H

#include <pthread.h>
#include <stdint.h>

#define TSOCK__NO_DEADLINE UINT64_MAX

void tsock__mutex_init(pthread_mutex_t *mu);
void tsock__cond_init(pthread_cond_t *cond);

/* The monotonic time `timeout_ms` from now; a negative timeout means never. */
uint64_t tsock__deadline(int timeout_ms);

/* Waits on cond (mu held) until signalled or the deadline passes. Returns 0 when signalled
 * (or spuriously woken), -ETIMEDOUT once the deadline has passed. */
int tsock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t deadline_ns);

#endif
