/* See consume_device.h. */
#include "consume_device.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "synthetic.h"

int
consume_tensor_bytes(tsock_batch *b, int tensor, struct host_copy *hc, const void **out)
{
    const void *data = tsock_batch_tensor_data(b, tensor);
    if (tsock_batch_tensor_device(b, tensor) != TSOCK_DEVICE_CUDA) {
        *out = data;
        return 0;
    }
    size_t bytes = tsock_batch_tensor_bytes(b, tensor);
    if (bytes > hc->cap) {
        void *grown = realloc(hc->bytes, bytes);
        if (!grown)
            return -ENOMEM;
        hc->bytes = grown;
        hc->cap = bytes;
    }
    /* The device's default stream waits for the batch; the copy back runs on it after. */
    int err = tsock_batch_wait(b, NULL);
    if (err == 0 && bytes)
        err = tsock_cuda_copy_to_host(hc->bytes, data, bytes, tsock_batch_device_index(b));
    *out = hc->bytes;
    return err;
}

/* float -> IEEE binary16, to nearest, ties to even (as the producer's conversion rounds). */
static uint16_t
half_from_float(float f)
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
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)h;
}

size_t
consume_verify_converted(uint64_t id, const void *image, const struct image_form *f)
{
    const uint8_t *img = image;
    size_t plane = (size_t)(f->height * f->width), elems = plane * 3, bad = 0;
    float scale[3], bias[3];
    for (int c = 0; c < 3; c++) {
        /* y = (x / 255 - mean) / std as x * scale + bias, coefficients rounded once to float. */
        scale[c] = (float)(1.0 / (255.0 * (double)f->std[c]));
        bias[c] = (float)(-(double)f->mean[c] / (double)f->std[c]);
    }
    for (size_t i = 0; i < elems; i++) {
        size_t src = f->nchw ? (i % plane) * 3 + i / plane : i;
        uint8_t x = tsock_synth_byte(id, src);
        if (f->dtype == TSOCK_UINT8) {
            bad += img[i] != x;
            continue;
        }
        size_t c = src % 3;
        float y = fmaf((float)x, scale[c], bias[c]);
        if (f->dtype == TSOCK_FLOAT32) {
            bad += memcmp(img + i * 4, &y, 4) != 0;
        } else {
            uint16_t h = half_from_float(y);
            bad += memcmp(img + i * 2, &h, 2) != 0;
        }
    }
    return bad;
}
