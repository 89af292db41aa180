/* The host shared-memory backend's table: the producer writes straight into the slots, so
 * publish has nothing to do; consumers read the mapped slots in place, so there is nothing to
 * wait for, and a release takes effect at once.
 *
 * With an output conversion (tsock_producer_set_output / _set_normalize) the producer writes
 * uint8 NHWC into host staging instead, and publish converts each batch into its slot once,
 * for every consumer, with the C reference of the GPU's conversion (backend/convert.c): the
 * same bytes as a CUDA ring's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/shm/shm.h"
#include "core/core.h"
#include "core/parallel.h"

struct shm_ring {
    struct tsock__slot_memory base;
    struct tsock__region region;
    size_t stride;
    /* A converting ring: slots as the caller fills them (stage_stride each), and the plan. */
    uint8_t *staging;
    size_t stage_stride;
    struct tsock__convert_plan *plan;
};

static void shm_close(struct tsock__slot_memory *m);

/* The staging slots of a converting ring, reserved (touched) now so that a lack of memory is
 * an error at start, not a signal later. Returns 0 or -ENOMEM / TSOCK_E_LAYOUT. */
static int
reserve_staging(struct shm_ring *r, const struct tsock__ring_request *req,
                struct tsock__ring_shape *shape)
{
    r->plan = calloc(1, sizeof *r->plan);
    if (!r->plan)
        return -ENOMEM;
    int err = tsock__convert_plan_make(req->convert, req->layout, req->batch_size, &shape->layout,
                                       shape->offsets, &shape->stride, r->plan);
    if (err < 0)
        return err;
    size_t bytes;
    if (tsock__mul_size(req->stride, req->slots, &bytes) < 0)
        return TSOCK_E_LAYOUT;
    void *staging = NULL;
    if (posix_memalign(&staging, 4096, bytes ? bytes : 1) != 0) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot reserve %zu bytes of staging memory for the output "
                   "conversion",
                   bytes);
        return -ENOMEM;
    }
    memset(staging, 0, bytes);
    r->staging = staging;
    r->stage_stride = req->stride;
    return 0;
}

struct shm_view {
    struct tsock__ring_view base;
    struct tsock__region region;
};

static int
shm_create(struct tsock__slot_memory **out, const struct tsock__ring_request *req,
           struct tsock__ring_shape *shape)
{
    struct shm_ring *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->base.ops = &tsock__backend_shm;
    shape->layout = *req->layout;
    memcpy(shape->offsets, req->offsets, sizeof shape->offsets);
    shape->stride = req->stride;
    int err = 0;
    if (req->convert && req->convert->tensor[0])
        err = reserve_staging(r, req, shape);
    size_t bytes = 0;
    if (err == 0 && tsock__mul_size(shape->stride, req->slots, &bytes) < 0)
        err = TSOCK_E_LAYOUT;
    if (err == 0) {
        tsock__shm_sweep_orphans();
        err = tsock__shm_create(&r->region, bytes);
    }
    if (err < 0) {
        shm_close(&r->base);
        return err;
    }
    r->stride = shape->stride;
    shape->bytes = bytes;
    *out = &r->base;
    return 0;
}

static size_t
shm_export_blob(const struct tsock__slot_memory *m, const uint8_t **blob)
{
    const struct shm_ring *r = (const struct shm_ring *)m;
    *blob = (const uint8_t *)r->region.name;
    return strlen(r->region.name);
}

static int
shm_fill_pointer(struct tsock__slot_memory *m, uint32_t slot, uint8_t **base)
{
    struct shm_ring *r = (struct shm_ring *)m;
    if (r->staging)
        *base = r->staging + (size_t)slot * r->stage_stride;
    else
        *base = r->region.base + (size_t)slot * r->stride;
    return 0;
}

/* One sample of a batch being converted (tsock__parallel_for's item). */
struct convert_job {
    const struct tsock__convert_plan *plan;
    const uint8_t *in;
    uint8_t *out;
};

static void
convert_sample(void *ctx, size_t item, char *scratch)
{
    const struct convert_job *job = ctx;
    (void)scratch;
    tsock__convert_ref_range(job->plan, job->in, job->out, (uint32_t)item, 1);
}

static int
shm_publish(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples)
{
    struct shm_ring *r = (struct shm_ring *)m;
    if (!r->staging)
        return 0; /* the caller wrote the slot itself: it is readable as it is */
    /* Converted once here, for every consumer, a sample per item on every CPU: one thread
     * converting 224-pixel float32 batches would be slower than the decode workers. */
    struct convert_job job = {r->plan, r->staging + (size_t)slot * r->stage_stride,
                              r->region.base + (size_t)slot * r->stride};
    if (tsock__parallel_for(0, samples, 1, convert_sample, &job) < 0)
        tsock__convert_ref(r->plan, job.in, job.out, samples); /* no thread had memory */
    return 0;
}

static void
shm_close(struct tsock__slot_memory *m)
{
    struct shm_ring *r = (struct shm_ring *)m;
    if (!r)
        return;
    if (r->region.base)
        tsock__shm_release(&r->region);
    free(r->staging);
    free(r->plan);
    free(r);
}

static int
shm_attach(struct tsock__ring_view **out, const struct tsock__attach_request *req)
{
    char name[TSOCK__REGION_NAME_MAX];
    if (req->blob_len == 0 || req->blob_len >= sizeof name)
        return -EINVAL;
    memcpy(name, req->blob, req->blob_len);
    name[req->blob_len] = '\0';
    struct shm_view *v = calloc(1, sizeof *v);
    if (!v)
        return -ENOMEM;
    int err = tsock__shm_attach(&v->region, name, req->ring_bytes);
    if (err < 0) {
        tsock__log(TSOCK_LOG_ERROR, "cannot use the producer's ring %s: %s", name,
                   tsock_strerror(err));
        free(v);
        return err;
    }
    v->base.ops = &tsock__backend_shm;
    *out = &v->base;
    tsock__log(TSOCK_LOG_INFO, "attached the producer's ring %s (%zu bytes)", name,
               req->ring_bytes);
    return 0;
}

static const uint8_t *
shm_view_base(const struct tsock__ring_view *v)
{
    return ((const struct shm_view *)v)->region.base;
}

static int
shm_view_device(const struct tsock__ring_view *v)
{
    return -1;
}

static int
shm_wait(struct tsock__ring_view *v, uint32_t slot, void *stream)
{
    return 0;
}

static int
shm_copy_out(struct tsock__ring_view *v, uint32_t slot, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return 0;
}

static int
shm_copy_finish(struct tsock__ring_view *v)
{
    return 0;
}

static void
shm_detach(struct tsock__ring_view *v)
{
    struct shm_view *sv = (struct shm_view *)v;
    if (!sv)
        return;
    tsock__shm_release(&sv->region);
    free(sv);
}

static int
host_alloc(int device, size_t bytes, void **ptr)
{
    void *grown = malloc(bytes ? bytes : 1);
    if (!grown)
        return -ENOMEM;
    *ptr = grown;
    return 0;
}

static void
host_free(int device, void *ptr)
{
    free(ptr);
}

static int
host_fence_arm(int device, void **fence, void *stream)
{
    return 0; /* the caller's CPU has finished reading host memory when it releases */
}

static int
host_fence_passed(int device, void *fence)
{
    return 1;
}

static void
host_fence_destroy(void *fence)
{
}

static int
host_device_sync(int device)
{
    return 0; /* host memory: reads are done when the caller's code returns */
}

static int
shm_remove_orphan(const uint8_t *blob, size_t blob_len)
{
    char name[TSOCK__REGION_NAME_MAX];
    if (blob_len == 0 || blob_len >= sizeof name)
        return 0;
    memcpy(name, blob, blob_len);
    name[blob_len] = '\0';
    return tsock__shm_remove_if_orphaned(name);
}

static int
host_device_count(void)
{
    return TSOCK_E_NO_DEVICE;
}

const struct tsock__backend tsock__backend_shm = {
    .name = "shm",
    .wire_device = TSOCK_DEVICE_CPU,
    .create = shm_create,
    .export_blob = shm_export_blob,
    .fill_pointer = shm_fill_pointer,
    .publish = shm_publish,
    .close = shm_close,
    .attach = shm_attach,
    .view_base = shm_view_base,
    .view_device = shm_view_device,
    .wait = shm_wait,
    .copy_out = shm_copy_out,
    .copy_finish = shm_copy_finish,
    .detach = shm_detach,
    .buffer_alloc = host_alloc,
    .buffer_free = host_free,
    .fence_arm = host_fence_arm,
    .fence_passed = host_fence_passed,
    .fence_destroy = host_fence_destroy,
    .device_sync = host_device_sync,
    .device_count = host_device_count,
    .remove_orphan = shm_remove_orphan,
};
