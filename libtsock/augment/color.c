/* Brightness, saturation ("Color") and contrast: torchvision's uint8 kernels, which multiply
 * and blend in float32 and truncate back to uint8. */
#include <math.h>

#include "augment/augment.h"
#include "augment/fp32.h"

void
tsock__aug_brightness(uint8_t *img, int w, int h, double factor)
{
    float f = (float)factor;
    size_t n = (size_t)w * (size_t)h * 3;
    for (size_t i = 0; i < n; i++)
        img[i] = tsock__to_u8((float)img[i] * f);
}

/* _rgb_to_grayscale_image(preserve_dtype=False).floor_(): r*0.2989, then + g*0.587 and
 * + b*0.114 as two fused add-with-alpha steps. */
static float
gray_floor(const uint8_t *px)
{
    float l = (float)px[0] * 0.2989f;
    l = tsock__fma32((float)px[1], 0.587f, l);
    l = tsock__fma32((float)px[2], 0.114f, l);
    return tsock__floor32(l);
}

/* _blend: x * ratio + other * (1 - ratio), clamped and truncated. */
static uint8_t
blend(uint8_t x, float other, float ratio, float alpha)
{
    return tsock__to_u8(tsock__fma32(other, alpha, (float)x * ratio));
}

void
tsock__aug_saturation(uint8_t *img, int w, int h, double factor)
{
    float ratio = (float)factor, alpha = (float)(1.0 - factor);
    size_t n = (size_t)w * (size_t)h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = img + 3 * i;
        float g = gray_floor(px);
        for (int c = 0; c < 3; c++)
            px[c] = blend(px[c], g, ratio, alpha);
    }
}

void
tsock__aug_contrast(uint8_t *img, int w, int h, double factor)
{
    size_t n = (size_t)w * (size_t)h;
    /* torch sums the floored grey values in float32; they are integers, so the sum is exact
     * (and equal to this one) while it stays below 2^24: images up to 65,793 pixels. */
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)gray_floor(img + 3 * i);
    float mean = (float)sum / (float)n;
    float ratio = (float)factor, alpha = (float)(1.0 - factor);
    for (size_t i = 0; i < 3 * n; i++)
        img[i] = blend(img[i], mean, ratio, alpha);
}
