/* Hue: torchvision's float32 RGB -> HSV -> RGB round trip (after Pillow's formulas), step for
 * step, so that the bytes agree. */
#include <math.h>

#include "augment/augment.h"
#include "augment/fp32.h"

struct hsv {
    float h, s, v;
};

static float
maxf3(float a, float b, float c)
{
    float m = a > b ? a : b;
    return m > c ? m : c;
}

static float
minf3(float a, float b, float c)
{
    float m = a < b ? a : b;
    return m < c ? m : c;
}

/* _rgb_to_hsv. The masks multiply as 0.0 / 1.0, as torch does. */
static struct hsv
rgb_to_hsv(float r, float g, float b)
{
    float maxc = maxf3(r, g, b), minc = minf3(r, g, b);
    int eqc = maxc == minc;
    float range = maxc - minc;
    float s = range / (eqc ? 1.0f : maxc);
    float div = eqc ? 1.0f : range;
    float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float neq_r = maxc != r ? 1.0f : 0.0f, eq_g = maxc == g ? 1.0f : 0.0f;
    float hg = ((rc + 2.0f) - bc) * (eq_g * neq_r);
    float hr = (bc - gc) * (1.0f - neq_r);
    float hb = ((gc + 4.0f) - rc) * (neq_r * (1.0f - eq_g));
    float hh = (hr + hg) + hb;
    hh = fmodf(hh * (float)(1.0 / 6.0) + 1.0f, 1.0f);
    return (struct hsv){hh, s, maxc};
}

static float
clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* _hsv_to_rgb: v, p, q, t picked by the sector, as torch's gather table does. */
static void
hsv_to_rgb(struct hsv c, float rgb[3])
{
    float h6 = c.h * 6.0f;
    float fi = tsock__floor32(h6);
    float f = h6 - fi;
    int i = (int)fi;
    float sxf = c.s * f, one_minus_s = 1.0f - c.s;
    float q = clamp01((1.0f - sxf) * c.v);
    float t = clamp01((sxf + one_minus_s) * c.v);
    float p = clamp01(one_minus_s * c.v);
    i = ((i % 6) + 6) % 6;
    const float vpqt[4] = {c.v, p, q, t};
    static const int sel[3][6] = {{0, 2, 1, 1, 3, 0}, {3, 0, 0, 2, 1, 1}, {1, 1, 3, 0, 0, 2}};
    for (int k = 0; k < 3; k++)
        rgb[k] = vpqt[sel[k][i]];
}

/* torch.remainder(a, 1.0): fmod, then moved into [0, 1) when negative. */
static float
remainder1(float a)
{
    float m = fmodf(a, 1.0f);
    if (m != 0.0f && m < 0.0f)
        m += 1.0f;
    return m;
}

void
tsock__aug_hue(uint8_t *img, int w, int h, double factor)
{
    const float to_unit = (float)(1.0 / 255.0), f = (float)factor;
    size_t n = (size_t)w * (size_t)h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *px = img + 3 * i;
        struct hsv c =
            rgb_to_hsv((float)px[0] * to_unit, (float)px[1] * to_unit, (float)px[2] * to_unit);
        c.h = remainder1(c.h + f);
        float rgb[3];
        hsv_to_rgb(c, rgb);
        /* to_dtype(uint8, scale=True): x * (255 + 1 - 1e-3), truncated. */
        for (int k = 0; k < 3; k++)
            px[k] = tsock__to_u8(rgb[k] * 255.999f);
    }
}
