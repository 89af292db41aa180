/* The CUDA table of a build without a CUDA toolkit: every operation says there is no usable
 * GPU, so the library, its programs and the tests behave as on a machine without one. Nothing
 * here touches CUDA. */
#include <errno.h>
#include <stddef.h>

#include "backend/backend.h"
#include "core/core.h"

static int
no_toolkit(void)
{
    tsock__log(TSOCK_LOG_ERROR, "this tsock was built without the CUDA backend (no CUDA "
                                "toolkit at build time)");
    return TSOCK_E_NO_DEVICE;
}

int
tsock__backend_cuda_device_count(void)
{
    return TSOCK_E_NO_DEVICE;
}

static int
refuse_create(struct tsock__slot_memory **out, const struct tsock__ring_request *req,
              struct tsock__ring_shape *shape)
{
    *out = NULL;
    return no_toolkit();
}

static int
refuse_attach(struct tsock__ring_view **out, const struct tsock__attach_request *req)
{
    *out = NULL;
    return no_toolkit();
}

/* Nothing below can be reached: no ring or view of this table ever exists. */

static size_t
no_blob(const struct tsock__slot_memory *m, const uint8_t **blob)
{
    *blob = NULL;
    return 0;
}

static int
no_slot(struct tsock__slot_memory *m, uint32_t slot, uint8_t **base)
{
    return TSOCK_E_NO_DEVICE;
}

static int
no_publish(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples)
{
    return TSOCK_E_NO_DEVICE;
}

static void
no_close(struct tsock__slot_memory *m)
{
}

static const uint8_t *
no_base(const struct tsock__ring_view *v)
{
    return NULL;
}

static int
no_device(const struct tsock__ring_view *v)
{
    return -1;
}

static int
no_wait(struct tsock__ring_view *v, uint32_t slot, void *stream)
{
    return TSOCK_E_NO_DEVICE;
}

static int
no_copy(struct tsock__ring_view *v, uint32_t slot, void *dst, const void *src, size_t bytes)
{
    return TSOCK_E_NO_DEVICE;
}

static int
no_finish(struct tsock__ring_view *v)
{
    return TSOCK_E_NO_DEVICE;
}

static void
no_detach(struct tsock__ring_view *v)
{
}

static int
no_alloc(int device, size_t bytes, void **ptr)
{
    return no_toolkit();
}

static void
no_free(int device, void *ptr)
{
}

static int
no_fence_arm(int device, void **fence, void *stream)
{
    return no_toolkit();
}

static int
no_fence_passed(int device, void *fence)
{
    return TSOCK_E_NO_DEVICE;
}

static void
no_fence_destroy(void *fence)
{
}

static int
no_device_sync(int device)
{
    return 0; /* nothing was ever queued on a device here */
}

static int
no_orphan(const uint8_t *blob, size_t blob_len)
{
    return 0;
}

const struct tsock__backend tsock__backend_cuda = {
    .name = "cuda (not built)",
    .wire_device = TSOCK_DEVICE_CUDA,
    .create = refuse_create,
    .export_blob = no_blob,
    .fill_pointer = no_slot,
    .publish = no_publish,
    .close = no_close,
    .attach = refuse_attach,
    .view_base = no_base,
    .view_device = no_device,
    .wait = no_wait,
    .copy_out = no_copy,
    .copy_finish = no_finish,
    .detach = no_detach,
    .buffer_alloc = no_alloc,
    .buffer_free = no_free,
    .fence_arm = no_fence_arm,
    .fence_passed = no_fence_passed,
    .fence_destroy = no_fence_destroy,
    .device_sync = no_device_sync,
    .remove_orphan = no_orphan,
};
