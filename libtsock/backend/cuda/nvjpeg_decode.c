/* The GPU decoder on nvJPEG (issue 20), the device API's jpeg_* entries on a real GPU.
 *
 * nvJPEG's hardware engine (A100, H100, H200: nvjpegCreateEx with NVJPEG_BACKEND_HARDWARE)
 * takes a batch at once (nvjpegDecodeBatchedEx), each image with its own region of interest,
 * so only the crop is decoded. The images it refuses (nvjpegDecodeBatchedSupportedEx) and all
 * images on a GPU without the engine go to nvJPEG's CUDA decoder (GPU-assisted Huffman, one
 * image at a time). An image that nvJPEG cannot parse or decode is reported to the caller, which
 * decodes it on the CPU. Each decoded crop is then resized, windowed and flipped by
 * gpu_resize.cu straight into its place in the slot.
 *
 * The decoded crops live in one device buffer, filled in chunks of at most ROI_BUDGET bytes so
 * that a batch of large photographs cannot exhaust device memory; everything runs on the
 * caller's stream, so a chunk's decode follows the previous chunk's resize. decode returns once
 * the stream has run the batch: the input bytes are the caller's host memory, valid during the
 * call only, and nvJPEG's pinned staging is reused from image to image. */
#ifdef TSOCK_HAVE_CUDA /* else devapi_none.c */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_resize.h"
#include "backend/cuda/nvjpeg_api.h"
#include "backend/cuda/nvjpeg_decode.h"
#include "core/core.h"

cudaError_t tsock__cuda_resize_launch(const uint8_t *src, const struct tsock__resize_geom *g,
                                      uint8_t *dst, cudaStream_t stream);

#define ROI_BUDGET ((size_t)512 << 20)

/* How an image of a chunk is decoded: the hardware engine, its crop only (ROI) or, where the
 * engine takes the image but not the region, whole (the resize kernel then reads the crop out
 * of it); or nvJPEG's CUDA decoder, its crop only. */
enum mode { MODE_ROI, MODE_FULL, MODE_CUDA };
#define ROI_ALIGN 256

struct tsock__dev_jpeg {
    const struct tsock__nvjpeg *nv;
    /* The hardware engine, or NULL. */
    tsock__nvjpeg_handle hw;
    tsock__nvjpeg_state hw_state;
    tsock__nvjpeg_stream hw_js;
    tsock__nvjpeg_params *hw_params; /* one per image of a batch */
    int hw_batch;                    /* DecodeBatchedInitialize's batch size so far, 0: none */
    /* The CUDA decoder. */
    tsock__nvjpeg_handle h;
    tsock__nvjpeg_decoder dec;
    tsock__nvjpeg_state st;
    tsock__nvjpeg_buffer pinned, devbuf;
    tsock__nvjpeg_stream js;
    tsock__nvjpeg_params params;
    /* Per batch. */
    uint32_t cap;
    const unsigned char **data;
    size_t *len, *roi_off;
    tsock__nvjpeg_image *dest;
    tsock__nvjpeg_params *batch_params;
    uint32_t *hw_idx;
    uint8_t *mode; /* enum mode, per image of a chunk */
    unsigned *full_w, *full_h;
    uint8_t *roi; /* device */
    size_t roi_cap;
    int warned;
};

static int
image_error(int st)
{
    switch (st) {
    case TSOCK__NVJPEG_BAD_JPEG:
    case TSOCK__NVJPEG_INCOMPLETE_BITSTREAM: return -EPROTO;
    case TSOCK__NVJPEG_NOT_SUPPORTED:
    case TSOCK__NVJPEG_IMPLEMENTATION_NOT_SUPPORTED: return -ENOTSUP;
    case TSOCK__NVJPEG_ALLOCATOR_FAILURE: return -ENOMEM;
    default: return -EIO;
    }
}

/* The CUDA decoder: a GPU-assisted Huffman decoder where this nvJPEG has one, else the hybrid. */
static int
open_cuda_decoder(struct tsock__dev_jpeg *j)
{
    const struct tsock__nvjpeg *nv = j->nv;
    int st = nv->CreateEx(TSOCK__NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &j->h);
    if (st != 0) {
        tsock__log(TSOCK_LOG_ERROR, "nvjpegCreateEx: %s", tsock__nvjpeg_status_text(st));
        return st == TSOCK__NVJPEG_ARCH_MISMATCH ? TSOCK__DEV_NO_DEVICE : TSOCK__DEV_OTHER;
    }
    if (nv->DecoderCreate(j->h, TSOCK__NVJPEG_BACKEND_GPU_HYBRID, &j->dec) != 0 &&
        (st = nv->DecoderCreate(j->h, TSOCK__NVJPEG_BACKEND_HYBRID, &j->dec)) != 0) {
        tsock__log(TSOCK_LOG_ERROR, "nvjpegDecoderCreate: %s", tsock__nvjpeg_status_text(st));
        return TSOCK__DEV_OTHER;
    }
    if ((st = nv->DecoderStateCreate(j->h, j->dec, &j->st)) == 0 &&
        (st = nv->BufferPinnedCreate(j->h, NULL, &j->pinned)) == 0 &&
        (st = nv->BufferDeviceCreate(j->h, NULL, &j->devbuf)) == 0 &&
        (st = nv->StateAttachPinnedBuffer(j->st, j->pinned)) == 0 &&
        (st = nv->StateAttachDeviceBuffer(j->st, j->devbuf)) == 0 &&
        (st = nv->JpegStreamCreate(j->h, &j->js)) == 0 &&
        (st = nv->DecodeParamsCreate(j->h, &j->params)) == 0)
        st = nv->DecodeParamsSetOutputFormat(j->params, TSOCK__NVJPEG_OUTPUT_RGBI);
    if (st != 0) {
        tsock__log(TSOCK_LOG_ERROR, "starting nvJPEG's CUDA decoder: %s",
                   tsock__nvjpeg_status_text(st));
        return st == TSOCK__NVJPEG_ALLOCATOR_FAILURE ? TSOCK__DEV_NO_MEMORY : TSOCK__DEV_OTHER;
    }
    return TSOCK__DEV_OK;
}

/* The hardware engine, where the GPU has one; silence otherwise (the CUDA decoder serves). */
static void
open_hardware(struct tsock__dev_jpeg *j)
{
    const struct tsock__nvjpeg *nv = j->nv;
    int st = nv->CreateEx(TSOCK__NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &j->hw);
    if (st == 0 && (st = nv->JpegStateCreate(j->hw, &j->hw_state)) == 0)
        st = nv->JpegStreamCreate(j->hw, &j->hw_js);
    if (st != 0) {
        tsock__log(TSOCK_LOG_INFO,
                   "nvJPEG: no hardware JPEG engine here (%s): the CUDA decoder "
                   "decodes every image",
                   tsock__nvjpeg_status_text(st));
        if (j->hw_state)
            nv->JpegStateDestroy(j->hw_state);
        if (j->hw)
            nv->Destroy(j->hw);
        j->hw = j->hw_state = NULL;
    }
}

int
tsock__nvjpeg_create(struct tsock__dev_jpeg **out, uint32_t max_batch, int *hardware,
                     const char **name, const char **why)
{
    *out = NULL;
    const struct tsock__nvjpeg *nv = tsock__nvjpeg_load(why);
    if (!nv)
        return TSOCK__DEV_NO_LIBRARY;
    struct tsock__dev_jpeg *j = calloc(1, sizeof *j);
    if (!j)
        return TSOCK__DEV_NO_MEMORY;
    j->nv = nv;
    open_hardware(j);
    int e = open_cuda_decoder(j);
    if (e != TSOCK__DEV_OK) {
        tsock__nvjpeg_destroy(j);
        return e;
    }
    *hardware = j->hw != NULL;
    *name = j->hw ? "nvJPEG hardware engine (nvJPEG CUDA decoder for what it refuses)"
                  : "nvJPEG CUDA decoder";
    *out = j;
    return TSOCK__DEV_OK;
}

static int
reserve(struct tsock__dev_jpeg *j, uint32_t n)
{
    if (n <= j->cap)
        return 0;
#define GROW(field)                                                                                \
    do {                                                                                           \
        void *p = realloc((void *)j->field, (size_t)n * sizeof *j->field);                         \
        if (!p)                                                                                    \
            return -ENOMEM;                                                                        \
        j->field = p;                                                                              \
    } while (0)
    GROW(data);
    GROW(len);
    GROW(roi_off);
    GROW(dest);
    GROW(batch_params);
    GROW(hw_idx);
    GROW(hw_params);
    GROW(mode);
    GROW(full_w);
    GROW(full_h);
#undef GROW
    for (uint32_t i = j->cap; i < n; i++)
        j->hw_params[i] = NULL;
    if (j->hw)
        for (uint32_t i = j->cap; i < n; i++) {
            if (j->nv->DecodeParamsCreate(j->hw, &j->hw_params[i]) != 0 ||
                j->nv->DecodeParamsSetOutputFormat(j->hw_params[i], TSOCK__NVJPEG_OUTPUT_RGBI) !=
                    0) {
                j->cap = i;
                return -ENOMEM;
            }
        }
    j->cap = n;
    return 0;
}

/* Makes the crop buffer hold `bytes` (the stream is idle: decode waits for it at its end). */
static int
reserve_roi(struct tsock__dev_jpeg *j, size_t bytes, tsock__dev_stream_t s)
{
    const struct tsock__devapi *d = &tsock__devapi_real;
    if (bytes <= j->roi_cap)
        return TSOCK__DEV_OK;
    int e = d->stream_sync(s);
    if (e == TSOCK__DEV_OK && j->roi)
        e = d->free(j->roi);
    j->roi = NULL;
    j->roi_cap = 0;
    if (e == TSOCK__DEV_OK && (e = d->malloc((void **)&j->roi, bytes)) == TSOCK__DEV_OK)
        j->roi_cap = bytes;
    return e;
}

static size_t
aligned(size_t b)
{
    return (b + ROI_ALIGN - 1) & ~(size_t)(ROI_ALIGN - 1);
}

static size_t
roi_bytes(const struct tsock__dev_jpeg_job *job)
{
    return aligned((size_t)job->crop_w * (size_t)job->crop_h * 3);
}

/* Whether the hardware engine takes image i of a chunk, and how (mode); an image nvJPEG cannot
 * parse gets its error (the caller decodes it on the CPU). */
static void
classify(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *job, uint32_t i, int *status)
{
    const struct tsock__nvjpeg *nv = j->nv;
    tsock__nvjpeg_params p = j->hw_params[i];
    int unsupported = 1;
    j->mode[i] = MODE_CUDA;
    int st = nv->JpegStreamParse(j->hw, job->data, job->size, 0, 0, j->hw_js);
    if (st != 0) {
        *status = image_error(st);
        return;
    }
    if (nv->JpegStreamGetFrameDimensions(j->hw_js, &j->full_w[i], &j->full_h[i]) != 0)
        return;
    if (nv->DecodeParamsSetROI(p, job->crop_x, job->crop_y, job->crop_w, job->crop_h) == 0 &&
        nv->DecodeBatchedSupportedEx(j->hw, j->hw_js, p, &unsupported) == 0 && !unsupported) {
        j->mode[i] = MODE_ROI;
        return;
    }
    unsupported = 1;
    if (nv->DecodeParamsSetROI(p, 0, 0, -1, -1) == 0 &&
        nv->DecodeBatchedSupportedEx(j->hw, j->hw_js, p, &unsupported) == 0 && !unsupported)
        j->mode[i] = MODE_FULL;
}

/* Bytes image i takes in the crop buffer. */
static size_t
buffer_bytes(const struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *job, uint32_t i)
{
    if (j->mode[i] == MODE_FULL)
        return aligned((size_t)j->full_w[i] * j->full_h[i] * 3);
    return roi_bytes(job);
}

/* The hardware engine's share of a chunk, decoded as one batch. When nvJPEG refuses the batch
 * as a whole, its images go to the CUDA decoder (mode MODE_CUDA, status still 1). */
static void
decode_hardware(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs, uint32_t n,
                const int *status, tsock__dev_stream_t s)
{
    const struct tsock__nvjpeg *nv = j->nv;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (status[i] != 1 || j->mode[i] == MODE_CUDA)
            continue;
        size_t w = j->mode[i] == MODE_FULL ? j->full_w[i] : (size_t)jobs[i].crop_w;
        j->data[m] = jobs[i].data;
        j->len[m] = jobs[i].size;
        j->dest[m] = (tsock__nvjpeg_image){{j->roi + j->roi_off[i]}, {w * 3}};
        j->batch_params[m] = j->hw_params[i];
        j->hw_idx[m++] = i;
    }
    if (m == 0)
        return;
    int st = 0;
    if (j->hw_batch != (int)m) {
        st = nv->DecodeBatchedInitialize(j->hw, j->hw_state, (int)m, 1, TSOCK__NVJPEG_OUTPUT_RGBI);
        j->hw_batch = st == 0 ? (int)m : 0;
    }
    if (st == 0)
        st = nv->DecodeBatchedEx(j->hw, j->hw_state, j->data, j->len, j->dest, j->batch_params,
                                 (tsock__nvjpeg_cuda_stream)s);
    if (st != 0) {
        /* The CUDA decoder tells the images apart. */
        if (!j->warned++)
            tsock__log(TSOCK_LOG_WARN,
                       "nvJPEG's hardware engine failed a batch (%s): the CUDA decoder takes it "
                       "(said once)",
                       tsock__nvjpeg_status_text(st));
        j->hw_batch = 0;
        for (uint32_t k = 0; k < m; k++)
            j->mode[j->hw_idx[k]] = MODE_CUDA;
    }
}

/* The CUDA decoder, image by image, for every image still at status 1. */
static int
decode_cuda(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs, uint32_t n,
            int *status, tsock__dev_stream_t s)
{
    const struct tsock__nvjpeg *nv = j->nv;
    for (uint32_t i = 0; i < n; i++) {
        if (status[i] != 1 || j->mode[i] != MODE_CUDA)
            continue;
        const struct tsock__dev_jpeg_job *job = &jobs[i];
        tsock__nvjpeg_image dest = {{j->roi + j->roi_off[i]}, {(size_t)job->crop_w * 3}};
        int st = nv->JpegStreamParse(j->h, job->data, job->size, 0, 0, j->js);
        if (st == 0)
            st = nv->DecodeParamsSetROI(j->params, job->crop_x, job->crop_y, job->crop_w,
                                        job->crop_h);
        if (st == 0)
            st = nv->DecodeJpeg(j->h, j->dec, j->st, j->js, &dest, j->params,
                                (tsock__nvjpeg_cuda_stream)s);
        status[i] = st == 0 ? 0 : image_error(st);
        /* The state's pinned buffer is refilled by the next image's host phase. */
        int e = tsock__devapi_real.stream_sync(s);
        if (e != TSOCK__DEV_OK)
            return e;
    }
    return TSOCK__DEV_OK;
}

/* One chunk: decode the crops (or whole images), then resize each into its place. */
static int
decode_chunk(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs, uint32_t n,
             int *status, tsock__dev_stream_t s)
{
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        status[i] = 1; /* not decoded yet */
        j->mode[i] = MODE_CUDA;
        if (j->hw)
            classify(j, &jobs[i], i, &status[i]);
        j->roi_off[i] = total;
        total += buffer_bytes(j, &jobs[i], i);
    }
    int e = reserve_roi(j, total, s);
    if (e != TSOCK__DEV_OK)
        return e;
    if (j->hw)
        decode_hardware(j, jobs, n, status, s);
    for (uint32_t i = 0; i < n; i++)
        if (status[i] == 1 && j->mode[i] != MODE_CUDA)
            status[i] = 0; /* the hardware batch took it */
    e = decode_cuda(j, jobs, n, status, s);
    for (uint32_t i = 0; i < n && e == TSOCK__DEV_OK; i++) {
        if (status[i] != 0)
            continue;
        const struct tsock__dev_jpeg_job *job = &jobs[i];
        const uint8_t *src = j->roi + j->roi_off[i];
        size_t pitch = (size_t)job->crop_w * 3;
        if (j->mode[i] == MODE_FULL) {
            pitch = (size_t)j->full_w[i] * 3;
            src += (size_t)job->crop_y * pitch + (size_t)job->crop_x * 3;
        }
        struct tsock__resize_geom g = {.src_w = job->crop_w,
                                       .src_h = job->crop_h,
                                       .pitch = pitch,
                                       .resize_w = job->resize_w,
                                       .resize_h = job->resize_h,
                                       .win_x = job->win_x,
                                       .win_y = job->win_y,
                                       .out_w = job->out_w,
                                       .out_h = job->out_h,
                                       .flip = job->flip};
        if (tsock__cuda_resize_launch(src, &g, job->dst, (cudaStream_t)s) != cudaSuccess)
            e = TSOCK__DEV_LAUNCH;
    }
    return e;
}

int
tsock__nvjpeg_decode(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs, uint32_t n,
                     int *status, tsock__dev_stream_t s)
{
    if (reserve(j, n) != 0)
        return TSOCK__DEV_NO_MEMORY;
    int e = TSOCK__DEV_OK;
    for (uint32_t i = 0; i < n && e == TSOCK__DEV_OK;) {
        /* A chunk: as many images as fit the budget, at least one. */
        uint32_t k = 1;
        size_t bytes = roi_bytes(&jobs[i]);
        while (i + k < n && bytes + roi_bytes(&jobs[i + k]) <= ROI_BUDGET)
            bytes += roi_bytes(&jobs[i + k++]);
        e = decode_chunk(j, jobs + i, k, status + i, s);
        i += k;
    }
    if (e == TSOCK__DEV_OK)
        e = tsock__devapi_real.stream_sync(s);
    return e;
}

void
tsock__nvjpeg_destroy(struct tsock__dev_jpeg *j)
{
    if (!j)
        return;
    const struct tsock__nvjpeg *nv = j->nv;
    for (uint32_t i = 0; i < j->cap && j->hw_params; i++)
        if (j->hw_params[i])
            nv->DecodeParamsDestroy(j->hw_params[i]);
    if (j->hw_js)
        nv->JpegStreamDestroy(j->hw_js);
    if (j->hw_state)
        nv->JpegStateDestroy(j->hw_state);
    if (j->hw)
        nv->Destroy(j->hw);
    if (j->params)
        nv->DecodeParamsDestroy(j->params);
    if (j->js)
        nv->JpegStreamDestroy(j->js);
    if (j->st)
        nv->JpegStateDestroy(j->st);
    if (j->pinned)
        nv->BufferPinnedDestroy(j->pinned);
    if (j->devbuf)
        nv->BufferDeviceDestroy(j->devbuf);
    if (j->dec)
        nv->DecoderDestroy(j->dec);
    if (j->h)
        nv->Destroy(j->h);
    if (j->roi)
        (void)tsock__devapi_real.free(j->roi);
    free(j->data);
    free(j->len);
    free(j->roi_off);
    free(j->dest);
    free(j->batch_params);
    free(j->hw_idx);
    free(j->hw_params);
    free(j->mode);
    free(j->full_w);
    free(j->full_h);
    free(j);
}

#endif
