/* The GPU decoder of a device ring (issue 20): image/device_decoder.h's interface, on the device
 * API's JPEG decoder (nvJPEG, or the simulated device's).
 *
 * The pipeline hands over a batch while the filling slot's staging buffer is current; each job
 * names where the CPU would have written the image in that buffer. The device decodes into a
 * device buffer shaped like the staging slot (one per staging buffer), at the same offset. At
 * publish, the ring copies the staging slot to the device as always, then merge copies the
 * device-decoded images over their places (the staging bytes there were never written), before
 * the conversion kernel runs: everything on the ring's one stream, so in order.
 *
 * A device buffer is reused two batches later, when its staging buffer is: the ring waits for
 * the staging buffer's copy event before handing it out again, and that event is recorded after
 * the merge, so the previous merge out of the buffer has finished by then. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpudec.h"
#include "image/device_decoder.h"

struct range {
    size_t off, len;
};

struct tsock__cuda_gpudec {
    struct tsock__device_decoder base;
    int device;
    tsock__dev_stream_t stream; /* the ring's */
    uint8_t *staging[2];
    size_t stride;
    uint8_t *out[2]; /* device, stride bytes each */
    struct range *ranges[2];
    uint32_t nranges[2], range_cap[2];
    int current;
    struct tsock__dev_jpeg *jpeg;
    int hardware;
    const char *name;
    struct tsock__dev_jpeg_job *jobs;
    uint32_t jobs_cap;
};

static int
accepts(const struct tsock__device_decoder *dd, const struct tsock__image_info *info)
{
    const struct tsock__cuda_gpudec *g = (const struct tsock__cuda_gpudec *)dd;
    /* CMYK and YCCK go to the CPU for PIL's inverted polarity and formula; RGB-coded JPEGs
     * (no colour transform) because nvJPEG would treat them as YCbCr. */
    if (info->format != TSOCK__IMAGE_JPEG || info->bit_depth != 8 ||
        (info->color != TSOCK__COLOR_YCBCR && info->color != TSOCK__COLOR_GRAY))
        return 0;
    return !(info->progressive && g->hardware);
}

static const char *
name(const struct tsock__device_decoder *dd)
{
    return ((const struct tsock__cuda_gpudec *)dd)->name;
}

/* Notes that [off, off + len) of the current buffer holds a device-decoded image. */
static int
add_range(struct tsock__cuda_gpudec *g, size_t off, size_t len)
{
    int c = g->current;
    uint32_t n = g->nranges[c];
    if (n && g->ranges[c][n - 1].off + g->ranges[c][n - 1].len == off) {
        g->ranges[c][n - 1].len += len; /* neighbours in the batch: one copy */
        return 0;
    }
    if (n == g->range_cap[c]) {
        uint32_t cap = n ? 2 * n : 64;
        struct range *r = realloc(g->ranges[c], cap * sizeof *r);
        if (!r)
            return -ENOMEM;
        g->ranges[c] = r;
        g->range_cap[c] = cap;
    }
    g->ranges[c][n] = (struct range){off, len};
    g->nranges[c] = n + 1;
    return 0;
}

/* The device job of `job`, or -EINVAL when its output is not inside the current staging slot. */
static int
device_job(const struct tsock__cuda_gpudec *g, const struct tsock__image_job *job,
           struct tsock__dev_jpeg_job *dj, size_t *off)
{
    const struct tsock__resize_spec *s = &job->spec;
    size_t bytes = (size_t)s->out_w * (size_t)s->out_h * 3;
    const uint8_t *base = g->staging[g->current];
    if (job->out < base || (size_t)(job->out - base) > g->stride ||
        bytes > g->stride - (size_t)(job->out - base))
        return -EINVAL;
    *off = (size_t)(job->out - base);
    *dj = (struct tsock__dev_jpeg_job){.data = job->data,
                                       .size = job->size,
                                       .crop_x = s->crop.x,
                                       .crop_y = s->crop.y,
                                       .crop_w = s->crop.w,
                                       .crop_h = s->crop.h,
                                       .resize_w = s->resize_w,
                                       .resize_h = s->resize_h,
                                       .win_x = s->win_x,
                                       .win_y = s->win_y,
                                       .out_w = s->out_w,
                                       .out_h = s->out_h,
                                       .flip = s->flip,
                                       .dst = g->out[g->current] + *off,
                                       .sample = job->sample};
    return 0;
}

static int
decode(struct tsock__device_decoder *dd, const struct tsock__image_job *jobs, uint32_t n,
       int *status)
{
    struct tsock__cuda_gpudec *g = (struct tsock__cuda_gpudec *)dd;
    if (n > g->jobs_cap) {
        struct tsock__dev_jpeg_job *j = realloc(g->jobs, (size_t)n * sizeof *j);
        if (!j)
            return -ENOMEM;
        g->jobs = j;
        g->jobs_cap = n;
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t off;
        status[i] = device_job(g, &jobs[i], &g->jobs[i], &off);
        if (status[i] < 0)
            return status[i]; /* the pipeline's bug, not the image's */
    }
    struct tsock__cuda_guard guard;
    int err = tsock__cuda_enter(g->device, &guard);
    if (err < 0)
        return err;
    int e = tsock__dev()->jpeg_decode(g->jpeg, g->jobs, n, status, g->stream);
    tsock__cuda_leave(&guard);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "decoding JPEGs on the GPU");
    for (uint32_t i = 0; i < n; i++)
        if (status[i] == 0) {
            size_t off = (size_t)(g->jobs[i].dst - g->out[g->current]);
            int r = add_range(g, off, (size_t)jobs[i].spec.out_w * jobs[i].spec.out_h * 3);
            if (r < 0)
                return r;
        }
    return 0;
}

static const struct tsock__device_decoder_ops ops = {
    .accepts = accepts,
    .decode = decode,
    .name = name,
};

/* One message for a missing nvJPEG, saying what to install. */
static int
explain(int e, const char *why)
{
    if (e == TSOCK__DEV_NO_LIBRARY) {
        tsock__log(TSOCK_LOG_ERROR,
                   "the GPU decoder needs NVIDIA's nvJPEG library, which this process cannot load "
                   "(%s): install the CUDA toolkit's nvjpeg (libnvjpeg.so.13 or .12), or the "
                   "nvidia-nvjpeg Python wheel (CUDA 13; nvidia-nvjpeg-cu12 for CUDA 12: "
                   "scripts/deps.sh installs it on a machine with a GPU) and point "
                   "TSOCK_NVJPEG_LIBRARY at its lib/libnvjpeg.so.13; or use --decoder cpu",
                   why ? why : "not found");
        return -ENOPKG;
    }
    return tsock__cuda_fail(e, "starting the GPU JPEG decoder");
}

int
tsock__cuda_gpudec_create(struct tsock__cuda_gpudec **out, int device, tsock__dev_stream_t stream,
                          uint8_t *const staging[2], size_t stride, uint32_t batch)
{
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_gpudec *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g)
        return -ENOMEM;
    g->base.ops = &ops;
    g->device = device;
    g->stream = stream;
    g->staging[0] = staging[0];
    g->staging[1] = staging[1];
    g->stride = stride;
    const char *why = NULL;
    int e = d->jpeg_create(&g->jpeg, batch, &g->hardware, &g->name, &why);
    int err = e == TSOCK__DEV_OK ? 0 : explain(e, why);
    for (int i = 0; i < 2 && err == 0; i++)
        if ((e = d->malloc((void **)&g->out[i], stride)) != TSOCK__DEV_OK)
            err = tsock__cuda_fail(e, "cudaMalloc (GPU decoder output)");
    if (err < 0) {
        tsock__cuda_gpudec_destroy(g);
        return err;
    }
    tsock__log(TSOCK_LOG_INFO, "GPU decoder: %s on CUDA device %d", g->name, device);
    *out = g;
    return 0;
}

struct tsock__device_decoder *
tsock__cuda_gpudec_bind(struct tsock__cuda_gpudec *g, int current)
{
    g->current = current;
    g->nranges[current] = 0;
    return &g->base;
}

int
tsock__cuda_gpudec_merge(struct tsock__cuda_gpudec *g, int current, uint8_t *target,
                         tsock__dev_stream_t stream)
{
    const struct tsock__devapi *d = tsock__dev();
    int e = TSOCK__DEV_OK;
    for (uint32_t i = 0; i < g->nranges[current] && e == TSOCK__DEV_OK; i++) {
        const struct range *r = &g->ranges[current][i];
        e = d->memcpy_async(target + r->off, g->out[current] + r->off, r->len, TSOCK__DEV_D2D,
                            stream);
    }
    g->nranges[current] = 0;
    return e;
}

void
tsock__cuda_gpudec_destroy(struct tsock__cuda_gpudec *g)
{
    if (!g)
        return;
    const struct tsock__devapi *d = tsock__dev();
    if (g->jpeg)
        d->jpeg_destroy(g->jpeg);
    for (int i = 0; i < 2; i++) {
        if (g->out[i])
            (void)d->free(g->out[i]);
        free(g->ranges[i]);
    }
    free(g->jobs);
    free(g);
}

/* Public (tsock.h). */
int
tsock_cuda_decoder_check(int device)
{
    if (device < 0)
        return -EINVAL;
    int n = tsock__cuda_device_count();
    if (n < 0)
        return n;
    if (device >= n) {
        tsock__log(TSOCK_LOG_ERROR, "no CUDA device %d: this process sees %d", device, n);
        return TSOCK_E_NO_DEVICE;
    }
    struct tsock__cuda_guard guard;
    int err = tsock__cuda_enter(device, &guard);
    if (err < 0)
        return err;
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__dev_jpeg *j = NULL;
    int hardware = 0;
    const char *nm = NULL, *why = NULL;
    int e = d->jpeg_create(&j, 1, &hardware, &nm, &why);
    if (e == TSOCK__DEV_OK) {
        tsock__log(TSOCK_LOG_INFO, "GPU decoder: %s can run on CUDA device %d", nm, device);
        d->jpeg_destroy(j);
    }
    tsock__cuda_leave(&guard);
    return e == TSOCK__DEV_OK ? 0 : explain(e, why);
}
