/* Sharpness: a blend with the image blurred by torchvision's 3x3 kernel (1s around, 5 in the
 * middle, over 13), interior pixels only. */
#include <string.h>

#include "augment/augment.h"
#include "augment/fp32.h"

/* torch convolves in float32 and rounds (halves to even). The exact value is k / 13 for an
 * integer k, never within 1/26 of a half, far beyond float32's error here: so the rounding is
 * floor((2k + 13) / 26) in integers, whatever order torch sums in. */
TSOCK__INLINE int
blurred(const uint8_t *src, size_t pitch, int x, int c)
{
    const uint8_t *up = src - pitch, *down = src + pitch;
    int k = 5 * src[3 * x + c];
    for (int dx = -1; dx <= 1; dx++)
        k += up[3 * (x + dx) + c] + down[3 * (x + dx) + c];
    k += src[3 * (x - 1) + c] + src[3 * (x + 1) + c];
    return (2 * k + 13) / 26;
}

/* The interior rows, built twice (hw: the FMA instruction; the same results). */
TSOCK__INLINE void
sharpen_rows(uint8_t *img, const uint8_t *tmp, int w, int h, float alpha, int hw)
{
    size_t pitch = (size_t)w * 3;
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *src = tmp + (size_t)y * pitch;
        uint8_t *dst = img + (size_t)y * pitch;
        for (int x = 1; x < w - 1; x++)
            for (int c = 0; c < 3; c++) {
                float v = (float)src[3 * x + c];
                float b = (float)blurred(src, pitch, x, c);
                dst[3 * x + c] = tsock__to_u8(tsock__fma32_sel(hw, b - v, alpha, v));
            }
    }
}

TSOCK__FMA_TARGET static void
sharpen_rows_fma(uint8_t *img, const uint8_t *tmp, int w, int h, float alpha)
{
    sharpen_rows(img, tmp, w, h, alpha, 1);
}

void
tsock__aug_sharpness(uint8_t *img, int w, int h, double factor, uint8_t *tmp)
{
    if (w <= 2 || h <= 2)
        return;
    float alpha = (float)(1.0 - factor);
    memcpy(tmp, img, (size_t)w * 3 * (size_t)h);
    if (TSOCK__HAVE_FMA())
        sharpen_rows_fma(img, tmp, w, h, alpha);
    else
        sharpen_rows(img, tmp, w, h, alpha, 0);
}
