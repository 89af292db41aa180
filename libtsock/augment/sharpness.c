/* Sharpness: a blend with the image blurred by torchvision's 3x3 kernel (1s around, 5 in the
 * middle, over 13), interior pixels only. */
#include <string.h>

#include "augment/augment.h"
#include "augment/fp32.h"

/* torch convolves in float32 and rounds (halves to even). The exact value is k / 13 for an
 * integer k, never within 1/26 of a half, far beyond float32's error here: so the rounding is
 * floor((2k + 13) / 26) in integers, whatever order torch sums in. */
static int
blurred(const uint8_t *src, size_t pitch, int x, int c)
{
    const uint8_t *up = src - pitch, *down = src + pitch;
    int k = 5 * src[3 * x + c];
    for (int dx = -1; dx <= 1; dx++)
        k += up[3 * (x + dx) + c] + down[3 * (x + dx) + c];
    k += src[3 * (x - 1) + c] + src[3 * (x + 1) + c];
    return (2 * k + 13) / 26;
}

void
tsock__aug_sharpness(uint8_t *img, int w, int h, double factor, uint8_t *tmp)
{
    if (w <= 2 || h <= 2)
        return;
    size_t pitch = (size_t)w * 3;
    float alpha = (float)(1.0 - factor);
    memcpy(tmp, img, pitch * (size_t)h);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *src = tmp + (size_t)y * pitch;
        uint8_t *dst = img + (size_t)y * pitch;
        for (int x = 1; x < w - 1; x++)
            for (int c = 0; c < 3; c++) {
                float v = (float)src[3 * x + c];
                float b = (float)blurred(src, pitch, x, c);
                dst[3 * x + c] = tsock__to_u8(tsock__fma32(b - v, alpha, v));
            }
    }
}
