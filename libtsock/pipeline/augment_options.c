/* The pipeline's augmentation options: the val preset's resize, the auto-augment policy,
 * ColorJitter and RandomErasing of the train preset. */
#include <errno.h>
#include <math.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"
#include "tsock/augment.h"

/* RandomErasing's fill: ImageNet's mean, the value 0 of the reference recipe's erasing (it
 * erases after Normalize), rounded to uint8: 0.485, 0.456, 0.406 times 255. */
static const uint8_t ERASE_FILL[3] = {124, 116, 104};

void
tsock__pipeline_augment_defaults(struct tsock_pipeline *pl)
{
    pl->aug = (struct tsock__aug_config){
        .policy = TSOCK__POLICY_NONE, .ra_magnitude = 9, .ra_ops = 2, .interp = TSOCK__AUG_NEAREST};
    for (int c = 0; c < 3; c++)
        pl->aug.erase_fill[c] = ERASE_FILL[c];
}

int
tsock_pipeline_set_val_resize(tsock_pipeline *pl, int resize)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && (resize < 0 || resize > TSOCK__PIPELINE_MAX_SIZE))
        r = -EINVAL;
    if (r == 0)
        pl->val_resize = resize;
    return r;
}

int
tsock_pipeline_set_interpolation(tsock_pipeline *pl, int interpolation)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && interpolation != TSOCK_INTERPOLATION_BILINEAR &&
        interpolation != TSOCK_INTERPOLATION_BICUBIC)
        r = -EINVAL;
    if (r == 0)
        pl->bicubic = interpolation == TSOCK_INTERPOLATION_BICUBIC;
    return r;
}

int
tsock_pipeline_set_auto_augment(tsock_pipeline *pl, int policy, int magnitude, int num_ops,
                                int interpolation)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 &&
        (policy < TSOCK_AUTO_AUGMENT_NONE || policy > TSOCK_AUTO_AUGMENT_IMAGENET ||
         magnitude < 0 || magnitude >= TSOCK_AUGMENT_RA_BINS || num_ops < 0 ||
         num_ops > TSOCK_AUGMENT_MAX_OPS ||
         (interpolation != TSOCK_AUGMENT_NEAREST && interpolation != TSOCK_AUGMENT_BILINEAR)))
        r = -EINVAL;
    if (r == 0) {
        pl->aug.policy = policy;
        pl->aug.ra_magnitude = magnitude;
        pl->aug.ra_ops = num_ops;
        pl->aug.interp = interpolation;
    }
    return r;
}

int
tsock_pipeline_set_color_jitter(tsock_pipeline *pl, double brightness, double contrast,
                                double saturation, double hue)
{
    int r = tsock__pipeline_settable(pl);
    /* Written so that NaN fails too. */
    if (r == 0 &&
        !(brightness >= 0.0 && contrast >= 0.0 && saturation >= 0.0 && isfinite(brightness) &&
          isfinite(contrast) && isfinite(saturation) && hue >= 0.0 && hue <= 0.5))
        r = -EINVAL;
    if (r == 0) {
        pl->aug.jitter[0] = brightness;
        pl->aug.jitter[1] = contrast;
        pl->aug.jitter[2] = saturation;
        pl->aug.jitter[3] = hue;
    }
    return r;
}

int
tsock_pipeline_set_random_erase(tsock_pipeline *pl, double probability)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && !(probability >= 0.0 && probability <= 1.0))
        r = -EINVAL;
    if (r == 0)
        pl->aug.erase_p = probability;
    return r;
}
