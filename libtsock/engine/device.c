/* Device queries of the public API, answered by the backend tables (backend/backend.h): the
 * engine never calls into backend/cuda/ directly. */
#include "backend/backend.h"
#include "core/core.h"

int
tsock_cuda_device_count(void)
{
    return tsock__backend_cuda.device_count();
}
