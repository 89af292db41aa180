/* Choosing a backend: by the producer's device setting, or by a WELCOME's device field. */
#include "backend/backend.h"
#include "core/core.h"

const struct tsock__backend *
tsock__backend_for_device(int device)
{
    return device < 0 ? &tsock__backend_shm : &tsock__backend_cuda;
}

const struct tsock__backend *
tsock__backend_for_wire(uint32_t wire_device)
{
    if (wire_device == tsock__backend_shm.wire_device)
        return &tsock__backend_shm;
    if (wire_device == tsock__backend_cuda.wire_device)
        return &tsock__backend_cuda;
    return NULL;
}
