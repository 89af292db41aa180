/* Handoff benchmark: what the control channel costs when batches are tiny.
 *
 * One producer (this process) publishes 8-byte batches as fast as the ring allows to K
 * consumer processes (forked). Each batch carries the producer's monotonic clock at publish, so
 * a consumer measures the one-way handoff latency (publish -> its next() returns) as well as
 * the duration of each next() call and the batches/s it received. Prints one JSON object.
 *
 *   tsock-bench-handoff [--consumers 1,2,4] [--batches 20000] [--slots 8] [--repeat 3]
 *
 * Every configuration runs `repeat` times inside the same invocation; the JSON reports the
 * median of the runs, so the figures compare within one run on a shared, noisy machine.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tsock/tsock.h"

#define MAX_CONSUMERS 8
#define MAX_REPEAT 15

struct consumer_result {
    double batches_per_s;
    double next_p50_us, next_p99_us;
    double handoff_p50_us, handoff_p99_us;
    uint64_t batches;
    int error;
};

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double
percentile_us(uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    size_t i = (size_t)(q * (double)(n - 1));
    return (double)v[i] / 1000.0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A consumer process: receive `batches` batches, record latencies, write the result. */
static void
run_consumer(const char *endpoint, uint64_t batches, struct consumer_result *out)
{
    uint64_t *next_ns = calloc(batches, sizeof *next_ns);
    uint64_t *handoff_ns = calloc(batches, sizeof *handoff_ns);
    tsock_consumer *c = NULL;
    int err = tsock_consumer_create(&c, endpoint);
    if (!err)
        err = tsock_consumer_start(c, 10000);
    uint64_t got = 0, first = 0;
    while (!err && got < batches) {
        tsock_batch *b;
        uint64_t t0 = now_ns();
        err = tsock_consumer_next(c, 10000, &b);
        uint64_t t1 = now_ns();
        if (err)
            break;
        const uint64_t *stamp = tsock_batch_tensor_data(b, 0);
        next_ns[got] = t1 - t0;
        handoff_ns[got] = t1 - stamp[0];
        if (got++ == 0)
            first = t1;
        tsock_consumer_release(c, b);
    }
    double elapsed = (double)(now_ns() - first) / 1e9;
    out->batches = got;
    out->error = err;
    out->batches_per_s = got > 1 ? (double)(got - 1) / elapsed : 0;
    out->next_p50_us = percentile_us(next_ns, got, 0.50);
    out->next_p99_us = percentile_us(next_ns, got, 0.99);
    out->handoff_p50_us = percentile_us(handoff_ns, got, 0.50);
    out->handoff_p99_us = percentile_us(handoff_ns, got, 0.99);
    tsock_consumer_destroy(c);
    free(next_ns);
    free(handoff_ns);
}

static int
publish_all(tsock_producer *p, int consumers, uint64_t batches)
{
    int err = tsock_producer_wait_consumers(p, consumers, 20000);
    for (uint64_t i = 0; err >= 0 && i < batches; i++) {
        tsock_slot *slot;
        err = tsock_producer_acquire(p, 10000, &slot);
        if (err < 0)
            break;
        uint64_t stamp = now_ns();
        memcpy(tsock_slot_data(slot, 0), &stamp, sizeof stamp);
        err = tsock_producer_publish(p, slot, 1);
    }
    return err < 0 ? err : 0;
}

/* One run with `consumers` processes; fills results[0..consumers-1]. */
static int
run_once(int consumers, uint64_t batches, uint32_t slots, struct consumer_result *results)
{
    char dir[] = "/tmp/tsock-bench-XXXXXX", endpoint[128];
    if (!mkdtemp(dir))
        return -1;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/handoff.sock", dir);
    for (int i = 0; i < consumers; i++) {
        if (fork() == 0) {
            run_consumer(endpoint, batches, &results[i]);
            _exit(0);
        }
    }
    tsock_layout *layout;
    tsock_layout_create(&layout);
    tsock_layout_add(layout, "stamp", TSOCK_UINT64, 0, NULL);
    tsock_producer *p = NULL;
    int err = tsock_producer_create(&p, endpoint, layout, 1, slots);
    tsock_layout_destroy(layout);
    if (!err)
        err = tsock_producer_start(p);
    if (!err)
        err = publish_all(p, consumers, batches);
    for (int i = 0; i < consumers; i++)
        wait(NULL);
    tsock_producer_destroy(p);
    rmdir(dir);
    return err;
}

static void
print_config(int consumers, struct consumer_result runs[][MAX_CONSUMERS], int repeat)
{
    double rate[MAX_REPEAT], np50[MAX_REPEAT], np99[MAX_REPEAT], hp50[MAX_REPEAT], hp99[MAX_REPEAT];
    for (int r = 0; r < repeat; r++) {
        /* Per run: the slowest consumer's rate (the group's pace) and the worst percentiles. */
        rate[r] = runs[r][0].batches_per_s;
        np50[r] = np99[r] = hp50[r] = hp99[r] = 0;
        for (int i = 0; i < consumers; i++) {
            struct consumer_result *c = &runs[r][i];
            rate[r] = c->batches_per_s < rate[r] ? c->batches_per_s : rate[r];
            np50[r] = c->next_p50_us > np50[r] ? c->next_p50_us : np50[r];
            np99[r] = c->next_p99_us > np99[r] ? c->next_p99_us : np99[r];
            hp50[r] = c->handoff_p50_us > hp50[r] ? c->handoff_p50_us : hp50[r];
            hp99[r] = c->handoff_p99_us > hp99[r] ? c->handoff_p99_us : hp99[r];
        }
    }
    printf("    {\"consumers\": %d, \"batches_per_s_per_consumer\": %.0f, "
           "\"next_latency_us\": {\"p50\": %.1f, \"p99\": %.1f}, "
           "\"handoff_latency_us\": {\"p50\": %.1f, \"p99\": %.1f}}",
           consumers, median(rate, repeat), median(np50, repeat), median(np99, repeat),
           median(hp50, repeat), median(hp99, repeat));
}

int
main(int argc, char **argv)
{
    int counts[MAX_CONSUMERS] = {1, 2, 4}, ncounts = 3, repeat = 3;
    uint64_t batches = 20000;
    uint32_t slots = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batches") == 0)
            batches = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--slots") == 0)
            slots = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--consumers") == 0) {
            ncounts = 0;
            for (char *tok = strtok(argv[i + 1], ","); tok && ncounts < MAX_CONSUMERS;
                 tok = strtok(NULL, ","))
                counts[ncounts++] = atoi(tok);
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (batches < 10 || repeat < 1 || repeat > MAX_REPEAT || slots < 2) {
        fprintf(stderr, "need --batches >= 10, 1 <= --repeat <= %d, --slots >= 2\n", MAX_REPEAT);
        return 2;
    }
    struct consumer_result(*runs)[MAX_CONSUMERS] =
        mmap(NULL, sizeof(struct consumer_result) * MAX_CONSUMERS * MAX_REPEAT,
             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("{\"benchmark\": \"handoff\", \"batches\": %llu, \"slots\": %u, \"repeat\": %d, "
           "\"cpus\": %ld, \"results\": [\n",
           (unsigned long long)batches, slots, repeat, sysconf(_SC_NPROCESSORS_ONLN));
    int status = 0;
    for (int k = 0; k < ncounts; k++) {
        if (counts[k] < 1 || counts[k] > MAX_CONSUMERS)
            return 2;
        for (int r = 0; r < repeat; r++) {
            memset(runs[r], 0, sizeof runs[r]);
            if (run_once(counts[k], batches, slots, runs[r]) != 0)
                status = 1;
            for (int i = 0; i < counts[k]; i++)
                status |= runs[r][i].error != 0 || runs[r][i].batches != batches;
        }
        print_config(counts[k], runs, repeat);
        printf(k + 1 < ncounts ? ",\n" : "\n");
    }
    printf("  ], \"ok\": %s}\n", status ? "false" : "true");
    return status;
}
