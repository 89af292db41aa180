/* Seeded randomness and torchvision's box rules (RandomResizedCrop, Resize(int), CenterCrop).
 * Pure arithmetic: the same inputs give the same box on every machine and thread. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "core/core.h"
#include "image/image.h"

#define GOLDEN 0x9E3779B97F4A7C15u

void
tsock__rng_seed(struct tsock__rng *rng, uint64_t seed)
{
    rng->state = seed;
}

uint64_t
tsock__rng_next(struct tsock__rng *rng)
{
    /* tsock__mix64 adds the increment itself, so output i is the splitmix64 output for state
     * seed + (i + 1) * GOLDEN. */
    uint64_t x = rng->state;
    rng->state += GOLDEN;
    return tsock__mix64(x);
}

double
tsock__rng_double(struct tsock__rng *rng)
{
    return (double)(tsock__rng_next(rng) >> 11) * 0x1.0p-53;
}

double
tsock__rng_uniform(struct tsock__rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * tsock__rng_double(rng);
}

uint64_t
tsock__rng_below(struct tsock__rng *rng, uint64_t n)
{
    uint64_t x, threshold;

    if (n <= 1)
        return 0;
    /* Rejects the top sliver (2^64 mod n values) that would make x % n uneven. */
    threshold = (0 - n) % n;
    do
        x = tsock__rng_next(rng);
    while (x < threshold);
    return x % n;
}

/* Python 3's round() to an int: halves go to the even neighbour. */
static double
round_half_even(double x)
{
    double f = floor(x), d = x - f;

    if (d > 0.5)
        return f + 1.0;
    if (d < 0.5)
        return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

int
tsock__rrc_box(struct tsock__rng *rng, int w, int h, double scale_min, double scale_max,
               double ratio_min, double ratio_max, struct tsock__box *box)
{
    const double area = (double)w * (double)h;
    double log_lo, log_hi, in_ratio;
    int cw, ch;

    if (w < 1 || h < 1 || !(scale_min >= 0.0) || !(scale_min <= scale_max) || !(ratio_min > 0.0) ||
        !(ratio_min <= ratio_max) || !isfinite(scale_max) || !isfinite(ratio_max))
        return -EINVAL;
    log_lo = log(ratio_min);
    log_hi = log(ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * tsock__rng_uniform(rng, scale_min, scale_max);
        double aspect = exp(tsock__rng_uniform(rng, log_lo, log_hi));
        double fw = round_half_even(sqrt(target * aspect));
        double fh = round_half_even(sqrt(target / aspect));

        if (fw > 0 && fw <= w && fh > 0 && fh <= h) {
            cw = (int)fw;
            ch = (int)fh;
            /* torch.randint(0, h - ch + 1) for the row, then the column, as torchvision. */
            box->y = (int)tsock__rng_below(rng, (uint64_t)(h - ch + 1));
            box->x = (int)tsock__rng_below(rng, (uint64_t)(w - cw + 1));
            box->w = cw;
            box->h = ch;
            return 1;
        }
    }
    /* Fallback: the central crop with the aspect ratio clamped into [ratio_min, ratio_max]. */
    in_ratio = (double)w / (double)h;
    if (in_ratio < ratio_min) {
        cw = w;
        ch = (int)round_half_even(cw / ratio_min);
    } else if (in_ratio > ratio_max) {
        ch = h;
        cw = (int)round_half_even(ch * ratio_max);
    } else {
        cw = w;
        ch = h;
    }
    /* A 1-pixel-wide image with a tall ratio limit could round to 0; keep the box non-empty
     * (torchvision would hand an empty crop to resize, which fails). */
    if (cw < 1)
        cw = 1;
    if (ch < 1)
        ch = 1;
    box->w = cw;
    box->h = ch;
    box->y = (h - ch) / 2;
    box->x = (w - cw) / 2;
    return 0;
}

int
tsock__val_resize_dims(int w, int h, int short_side, int *nw, int *nh)
{
    int s, l;

    if (w < 1 || h < 1 || short_side < 1)
        return -EINVAL;
    s = w <= h ? w : h;
    l = w <= h ? h : w;
    /* int(size * long / short): Python's true division of exact integers, then truncation;
     * the product is exact in a double, so the division rounds the same way. */
    double nl = (double)short_side * (double)l / (double)s;
    if (nl >= 2147483647.0)
        return -EINVAL;
    if (w <= h) {
        *nw = short_side;
        *nh = (int)nl;
    } else {
        *nw = (int)nl;
        *nh = short_side;
    }
    return 0;
}

int
tsock__center_offset(int size, int crop)
{
    int d = size - crop;

    /* int(round(d / 2.0)): exact halves (odd d) go to the even integer. */
    if (d % 2 == 0)
        return d / 2;
    int lo = (d - 1) / 2; /* d > 0 here; for d < 0 torchvision pads instead */
    return lo % 2 == 0 ? lo : lo + 1;
}
