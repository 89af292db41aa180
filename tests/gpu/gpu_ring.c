/* GPU tests of the CUDA backend: a producer with its ring on device 0 and consumers in other
 * processes (CUDA IPC cannot open a handle in the process that exported it, and CUDA does not
 * survive fork, so every other role is this program re-executed with a role argument).
 *
 *   gpu_ring content   1 producer, 4 consumers (one with a batch size that forces gathers in
 *                      device memory), 3 epochs: every byte checked after a copy back from the
 *                      device made on the consumer's stream, released stream-ordered before the
 *                      copy has finished; every epoch covers every sample once.
 *   gpu_ring convert   float16 NCHW ImageNet-normalised output: the device bytes equal the C
 *                      reference's (tsock__convert_ref) bit for bit.
 *   gpu_ring memory    1000 batches: device memory in use does not grow.
 *   gpu_ring death     the producer is killed with SIGKILL: the consumer fails with
 *                      TSOCK_E_PRODUCER_LOST and the ring's memory is returned to the device,
 *                      i.e. the consumer closed its IPC mapping.
 *
 * Without a usable GPU each case prints why and exits 77, which ctest reports as skipped.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/convert.h"
#include "core/layout.h"
#include "tsock/tsock.h"

#define SKIP 77
#define SAMPLES 1000
#define BATCH 32
#define SLOTS 8
#define WIDTH 64
#define EPOCHS 3
#define CONSUMERS 4

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond);                     \
        }                                                                                          \
    } while (0)

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void
log_line(void *user, int level, const char *message)
{
    fprintf(stderr, "[%d:%d] %s\n", (int)getpid(), level, message);
}

static uint8_t
pattern(uint64_t id, int j)
{
    return (uint8_t)(id * 7u + (uint64_t)j);
}

static tsock_layout *
make_layout(int hwc)
{
    tsock_layout *l;
    int64_t flat[1] = {WIDTH}, image[3] = {4, 8, 3};
    tsock_layout_create(&l);
    if (hwc)
        tsock_layout_add(l, "data", TSOCK_UINT8, 3, image);
    else
        tsock_layout_add(l, "data", TSOCK_UINT8, 1, flat);
    tsock_layout_add(l, "index", TSOCK_INT64, 0, NULL);
    return l;
}

static pid_t
spawn(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* ---- roles ------------------------------------------------------------------------------- */

/* Fills and publishes one slot: data[j] = pattern(id, j), index = id. */
static int
produce_one(tsock_producer *p, size_t sample_bytes)
{
    tsock_slot *s;
    int err = tsock_producer_acquire(p, 10000, &s);
    if (err < 0)
        return err;
    uint32_t n = tsock_slot_planned(s);
    const uint64_t *ids = tsock_slot_sample_ids(s);
    uint8_t *data = tsock_slot_data(s, 0);
    int64_t *index = tsock_slot_data(s, 1);
    for (uint32_t i = 0; i < n; i++) {
        for (size_t j = 0; j < sample_bytes; j++)
            data[i * sample_bytes + j] = pattern(ids[i], (int)j);
        index[i] = (int64_t)ids[i];
    }
    return tsock_producer_publish(p, s, n);
}

static tsock_producer *
start_producer(const char *endpoint, int hwc, uint64_t epochs, int convert, uint32_t slots)
{
    tsock_layout *l = make_layout(hwc);
    tsock_producer *p = NULL;
    if (tsock_producer_create(&p, endpoint, l, BATCH, slots) < 0)
        exit(1);
    tsock_layout_destroy(l);
    tsock_producer_set_device(p, 0);
    tsock_producer_set_heartbeat(p, 100, 1000);
    tsock_producer_set_sampler(p, SAMPLES, 11, epochs);
    if (convert) {
        tsock_producer_set_output(p, "data", TSOCK_FLOAT16, TSOCK_NCHW);
        tsock_producer_set_normalize(p, "data", 0, NULL, NULL);
    }
    int err = tsock_producer_start(p);
    if (err < 0) {
        fprintf(stderr, "producer start: %s\n", tsock_strerror(err));
        exit(1);
    }
    return p;
}

/* Copies a batch back on `stream`, releases it stream-ordered at once, then checks it. */
static int
check_batch(tsock_consumer *c, tsock_batch *b, cudaStream_t stream, uint8_t *host, int64_t *ids,
            uint8_t *seen)
{
    uint32_t n = tsock_batch_samples(b);
    EXPECT(tsock_batch_tensor_device(b, 0) == TSOCK_DEVICE_CUDA);
    EXPECT(tsock_batch_device_index(b) >= 0);
    EXPECT(tsock_batch_wait(b, stream) == 0);
    CUDA_OK(cudaMemcpyAsync(host, tsock_batch_tensor_data(b, 0), (size_t)n * WIDTH,
                            cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaMemcpyAsync(ids, tsock_batch_tensor_data(b, 1), (size_t)n * 8,
                            cudaMemcpyDeviceToHost, stream));
    EXPECT(tsock_consumer_release_on_stream(c, b, stream) == 0);
    CUDA_OK(cudaStreamSynchronize(stream));
    int bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= SAMPLES || seen[ids[i]]++) {
            bad++;
            continue;
        }
        for (int j = 0; j < WIDTH; j++)
            bad += host[(size_t)i * WIDTH + (size_t)j] != pattern((uint64_t)ids[i], j);
    }
    return bad;
}

/* Consumer process: reads until the stream ends; exit 0 when every epoch was exact and every
 * byte right. */
static int
consumer_main(const char *endpoint, uint32_t batch_size, long max_batches)
{
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_heartbeat(c, 100, 1000);
    tsock_consumer_set_batch_size(c, batch_size);
    int err = tsock_consumer_start(c, 20000);
    if (err < 0) {
        fprintf(stderr, "consumer start: %s\n", tsock_strerror(err));
        return 1;
    }
    cudaStream_t stream;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    uint8_t *host, seen[SAMPLES];
    int64_t *ids;
    CUDA_OK(cudaMallocHost((void **)&host, (size_t)BATCH * 2 * WIDTH));
    CUDA_OK(cudaMallocHost((void **)&ids, (size_t)BATCH * 2 * 8));
    long batches = 0, content_errors = 0, epochs = 0, samples_in_epoch = 0;
    memset(seen, 0, sizeof seen);
    tsock_batch *b;
    while ((max_batches < 0 || batches < max_batches) &&
           (err = tsock_consumer_next(c, 20000, &b)) == 0) {
        int end = tsock_batch_is_epoch_end(b);
        samples_in_epoch += tsock_batch_samples(b);
        content_errors += check_batch(c, b, stream, host, ids, seen);
        batches++;
        if (end) {
            EXPECT(samples_in_epoch == SAMPLES);
            samples_in_epoch = 0;
            memset(seen, 0, sizeof seen);
            epochs++;
        }
    }
    if (max_batches < 0)
        EXPECT(err == TSOCK_E_END && epochs == EPOCHS);
    printf("consumer %d (batch %u): %ld batches, %ld epochs, %ld content errors\n", (int)getpid(),
           batch_size, batches, epochs, content_errors);
    EXPECT(content_errors == 0);
    tsock_consumer_destroy(c);
    cudaStreamDestroy(stream);
    return failures ? 1 : 0;
}

/* Producer process for the death case: publishes until killed. */
static int
producer_main(const char *endpoint)
{
    /* 64 slots of 8 MiB: a ring large enough to see in the device's free memory. */
    tsock_layout *l;
    int64_t big[1] = {8 << 20};
    tsock_layout_create(&l);
    tsock_layout_add(l, "data", TSOCK_UINT8, 1, big);
    tsock_producer *p = NULL;
    tsock_producer_create(&p, endpoint, l, 1, 64);
    tsock_producer_set_device(p, 0);
    tsock_producer_set_heartbeat(p, 100, 1000);
    if (tsock_producer_start(p) < 0)
        return 1;
    tsock_producer_wait_consumers(p, 1, 20000);
    for (;;) {
        tsock_slot *s;
        if (tsock_producer_acquire(p, 10000, &s) == 0) {
            memset(tsock_slot_data(s, 0), 1, 64);
            tsock_producer_publish(p, s, 1);
        }
    }
}

/* ---- cases ------------------------------------------------------------------------------- */

static int
case_content(const char *endpoint)
{
    pid_t kids[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) {
        char *argv[] = {"gpu_ring",          "--consumer", (char *)endpoint,
                        i == 3 ? "24" : "0", "-1",         NULL};
        kids[i] = spawn(argv);
    }
    tsock_producer *p = start_producer(endpoint, 0, EPOCHS, 0, SLOTS);
    EXPECT(tsock_producer_wait_consumers(p, CONSUMERS, 30000) == CONSUMERS);
    int err;
    while ((err = produce_one(p, WIDTH)) == 0)
        ;
    EXPECT(err == TSOCK_E_END);
    tsock_producer_finish(p);
    for (int i = 0; i < CONSUMERS; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* Consumer process of the convert case: compares the device bytes of one batch with what the C
 * reference makes of the same input. */
static int
convert_consumer_main(const char *endpoint)
{
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    if (tsock_consumer_start(c, 20000) < 0)
        return 1;
    tsock_batch *b;
    int err = tsock_consumer_next(c, 20000, &b);
    if (err < 0)
        return 1;
    EXPECT(tsock_batch_tensor_dtype(b, 0) == TSOCK_FLOAT16);
    EXPECT(tsock_batch_tensor_dim(b, 0, 1) == 3 && tsock_batch_tensor_dim(b, 0, 2) == 4 &&
           tsock_batch_tensor_dim(b, 0, 3) == 8);
    uint32_t n = tsock_batch_samples(b);
    size_t bytes = tsock_batch_tensor_bytes(b, 0);
    uint16_t *got = malloc(bytes);
    int64_t ids[BATCH];
    EXPECT(tsock_batch_wait(b, NULL) == 0);
    CUDA_OK(cudaMemcpy(got, tsock_batch_tensor_data(b, 0), bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ids, tsock_batch_tensor_data(b, 1), n * 8, cudaMemcpyDeviceToHost));
    /* The same conversion on the CPU, from the bytes the producer wrote. */
    struct tsock__convert_request req = {.tensor = "data",
                                         .channels_first = 1,
                                         .normalize = 1,
                                         .dtype = TSOCK_FLOAT16,
                                         .channels = 3,
                                         .mean = {0.485f, 0.456f, 0.406f},
                                         .std = {0.229f, 0.224f, 0.225f}};
    tsock_layout *in = make_layout(1), out;
    size_t offsets[TSOCK_MAX_TENSORS], stride;
    struct tsock__convert_plan cv;
    EXPECT(tsock__convert_plan_make(&req, in, BATCH, &out, offsets, &stride, &cv) == 0);
    uint8_t *src = calloc(1, cv.in_offset[1] + 8 * BATCH), *want = calloc(1, stride);
    for (uint32_t i = 0; i < n; i++)
        for (int j = 0; j < 96; j++)
            src[i * 96 + (uint32_t)j] = pattern((uint64_t)ids[i], j);
    tsock__convert_ref(&cv, src, want, n);
    EXPECT(memcmp(want, got, bytes) == 0);
    tsock_consumer_release(c, b);
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

static int
case_convert(const char *endpoint)
{
    char *argv[] = {"gpu_ring", "--convert-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn(argv);
    tsock_producer *p = start_producer(endpoint, 1, 1, 1, SLOTS);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    for (int i = 0; i < 3; i++)
        EXPECT(produce_one(p, 96) == 0);
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

static size_t
used_bytes(void)
{
    size_t free_b = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total));
    return total - free_b;
}

static int
case_memory(const char *endpoint)
{
    char *argv[] = {"gpu_ring", "--consumer", (char *)endpoint, "0", "1050", NULL};
    pid_t kid = spawn(argv);
    tsock_producer *p = start_producer(endpoint, 0, 0, 0, SLOTS);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    size_t at_start = 0;
    for (int i = 0; i < 1050; i++) {
        EXPECT(produce_one(p, WIDTH) == 0);
        if (i == 50)
            at_start = used_bytes();
    }
    size_t at_end = used_bytes();
    printf("device memory in use: %zu MiB after 50 batches, %zu MiB after 1050\n", at_start >> 20,
           at_end >> 20);
    /* Growth beyond allocator granularity would be a leak per batch. */
    EXPECT(at_end <= at_start + (8u << 20));
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

static int
case_death(const char *endpoint)
{
    CUDA_OK(cudaSetDevice(0));
    size_t before = used_bytes();
    char *argv[] = {"gpu_ring", "--producer", (char *)endpoint, NULL};
    pid_t kid = spawn(argv);
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_heartbeat(c, 100, 1000);
    EXPECT(tsock_consumer_start(c, 30000) == 0);
    tsock_batch *b;
    for (int i = 0; i < 20; i++) {
        EXPECT(tsock_consumer_next(c, 10000, &b) == 0);
        tsock_batch_wait(b, NULL);
        tsock_consumer_release(c, b);
    }
    size_t during = used_bytes();
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    int err;
    while ((err = tsock_consumer_next(c, 10000, &b)) == 0)
        tsock_consumer_release(c, b);
    EXPECT(err == TSOCK_E_PRODUCER_LOST);
    /* The consumer closes the ring once nothing refers to it; the driver then frees it. */
    size_t after = used_bytes();
    for (int i = 0; i < 100 && after > before + (64u << 20); i++) {
        usleep(100000);
        after = used_bytes();
    }
    printf("device memory in use: %zu MiB before, %zu MiB with the ring, %zu MiB after the "
           "producer's death\n",
           before >> 20, during >> 20, after >> 20);
    EXPECT(during >= before + (256u << 20)); /* the 512 MiB ring was visible */
    EXPECT(after <= before + (64u << 20));
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

int
main(int argc, char **argv)
{
    tsock_set_log(log_line, NULL, TSOCK_LOG_WARN);
    if (argc == 5 && strcmp(argv[1], "--consumer") == 0)
        return consumer_main(argv[2], (uint32_t)atoi(argv[3]), atol(argv[4]));
    if (argc == 3 && strcmp(argv[1], "--producer") == 0)
        return producer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--convert-consumer") == 0)
        return convert_consumer_main(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "usage: %s content|convert|memory|death\n", argv[0]);
        return 2;
    }
    int devices = tsock_cuda_device_count();
    if (devices < 0) {
        printf("SKIP: no usable CUDA device (%s); the GPU tests need one\n",
               tsock_strerror(devices));
        return SKIP;
    }
    char dir[] = "/tmp/tsock-gpu-XXXXXX", endpoint[256];
    if (!mkdtemp(dir))
        return 1;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, argv[1]);
    if (strcmp(argv[1], "content") == 0)
        return case_content(endpoint);
    if (strcmp(argv[1], "convert") == 0)
        return case_convert(endpoint);
    if (strcmp(argv[1], "memory") == 0)
        return case_memory(endpoint);
    if (strcmp(argv[1], "death") == 0)
        return case_death(endpoint);
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
