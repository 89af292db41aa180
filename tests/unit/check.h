/* A minimal assertion helper for the C unit tests: each failed CHECK prints where and why and
 * makes the test exit non-zero at the end; ctest reads the exit status. */
#ifndef TSOCK_TEST_CHECK_H
#define TSOCK_TEST_CHECK_H

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Atomic: tests call CHECK from several threads. */
static atomic_int check_failures;
static atomic_int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        check_count++;                                                                             \
        if (check_a_ != check_b_) {                                                                \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__,          \
                    __LINE__, #a, check_a_, #b, check_b_);                                         \
        }                                                                                          \
    } while (0)

/* Ends main(): prints a summary and returns the exit status. */
#define CHECK_DONE()                                                                               \
    (printf("%d checks, %d failed\n", atomic_load(&check_count), atomic_load(&check_failures)),    \
     atomic_load(&check_failures) ? 1 : 0)

#endif
