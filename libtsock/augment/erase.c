/* RandomErasing: its box sampler and the fill. */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

void
tsock__aug_erase(uint8_t *img, int w, int h, int x, int y, int bw, int bh, const uint8_t fill[3])
{
    int x1 = x + bw > w ? w : x + bw, y1 = y + bh > h ? h : y + bh;
    if (x < 0)
        x = 0;
    if (y < 0)
        y = 0;
    for (int r = y; r < y1; r++)
        for (int c = x; c < x1; c++)
            memcpy(img + ((size_t)r * (size_t)w + (size_t)c) * 3, fill, 3);
}

/* RandomErasing.forward + get_params with the reference presets' arguments: erase when
 * rand() < p; then up to 10 attempts of area * U(0.02, 0.33) and aspect exp(U(log 0.3,
 * log 3.3)), h = round(sqrt(area * aspect)), w = round(sqrt(area / aspect)) (halves to even),
 * kept when h < H and w < W, placed at i = randint(0, H - h + 1), j = randint(0, W - w + 1). */
int
tsock__aug_erase_draw(struct tsock__rng *rng, double p, int w, int h, struct tsock__box *box)
{
    if (!(tsock__rng_double(rng) < p))
        return 0;
    double area = (double)w * (double)h;
    double lr0 = log(0.3), lr1 = log(3.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        double erase_area = area * tsock__rng_uniform(rng, 0.02, 0.33);
        double aspect = exp(tsock__rng_uniform(rng, lr0, lr1));
        int eh = (int)nearbyint(sqrt(erase_area * aspect));
        int ew = (int)nearbyint(sqrt(erase_area / aspect));
        if (!(eh < h && ew < w))
            continue;
        box->y = (int)tsock__rng_below(rng, (uint64_t)(h - eh + 1));
        box->x = (int)tsock__rng_below(rng, (uint64_t)(w - ew + 1));
        box->w = ew;
        box->h = eh;
        return 1;
    }
    return 0;
}
