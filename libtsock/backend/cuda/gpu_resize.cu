/* The GPU decoder's resize kernel (issue 20): one thread per output pixel of one image, computed
 * by tsock__resize_pixel (gpu_resize.h), the same function the CPU unit test runs. One launch per
 * image keeps each launch's geometry in kernel parameters, with nothing to manage in device
 * memory. */
#include <cuda_runtime.h>

#include "backend/cuda/gpu_resize.h"

extern "C" cudaError_t tsock__cuda_resize_launch(const uint8_t *src,
                                                 const struct tsock__resize_geom *g, uint8_t *dst,
                                                 cudaStream_t stream);

namespace
{

__global__ void
resize_kernel(const uint8_t *src, struct tsock__resize_geom g, uint8_t *dst)
{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= g.out_w * g.out_h)
        return;
    int ox = k % g.out_w, oy = k / g.out_w;
    tsock__resize_pixel(src, &g, ox, oy, dst + (size_t)k * 3);
}

} // namespace

extern "C" cudaError_t
tsock__cuda_resize_launch(const uint8_t *src, const struct tsock__resize_geom *g, uint8_t *dst,
                          cudaStream_t stream)
{
    int total = g->out_w * g->out_h;
    if (total <= 0)
        return cudaSuccess;
    const unsigned threads = 128;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    resize_kernel<<<blocks, threads, 0, stream>>>(src, *g, dst);
    return cudaGetLastError();
}
