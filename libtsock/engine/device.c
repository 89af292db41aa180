/* Device queries of the public API. */
#include "backend/backend.h"
#include "core/core.h"

int
tsock_cuda_device_count(void)
{
    return tsock__backend_cuda_device_count();
}
