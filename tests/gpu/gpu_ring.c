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
 * Cases for the defects of issue 12 (they need the simulated device's controls):
 *   gpu_ring capture   item 1: consumers whose process captures a CUDA graph in global mode
 *                      (queries from threads not in relaxed mode fail): releases still wait for
 *                      their fences, every byte right, no slot refilled under a reader.
 *   gpu_ring stall     item 2: the producer's device stops with work queued, then the producer
 *                      is killed: every batch announced had its copy completed (the consumer's
 *                      stream never waits on an event that cannot complete), and the consumer
 *                      reports TSOCK_E_PRODUCER_LOST.
 *   gpu_ring guard     item 11: ring on device 1 of 2, gathers included: the consumer never
 *                      makes a context on device 0.
 *   gpu_ring envfail   item 10: each environment failure gives its own code and message.
 *
 * Issue 22: gpu_ring leave   a consumer that stops calling next mid-epoch is paused by the
 *                      library on a GPU ring too: another consumer reads two epochs meanwhile,
 *                      and the first one's epoch then holds exactly the samples it lacked.
 *
 * Issue 20: capture also runs a gathering consumer whose reading thread did not relax its
 * capture mode (tsock's own synchronous calls on it must be: the gather's waits, its buffers'
 * cudaMalloc/cudaFree, closing); gpu_ring sim_rules checks that the simulated device catches
 * each rule it learned (a write under a queued read of this process, unmapping memory queued
 * work uses, a full check table, per-stream capture) and no longer blames a read that waits
 * for an event recorded after the write.
 * content also checks item 13 (no spinning waits in the producer) and convert item 12 (a stale
 * launch error left by someone else does not fail a publish) on the simulated device.
 *
 * Every CUDA call goes through the backend's device API (devapi.h), so with TSOCK_CUDA_SIM=1
 * the same cases run on the simulated device. On a GPU a case skips (prints SKIP, exits 77)
 * only when no CUDA device exists; any other failure to use one fails it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/convert.h"
#include "backend/cuda/devapi.h"
#include "backend/cuda/devapi_sim.h"
#include "core/layout.h"
#include "gpu_leftovers.h"
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

#define DEV (tsock__dev())
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        if (e_ != TSOCK__DEV_OK) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                          \
                    DEV->error_text(DEV->last_raw()));                                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A synchronous copy back to the host, on the default stream. */
static void
copy_back(void *dst, const void *src, size_t bytes)
{
    CUDA_OK(DEV->memcpy_async(dst, src, bytes, TSOCK__DEV_D2H, NULL));
    CUDA_OK(DEV->stream_sync(NULL));
}

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

/* The device the ring lives on: 0, or GPU_RING_DEVICE (the guard case uses device 1 of 2). */
static int
ring_device(void)
{
    const char *v = getenv("GPU_RING_DEVICE");
    return v ? atoi(v) : 0;
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
        /* A child outliving an aborted test would hold ctest's output pipe open (issue 20's
         * review, section 2): it dies with the test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* ---- roles ------------------------------------------------------------------------------- */

/* Time bounds, times TSOCK_TEST_TIME_SCALE (default 1): under compute-sanitizer every CUDA
 * call is many times slower, and a heartbeat timeout meant for a normal run declares a healthy
 * peer lost (gpu-check.sh sets 20 there). */
static int
scaled(int ms)
{
    const char *v = getenv("TSOCK_TEST_TIME_SCALE");
    int k = v ? atoi(v) : 1;
    return k > 1 && k < 1000 ? ms * k : ms;
}

/* Fills and publishes one slot: data[j] = pattern(id, j), index = id. */
static int
produce_one(tsock_producer *p, size_t sample_bytes)
{
    tsock_slot *s;
    int err = tsock_producer_acquire(p, scaled(10000), &s);
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
    tsock_producer_set_device(p, ring_device());
    tsock_producer_set_heartbeat(p, 100, scaled(5000));
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

/* The guard case (item 11) calls tsock with no CUDA context current on the thread, so any
 * tsock call without a device guard makes one on device 0; the test's own calls get the
 * ring's device made current around them (on: 1) and dropped after (on: 0). */
static int guard_mode;
/* The capture case's gathering consumer: only the test's own calls relax the capture mode. */
static int capture_own_calls, capture_previous, capture_relaxed;

static void
own_calls(int on)
{
    if (capture_own_calls && on && !capture_relaxed)
        capture_relaxed = DEV->capture_relax(&capture_previous) == TSOCK__DEV_OK;
    else if (capture_own_calls && !on && capture_relaxed) {
        DEV->capture_restore(capture_previous);
        capture_relaxed = 0;
    }
    if (!guard_mode)
        return;
    if (on)
        CUDA_OK(DEV->set_device(ring_device()));
    else
        DEV->context_set(NULL);
}

/* Copies a batch back on `stream`, releases it stream-ordered at once, then checks it. */
static int
check_batch(tsock_consumer *c, tsock_batch *b, tsock__dev_stream_t stream, uint8_t *host,
            int64_t *ids, uint8_t *seen)
{
    uint32_t n = tsock_batch_samples(b);
    EXPECT(tsock_batch_tensor_device(b, 0) == TSOCK_DEVICE_CUDA);
    EXPECT(tsock_batch_device_index(b) >= 0);
    EXPECT(tsock_batch_wait(b, stream) == 0);
    own_calls(1);
    CUDA_OK(DEV->memcpy_async(host, tsock_batch_tensor_data(b, 0), (size_t)n * WIDTH,
                              TSOCK__DEV_D2H, stream));
    CUDA_OK(DEV->memcpy_async(ids, tsock_batch_tensor_data(b, 1), (size_t)n * 8, TSOCK__DEV_D2H,
                              stream));
    own_calls(0);
    EXPECT(tsock_consumer_release_on_stream(c, b, stream) == 0);
    own_calls(1);
    CUDA_OK(DEV->stream_sync(stream));
    own_calls(0);
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

/* The leave case's roles (consumer_main): stop reading after `leave_after` batches until the
 * file `leave_until` exists; stop after `stop_epochs` epochs (0: at the stream's end), then
 * create the file `done_file`. */
static long leave_after;
static const char *leave_until, *done_file;
static long stop_epochs;

/* A consumer's epoch grace: long, except in the leave case. The other cases read a finite
 * stream and are not about leaving: a loaded sanitizer run can make a step slow enough for the
 * library to pause the consumer (consumer_leave.c), and one paused just when the stream ends
 * is not waited for (docs/semantics.md, "When a finite stream ends"). */
static int consumer_grace_ms = 30000;

/* Waits (bounded: 60 s) for a file another process creates; 1 when it exists. */
static int
wait_file(const char *path)
{
    for (int i = 0; i < 6000; i++) {
        if (access(path, F_OK) == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* Consumer process: reads until the stream ends; exit 0 when every epoch was exact and every
 * byte right. */
static int
consumer_main(const char *endpoint, uint32_t batch_size, long max_batches)
{
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_heartbeat(c, 100, scaled(5000));
    tsock_consumer_set_batch_size(c, batch_size);
    tsock_consumer_set_epoch_grace(c, consumer_grace_ms);
    int err = tsock_consumer_start(c, scaled(20000));
    if (err < 0) {
        fprintf(stderr, "consumer start: %s\n", tsock_strerror(err));
        return 1;
    }
    tsock__dev_stream_t stream;
    own_calls(1);
    CUDA_OK(DEV->set_device(ring_device()));
    CUDA_OK(DEV->stream_create(&stream));
    uint8_t *host, seen[SAMPLES];
    int64_t *ids;
    CUDA_OK(DEV->host_alloc((void **)&host, (size_t)BATCH * 2 * WIDTH));
    CUDA_OK(DEV->host_alloc((void **)&ids, (size_t)BATCH * 2 * 8));
    guard_mode = getenv("GPU_RING_NO_CONTEXT_ON_0") != NULL;
    own_calls(0);
    long batches = 0, content_errors = 0, epochs = 0, samples_in_epoch = 0;
    memset(seen, 0, sizeof seen);
    tsock_batch *b;
    while ((max_batches < 0 || batches < max_batches) && (!stop_epochs || epochs < stop_epochs) &&
           (err = tsock_consumer_next(c, scaled(20000), &b)) == 0) {
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
        if (leave_until && batches == leave_after) /* stops calling next meanwhile */
            EXPECT(wait_file(leave_until));
    }
    if (stop_epochs) {
        EXPECT(err == 0 && epochs == stop_epochs);
        max_batches = batches; /* not read to the stream's end */
    }
    if (done_file)
        fclose(fopen(done_file, "w"));
    if (max_batches < 0 && err != TSOCK_E_END)
        fprintf(stderr, "consumer %d: the stream ended with %s\n", (int)getpid(),
                tsock_strerror(err));
    if (max_batches < 0)
        EXPECT(err == TSOCK_E_END && epochs == EPOCHS);
    printf("consumer %d (batch %u): %ld batches, %ld epochs, %ld content errors\n", (int)getpid(),
           batch_size, batches, epochs, content_errors);
    EXPECT(content_errors == 0);
    tsock_consumer_destroy(c);
    own_calls(1);
    DEV->stream_destroy(stream);
    DEV->host_free(host);
    DEV->host_free(ids);
    if (getenv("GPU_RING_NO_CONTEXT_ON_0") && tsock__dev_simulated())
        EXPECT((tsock__dev_sim_contexts() & 1u) == 0); /* item 11 */
    return failures ? 1 : 0;
}

/* Producer process for the death case: publishes until killed. */
static int
producer_main(const char *endpoint)
{
    /* 64 slots of 8 MiB: a ring large enough to see in the device's free memory (1 MiB on the
     * simulated device, whose memory is this machine's). */
    tsock_layout *l;
    int64_t big[1] = {tsock__dev_simulated() ? 1 << 20 : 8 << 20};
    tsock_layout_create(&l);
    tsock_layout_add(l, "data", TSOCK_UINT8, 1, big);
    tsock_producer *p = NULL;
    tsock_producer_create(&p, endpoint, l, 1, 64);
    tsock_producer_set_device(p, 0);
    tsock_producer_set_heartbeat(p, 100, scaled(5000));
    if (tsock_producer_start(p) < 0)
        return 1;
    tsock_producer_wait_consumers(p, 1, scaled(20000));
    for (;;) {
        tsock_slot *s;
        if (tsock_producer_acquire(p, scaled(10000), &s) == 0) {
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
    EXPECT(tsock_producer_wait_consumers(p, CONSUMERS, scaled(30000)) == CONSUMERS);
    int err;
    while ((err = produce_one(p, WIDTH)) == 0)
        ;
    EXPECT(err == TSOCK_E_END);
    /* Item 13: the producer's waits for its copies sleep (BlockingSync), never spin. */
    if (tsock__dev_simulated())
        EXPECT(tsock__dev_sim_spin_waits() == 0);
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
    if (tsock_consumer_start(c, scaled(20000)) < 0)
        return 1;
    tsock_batch *b;
    int err = tsock_consumer_next(c, scaled(20000), &b);
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
    copy_back(got, tsock_batch_tensor_data(b, 0), bytes);
    copy_back(ids, tsock_batch_tensor_data(b, 1), n * 8);
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
    free(got);
    free(src);
    free(want);
    tsock_layout_destroy(in);
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
    EXPECT(tsock_producer_wait_consumers(p, 1, scaled(30000)) == 1);
    /* Item 12: another user of the runtime left a launch error behind; the publish clears it. */
    if (tsock__dev_simulated())
        tsock__dev_sim_set_stale_error();
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
    CUDA_OK(DEV->mem_info(&free_b, &total));
    return total - free_b;
}

static int
case_memory(const char *endpoint)
{
    char *argv[] = {"gpu_ring", "--consumer", (char *)endpoint, "0", "1050", NULL};
    pid_t kid = spawn(argv);
    tsock_producer *p = start_producer(endpoint, 0, 0, 0, SLOTS);
    EXPECT(tsock_producer_wait_consumers(p, 1, scaled(30000)) == 1);
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
    CUDA_OK(DEV->set_device(0));
    size_t before = used_bytes();
    char *argv[] = {"gpu_ring", "--producer", (char *)endpoint, NULL};
    pid_t kid = spawn(argv);
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_heartbeat(c, 100, scaled(5000));
    EXPECT(tsock_consumer_start(c, scaled(30000)) == 0);
    tsock_batch *b;
    for (int i = 0; i < 20; i++) {
        EXPECT(tsock_consumer_next(c, scaled(10000), &b) == 0);
        tsock_batch_wait(b, NULL);
        tsock_consumer_release(c, b);
    }
    size_t during = used_bytes();
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    int err;
    while ((err = tsock_consumer_next(c, scaled(10000), &b)) == 0)
        tsock_consumer_release(c, b);
    EXPECT(err == TSOCK_E_PRODUCER_LOST);
    /* The consumer closes the ring once nothing refers to it; the driver then frees it. */
    size_t after = used_bytes();
    for (int i = 0; i < 100 && after > before + (tsock__dev_simulated() ? 8u << 20 : 64u << 20);
         i++) {
        usleep(100000);
        after = used_bytes();
    }
    printf("device memory in use: %zu MiB before, %zu MiB with the ring, %zu MiB after the "
           "producer's death\n",
           before >> 20, during >> 20, after >> 20);
    size_t ring = tsock__dev_simulated() ? (size_t)64 << 20 : (size_t)512 << 20;
    EXPECT(during >= before + ring / 2); /* the ring was visible */
    EXPECT(after <= before + ring / 8);
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

/* ---- cases for issue 12's defects ---------------------------------------------------------- */

static pid_t
spawn_env(char *const argv[], const char *const env[])
{
    pid_t pid = fork();
    if (pid == 0) {
        /* A child outliving an aborted test would hold ctest's output pipe open (issue 20's
         * review, section 2): it dies with the test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 0; env[i]; i += 2)
            setenv(env[i], env[i + 1], 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* Consumer process of the capture case: its process captures a graph in global mode; only its
 * own (main) thread relaxed its mode, as a training loop outside the capture would. */
static int
capture_consumer_main(const char *endpoint)
{
    tsock__dev_sim_set_global_capture(1);
    int mode;
    CUDA_OK(DEV->capture_relax(&mode));
    return consumer_main(endpoint, 0, -1);
}

/* Issue 20: a gathering consumer (batch 24) whose reading thread keeps the global mode: only
 * the test's own calls relax it, so tsock's synchronous calls on that thread must do so too. */
static int
capture_gather_consumer_main(const char *endpoint)
{
    tsock__dev_sim_set_global_capture(1);
    capture_own_calls = 1;
    return consumer_main(endpoint, 24, -1);
}

static int
wait_children(pid_t *kids, int n)
{
    for (int i = 0; i < n; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failures;
}

/* Item 1: see the top of the file. A release counted as passed on a capture error lets the
 * producer refill a slot under a queued read: the simulator aborts the producer there. */
static int
case_capture(const char *endpoint)
{
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        char *argv[] = {"gpu_ring", i ? "--capture-gather-consumer" : "--capture-consumer",
                        (char *)endpoint, NULL};
        kids[i] = spawn(argv);
    }
    tsock_producer *p = start_producer(endpoint, 0, EPOCHS, 0, 2);
    EXPECT(tsock_producer_wait_consumers(p, 2, scaled(30000)) == 2);
    int err;
    while ((err = produce_one(p, WIDTH)) == 0)
        ;
    EXPECT(err == TSOCK_E_END);
    tsock_producer_finish(p);
    wait_children(kids, 2);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* The leave case (issue 22, docs/semantics.md "Leaving an epoch early", on a GPU ring): A
 * reads 3 batches and stops calling next without a word; B reads two whole epochs meanwhile
 * (A's queued batches would hold every slot: the library pauses A after its epoch grace);
 * then A's epoch goes on with exactly the samples it lacked, and a second exact epoch
 * follows. Run twice: A viewing the slots (its releases stream-ordered), then A gathering
 * (batches of 24). */
static int
case_leave(const char *dir, const char *endpoint, const char *batch)
{
    char b_done[300], a_done[300];
    snprintf(b_done, sizeof b_done, "%s/b-done-%s", dir, batch);
    snprintf(a_done, sizeof a_done, "%s/a-done-%s", dir, batch);
    tsock_producer *p = start_producer(endpoint, 0, 0, 0, SLOTS);
    char *a_argv[] = {
        "gpu_ring", "--leave-consumer", (char *)endpoint, (char *)batch, b_done, a_done, NULL};
    pid_t a = spawn(a_argv);
    EXPECT(tsock_producer_wait_consumers(p, 1, scaled(30000)) == 1);
    char *b_argv[] = {"gpu_ring", "--steady-consumer", (char *)endpoint, b_done, NULL};
    pid_t b = spawn(b_argv);
    /* Endless epochs: publish until A is done, for whoever would receive a batch (nobody
     * while A is paused and B is gone). */
    while (access(a_done, F_OK) != 0) {
        if (tsock_producer_wait_consumers(p, 1, 100) < 1) {
            if (waitpid(a, NULL, WNOHANG) == a) { /* A failed before its end */
                a = -1;
                break;
            }
            continue;
        }
        int err = produce_one(p, WIDTH);
        if (err < 0 && err != -ETIMEDOUT)
            break;
    }
    if (a > 0)
        wait_children(&a, 1);
    else
        failures++;
    wait_children(&b, 1);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

static int
leave_consumer_main(const char *endpoint, const char *batch, const char *b_done, const char *a_done)
{
    consumer_grace_ms = 100;
    leave_after = 3;
    leave_until = b_done;
    stop_epochs = 2;
    done_file = a_done;
    return consumer_main(endpoint, (uint32_t)atoi(batch), -1);
}

static int
steady_consumer_main(const char *endpoint, const char *b_done)
{
    stop_epochs = 2;
    done_file = b_done;
    return consumer_main(endpoint, 0, -1);
}

/* Producer process of the stall case: publishes until its device stalls and it is killed. */
static int
stall_producer_main(const char *endpoint)
{
    tsock_producer *p = start_producer(endpoint, 0, 0, 0, SLOTS);
    tsock_producer_wait_consumers(p, 1, scaled(20000));
    for (;;)
        if (produce_one(p, WIDTH) < 0)
            return 1;
}

/* Waits (bounded) for everything queued on `stream` so far; 0 when it never completes. */
static int
stream_completes(tsock__dev_stream_t stream)
{
    tsock__dev_event_t ev;
    CUDA_OK(DEV->event_create(&ev, TSOCK__DEV_EVENT_DISABLE_TIMING));
    CUDA_OK(DEV->event_record(ev, stream));
    int done = 0;
    for (int i = 0; i < 2000 && !done; i++) { /* 20 s: a bound, not a timing assumption */
        done = DEV->event_query(ev) == TSOCK__DEV_OK;
        if (!done)
            usleep(10000);
    }
    DEV->event_destroy(ev);
    return done;
}

/* Item 2: see the top of the file. */
static int
case_stall(const char *endpoint, const char *dir)
{
    char stalled[300];
    snprintf(stalled, sizeof stalled, "%s/stalled", dir);
    const char *env[] = {"TSOCK_CUDA_SIM_STALL_AFTER", "40", "TSOCK_CUDA_SIM_STALL_FILE", stalled,
                         NULL};
    char *argv[] = {"gpu_ring", "--stall-producer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, env);
    tsock_consumer *c;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_heartbeat(c, 100, scaled(5000));
    EXPECT(tsock_consumer_start(c, scaled(30000)) == 0);
    tsock__dev_stream_t stream;
    CUDA_OK(DEV->set_device(0));
    CUDA_OK(DEV->stream_create(&stream));
    int killed = 0, err;
    long batches = 0;
    tsock_batch *b;
    for (;;) {
        if (!killed && access(stalled, F_OK) == 0) {
            kill(kid, SIGKILL);
            waitpid(kid, NULL, 0);
            killed = 1;
        }
        err = tsock_consumer_next(c, 500, &b);
        if (err == -ETIMEDOUT)
            continue;
        if (err < 0)
            break;
        batches++;
        EXPECT(tsock_batch_wait(b, stream) == 0);
        /* Announced, so its copy has completed: the stream's wait can always pass. */
        int completes = stream_completes(stream);
        if (!completes)
            fprintf(stderr,
                    "batch %ld was announced before its copy completed: the stream "
                    "waits for ever on its event\n",
                    batches);
        EXPECT(completes);
        tsock_consumer_release(c, b);
        if (!completes)
            break;
    }
    printf("stall: %ld batches before the producer's device stalled; then %s\n", batches,
           tsock_strerror(err));
    EXPECT(killed);
    EXPECT(err == TSOCK_E_PRODUCER_LOST);
    if (!killed) {
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
    }
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

/* Item 11: see the top of the file. */
static int
case_guard(const char *endpoint)
{
    const char *env[] = {"GPU_RING_NO_CONTEXT_ON_0", "1", NULL};
    char *argv[] = {"gpu_ring", "--consumer", (char *)endpoint, "24", "-1", NULL};
    pid_t kid = spawn_env(argv, env);
    tsock_producer *p = start_producer(endpoint, 0, EPOCHS, 0, SLOTS);
    EXPECT(tsock_producer_wait_consumers(p, 1, scaled(30000)) == 1);
    int err;
    while ((err = produce_one(p, WIDTH)) == 0)
        ;
    EXPECT(err == TSOCK_E_END);
    tsock_producer_finish(p);
    wait_children(&kid, 1);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* Child of the envfail case: what a producer start and a device count say. */
static int
envfail_main(const char *endpoint)
{
    printf("count %d\n", tsock_cuda_device_count());
    tsock_layout *l = make_layout(0);
    tsock_producer *p = NULL;
    tsock_producer_create(&p, endpoint, l, BATCH, SLOTS);
    tsock_layout_destroy(l);
    tsock_producer_set_device(p, 0);
    int err = tsock_producer_start(p);
    tsock_producer_destroy(p);
    return -err - 10000; /* exit status: which TSOCK_E_* (or 0) */
}

/* Item 10: each environment failure has its own code and log message. */
static int
case_envfail(const char *dir)
{
    static const struct {
        const char *kind, *says;
        int code;
    } cases[] = {
        {"no-device", "no CUDA device", TSOCK_E_NO_DEVICE},
        {"old-driver", "driver is older", TSOCK_E_DEVICE_UNUSABLE},
        {"exclusive", "EXCLUSIVE_PROCESS", TSOCK_E_DEVICE_UNUSABLE},
        {"fork", "before this process was forked", TSOCK_E_DEVICE_UNUSABLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char endpoint[300], log[300], cmd[1400];
        snprintf(endpoint, sizeof endpoint, "ipc://%s/envfail%zu.sock", dir, i);
        snprintf(log, sizeof log, "%s/envfail%zu.log", dir, i);
        snprintf(cmd, sizeof cmd,
                 "TSOCK_CUDA_SIM_FAIL=%s /proc/%d/exe --envfail '%s' >'%s' 2>&1; echo $? >>'%s'",
                 cases[i].kind, (int)getpid(), endpoint, log, log);
        EXPECT(system(cmd) == 0);
        FILE *f = fopen(log, "r");
        char text[8192] = "";
        size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
        text[got] = 0;
        if (f)
            fclose(f);
        char want[32];
        snprintf(want, sizeof want, "\n%d\n", -cases[i].code - 10000);
        int ok = strstr(text, cases[i].says) && strstr(text, want);
        if (!ok)
            fprintf(stderr, "envfail %s: wanted \"%s\" and exit %d; got:\n%s\n", cases[i].kind,
                    cases[i].says, -cases[i].code - 10000, text);
        EXPECT(ok);
    }
    return failures ? 1 : 0;
}

/* ---- issue 20: the simulated device's rules ----------------------------------------------- */

#define RULE_BYTES 4096

/* One rule in a child process of its own (the simulator aborts on a broken rule). */
static int
sim_rule_main(const char *rule)
{
    CUDA_OK(DEV->set_device(0));
    tsock__dev_stream_t a, b;
    CUDA_OK(DEV->stream_create(&a));
    CUDA_OK(DEV->stream_create(&b));
    void *mem, *tmp, *host;
    CUDA_OK(DEV->malloc(&mem, RULE_BYTES));
    CUDA_OK(DEV->malloc(&tmp, RULE_BYTES));
    CUDA_OK(DEV->host_alloc(&host, RULE_BYTES));
    tsock__dev_event_t ev;
    CUDA_OK(DEV->event_create(&ev, TSOCK__DEV_EVENT_DISABLE_TIMING));
    if (strcmp(rule, "ordered-read") == 0) {
        /* The write on a (held, so it has not run), then the event; b waits for the event,
         * then reads: the read is queued before the write runs, and ordered after it. */
        tsock__dev_sim_hold_stream(a, 1);
        CUDA_OK(DEV->memcpy_async(mem, host, RULE_BYTES, TSOCK__DEV_H2D, a));
        CUDA_OK(DEV->event_record(ev, a));
        CUDA_OK(DEV->stream_wait(b, ev));
        CUDA_OK(DEV->memcpy_async(tmp, mem, RULE_BYTES, TSOCK__DEV_D2D, b));
        tsock__dev_sim_hold_stream(a, 0);
    } else if (strcmp(rule, "same-process-write") == 0) {
        /* A read queued on b (held), then a write of the same bytes on a: nothing orders them. */
        tsock__dev_sim_hold_stream(b, 1);
        CUDA_OK(DEV->memcpy_async(tmp, mem, RULE_BYTES, TSOCK__DEV_D2D, b));
        CUDA_OK(DEV->memcpy_async(mem, host, RULE_BYTES, TSOCK__DEV_H2D, a));
        CUDA_OK(DEV->stream_sync(a));
    } else if (strcmp(rule, "unmap-in-use") == 0) {
        tsock__dev_sim_hold_stream(a, 1);
        CUDA_OK(DEV->memcpy_async(tmp, mem, RULE_BYTES, TSOCK__DEV_D2D, a));
        CUDA_OK(DEV->free(mem));
    } else if (strcmp(rule, "table-full") == 0) {
        tsock__dev_sim_hold_stream(a, 1);
        for (int i = 0; i < 1000; i++)
            CUDA_OK(DEV->memcpy_async(tmp, mem, 16, TSOCK__DEV_D2D, a));
    } else if (strcmp(rule, "stream-capture") == 0) {
        /* A record under capture is a graph node: the event stays complete; a sync of the
         * capturing stream fails, and so do other threads' queries and allocations. */
        int capturing = 0;
        tsock__dev_sim_capture_stream(a, 1);
        CUDA_OK(DEV->stream_capturing(a, &capturing));
        if (!capturing)
            return 3;
        CUDA_OK(DEV->event_record(ev, a));
        void *more;
        if (DEV->stream_sync(a) != TSOCK__DEV_CAPTURE ||
            DEV->event_query(ev) != TSOCK__DEV_CAPTURE ||
            DEV->malloc(&more, 16) != TSOCK__DEV_CAPTURE)
            return 4;
        int mode;
        CUDA_OK(DEV->capture_relax(&mode));
        if (DEV->event_query(ev) != TSOCK__DEV_OK) /* an empty set of work */
            return 5;
        DEV->capture_restore(mode);
        tsock__dev_sim_capture_stream(a, 0);
    } else {
        return 2;
    }
    CUDA_OK(DEV->stream_sync(a));
    CUDA_OK(DEV->stream_sync(b));
    DEV->event_destroy(ev);
    DEV->host_free(host);
    DEV->free(tmp);
    if (strcmp(rule, "unmap-in-use") != 0)
        DEV->free(mem);
    return 0;
}

static int
case_sim_rules(const char *dir)
{
    static const struct {
        const char *rule, *says; /* says: NULL when the child must pass */
    } rules[] = {
        {"ordered-read", NULL},
        {"same-process-write", "(this one) still has a queued read of it"},
        {"unmap-in-use", "free of device memory"},
        {"table-full", "table of queued reads"},
        {"stream-capture", NULL},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        char log[300];
        snprintf(log, sizeof log, "%s/%s.log", dir, rules[i].rule);
        pid_t pid = fork();
        if (pid == 0) {
            FILE *f = freopen(log, "w", stderr);
            (void)f;
            execl("/proc/self/exe", "gpu_ring", "--sim-rule", rules[i].rule, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        char text[8192] = "";
        FILE *f = fopen(log, "r");
        if (f) {
            text[fread(text, 1, sizeof text - 1, f)] = 0;
            fclose(f);
        }
        int ok = rules[i].says ? WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
                                     strstr(text, "RULE BROKEN") && strstr(text, rules[i].says)
                               : WIFEXITED(st) && WEXITSTATUS(st) == 0;
        printf("sim rule %s: %s\n", rules[i].rule,
               ok ? (rules[i].says ? "caught" : "passes") : "WRONG");
        if (!ok)
            fprintf(stderr, "rule %s: wanted %s%s; got status 0x%x:\n%s\n", rules[i].rule,
                    rules[i].says ? "an abort saying " : "a clean exit",
                    rules[i].says ? rules[i].says : "", st, text);
        EXPECT(ok);
    }
    return failures ? 1 : 0;
}

static int
run_case(const char *name, const char *endpoint, const char *dir)
{
    if (strcmp(name, "content") == 0)
        return case_content(endpoint);
    if (strcmp(name, "convert") == 0)
        return case_convert(endpoint);
    if (strcmp(name, "memory") == 0)
        return case_memory(endpoint);
    if (strcmp(name, "death") == 0)
        return case_death(endpoint);
    if (strcmp(name, "capture") == 0)
        return case_capture(endpoint);
    if (strcmp(name, "stall") == 0)
        return case_stall(endpoint, dir);
    if (strcmp(name, "guard") == 0)
        return case_guard(endpoint);
    if (strcmp(name, "envfail") == 0)
        return case_envfail(dir);
    if (strcmp(name, "sim_rules") == 0)
        return case_sim_rules(dir);
    if (strcmp(name, "leave") == 0)
        return case_leave(dir, endpoint, "0") || case_leave(dir, endpoint, "24");
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
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
    if (argc == 3 && strcmp(argv[1], "--capture-consumer") == 0)
        return capture_consumer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--capture-gather-consumer") == 0)
        return capture_gather_consumer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--sim-rule") == 0)
        return sim_rule_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--stall-producer") == 0)
        return stall_producer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--envfail") == 0)
        return envfail_main(argv[2]);
    if (argc == 6 && strcmp(argv[1], "--leave-consumer") == 0)
        return leave_consumer_main(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 4 && strcmp(argv[1], "--steady-consumer") == 0)
        return steady_consumer_main(argv[2], argv[3]);
    if (argc != 2) {
        fprintf(
            stderr,
            "usage: %s content|convert|memory|death|capture|stall|guard|envfail|sim_rules|leave\n",
            argv[0]);
        return 2;
    }
    static const char *const sim_only[] = {"capture", "stall", "guard", "envfail", "sim_rules"};
    for (size_t i = 0; i < sizeof sim_only / sizeof sim_only[0]; i++)
        if (strcmp(argv[1], sim_only[i]) == 0 && !tsock__dev_simulated()) {
            printf("SKIP: case %s needs the simulated device's controls (TSOCK_CUDA_SIM=1)\n",
                   argv[1]);
            return SKIP;
        }
    /* Each run gets its own simulated device (inherited by the processes it starts). */
    char simdev[64];
    snprintf(simdev, sizeof simdev, "gpu%d", (int)getpid());
    setenv("TSOCK_CUDA_SIM_DEVICE", simdev, 0);
    if (strcmp(argv[1], "guard") == 0) {
        setenv("TSOCK_CUDA_SIM_DEVICES", "2", 1);
        setenv("GPU_RING_DEVICE", "1", 1);
    }
    int devices = tsock_cuda_device_count();
    if (devices == TSOCK_E_NO_DEVICE && strcmp(argv[1], "envfail") != 0) {
        printf("SKIP: no CUDA device in this process (%s); the GPU tests need one\n",
               tsock_strerror(devices));
        return SKIP;
    }
    if (devices < 0 && strcmp(argv[1], "envfail") != 0) {
        /* A GPU exists but cannot be used: that is a failure to report, not a skip (item 10). */
        fprintf(stderr, "a CUDA device exists but this process cannot use it: %s\n",
                tsock_strerror(devices));
        return 1;
    }
    char dir[128], endpoint[256];
    test_scratch_dir(dir, sizeof dir, "gpu");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, argv[1]);
    int rc = run_case(argv[1], endpoint, dir);
    remove_scratch(dir);
    /* Issue 20: every process of the run has exited; nothing of its device may be left. */
    if (device_leftovers(getenv("TSOCK_CUDA_SIM_DEVICE")) > 0 && rc == 0)
        rc = 1;
    return rc;
}
