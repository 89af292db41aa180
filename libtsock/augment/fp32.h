/* float32 arithmetic as torch's CPU kernels do it, for the augmentation files. */
#ifndef TSOCK_AUGMENT_FP32_H
#define TSOCK_AUGMENT_FP32_H

#include <stdint.h>

/* a * b + c rounded once, as torch's vectorised add(x, y, alpha=...) computes it (an FMA
 * instruction). Done in double: the product of two floats is exact there, and with the
 * operands of these files (pixel values and factors of modest size) so is the sum, so the
 * one rounding to float is the FMA's. Without FMA hardware this stays cheap. */
static inline float
tsock__fma32(float a, float b, float c)
{
    return (float)((double)a * (double)b + (double)c);
}

/* clamp_(0, 255) then .to(torch.uint8): truncation toward zero. */
static inline uint8_t
tsock__to_u8(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v > 255.0f)
        return 255;
    return (uint8_t)v;
}

#endif
