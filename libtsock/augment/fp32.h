/* float32 arithmetic as torch's CPU kernels do it, for the augmentation files. */
#ifndef TSOCK_AUGMENT_FP32_H
#define TSOCK_AUGMENT_FP32_H

#include <math.h>
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

/* The same FMA either way: with `hw` (a constant where this is inlined) the instruction, which
 * a caller compiled for target("fma") gets, else the double emulation above. Inlined always,
 * so that the dead branch goes and the builtin expands in the caller's target. */
#define TSOCK__INLINE static inline __attribute__((always_inline))
TSOCK__INLINE float
tsock__fma32_sel(int hw, float a, float b, float c)
{
    return hw ? __builtin_fmaf(a, b, c) : tsock__fma32(a, b, c);
}

/* Whether the FMA-target builds may run (x86 CPUs with FMA); 0 elsewhere. */
#if defined(__x86_64__) || defined(__i386__)
#define TSOCK__FMA_TARGET __attribute__((target("fma")))
#define TSOCK__HAVE_FMA() __builtin_cpu_supports("fma")
#else
#define TSOCK__FMA_TARGET
#define TSOCK__HAVE_FMA() 0
#endif

/* floorf and nearbyintf (halves to even) without a libm call (the library is built for
 * baseline x86-64, where both are calls): the same results for the coordinates and sums of
 * these files, falling back to libm beyond 2^22. */
static inline float
tsock__floor32(float x)
{
    if (!(x > -4194304.0f && x < 4194304.0f))
        return floorf(x);
    float t = (float)(int)x;
    return t > x ? t - 1.0f : t;
}

static inline float
tsock__rint32(float x)
{
    /* Adding 1.5 * 2^23 leaves no fraction bits: the addition rounds to nearest, ties to
     * even (the constant is even), and the subtraction is exact. */
    const float magic = 12582912.0f;
    if (!(x > -4194304.0f && x < 4194304.0f))
        return nearbyintf(x);
    return (x + magic) - magic;
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
