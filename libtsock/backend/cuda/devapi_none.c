/* The "real runtime" of a build without a CUDA toolkit: there is no GPU to reach, so every
 * process sees no device (TSOCK_E_NO_DEVICE) and nothing past the device count is ever called.
 * The simulated device (TSOCK_CUDA_SIM=1) works in such a build too: it needs no toolkit. */
#ifndef TSOCK_HAVE_CUDA
#include <stddef.h>

#include "backend/cuda/devapi.h"

static const char *
error_text(int raw)
{
    return "tsock was built without the CUDA toolkit: no GPU support (TSOCK_CUDA_SIM=1 selects "
           "the simulated device)";
}

static int
last_raw(void)
{
    return TSOCK__DEV_NO_DEVICE;
}

static int
device_count(int *n)
{
    *n = 0;
    return TSOCK__DEV_NO_DEVICE;
}

static int
get_device(int *device)
{
    *device = 0;
    return TSOCK__DEV_NO_DEVICE;
}

static void *
context_get(void)
{
    return NULL;
}

static void
context_set(void *ctx)
{
}

const struct tsock__devapi tsock__devapi_real = {
    .name = "none",
    .error_text = error_text,
    .last_raw = last_raw,
    .device_count = device_count,
    .get_device = get_device,
    .context_get = context_get,
    .context_set = context_set,
};
#endif
