/* Monotonic-clock waits. */
#include <errno.h>
#include <time.h>

#include "core/core.h"
#include "core/sync.h"

void
tsock__mutex_init(pthread_mutex_t *mu)
{
    pthread_mutex_init(mu, NULL);
}

void
tsock__cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

uint64_t
tsock__deadline(int timeout_ms)
{
    if (timeout_ms < 0)
        return TSOCK__NO_DEADLINE;
    return tsock__now_ns() + (uint64_t)timeout_ms * 1000000u;
}

int
tsock__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t deadline_ns)
{
    if (deadline_ns == TSOCK__NO_DEADLINE) {
        pthread_cond_wait(cond, mu);
        return 0;
    }
    if (tsock__now_ns() >= deadline_ns)
        return -ETIMEDOUT;
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    int err = pthread_cond_timedwait(cond, mu, &ts);
    return err == ETIMEDOUT ? -ETIMEDOUT : 0;
}
