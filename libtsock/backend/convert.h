/* Producer-side conversion of one uint8 image tensor: dtype (uint8, float16, float32), optional
 * per-channel normalisation, and channel order (NHWC as decoded, or NCHW), plus the copy plan of
 * a whole slot (where each tensor sits before and after conversion).
 *
 * The arithmetic of one element lives here, in functions the C reference (convert.c) and the
 * CUDA kernel (backend/cuda/convert.cu) both call, so the CPU unit test of the reference checks
 * the very code the GPU runs. Each output element is fmaf(x, scale[c], bias[c]) in float, a
 * single correctly rounded operation on both sides, then rounded to float16 (to nearest, ties to
 * even) by bit manipulation rather than by a compiler intrinsic whose rounding might differ.
 * Internal to libtsock; compiled as C11 and as CUDA C++.
 */
#ifndef TSOCK_BACKEND_CONVERT_H
#define TSOCK_BACKEND_CONVERT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tsock/tsock.h"

#ifdef __CUDACC__
#define TSOCK__HD __host__ __device__
#else
#define TSOCK__HD
#endif

#define TSOCK__CONVERT_MAX_CHANNELS 4

/* What the caller asked for (tsock_producer_set_output / _set_normalize). */
struct tsock__convert_request {
    char tensor[TSOCK_MAX_NAME + 1]; /* empty: no conversion */
    int dtype;                       /* 0: keep uint8 (unless normalising: float32) */
    int channels_first;              /* NCHW output */
    int normalize;
    int channels; /* of mean and std */
    float mean[TSOCK__CONVERT_MAX_CHANNELS], std[TSOCK__CONVERT_MAX_CHANNELS];
};

/* The copy plan of one slot: every tensor's offset and per-sample size in the staging slot (as
 * the caller fills it) and in the published slot, and the conversion of tensor `tensor`. */
struct tsock__convert_plan {
    int tensor_count;
    size_t in_offset[TSOCK_MAX_TENSORS], out_offset[TSOCK_MAX_TENSORS];
    size_t in_sample_bytes[TSOCK_MAX_TENSORS], out_sample_bytes[TSOCK_MAX_TENSORS];
    int tensor; /* -1: every tensor is copied as it is */
    int out_dtype;
    int channels_first;
    uint32_t height, width, channels;
    float scale[TSOCK__CONVERT_MAX_CHANNELS], bias[TSOCK__CONVERT_MAX_CHANNELS];
};

/* Builds the plan: the published layout `out` (the converted tensor with its new dtype and
 * shape), its placement (out_offsets, *out_stride, as tsock__layout_place gives them) and *cv.
 * With an empty request the plan copies every tensor unchanged. Returns 0, or -EINVAL (logged:
 * unknown tensor, not uint8 [H, W, C] with C in 1..4, bad dtype, mean/std count or values) or
 * TSOCK_E_LAYOUT. */
int tsock__convert_plan_make(const struct tsock__convert_request *req, const tsock_layout *in,
                             uint32_t batch_size, tsock_layout *out, size_t *out_offsets,
                             size_t *out_stride, struct tsock__convert_plan *cv);

/* The reference: converts `samples` samples of a staging slot into a published slot on the
 * CPU, exactly as the kernel does on the GPU. */
void tsock__convert_ref(const struct tsock__convert_plan *cv, const uint8_t *in_slot,
                        uint8_t *out_slot, uint32_t samples);
/* The same for samples first..first+count-1 only (each sample's bytes are those of the whole
 * call): a host ring converts its samples on several threads. */
void tsock__convert_ref_range(const struct tsock__convert_plan *cv, const uint8_t *in_slot,
                              uint8_t *out_slot, uint32_t first, uint32_t count);

/* float -> IEEE binary16 bits, rounded to nearest, ties to even; NaN stays NaN, overflow gives
 * infinity, tiny values become subnormals or zero. */
TSOCK__HD static inline uint16_t
tsock__half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xFFu, mant = x & 0x7FFFFFu;
    if (exp == 0xFFu)
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e), bits = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
        if (rest > tie || (rest == tie && (bits & 1u)))
            bits++;
        return (uint16_t)(sign | bits);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1FFFu;
    /* A carry out of the mantissa moves into the exponent, which is the right result (up to
     * infinity). */
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)h;
}

/* Element `i` of an output sample comes from this element of the input sample. */
TSOCK__HD static inline uint32_t
tsock__convert_source(const struct tsock__convert_plan *cv, uint32_t i)
{
    if (!cv->channels_first)
        return i;
    uint32_t plane = cv->height * cv->width;
    return (i % plane) * cv->channels + i / plane;
}

/* Writes element `i` of one output sample from the input sample. */
TSOCK__HD static inline void
tsock__convert_element(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
                       uint32_t i)
{
    uint32_t src = tsock__convert_source(cv, i);
    uint8_t x = in[src];
    if (cv->out_dtype == TSOCK_UINT8) {
        out[i] = x;
        return;
    }
    uint32_t c = src % cv->channels;
    float y = fmaf((float)x, cv->scale[c], cv->bias[c]);
    if (cv->out_dtype == TSOCK_FLOAT32) {
        memcpy(out + (size_t)i * 4, &y, 4);
    } else {
        uint16_t h = tsock__half_from_float(y);
        memcpy(out + (size_t)i * 2, &h, 2);
    }
}

#endif
