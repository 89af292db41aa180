/* The CUDA backend's stand-in for builds without a CUDA toolkit: every entry point says there is
 * no usable GPU, so the library, its programs and the tests behave as on a machine without one.
 * Nothing here touches CUDA. */
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
tsock__cuda_device_count(void)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_ring_create(struct tsock_cuda_ring **out, int device, size_t in_stride,
                        size_t out_stride, uint32_t slots, const struct tsock_convert *cv)
{
    *out = NULL;
    return no_toolkit();
}

int
tsock__cuda_ring_staging(struct tsock_cuda_ring *r, uint8_t **host)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_ring_publish(struct tsock_cuda_ring *r, uint32_t slot, uint32_t samples)
{
    return TSOCK_E_NO_DEVICE;
}

void
tsock__cuda_ring_export(const struct tsock_cuda_ring *r, struct tsock_cuda_handles *h)
{
}

void
tsock__cuda_ring_destroy(struct tsock_cuda_ring *r)
{
}

int
tsock__cuda_import_open(struct tsock_cuda_import **out, int device,
                        const struct tsock_cuda_handles *h, uint32_t slots)
{
    *out = NULL;
    return no_toolkit();
}

uint8_t *
tsock__cuda_import_base(const struct tsock_cuda_import *imp)
{
    return NULL;
}

int
tsock__cuda_import_device(const struct tsock_cuda_import *imp)
{
    return -1;
}

int
tsock__cuda_import_wait(struct tsock_cuda_import *imp, uint32_t slot, void *stream)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_import_copy(struct tsock_cuda_import *imp, uint32_t slot, void *dst, const void *src,
                        size_t bytes)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_import_sync(struct tsock_cuda_import *imp)
{
    return TSOCK_E_NO_DEVICE;
}

void
tsock__cuda_import_close(struct tsock_cuda_import *imp)
{
}

int
tsock__cuda_fence_create(int device, void **fence)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_fence_record(int device, void *fence, void *stream)
{
    return TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_fence_done(int device, void *fence)
{
    return 1;
}

void
tsock__cuda_fence_destroy(void *fence)
{
}

int
tsock__cuda_alloc(int device, size_t bytes, void **ptr)
{
    return TSOCK_E_NO_DEVICE;
}

void
tsock__cuda_free(int device, void *ptr)
{
}
