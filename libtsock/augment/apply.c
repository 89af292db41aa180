/* The public entry points: one operation with given parameters, and one policy draw. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "augment/augment.h"
#include "tsock/augment.h"

_Static_assert((int)TSOCK_AUGMENT_COLOR_JITTER == (int)TSOCK__AUG_COLOR_JITTER &&
                   (int)TSOCK_AUGMENT_ERASE == (int)TSOCK__AUG_ERASE &&
                   (int)TSOCK_AUGMENT_HUE == (int)TSOCK__AUG_HUE &&
                   (int)TSOCK_AUGMENT_BILINEAR == (int)TSOCK__AUG_BILINEAR &&
                   (int)TSOCK_AUTO_AUGMENT_IMAGENET == (int)TSOCK__POLICY_IMAGENET,
               "the public enums are the internal ones");

/* How many parameters each operation takes (COLOR_JITTER: 4 to 8). */
static int
param_count(int op)
{
    switch (op) {
    case TSOCK__AUG_IDENTITY:
    case TSOCK__AUG_AUTOCONTRAST:
    case TSOCK__AUG_EQUALIZE:
    case TSOCK__AUG_INVERT: return 0;
    case TSOCK__AUG_ERASE: return 7;
    case TSOCK__AUG_COLOR_JITTER: return 4;
    default: return 1;
    }
}

static int
is_factor_op(int op)
{
    return op == TSOCK__AUG_BRIGHTNESS || op == TSOCK__AUG_COLOR || op == TSOCK__AUG_CONTRAST ||
           op == TSOCK__AUG_SHARPNESS;
}

static int
check_jitter(const double *p, int nparams)
{
    for (int k = 0; k < 3; k++)
        if (!(p[k] >= 0.0 && isfinite(p[k])))
            return -EINVAL;
    if (!(p[3] >= -0.5 && p[3] <= 0.5))
        return -EINVAL;
    for (int i = 4; i < nparams; i++)
        if (!(p[i] == 0.0 || p[i] == 1.0 || p[i] == 2.0 || p[i] == 3.0))
            return -EINVAL;
    return 0;
}

static int
check_params(int op, const double *p, int nparams)
{
    int want = param_count(op);
    if (op == TSOCK__AUG_COLOR_JITTER ? nparams < 4 || nparams > 8 : nparams != want)
        return -EINVAL;
    if (nparams && !p)
        return -EINVAL;
    for (int i = 0; i < nparams; i++)
        if (!isfinite(p[i]))
            return -EINVAL;
    if (is_factor_op(op) && !(p[0] >= 0.0))
        return -EINVAL;
    if (op == TSOCK__AUG_POSTERIZE && !(p[0] >= 0.0 && p[0] <= 8.0 && p[0] == floor(p[0])))
        return -EINVAL;
    if (op == TSOCK__AUG_SOLARIZE && !(p[0] <= 255.0))
        return -EINVAL;
    if (op == TSOCK__AUG_HUE && !(p[0] >= -0.5 && p[0] <= 0.5))
        return -EINVAL;
    if (op == TSOCK__AUG_ERASE)
        for (int i = 4; i < 7; i++)
            if (!(p[i] >= 0.0 && p[i] <= 255.0))
                return -EINVAL;
    if (op == TSOCK__AUG_COLOR_JITTER)
        return check_jitter(p, nparams);
    return 0;
}

static void
apply_checked(uint8_t *img, int w, int h, int op, const double *p, int nparams, int interp,
              uint8_t *tmp)
{
    switch (op) {
    case TSOCK__AUG_SHEAR_X:
    case TSOCK__AUG_SHEAR_Y:
    case TSOCK__AUG_TRANSLATE_X:
    case TSOCK__AUG_TRANSLATE_Y:
    case TSOCK__AUG_ROTATE: tsock__aug_policy_op(img, w, h, op, p[0], interp, tmp); break;
    case TSOCK__AUG_BRIGHTNESS:
    case TSOCK__AUG_COLOR:
    case TSOCK__AUG_CONTRAST:
    case TSOCK__AUG_SHARPNESS: tsock__aug_policy_op(img, w, h, op, p[0] - 1.0, interp, tmp); break;
    case TSOCK__AUG_POSTERIZE: tsock__aug_posterize(img, w, h, (int)p[0]); break;
    case TSOCK__AUG_SOLARIZE: tsock__aug_solarize(img, w, h, p[0]); break;
    case TSOCK__AUG_HUE: tsock__aug_hue(img, w, h, p[0]); break;
    case TSOCK__AUG_ERASE: {
        const uint8_t fill[3] = {(uint8_t)p[4], (uint8_t)p[5], (uint8_t)p[6]};
        tsock__aug_erase(img, w, h, (int)p[0], (int)p[1], (int)p[2], (int)p[3], fill);
        break;
    }
    case TSOCK__AUG_COLOR_JITTER: {
        /* Slots after the listed operations hold -1: nothing. */
        struct tsock__jitter_draw d = {{-1, -1, -1, -1}, {p[0], p[1], p[2], p[3]}, {1, 1, 1, 1}};
        for (int i = 4; i < nparams; i++)
            d.order[i - 4] = (int)p[i];
        tsock__aug_jitter_apply(img, w, h, &d);
        break;
    }
    default: tsock__aug_policy_op(img, w, h, op, 0.0, interp, tmp); break;
    }
}

int
tsock_augment_apply(uint8_t *image, int width, int height, int op, const double *params,
                    int nparams, int interpolation)
{
    if (!image || width < 1 || height < 1 || op < 0 || op >= TSOCK__AUG_OPS ||
        (interpolation != TSOCK__AUG_NEAREST && interpolation != TSOCK__AUG_BILINEAR))
        return -EINVAL;
    int r = check_params(op, params, nparams);
    if (r != 0)
        return r;
    uint8_t *tmp = malloc(TSOCK__AUG_TMP_BYTES(width, height));
    if (!tmp)
        return -ENOMEM;
    apply_checked(image, width, height, op, params, nparams, interpolation, tmp);
    free(tmp);
    return 0;
}

int
tsock_augment_draw(int policy, int magnitude, int num_ops, int width, int height, uint64_t seed,
                   int *ops, double *magnitudes, int capacity)
{
    if (policy < TSOCK__POLICY_NONE || policy > TSOCK__POLICY_IMAGENET || width < 1 || height < 1 ||
        capacity < 0 || (capacity && (!ops || !magnitudes)) || magnitude < 0 ||
        magnitude >= TSOCK_AUGMENT_RA_BINS || num_ops < 0 || num_ops > TSOCK_AUGMENT_MAX_OPS)
        return -EINVAL;
    struct tsock__aug_config c = {.policy = policy, .ra_magnitude = magnitude, .ra_ops = num_ops};
    struct tsock__aug_step steps[TSOCK__AUG_MAX_STEPS];
    struct tsock__rng rng;
    tsock__rng_seed(&rng, seed);
    int n = tsock__aug_policy_draw(&rng, &c, width, height, steps, TSOCK__AUG_MAX_STEPS);
    if (n > capacity)
        n = capacity;
    for (int i = 0; i < n; i++) {
        ops[i] = steps[i].op;
        magnitudes[i] = steps[i].magnitude;
    }
    return n;
}

int
tsock_augment_draw_erase(double p, int width, int height, uint64_t seed, int box[4])
{
    if (!(p >= 0.0 && p <= 1.0) || width < 1 || height < 1 || !box)
        return -EINVAL;
    struct tsock__rng rng;
    struct tsock__box b;
    tsock__rng_seed(&rng, seed);
    if (!tsock__aug_erase_draw(&rng, p, width, height, &b))
        return 0;
    box[0] = b.x;
    box[1] = b.y;
    box[2] = b.w;
    box[3] = b.h;
    return 1;
}

int
tsock_augment_draw_jitter(const double jitter[4], uint64_t seed, int order[4], double factors[4])
{
    if (!jitter || !order || !factors)
        return -EINVAL;
    for (int k = 0; k < 3; k++)
        if (!(jitter[k] >= 0.0 && isfinite(jitter[k])))
            return -EINVAL;
    if (!(jitter[3] >= 0.0 && jitter[3] <= 0.5))
        return -EINVAL;
    struct tsock__rng rng;
    struct tsock__jitter_draw d;
    tsock__rng_seed(&rng, seed);
    tsock__aug_jitter_draw(&rng, jitter, &d);
    for (int k = 0; k < 4; k++) {
        order[k] = d.order[k];
        factors[k] = d.enabled[k] ? d.factor[k] : (k == 3 ? 0.0 : 1.0);
    }
    return 0;
}
