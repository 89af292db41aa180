/* tsock-bench-gpu: the CUDA backend's figures, as JSON on stdout.
 *
 *   tsock-bench-gpu [--batches N] [--batch-size B] [--image S] [--device D]
 *
 *  - images/s delivered to 1 and to 4 consumer processes (each waits for every batch on its
 *    own stream and releases it stream-ordered; the producer fills staging with a byte pattern,
 *    so decoding is not part of the figure);
 *  - handoff round trip: publish of a one-image batch -> consumer next() -> stream-ordered
 *    release -> the producer sees the slot free (median and p99 over 500 batches);
 *  - host-to-device bandwidth the producer reached, next to a plain pinned cudaMemcpy of the
 *    same size on the same device (what the bus gives);
 *  - device memory in use after 50 and after N batches.
 *
 * Consumers are this program re-executed (CUDA IPC needs another process; CUDA does not
 * survive fork). Without a usable GPU it says so and exits 1. Never part of the test run.
 */
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tsock/tsock.h"

static int batches = 1000, batch_size = 128, image = 224, device = 0;

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pid_t
spawn(const char *endpoint, int count)
{
    char n[32];
    snprintf(n, sizeof n, "%d", count);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"tsock-bench-gpu", "--consume", (char *)endpoint, n, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* Consumer process: reads `count` batches, each waited for on its stream and released on it. */
static int
consume(const char *endpoint, int count)
{
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    if (tsock_consumer_start(c, 30000) < 0)
        return 1;
    cudaStream_t stream;
    cudaSetDevice(device);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (int i = 0; i < count; i++) {
        tsock_batch *b;
        if (tsock_consumer_next(c, 30000, &b) < 0)
            return 1;
        tsock_batch_wait(b, stream);
        tsock_consumer_release_on_stream(c, b, stream);
    }
    cudaStreamSynchronize(stream);
    tsock_consumer_destroy(c);
    return 0;
}

static tsock_producer *
producer(const char *endpoint, int samples_per_batch)
{
    tsock_layout *l;
    int64_t hwc[3] = {image, image, 3};
    tsock_layout_create(&l);
    tsock_layout_add(l, "image", TSOCK_UINT8, 3, hwc);
    tsock_producer *p;
    tsock_producer_create(&p, endpoint, l, (uint32_t)samples_per_batch, 8);
    tsock_layout_destroy(l);
    tsock_producer_set_device(p, device);
    int err = tsock_producer_start(p);
    if (err < 0) {
        fprintf(stderr, "tsock-bench-gpu: producer start: %s\n", tsock_strerror(err));
        exit(1);
    }
    return p;
}

static int
publish(tsock_producer *p, int samples, int fill)
{
    tsock_slot *s;
    int err = tsock_producer_acquire(p, 30000, &s);
    if (err == 0 && fill)
        memset(tsock_slot_data(s, 0), 0x5A, (size_t)samples * image * image * 3);
    return err ? err : tsock_producer_publish(p, s, (uint32_t)samples);
}

static size_t
used_bytes(void)
{
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return total - free_b;
}

/* Images per second to `consumers` consumers; also the producer-side H2D figure and memory. */
static void
throughput(const char *endpoint, int consumers, int first)
{
    pid_t kids[4];
    for (int i = 0; i < consumers; i++)
        kids[i] = spawn(endpoint, batches);
    tsock_producer *p = producer(endpoint, batch_size);
    tsock_producer_wait_consumers(p, consumers, 60000);
    size_t mem50 = 0;
    double t0 = now_s();
    for (int i = 0; i < batches; i++) {
        if (publish(p, batch_size, 0) < 0)
            exit(1);
        if (i == 50)
            mem50 = used_bytes();
    }
    for (int i = 0; i < consumers; i++)
        waitpid(kids[i], NULL, 0);
    double seconds = now_s() - t0;
    size_t mem_end = used_bytes();
    double bytes = (double)batches * batch_size * image * image * 3;
    printf("%s  \"consumers_%d\": {\"images_per_s\": %.0f, \"h2d_gb_per_s\": %.2f, "
           "\"device_mib_after_50\": %zu, \"device_mib_after_%d\": %zu}",
           first ? "" : ",\n", consumers, batches * (double)batch_size / seconds,
           bytes / seconds / 1e9, mem50 >> 20, batches, mem_end >> 20);
    tsock_producer_destroy(p);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Round trips of one-image batches to one consumer. */
static void
latency(const char *endpoint)
{
    enum { N = 500 };
    pid_t kid = spawn(endpoint, N);
    tsock_producer *p = producer(endpoint, 1);
    tsock_producer_wait_consumers(p, 1, 60000);
    static double rtt[N];
    for (int i = 0; i < N; i++) {
        double t0 = now_s();
        publish(p, 1, 1);
        uint64_t released = 0;
        while (tsock_producer_stat(p, -1, TSOCK_STAT_RELEASED, &released) == 0 &&
               released < (uint64_t)i + 1)
            sched_yield();
        rtt[i] = (now_s() - t0) * 1e6;
    }
    waitpid(kid, NULL, 0);
    qsort(rtt, N, sizeof rtt[0], cmp_double);
    printf(",\n  \"handoff_round_trip_us\": {\"median\": %.1f, \"p99\": %.1f}", rtt[N / 2],
           rtt[N * 99 / 100]);
    tsock_producer_destroy(p);
}

/* What the bus gives: pinned host to device, one batch at a time, on one stream. */
static void
bus(void)
{
    size_t bytes = (size_t)batch_size * image * image * 3;
    void *host, *dev;
    cudaSetDevice(device);
    cudaMallocHost(&host, bytes);
    cudaMalloc(&dev, bytes);
    cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    double t0 = now_s();
    for (int i = 0; i < 50; i++)
        cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    double seconds = now_s() - t0;
    printf(",\n  \"bus_h2d_gb_per_s\": %.2f", 50.0 * (double)bytes / seconds / 1e9);
    cudaFree(dev);
    cudaFreeHost(host);
}

int
main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--consume") == 0)
        return consume(argv[2], atoi(argv[3]));
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batches") == 0)
            batches = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch-size") == 0)
            batch_size = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--image") == 0)
            image = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--device") == 0)
            device = atoi(argv[i + 1]);
    }
    if (batches < 60 || batch_size < 1 || image < 1 || device < 0) {
        fprintf(stderr, "usage: %s [--batches N>=60] [--batch-size B] [--image S] [--device D]\n",
                argv[0]);
        return 2;
    }
    int devices = tsock_cuda_device_count();
    if (devices < 0) {
        fprintf(stderr, "tsock-bench-gpu: no usable CUDA device (%s): nothing to measure\n",
                tsock_strerror(devices));
        return 1;
    }
    char dir[] = "/tmp/tsock-bench-gpu-XXXXXX", endpoint[256];
    if (!mkdtemp(dir))
        return 1;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/bench.sock", dir);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    printf("{\n  \"device\": \"%s\", \"batch_size\": %d, \"image\": [%d, %d, 3], "
           "\"batches\": %d,\n",
           prop.name, batch_size, image, image, batches);
    throughput(endpoint, 1, 1);
    throughput(endpoint, 4, 0);
    latency(endpoint);
    bus();
    printf("\n}\n");
    return 0;
}
