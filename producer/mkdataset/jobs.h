/* What tsock-mkdataset's pools of writer threads share: the first error, which stops them all,
 * and writing a file whole. */
#ifndef TSOCK_MKDATASET_JOBS_H
#define TSOCK_MKDATASET_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The first error of a pool: the first thread to fail writes its message; the others see
 * `failed` and stop taking work. */
struct first_error {
    pthread_mutex_t lock;
    atomic_int failed;
    char text[1024];
};

void first_error_init(struct first_error *e);
void first_error_destroy(struct first_error *e);
/* Records the message unless an earlier one was recorded. */
void first_error_set(struct first_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int first_error_seen(struct first_error *e);

/* Writes n bytes to path (created or truncated); on any error removes the file, so that a
 * full disk leaves no partial file, and writes the reason to err. Returns 0 or -1. */
int write_whole(const char *path, const uint8_t *p, size_t n, char *err, size_t err_size);

#endif
