/* Autocontrast and equalize: per-channel statistics in one pass over the image, then a
 * 256-entry lookup table per channel. */
#include <string.h>

#include "augment/augment.h"
#include "augment/fp32.h"

static void
apply_luts(uint8_t *img, size_t n, uint8_t lut[3][256])
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = img + 3 * i;
        px[0] = lut[0][px[0]];
        px[1] = lut[1][px[1]];
        px[2] = lut[2][px[2]];
    }
}

static void
histograms(const uint8_t *img, size_t n, uint32_t hist[3][256])
{
    memset(hist, 0, 3 * 256 * sizeof hist[0][0]);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *px = img + 3 * i;
        hist[0][px[0]]++;
        hist[1][px[1]]++;
        hist[2][px[2]]++;
    }
}

/* autocontrast_image: (x - min) / ((max - min) * (1/255)) in float32, clamped and truncated;
 * a constant channel is left as it is. */
static void
autocontrast_lut(const uint32_t hist[256], uint8_t lut[256])
{
    int lo = 0, hi = 255;
    while (lo < 255 && !hist[lo])
        lo++;
    while (hi > 0 && !hist[hi])
        hi--;
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)v;
    if (lo >= hi)
        return;
    float inv_scale = ((float)hi - (float)lo) * (float)(1.0 / 255.0);
    for (int v = 0; v < 256; v++)
        lut[v] = tsock__to_u8(((float)v - (float)lo) / inv_scale);
}

void
tsock__aug_autocontrast(uint8_t *img, int w, int h)
{
    size_t n = (size_t)w * (size_t)h;
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    histograms(img, n, hist);
    for (int c = 0; c < 3; c++)
        autocontrast_lut(hist[c], lut[c]);
    apply_luts(img, n, lut);
}

/* equalize_image (PIL's scheme): step = (pixels not of the top value) / 255;
 * lut[k] = (cum[k-1] + step/2) / step clamped to 255, lut[0] = 0; a channel with step 0 is
 * left as it is. */
static void
equalize_lut(const uint32_t hist[256], size_t n, uint8_t lut[256])
{
    int top = 255;
    while (top > 0 && !hist[top])
        top--;
    uint64_t step = (n - hist[top]) / 255;
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)v;
    if (step == 0)
        return;
    uint64_t cum = 0;
    lut[0] = 0;
    for (int v = 1; v < 256; v++) {
        cum += hist[v - 1];
        uint64_t q = (cum + step / 2) / step;
        lut[v] = (uint8_t)(q > 255 ? 255 : q);
    }
}

void
tsock__aug_equalize(uint8_t *img, int w, int h)
{
    size_t n = (size_t)w * (size_t)h;
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    histograms(img, n, hist);
    for (int c = 0; c < 3; c++)
        equalize_lut(hist[c], n, lut[c]);
    apply_luts(img, n, lut);
}
