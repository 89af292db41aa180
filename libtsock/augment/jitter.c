/* ColorJitter(brightness, contrast, saturation, hue): a random order of the four, then a
 * factor for each enabled one, as torchvision's v2.ColorJitter draws them. */
#include "augment/augment.h"

void
tsock__aug_jitter_draw(struct tsock__rng *rng, const double jitter[4], struct tsock__jitter_draw *d)
{
    /* torch.randperm(4) */
    for (int i = 0; i < 4; i++)
        d->order[i] = i;
    for (int i = 3; i > 0; i--) {
        int j = (int)tsock__rng_below(rng, (uint64_t)i + 1);
        int t = d->order[i];
        d->order[i] = d->order[j];
        d->order[j] = t;
    }
    for (int k = 0; k < 4; k++) {
        d->enabled[k] = jitter[k] > 0.0;
        if (!d->enabled[k])
            continue;
        if (k == 3) {
            d->factor[k] = tsock__rng_uniform(rng, -jitter[k], jitter[k]);
        } else {
            double lo = 1.0 - jitter[k];
            d->factor[k] = tsock__rng_uniform(rng, lo < 0.0 ? 0.0 : lo, 1.0 + jitter[k]);
        }
    }
}

void
tsock__aug_jitter_apply(uint8_t *img, int w, int h, const struct tsock__jitter_draw *d)
{
    for (int i = 0; i < 4; i++) {
        int k = d->order[i];
        if (k < 0 || !d->enabled[k])
            continue;
        switch (k) {
        case 0: tsock__aug_brightness(img, w, h, d->factor[k]); break;
        case 1: tsock__aug_contrast(img, w, h, d->factor[k]); break;
        case 2: tsock__aug_saturation(img, w, h, d->factor[k]); break;
        default: tsock__aug_hue(img, w, h, d->factor[k]); break;
        }
    }
}
