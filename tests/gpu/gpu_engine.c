/* The consumer and producer engines' ordering and lifetime on a device ring (issue 12, items 2,
 * 3, 5 and 6), producer and consumer in separate processes (CUDA IPC cannot open a handle in
 * the process that exported it; every other role is this program re-executed).
 *
 *   gpu_engine gather_beats  item 2: a consumer whose gather never completes (its device
 *                            stalls) keeps heartbeating: the producer does not lose it.
 *   gpu_engine close_waits   item 3: a consumer destroyed right after a stream-ordered release,
 *                            and with batches never released, whose reads are still queued on
 *                            the default stream and on a non-blocking side stream,
 *                            says BYE only after those reads ran: the producer never refills a
 *                            slot under them (the simulated device aborts a write under a
 *                            queued read of another live process).
 *   gpu_engine stop_waits    item 5: a producer stopped while a consumer's reads of a batch are
 *                            queued does not free the ring under them: it waits for the BYE
 *                            that follows the release (the simulated device aborts a free of
 *                            memory another live process has queued work on).
 *   gpu_engine partial_end   item 6: the partial gather that ends a stream is device memory,
 *                            labelled so, with the right bytes.
 *   gpu_engine held_past_exit  a batch its consumer still holds when the producer stops, frees
 *                            its ring and exits still reads right: the driver keeps exported
 *                            memory while an importer has it open, as docs/gpu.md promises a
 *                            consumer that holds a batch past the producer's goodbye bound or
 *                            reconnects while holding one. The simulated device models that
 *                            (the bytes stay until the last process closes them); only a run
 *                            on a GPU shows the driver does it.
 *
 *
 * Issue 20 (the review in shared/reviews/gpu.md, each case failing before its fix):
 *   gpu_engine overlap          publish returns while the batch's copy cannot run (the device
 *                               held), so the next batch is filled meanwhile; consumers hear of
 *                               a batch only once its copy completed, and read it right.
 *   gpu_engine close_after_bound  a consumer whose stream-ordered release is still pending when
 *                               the 5 s fence bound passes (its device busy for 7 s) waits for
 *                               the device before BYE: no slot refilled, nothing unmapped, under
 *                               its queued read (the simulator aborts either).
 *   gpu_engine gather_timeout   a gather whose copies never complete (the consumer's device
 *                               stalls) returns at next's timeout, then TSOCK_E_PRODUCER_LOST
 *                               once the producer is killed, instead of blocking for ever.
 *   gpu_engine capture_release  a release on a stream that captures a graph is refused (the
 *                               record would be a graph node: the fence would pass at once); the
 *                               batch stays held and is released after the capture.
 *   held_past_exit also waits for the held batch after the producer destroyed its events
 *   (undefined in CUDA: the simulator aborts an imported event's use after that).
 *
 * gather_beats, overlap, close_after_bound, gather_timeout and capture_release need the
 * simulated device's controls and skip elsewhere; the others run on a real GPU too. Each run
 * removes its scratch directory and fails when its simulated device's objects are left in
 * /dev/shm (gpu_leftovers.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/devapi.h"
#include "backend/cuda/devapi_sim.h"
#include "gpu_leftovers.h"
#include "tsock/tsock.h"

#define SKIP 77
#define BATCH 32
#define SLOTS 4
#define WIDTH 64
#define HB_TIMEOUT_MS 1000

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

static void
log_line(void *user, int level, const char *message)
{
    fprintf(stderr, "[%d:%d] %s\n", (int)getpid(), level, message);
}

static pid_t
spawn_env(char *const argv[], const char *const env[])
{
    pid_t pid = fork();
    if (pid == 0) {
        /* A child outliving an aborted test would hold ctest's output pipe open (issue 20's
         * review, section 2): it dies with the test. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 0; env && env[i]; i += 2)
            setenv(env[i], env[i + 1], 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* The child's exit status, or -1 when it died of a signal (the simulator aborts on a rule). */
static int
child_status(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -2;
    if (WIFSIGNALED(st))
        fprintf(stderr, "process %d died of signal %d\n", (int)pid, WTERMSIG(st));
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Waits (bounded: 30 s) for a file another process creates. */
static int
file_appears(const char *path)
{
    for (int i = 0; i < 3000; i++) {
        if (access(path, F_OK) == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

static void
touch(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

/* Sample k of the stream (in stream order) holds bytes (k * 7 + j). */
static uint8_t
pattern(uint64_t k, size_t j)
{
    return (uint8_t)(k * 7u + j);
}

/* The first byte of `samples` samples read back to `host` that is not the pattern of the
 * stream positions from `position`, as sample * WIDTH + byte; -1 when every byte is right. */
static long
wrong_byte(const uint8_t *host, size_t samples, uint64_t position)
{
    for (size_t k = 0; k < samples; k++)
        for (size_t j = 0; j < WIDTH; j++)
            if (host[k * WIDTH + j] != pattern(position + k, j))
                return (long)(k * WIDTH + j);
    return -1;
}

/* The producer's heartbeat timeout. The cases whose consumer is meant to stay alive while its
 * reads are queued raise it: under a loaded sanitizer run a consumer whose heartbeats came late
 * was lost, and its slots refilled under its reads (rightly, by the simulator's rules). */
static int producer_hb_timeout_ms = HB_TIMEOUT_MS;

/* A producer on device 0; `sampler`: endless epochs of 1000 samples, else free mode. */
static tsock_producer *
start_producer(const char *endpoint, int sampler)
{
    tsock_layout *l;
    int64_t flat[1] = {WIDTH};
    tsock_layout_create(&l);
    tsock_layout_add(l, "data", TSOCK_UINT8, 1, flat);
    tsock_producer *p = NULL;
    if (tsock_producer_create(&p, endpoint, l, BATCH, SLOTS) < 0)
        exit(1);
    tsock_layout_destroy(l);
    tsock_producer_set_device(p, 0);
    tsock_producer_set_heartbeat(p, 50, producer_hb_timeout_ms);
    if (sampler)
        tsock_producer_set_sampler(p, 1000, 3, 0);
    int err = tsock_producer_start(p);
    if (err < 0) {
        fprintf(stderr, "producer start: %s\n", tsock_strerror(err));
        exit(1);
    }
    return p;
}

/* Publishes one batch; *position counts the samples published so far. */
static int
produce_one(tsock_producer *p, uint64_t *position, int timeout_ms)
{
    tsock_slot *s;
    int err = tsock_producer_acquire(p, timeout_ms, &s);
    if (err < 0)
        return err;
    /* A sampler plans the slot (fewer than BATCH at an epoch's end); free mode fills it. */
    uint32_t n = tsock_slot_planned(s) ? tsock_slot_planned(s) : BATCH;
    uint8_t *data = tsock_slot_data(s, 0);
    for (uint32_t i = 0; i < n; i++)
        for (size_t j = 0; j < WIDTH; j++)
            data[i * WIDTH + j] = pattern(*position + i, j);
    *position += n;
    return tsock_producer_publish(p, s, n);
}

/* A started consumer. Its epoch grace is long: several checks want the stream's first batch
 * (pattern(k, j)), and a job that has not read for the grace gives its first batches back
 * (consumer_leave.c), which a loaded sanitizer run's slow setup (a stream, device memory)
 * would otherwise cause. No case here is about leaving an epoch. */
static tsock_consumer *
start_consumer(const char *endpoint, uint32_t batch_size)
{
    tsock_consumer *c;
    if (tsock_consumer_create(&c, endpoint) < 0)
        exit(1);
    tsock_consumer_set_heartbeat(c, 50, 30000);
    tsock_consumer_set_epoch_grace(c, 60000);
    if (batch_size)
        tsock_consumer_set_batch_size(c, batch_size);
    int err = tsock_consumer_start(c, 30000);
    if (err < 0) {
        fprintf(stderr, "consumer start: %s\n", tsock_strerror(err));
        exit(1);
    }
    return c;
}

/* ---- item 2 --------------------------------------------------------------------------------- */

/* Consumer role: batches of 48 from producer batches of 32, so the first is a gather; its
 * device stalls before the gather's copy runs, so next never returns. */
static int
stalled_gather_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 48);
    tsock_batch *b;
    int err = tsock_consumer_next(c, 120000, &b);
    fprintf(stderr, "stalled consumer: next returned %s\n", tsock_strerror(err));
    return 3; /* killed before: reaching here means the gather did not stall */
}

static int
case_gather_beats(const char *endpoint, const char *dir)
{
    char stalled[300];
    snprintf(stalled, sizeof stalled, "%s/stalled", dir);
    tsock_producer *p = start_producer(endpoint, 1);
    const char *env[] = {"TSOCK_CUDA_SIM_STALL_AFTER", "0", "TSOCK_CUDA_SIM_STALL_FILE", stalled,
                         NULL};
    char *argv[] = {"gpu_engine", "--stalled-gather", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, env);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    uint64_t position = 0;
    EXPECT(produce_one(p, &position, 10000) == 0);
    EXPECT(produce_one(p, &position, 10000) == 0);
    EXPECT(file_appears(stalled));
    /* The consumer is now blocked in its gather for good. Four heartbeat timeouts: had its
     * heartbeats stopped, the producer would have lost it by then. */
    uint64_t lost = 0;
    for (int i = 0; i < 4 * HB_TIMEOUT_MS / 20 && lost == 0; i++) {
        usleep(20000);
        tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost);
    }
    EXPECT(lost == 0);
    EXPECT(tsock_producer_consumer_count(p) == 1);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* ---- item 3 --------------------------------------------------------------------------------- */

/* Consumer role: a batch read on a stream and released on it, a second read on the default
 * stream and never released, then destroy at once while both reads are still queued. */
static int
closing_consumer_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 0);
    tsock__dev_stream_t stream;
    CUDA_OK(DEV->set_device(0));
    CUDA_OK(DEV->stream_create(&stream));
    void *copy;
    CUDA_OK(DEV->malloc(&copy, 3 * (size_t)BATCH * WIDTH));
    tsock_batch *a, *b, *d;
    if (tsock_consumer_next(c, 30000, &a) < 0 || tsock_consumer_next(c, 30000, &b) < 0 ||
        tsock_consumer_next(c, 30000, &d) < 0)
        return 4;
    size_t bytes = tsock_batch_tensor_bytes(a, 0);
    EXPECT(tsock_batch_wait(a, stream) == 0);
    CUDA_OK(DEV->memcpy_async(copy, tsock_batch_tensor_data(a, 0), bytes, TSOCK__DEV_D2D, stream));
    EXPECT(tsock_consumer_release_on_stream(c, a, stream) == 0);
    /* b is read on the legacy default stream, d on the non-blocking side stream (as torch's
     * side streams are): neither is released, and destroy must wait for both. */
    EXPECT(tsock_batch_wait(b, NULL) == 0);
    CUDA_OK(DEV->memcpy_async((uint8_t *)copy + bytes, tsock_batch_tensor_data(b, 0), bytes,
                              TSOCK__DEV_D2D, NULL));
    EXPECT(tsock_batch_wait(d, stream) == 0);
    CUDA_OK(DEV->memcpy_async((uint8_t *)copy + 2 * bytes, tsock_batch_tensor_data(d, 0), bytes,
                              TSOCK__DEV_D2D, stream));
    tsock_consumer_destroy(c);
    CUDA_OK(DEV->stream_sync(stream));
    CUDA_OK(DEV->stream_sync(NULL));
    uint8_t *host = malloc(3 * bytes);
    CUDA_OK(DEV->memcpy_async(host, copy, 3 * bytes, TSOCK__DEV_D2H, NULL));
    CUDA_OK(DEV->stream_sync(NULL));
    /* The three copies read their batches before the producer could refill the slots. */
    long wrong = wrong_byte(host, 3 * (size_t)BATCH, 0);
    if (wrong >= 0) {
        fprintf(stderr, "closing consumer: sample %ld byte %ld refilled under a read\n",
                wrong / WIDTH, wrong % WIDTH);
        return 5;
    }
    free(host);
    CUDA_OK(DEV->free(copy));
    return failures ? 1 : 0;
}

static int
case_close_waits(const char *endpoint)
{
    producer_hb_timeout_ms = 10000;
    tsock_producer *p = start_producer(endpoint, 1);
    /* The consumer's work runs late (up to 0.2 s an item), so its reads are still queued when
     * it calls destroy. */
    const char *env[] = {"TSOCK_CUDA_SIM_MAX_DELAY_US", "200000", NULL};
    char *argv[] = {"gpu_engine", "--closing-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, env);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    uint64_t position = 0;
    /* Keep every slot filled: a slot given back is refilled at once. */
    int status = -3;
    for (;;) {
        int err = produce_one(p, &position, 50);
        if (err < 0 && err != -ETIMEDOUT) {
            fprintf(stderr, "producing failed: %s\n", tsock_strerror(err));
            status = child_status(kid);
            break;
        }
        int st;
        if (waitpid(kid, &st, WNOHANG) == kid) {
            status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            break;
        }
    }
    if (status != 0)
        fprintf(stderr, "closing consumer exited with %d\n", status);
    EXPECT(status == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* ---- item 5 --------------------------------------------------------------------------------- */

/* Producer role: publishes one batch, and stops when told to (the file `go`). */
static int
stopping_producer_main(const char *endpoint, const char *go)
{
    tsock_producer *p = start_producer(endpoint, 1);
    tsock_producer_wait_consumers(p, 1, 30000);
    uint64_t position = 0;
    if (produce_one(p, &position, 10000) < 0)
        return 4;
    if (!file_appears(go))
        return 5;
    tsock_producer_destroy(p);
    return 0;
}

/* Starts the stopping producer role in a child; `go` receives the path that tells it to stop. */
static pid_t
spawn_stopping_producer(const char *endpoint, const char *dir, char *go, size_t go_size)
{
    snprintf(go, go_size, "%s/go", dir);
    char *argv[] = {"gpu_engine", "--stopping-producer", (char *)endpoint, go, NULL};
    return spawn_env(argv, NULL);
}

static int
case_stop_waits(const char *endpoint, const char *dir)
{
    char go[300];
    pid_t kid = spawn_stopping_producer(endpoint, dir, go, sizeof go);
    tsock_consumer *c = start_consumer(endpoint, 0);
    tsock__dev_stream_t stream;
    CUDA_OK(DEV->set_device(0));
    CUDA_OK(DEV->stream_create(&stream));
    void *copy;
    CUDA_OK(DEV->malloc(&copy, (size_t)BATCH * WIDTH));
    tsock_batch *b;
    EXPECT(tsock_consumer_next(c, 30000, &b) == 0);
    size_t bytes = tsock_batch_tensor_bytes(b, 0);
    EXPECT(tsock_batch_wait(b, stream) == 0);
    CUDA_OK(DEV->memcpy_async(copy, tsock_batch_tensor_data(b, 0), bytes, TSOCK__DEV_D2D, stream));
    touch(go);
    tsock_batch *none;
    EXPECT(tsock_consumer_next(c, 30000, &none) == TSOCK_E_PRODUCER_STOPPED);
    /* The read is still queued (this process's work runs late): the release is stream-ordered,
     * and only then may the producer free its ring. */
    EXPECT(tsock_consumer_release_on_stream(c, b, stream) == 0);
    EXPECT(child_status(kid) == 0);
    uint8_t *host = malloc(bytes);
    CUDA_OK(DEV->stream_sync(stream));
    CUDA_OK(DEV->memcpy_async(host, copy, bytes, TSOCK__DEV_D2H, NULL));
    CUDA_OK(DEV->stream_sync(NULL));
    if (wrong_byte(host, BATCH, 0) >= 0)
        EXPECT(!"the batch's bytes changed under a queued read");
    free(host);
    tsock_consumer_destroy(c);
    CUDA_OK(DEV->free(copy));
    DEV->stream_destroy(stream);
    return failures ? 1 : 0;
}

/* ---- a batch held past its producer's exit ---------------------------------------------- */

/* Reads the first tensor of b back to the host; 0 when every byte is the pattern. */
static int
batch_reads_right(tsock_batch *b)
{
    size_t bytes = tsock_batch_tensor_bytes(b, 0);
    uint8_t *host = malloc(bytes);
    int dev = DEV->memcpy_async(host, tsock_batch_tensor_data(b, 0), bytes, TSOCK__DEV_D2H, NULL);
    if (dev == TSOCK__DEV_OK)
        dev = DEV->stream_sync(NULL);
    if (dev != TSOCK__DEV_OK) {
        fprintf(stderr, "reading the held batch: %s\n", DEV->error_text(DEV->last_raw()));
        free(host);
        return -1;
    }
    int wrong = wrong_byte(host, bytes / WIDTH, 0) >= 0;
    free(host);
    return wrong;
}

static int
case_held_past_exit(const char *endpoint, const char *dir)
{
    char go[300];
    pid_t kid = spawn_stopping_producer(endpoint, dir, go, sizeof go);
    tsock_consumer *c = start_consumer(endpoint, 0);
    CUDA_OK(DEV->set_device(0));
    tsock_batch *b;
    int err = tsock_consumer_next(c, 30000, &b);
    if (err < 0) {
        fprintf(stderr, "held_past_exit: next returned %s\n", tsock_strerror(err));
        touch(go);
        child_status(kid);
        tsock_consumer_destroy(c);
        return 1;
    }
    EXPECT(tsock_batch_wait(b, NULL) == 0);
    EXPECT(batch_reads_right(b) == 0);
    touch(go);
    tsock_batch *none;
    EXPECT(tsock_consumer_next(c, 30000, &none) == TSOCK_E_PRODUCER_STOPPED);
    /* The producer waits its goodbye bound for us, frees its ring and exits. */
    EXPECT(child_status(kid) == 0);
    int after = batch_reads_right(b);
    printf("a batch held past its producer's exit: %s\n", after == 0  ? "reads right"
                                                          : after < 0 ? "cannot be read"
                                                                      : "reads wrong bytes");
    EXPECT(after == 0);
    /* Issue 20: its events were destroyed with the ring; the wait must not touch them. */
    EXPECT(tsock_batch_wait(b, NULL) == 0);
    EXPECT(tsock_consumer_release(c, b) == 0);
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

/* ---- item 6 --------------------------------------------------------------------------------- */

/* Consumer role: batches of 40 from a free-mode stream of 3 x 32 samples: 40, 40, then a
 * partial gather of 16 handed over when the stream ends. */
static int
partial_consumer_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 40);
    uint64_t position = 0;
    tsock_batch *b;
    int err, last_ok = 0;
    while ((err = tsock_consumer_next(c, 30000, &b)) == 0) {
        uint32_t n = tsock_batch_samples(b);
        int device = tsock_batch_device_index(b);
        EXPECT(device == 0);
        EXPECT(tsock_batch_tensor_device(b, 0) == TSOCK_DEVICE_CUDA);
        uint8_t *host = malloc((size_t)n * WIDTH);
        EXPECT(tsock_batch_wait(b, NULL) == 0);
        if (device >= 0)
            EXPECT(tsock_cuda_copy_to_host(host, tsock_batch_tensor_data(b, 0), (size_t)n * WIDTH,
                                           device) == 0);
        int same = device >= 0 && wrong_byte(host, n, position) < 0;
        EXPECT(same);
        free(host);
        position += n;
        last_ok = n == 16 && same;
        EXPECT(tsock_consumer_release(c, b) == 0);
    }
    EXPECT(err == TSOCK_E_END);
    EXPECT(position == 3 * BATCH);
    EXPECT(last_ok);
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

static int
case_partial_end(const char *endpoint)
{
    tsock_producer *p = start_producer(endpoint, 0);
    char *argv[] = {"gpu_engine", "--partial-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, NULL);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    uint64_t position = 0;
    for (int i = 0; i < 3; i++)
        EXPECT(produce_one(p, &position, 10000) == 0);
    /* The stream ends only once the consumer took every sample, its last gather incomplete:
     * its ring is then closed before that gather is handed over, the case item 6 is about. */
    uint64_t released = 0;
    for (int i = 0; i < 3000 && released < 3; i++) {
        usleep(10000);
        tsock_producer_stat(p, -1, TSOCK_STAT_RELEASED, &released);
    }
    EXPECT(released == 3);
    EXPECT(tsock_producer_finish(p) == 0);
    EXPECT(child_status(kid) == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* ---- issue 20 ---------------------------------------------------------------------------- */

static void
publish_blocked(int sig)
{
    static const char msg[] = "publish did not return while its copy could not run: filling "
                              "the next batch does not overlap the copy\n";
    (void)sig;
    (void)!write(2, msg, sizeof msg - 1);
    _exit(9);
}

/* Consumer role of overlap: reads to the end, every byte checked; exits 0 with 2 batches. */
static int
overlap_consumer_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 0);
    CUDA_OK(DEV->set_device(0));
    uint64_t position = 0;
    tsock_batch *b;
    int err;
    while ((err = tsock_consumer_next(c, 30000, &b)) == 0) {
        EXPECT(tsock_batch_wait(b, NULL) == 0);
        size_t bytes = tsock_batch_tensor_bytes(b, 0);
        uint8_t *host = malloc(bytes);
        EXPECT(tsock_cuda_copy_to_host(host, tsock_batch_tensor_data(b, 0), bytes, 0) == 0);
        if (wrong_byte(host, bytes / WIDTH, position) >= 0)
            EXPECT(!"a batch read wrong bytes");
        free(host);
        position += tsock_batch_samples(b);
        EXPECT(tsock_consumer_release(c, b) == 0);
    }
    EXPECT(err == TSOCK_E_END);
    EXPECT(position == 2 * BATCH);
    tsock_consumer_destroy(c);
    return failures ? 1 : 0;
}

/* The copy/fill overlap: with every stream of the producer held (nothing it queues runs),
 * publish returns, and so does filling and publishing the next batch into the other staging
 * buffer; no consumer hears of either batch until their copies ran. */
static int
case_overlap(const char *endpoint)
{
    tsock_producer *p = start_producer(endpoint, 0);
    char *argv[] = {"gpu_engine", "--overlap-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, NULL);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    tsock__dev_sim_hold_all(1);
    signal(SIGALRM, publish_blocked);
    alarm(30); /* a bound: before issue 20 the first publish waited for its copy for ever */
    uint64_t position = 0;
    EXPECT(produce_one(p, &position, 10000) == 0);
    EXPECT(produce_one(p, &position, 10000) == 0);
    alarm(0);
    /* Neither copy could run: neither batch may have been announced. */
    usleep(200000);
    uint64_t announced = 0;
    EXPECT(tsock_producer_stat(p, 0, TSOCK_STAT_BATCHES, &announced) == 0);
    if (announced)
        fprintf(stderr, "%llu batch(es) announced before their copies ran\n",
                (unsigned long long)announced);
    EXPECT(announced == 0);
    tsock__dev_sim_hold_all(0);
    EXPECT(tsock_producer_finish(p) == 0);
    EXPECT(child_status(kid) == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* Consumer role of close_after_bound: one batch read on a stream and released on it; the
 * device then stays busy 7 s (TSOCK_CUDA_SIM_STALL_MS), past the 5 s fence bound of destroy. */
static int
slow_release_consumer_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 0);
    tsock__dev_stream_t stream;
    CUDA_OK(DEV->set_device(0));
    CUDA_OK(DEV->stream_create(&stream));
    void *copy;
    CUDA_OK(DEV->malloc(&copy, (size_t)BATCH * WIDTH));
    tsock_batch *a;
    if (tsock_consumer_next(c, 30000, &a) < 0)
        return 4;
    size_t bytes = tsock_batch_tensor_bytes(a, 0);
    EXPECT(tsock_batch_wait(a, stream) == 0);
    CUDA_OK(DEV->memcpy_async(copy, tsock_batch_tensor_data(a, 0), bytes, TSOCK__DEV_D2D, stream));
    EXPECT(tsock_consumer_release_on_stream(c, a, stream) == 0);
    tsock_consumer_destroy(c);
    uint8_t *host = malloc(bytes);
    CUDA_OK(DEV->memcpy_async(host, copy, bytes, TSOCK__DEV_D2H, stream));
    CUDA_OK(DEV->stream_sync(stream));
    long wrong = wrong_byte(host, BATCH, 0);
    if (wrong >= 0) {
        fprintf(stderr, "slow consumer: sample %ld byte %ld refilled under a read\n", wrong / WIDTH,
                wrong % WIDTH);
        return 5;
    }
    free(host);
    CUDA_OK(DEV->free(copy));
    DEV->stream_destroy(stream);
    return failures ? 1 : 0;
}

/* Keeps every slot filled until the child exits; its exit status. */
static int
produce_until_exit(tsock_producer *p, pid_t kid)
{
    uint64_t position = 0;
    for (;;) {
        int err = produce_one(p, &position, 50);
        if (err < 0 && err != -ETIMEDOUT) {
            fprintf(stderr, "producing failed: %s\n", tsock_strerror(err));
            return child_status(kid);
        }
        int st;
        if (waitpid(kid, &st, WNOHANG) == kid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
}

static int
case_close_after_bound(const char *endpoint)
{
    producer_hb_timeout_ms = 10000;
    tsock_producer *p = start_producer(endpoint, 1);
    const char *env[] = {"TSOCK_CUDA_SIM_STALL_AFTER", "0", "TSOCK_CUDA_SIM_STALL_MS", "7000",
                         NULL};
    char *argv[] = {"gpu_engine", "--slow-release-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, env);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    int status = produce_until_exit(p, kid);
    if (status != 0)
        fprintf(stderr, "slow consumer exited with %d\n", status);
    EXPECT(status == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

/* Consumer role of gather_timeout: batches of 48 from 32, its device stalled for good, so the
 * first gather's copies never complete. */
static int
gather_timeout_consumer_main(const char *endpoint, const char *timed_out)
{
    tsock_consumer *c;
    if (tsock_consumer_create(&c, endpoint) < 0)
        return 1;
    tsock_consumer_set_heartbeat(c, 50, HB_TIMEOUT_MS);
    tsock_consumer_set_epoch_grace(c, 60000); /* as start_consumer's */
    tsock_consumer_set_batch_size(c, 48);
    if (tsock_consumer_start(c, 30000) < 0)
        return 1;
    tsock_batch *b;
    int err = tsock_consumer_next(c, 1000, &b);
    fprintf(stderr, "gather consumer: next(1000 ms) returned %s\n", tsock_strerror(err));
    EXPECT(err == -ETIMEDOUT);
    touch(timed_out);
    err = tsock_consumer_next(c, 60000, &b);
    fprintf(stderr, "gather consumer: after the producer was killed, next returned %s\n",
            tsock_strerror(err));
    EXPECT(err == TSOCK_E_PRODUCER_LOST);
    /* No destroy: its device never runs the copies, which destroy would wait for. */
    _exit(failures ? 1 : 0);
}

/* Waits (bounded: 30 s) for a child; its status, or -3 after killing it when it did not end. */
static int
child_status_within(pid_t kid)
{
    for (int i = 0; i < 3000; i++) {
        int st;
        if (waitpid(kid, &st, WNOHANG) == kid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    return -3;
}

static int
case_gather_timeout(const char *endpoint, const char *dir)
{
    char go[300], timed_out[300];
    snprintf(timed_out, sizeof timed_out, "%s/timed-out", dir);
    pid_t producer = spawn_stopping_producer(endpoint, dir, go, sizeof go);
    const char *env[] = {"TSOCK_CUDA_SIM_STALL_AFTER", "0", NULL};
    char *argv[] = {"gpu_engine", "--gather-timeout-consumer", (char *)endpoint, timed_out, NULL};
    pid_t consumer = spawn_env(argv, env);
    int timed = file_appears(timed_out);
    if (!timed)
        fprintf(stderr, "next did not return at its timeout: the gather blocks on its copies\n");
    EXPECT(timed);
    kill(producer, SIGKILL);
    waitpid(producer, NULL, 0);
    int status = child_status_within(consumer);
    if (status == -3)
        fprintf(stderr, "next did not return after the producer's loss\n");
    EXPECT(status == 0);
    return failures ? 1 : 0;
}

/* Consumer role of capture_release. */
static int
capture_release_consumer_main(const char *endpoint)
{
    tsock_consumer *c = start_consumer(endpoint, 0);
    tsock__dev_stream_t stream;
    CUDA_OK(DEV->set_device(0));
    CUDA_OK(DEV->stream_create(&stream));
    tsock_batch *b;
    if (tsock_consumer_next(c, 30000, &b) < 0)
        return 4;
    EXPECT(tsock_batch_wait(b, stream) == 0);
    tsock__dev_sim_capture_stream(stream, 1);
    int err = tsock_consumer_release_on_stream(c, b, stream);
    fprintf(stderr, "release on a capturing stream: %s\n", tsock_strerror(err));
    EXPECT(err == TSOCK_E_STATE);
    uint64_t held = 0;
    EXPECT(tsock_consumer_stat(c, TSOCK_STAT_HELD, &held) == 0);
    EXPECT(held == 1);
    tsock__dev_sim_capture_stream(stream, 0);
    EXPECT(tsock_consumer_release_on_stream(c, b, stream) == 0);
    tsock_consumer_destroy(c);
    CUDA_OK(DEV->stream_sync(stream));
    DEV->stream_destroy(stream);
    return failures ? 1 : 0;
}

static int
case_capture_release(const char *endpoint)
{
    tsock_producer *p = start_producer(endpoint, 1);
    char *argv[] = {"gpu_engine", "--capture-release-consumer", (char *)endpoint, NULL};
    pid_t kid = spawn_env(argv, NULL);
    EXPECT(tsock_producer_wait_consumers(p, 1, 30000) == 1);
    EXPECT(produce_until_exit(p, kid) == 0);
    tsock_producer_destroy(p);
    return failures ? 1 : 0;
}

static int
run_case(const char *name, const char *endpoint, const char *dir)
{
    if (strcmp(name, "gather_beats") == 0)
        return case_gather_beats(endpoint, dir);
    if (strcmp(name, "close_waits") == 0)
        return case_close_waits(endpoint);
    if (strcmp(name, "stop_waits") == 0)
        return case_stop_waits(endpoint, dir);
    if (strcmp(name, "partial_end") == 0)
        return case_partial_end(endpoint);
    if (strcmp(name, "held_past_exit") == 0)
        return case_held_past_exit(endpoint, dir);
    if (strcmp(name, "overlap") == 0)
        return case_overlap(endpoint);
    if (strcmp(name, "close_after_bound") == 0)
        return case_close_after_bound(endpoint);
    if (strcmp(name, "gather_timeout") == 0)
        return case_gather_timeout(endpoint, dir);
    if (strcmp(name, "capture_release") == 0)
        return case_capture_release(endpoint);
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
}

int
main(int argc, char **argv)
{
    tsock_set_log(log_line, NULL, TSOCK_LOG_WARN);
    if (argc == 3 && strcmp(argv[1], "--stalled-gather") == 0)
        return stalled_gather_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--closing-consumer") == 0)
        return closing_consumer_main(argv[2]);
    if (argc == 4 && strcmp(argv[1], "--stopping-producer") == 0)
        return stopping_producer_main(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--partial-consumer") == 0)
        return partial_consumer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--overlap-consumer") == 0)
        return overlap_consumer_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--slow-release-consumer") == 0)
        return slow_release_consumer_main(argv[2]);
    if (argc == 4 && strcmp(argv[1], "--gather-timeout-consumer") == 0)
        return gather_timeout_consumer_main(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--capture-release-consumer") == 0)
        return capture_release_consumer_main(argv[2]);
    if (argc != 2) {
        fprintf(stderr,
                "usage: %s gather_beats|close_waits|stop_waits|partial_end|held_past_exit|"
                "overlap|close_after_bound|gather_timeout|capture_release\n",
                argv[0]);
        return 2;
    }
    static const char *const sim_only[] = {"gather_beats", "overlap", "close_after_bound",
                                           "gather_timeout", "capture_release"};
    for (size_t i = 0; i < sizeof sim_only / sizeof sim_only[0]; i++)
        if (strcmp(argv[1], sim_only[i]) == 0 && !tsock__dev_simulated()) {
            printf("SKIP: case %s needs the simulated device's controls (TSOCK_CUDA_SIM=1)\n",
                   argv[1]);
            return SKIP;
        }
    /* Each run gets its own simulated device (inherited by the processes it starts). */
    char simdev[64];
    snprintf(simdev, sizeof simdev, "eng%d", (int)getpid());
    setenv("TSOCK_CUDA_SIM_DEVICE", simdev, 0);
    if (strcmp(argv[1], "stop_waits") == 0)
        setenv("TSOCK_CUDA_SIM_MAX_DELAY_US", "200000", 1); /* this process's reads run late */
    int devices = tsock_cuda_device_count();
    if (devices == TSOCK_E_NO_DEVICE) {
        printf("SKIP: no CUDA device in this process; the GPU tests need one\n");
        return SKIP;
    }
    if (devices < 0) {
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
