/* The simulated device's JPEG decoder (issue 20): what nvJPEG does on a GPU, with tsock's own
 * CPU decoder (libjpeg-turbo) so that the GPU decoder's plumbing (which image goes where, the
 * fallbacks, the ordering against the slot's copy and conversion) is tested bit for bit
 * against the CPU path on machines without a GPU.
 *
 * As on a GPU, bad data is known when decode returns (nvJPEG parses and Huffman-decodes on the
 * host): each image is decoded at once into host memory of the decoder's own, and only the
 * write into device memory is queued on the stream, where the simulated device runs it late,
 * after a random delay, under its checks of who writes what. Two host buffers alternate, each
 * reused once the event recorded after its writes has completed.
 *
 * Controls (environment, read at create):
 *   TSOCK_CUDA_SIM_DECODE_FAIL=id,id,...  the decode of these sample ids fails (-EIO), as a
 *                                         GPU decode failing for one image would;
 *   TSOCK_CUDA_SIM_DECODE_HW=0            act as nvJPEG's CUDA backend, which takes progressive
 *                                         JPEGs (default 1: the hardware engine, which does not);
 *   TSOCK_CUDA_SIM_DECODE_HOLD=path       a decode queues half its images, creates `path` and
 *                                         never returns, so that a test can kill the producer
 *                                         mid-decode: the first decode, or the one after
 *   TSOCK_CUDA_SIM_DECODE_HOLD_AFTER=N    N decodes (batches) have returned. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/devapi_sim_decode.h"
#include "image/image.h"

#define MAX_FAIL 64

struct tsock__dev_jpeg {
    struct tsock__decoder *dec;
    uint8_t *host[2];
    size_t cap[2];
    tsock__dev_event_t written[2]; /* the writes out of host[i] have run */
    int cur;
    uint64_t fail[MAX_FAIL];
    int nfail;
    const char *hold;
    unsigned long hold_after, calls;
};

static void
read_controls(struct tsock__dev_jpeg *j, int *hardware)
{
    const char *v = getenv("TSOCK_CUDA_SIM_DECODE_FAIL");
    while (v && *v && j->nfail < MAX_FAIL) {
        char *end;
        unsigned long long id = strtoull(v, &end, 10);
        if (end == v)
            break;
        j->fail[j->nfail++] = id;
        v = *end == ',' ? end + 1 : end;
    }
    v = getenv("TSOCK_CUDA_SIM_DECODE_HW");
    *hardware = !(v && strcmp(v, "0") == 0);
    v = getenv("TSOCK_CUDA_SIM_DECODE_HOLD");
    j->hold = v && *v ? v : NULL;
    v = getenv("TSOCK_CUDA_SIM_DECODE_HOLD_AFTER");
    j->hold_after = v ? strtoul(v, NULL, 10) : 0;
}

int
tsock__sim_jpeg_create(struct tsock__dev_jpeg **out, uint32_t max_batch, int *hardware,
                       const char **name, const char **why)
{
    const struct tsock__devapi *d = &tsock__devapi_sim;
    struct tsock__dev_jpeg *j = calloc(1, sizeof *j);
    *out = NULL;
    if (!j || tsock__decoder_create(&j->dec) != 0) {
        free(j);
        return TSOCK__DEV_NO_MEMORY;
    }
    read_controls(j, hardware);
    for (int i = 0; i < 2; i++) {
        int e = d->event_create(&j->written[i], TSOCK__DEV_EVENT_DISABLE_TIMING);
        if (e != TSOCK__DEV_OK) {
            tsock__sim_jpeg_destroy(j);
            return e;
        }
    }
    *name = *hardware ? "simulated device (libjpeg-turbo, as the hardware engine)"
                      : "simulated device (libjpeg-turbo, as the CUDA backend)";
    *why = NULL;
    *out = j;
    return TSOCK__DEV_OK;
}

static int
failed_by_request(const struct tsock__dev_jpeg *j, uint64_t sample)
{
    for (int i = 0; i < j->nfail; i++)
        if (j->fail[i] == sample)
            return 1;
    return 0;
}

/* Never returns: the test kills this process while its decode is under way. */
static void
hold(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0)
        close(fd);
    for (;;)
        pause();
}

int
tsock__sim_jpeg_decode(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs,
                       uint32_t n, int *status, tsock__dev_stream_t s)
{
    const struct tsock__devapi *d = &tsock__devapi_sim;
    int c = j->cur;
    int e = d->event_sync(j->written[c]); /* host[c]'s writes of two batches ago */
    if (e != TSOCK__DEV_OK)
        return e;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += (size_t)jobs[i].out_w * (size_t)jobs[i].out_h * 3;
    if (total > j->cap[c]) {
        free(j->host[c]);
        j->host[c] = malloc(total);
        j->cap[c] = j->host[c] ? total : 0;
        if (!j->host[c])
            return TSOCK__DEV_NO_MEMORY;
    }
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct tsock__dev_jpeg_job *job = &jobs[i];
        if (j->hold && j->calls == j->hold_after && i == n / 2)
            hold(j->hold);
        size_t bytes = (size_t)job->out_w * (size_t)job->out_h * 3;
        struct tsock__resize_spec spec = {
            .crop = {job->crop_x, job->crop_y, job->crop_w, job->crop_h},
            .resize_w = job->resize_w,
            .resize_h = job->resize_h,
            .win_x = job->win_x,
            .win_y = job->win_y,
            .out_w = job->out_w,
            .out_h = job->out_h,
            .flip = job->flip};
        status[i] =
            failed_by_request(j, job->sample)
                ? -EIO
                : tsock__decode_resize(j->dec, job->data, job->size, &spec, j->host[c] + at);
        if (status[i] != 0)
            continue;
        e = d->memcpy_async(job->dst, j->host[c] + at, bytes, TSOCK__DEV_H2D, s);
        if (e != TSOCK__DEV_OK)
            return e;
        at += bytes;
    }
    e = d->event_record(j->written[c], s);
    j->cur ^= 1;
    j->calls++;
    return e;
}

void
tsock__sim_jpeg_destroy(struct tsock__dev_jpeg *j)
{
    if (!j)
        return;
    const struct tsock__devapi *d = &tsock__devapi_sim;
    for (int i = 0; i < 2; i++) {
        if (j->written[i]) {
            (void)d->event_sync(j->written[i]);
            (void)d->event_destroy(j->written[i]);
        }
        free(j->host[i]);
    }
    tsock__decoder_destroy(j->dec);
    free(j);
}
