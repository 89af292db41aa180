/* What one training sample gets after its crop and flip, in the reference recipe's order:
 * the auto-augment policy, ColorJitter, RandomErasing. */
#include <math.h>

#include "augment/augment.h"

int
tsock__aug_enabled(const struct tsock__aug_config *c)
{
    return c->policy != TSOCK__POLICY_NONE || c->erase_p > 0.0 || c->jitter[0] > 0.0 ||
           c->jitter[1] > 0.0 || c->jitter[2] > 0.0 || c->jitter[3] > 0.0;
}

void
tsock__aug_policy_op(uint8_t *img, int w, int h, int op, double m, int interp, uint8_t *tmp)
{
    const double origin[2] = {0.0, 0.0};
    const double to_deg = 180.0 / M_PI; /* math.degrees */
    switch (op) {
    case TSOCK__AUG_SHEAR_X:
        tsock__aug_affine(img, w, h, 0.0, 0.0, 0.0, atan(m) * to_deg, 0.0, origin, interp, tmp);
        break;
    case TSOCK__AUG_SHEAR_Y:
        tsock__aug_affine(img, w, h, 0.0, 0.0, 0.0, 0.0, atan(m) * to_deg, origin, interp, tmp);
        break;
    case TSOCK__AUG_TRANSLATE_X:
        tsock__aug_affine(img, w, h, 0.0, trunc(m), 0.0, 0.0, 0.0, NULL, interp, tmp);
        break;
    case TSOCK__AUG_TRANSLATE_Y:
        tsock__aug_affine(img, w, h, 0.0, 0.0, trunc(m), 0.0, 0.0, NULL, interp, tmp);
        break;
    case TSOCK__AUG_ROTATE: tsock__aug_rotate(img, w, h, m, interp, tmp); break;
    case TSOCK__AUG_BRIGHTNESS: tsock__aug_brightness(img, w, h, 1.0 + m); break;
    case TSOCK__AUG_COLOR: tsock__aug_saturation(img, w, h, 1.0 + m); break;
    case TSOCK__AUG_CONTRAST: tsock__aug_contrast(img, w, h, 1.0 + m); break;
    case TSOCK__AUG_SHARPNESS: tsock__aug_sharpness(img, w, h, 1.0 + m, tmp); break;
    case TSOCK__AUG_POSTERIZE: tsock__aug_posterize(img, w, h, (int)m); break;
    case TSOCK__AUG_SOLARIZE: tsock__aug_solarize(img, w, h, 255.0 * m); break;
    case TSOCK__AUG_AUTOCONTRAST: tsock__aug_autocontrast(img, w, h); break;
    case TSOCK__AUG_EQUALIZE: tsock__aug_equalize(img, w, h); break;
    case TSOCK__AUG_INVERT: tsock__aug_invert(img, w, h); break;
    default: break; /* Identity */
    }
}

void
tsock__aug_sample(struct tsock__rng *rng, const struct tsock__aug_config *c, uint8_t *img, int w,
                  int h, uint8_t *tmp)
{
    struct tsock__aug_step steps[TSOCK__AUG_MAX_STEPS];
    int n = tsock__aug_policy_draw(rng, c, w, h, steps, TSOCK__AUG_MAX_STEPS);
    for (int i = 0; i < n; i++)
        tsock__aug_policy_op(img, w, h, steps[i].op, steps[i].magnitude, c->interp, tmp);
    if (c->jitter[0] > 0.0 || c->jitter[1] > 0.0 || c->jitter[2] > 0.0 || c->jitter[3] > 0.0) {
        struct tsock__jitter_draw d;
        tsock__aug_jitter_draw(rng, c->jitter, &d);
        tsock__aug_jitter_apply(img, w, h, &d);
    }
    struct tsock__box box;
    if (c->erase_p > 0.0 && tsock__aug_erase_draw(rng, c->erase_p, w, h, &box))
        tsock__aug_erase(img, w, h, box.x, box.y, box.w, box.h, c->erase_fill);
}
