/*
 * A pretend training loop that takes its batches from a tsock producer.
 *
 *   train_loop [ENDPOINT] [EPOCHS]
 *
 * ENDPOINT defaults to tsock's default ipc endpoint, EPOCHS to 2. Start a producer first, e.g.
 *
 *   tsock-producer --dataset synthetic --epochs 2 &
 *   train_loop
 *
 * Each batch is a read-only view of the producer's shared memory: nothing is copied. The
 * "training step" reads every pixel (a mean) and every label and sample id (a checksum), which
 * is the access pattern a real step has, then gives the batch back with tsock_consumer_release
 * so the producer can refill the slot. Only the public API (tsock/tsock.h) is used.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tsock/tsock.h>

/* How long to wait for the producer: at start, and for each batch. A producer that dies is
 * reported well before this by the heartbeat timeout (TSOCK_E_PRODUCER_LOST). */
#define CONNECT_TIMEOUT_MS 10000
#define NEXT_TIMEOUT_MS 30000

struct epoch_figures {
    uint64_t batches;
    uint64_t samples;
    double pixel_sum;  /* sum of every pixel byte, for the mean */
    uint64_t pixels;   /* number of pixel bytes */
    uint64_t checksum; /* order-independent: a sum of mixed (sample id, label) pairs */
    double start_s;
};

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A 64-bit mix (splitmix64's finaliser), so the checksum changes when any pair changes. */
static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* Finds tensor `name` and checks its dtype; returns its index, or a negative code. */
static int
find_tensor(const tsock_batch *b, const char *name, int dtype)
{
    int t = tsock_batch_find(b, name);
    if (t < 0) {
        fprintf(stderr, "train_loop: the batch has no tensor '%s'\n", name);
        return t;
    }
    if (tsock_batch_tensor_dtype(b, t) != dtype) {
        fprintf(stderr, "train_loop: tensor '%s' is %s, expected %s\n", name,
                tsock_dtype_name(tsock_batch_tensor_dtype(b, t)), tsock_dtype_name(dtype));
        return TSOCK_E_LAYOUT;
    }
    return t;
}

/* The pretend training step: reads the whole batch in place. Returns 0 or a negative code. */
static int
train_step(const tsock_batch *b, struct epoch_figures *fig)
{
    int image = find_tensor(b, "image", TSOCK_UINT8);
    int label = find_tensor(b, "label", TSOCK_INT64);
    int index = find_tensor(b, "index", TSOCK_INT64);
    if (image < 0 || label < 0 || index < 0)
        return TSOCK_E_LAYOUT;

    /* Every tensor's dimension 0 is the batch's sample count; image is [n, H, W, 3]. */
    uint32_t n = tsock_batch_samples(b);
    const uint8_t *pixels = tsock_batch_tensor_data(b, image);
    size_t pixel_bytes = tsock_batch_tensor_bytes(b, image);
    const int64_t *labels = tsock_batch_tensor_data(b, label);
    const int64_t *ids = tsock_batch_tensor_data(b, index);

    uint64_t sum = 0;
    for (size_t i = 0; i < pixel_bytes; i++)
        sum += pixels[i];
    fig->pixel_sum += (double)sum;
    fig->pixels += pixel_bytes;

    for (uint32_t i = 0; i < n; i++)
        fig->checksum += mix64((uint64_t)ids[i] * 0x9e3779b97f4a7c15ULL ^ (uint64_t)labels[i]);

    fig->batches++;
    fig->samples += n;
    return 0;
}

static void
print_epoch(uint64_t epoch, const struct epoch_figures *fig)
{
    double secs = now_s() - fig->start_s;
    printf("epoch %" PRIu64 ": %" PRIu64 " batches, %" PRIu64 " samples, mean pixel %.3f, "
           "checksum %016" PRIx64 ", %.3f s (%.0f samples/s)\n",
           epoch, fig->batches, fig->samples,
           fig->pixels ? fig->pixel_sum / (double)fig->pixels : 0.0, fig->checksum, secs,
           secs > 0 ? (double)fig->samples / secs : 0.0);
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    const char *endpoint = argc > 1 ? argv[1] : NULL; /* NULL: tsock's default endpoint */
    long epochs = argc > 2 ? strtol(argv[2], NULL, 10) : 2;
    if (argc > 3 || epochs < 1) {
        fprintf(stderr, "usage: %s [ENDPOINT] [EPOCHS >= 1]\n", argv[0]);
        return 2;
    }

    printf("train_loop: tsock %s, endpoint %s, %ld epochs\n", tsock_version_string(),
           endpoint ? endpoint : "(default)", epochs);

    tsock_consumer *c = NULL;
    int rc = tsock_consumer_create(&c, endpoint);
    if (rc == 0)
        rc = tsock_consumer_set_name(c, "c_train_loop");
    if (rc == 0)
        rc = tsock_consumer_start(c, CONNECT_TIMEOUT_MS);
    if (rc < 0) {
        fprintf(stderr, "train_loop: cannot connect: %s\n", tsock_strerror(rc));
        tsock_consumer_destroy(c);
        return 1;
    }
    printf("train_loop: connected; producer batch size %" PRIu32 ", %" PRIu32 " slots\n",
           tsock_consumer_batch_capacity(c), tsock_consumer_slot_count(c));

    /* Epochs are this consumer's own: they start where it joined, and each one covers every
     * sample once. The producer marks the last batch of each with tsock_batch_is_epoch_end. */
    struct epoch_figures fig = {.start_s = now_s()};
    long done = 0;
    int status = 0;
    while (done < epochs) {
        tsock_batch *b = NULL;
        rc = tsock_consumer_next(c, NEXT_TIMEOUT_MS, &b);
        if (rc == TSOCK_E_END) {
            /* The producer ran fewer epochs than we asked for: it decides the run's length. */
            printf("train_loop: the producer ended the stream after %ld of %ld epochs\n", done,
                   epochs);
            break;
        }
        if (rc < 0) {
            fprintf(stderr, "train_loop: next: %s\n", tsock_strerror(rc));
            status = 1;
            break;
        }

        rc = train_step(b, &fig);
        /* Read what we need from the batch before releasing it: afterwards it is gone. */
        int epoch_end = tsock_batch_is_epoch_end(b);
        int rrc = tsock_consumer_release(c, b);
        if (rc < 0 || rrc < 0) {
            if (rrc < 0)
                fprintf(stderr, "train_loop: release: %s\n", tsock_strerror(rrc));
            status = 1;
            break;
        }

        if (epoch_end) {
            print_epoch((uint64_t)done, &fig);
            done++;
            fig = (struct epoch_figures){.start_s = now_s()};
        }
    }

    uint64_t wait_ns = 0;
    if (tsock_consumer_stat(c, TSOCK_STAT_WAIT_NS, &wait_ns) == 0)
        printf("train_loop: %ld epochs, %.3f s waiting for batches\n", done,
               (double)wait_ns * 1e-9);
    tsock_consumer_destroy(c); /* releases anything still held and says goodbye */
    return status;
}
