/* Brightness, saturation ("Color") and contrast: torchvision's uint8 kernels, which multiply
 * and blend in float32 and truncate back to uint8. */
#include <math.h>

#include "augment/augment.h"
#include "augment/fp32.h"

/* Operations whose result depends on the byte alone go through a table of its 256 results
 * (the same arithmetic, once per value instead of once per byte). */
static void
apply_lut(uint8_t *img, size_t n, const uint8_t lut[256])
{
    for (size_t i = 0; i < n; i++)
        img[i] = lut[img[i]];
}

void
tsock__aug_brightness(uint8_t *img, int w, int h, double factor)
{
    float f = (float)factor;
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = tsock__to_u8((float)v * f);
    apply_lut(img, (size_t)w * (size_t)h * 3, lut);
}

/* _rgb_to_grayscale_image(preserve_dtype=False).floor_(): r*0.2989, then + g*0.587 and
 * + b*0.114 as two fused add-with-alpha steps. */
TSOCK__INLINE float
gray_floor(const uint8_t *px, int hw)
{
    float l = (float)px[0] * 0.2989f;
    l = tsock__fma32_sel(hw, (float)px[1], 0.587f, l);
    l = tsock__fma32_sel(hw, (float)px[2], 0.114f, l);
    return tsock__floor32(l);
}

/* _blend: x * ratio + other * (1 - ratio), clamped and truncated. */
TSOCK__INLINE uint8_t
blend(uint8_t x, float other, float ratio, float alpha, int hw)
{
    return tsock__to_u8(tsock__fma32_sel(hw, other, alpha, (float)x * ratio));
}

/* The per-pixel loops, built twice (hw: the FMA instruction; the same results). */
TSOCK__INLINE void
saturation_pixels(uint8_t *img, size_t n, float ratio, float alpha, int hw)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = img + 3 * i;
        float g = gray_floor(px, hw);
        for (int c = 0; c < 3; c++)
            px[c] = blend(px[c], g, ratio, alpha, hw);
    }
}

TSOCK__INLINE uint64_t
gray_sum(const uint8_t *img, size_t n, int hw)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)gray_floor(img + 3 * i, hw);
    return sum;
}

TSOCK__FMA_TARGET static void
saturation_fma(uint8_t *img, size_t n, float ratio, float alpha)
{
    saturation_pixels(img, n, ratio, alpha, 1);
}

TSOCK__FMA_TARGET static uint64_t
gray_sum_fma(const uint8_t *img, size_t n)
{
    return gray_sum(img, n, 1);
}

void
tsock__aug_saturation(uint8_t *img, int w, int h, double factor)
{
    float ratio = (float)factor, alpha = (float)(1.0 - factor);
    size_t n = (size_t)w * (size_t)h;
    if (TSOCK__HAVE_FMA())
        saturation_fma(img, n, ratio, alpha);
    else
        saturation_pixels(img, n, ratio, alpha, 0);
}

void
tsock__aug_contrast(uint8_t *img, int w, int h, double factor)
{
    size_t n = (size_t)w * (size_t)h;
    /* torch sums the floored grey values in float32; they are integers, so the sum is exact
     * (and equal to this one) while it stays below 2^24: images up to 65,793 pixels. */
    uint64_t sum = TSOCK__HAVE_FMA() ? gray_sum_fma(img, n) : gray_sum(img, n, 0);
    float mean = (float)sum / (float)n;
    float ratio = (float)factor, alpha = (float)(1.0 - factor);
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = blend((uint8_t)v, mean, ratio, alpha, 0);
    apply_lut(img, 3 * n, lut);
}
