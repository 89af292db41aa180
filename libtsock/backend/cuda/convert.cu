/* The producer-side conversion kernel: one thread per output element of the converted tensor,
 * computed by tsock__convert_element, the same function the CPU reference uses (convert.h). The
 * kernel is memory-bound; a grid-stride loop keeps the launch small for any batch. */
#include <cuda_runtime.h>

#include "backend/convert.h"

/* Declared for C in cuda_int.h, which C++ cannot include (C11 _Static_assert). */
extern "C" cudaError_t tsock__cuda_convert_launch(const struct tsock__convert_plan *cv,
                                                  const uint8_t *in, uint8_t *out, uint32_t samples,
                                                  cudaStream_t stream);

namespace
{

__global__ void
convert_kernel(struct tsock__convert_plan cv, const uint8_t *in, uint8_t *out, uint64_t total,
               uint32_t per_sample)
{
    size_t in_bytes = cv.in_sample_bytes[cv.tensor], out_bytes = cv.out_sample_bytes[cv.tensor];
    for (uint64_t k = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; k < total;
         k += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t sample = k / per_sample;
        uint32_t i = (uint32_t)(k % per_sample);
        tsock__convert_element(&cv, in + sample * in_bytes, out + sample * out_bytes, i);
    }
}

} // namespace

extern "C" cudaError_t
tsock__cuda_convert_launch(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
                           uint32_t samples, cudaStream_t stream)
{
    uint32_t per_sample = cv->height * cv->width * cv->channels;
    uint64_t total = (uint64_t)per_sample * samples;
    if (total == 0)
        return cudaSuccess;
    const unsigned threads = 256;
    uint64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535)
        blocks = 65535;
    /* The plan is passed by value: it lives in kernel parameter space, so no copy of it has to
     * be managed in device memory. */
    convert_kernel<<<(unsigned)blocks, threads, 0, stream>>>(*cv, in, out, total, per_sample);
    return cudaGetLastError();
}
