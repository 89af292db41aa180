/* The auto-augment policies' search spaces and draws: torchvision's TrivialAugmentWide,
 * RandAugment and AutoAugment(IMAGENET) (transforms/v2/_auto_augment.py), entry for entry. */
#include <math.h>

#include "augment/augment.h"
#include "augment/fp32.h"

/* How an operation's magnitudes are binned. */
enum bins_kind {
    BINS_NONE = 0,      /* no magnitude (0.0) */
    BINS_LINEAR = 1,    /* torch.linspace(lo, hi, n) in float32 */
    BINS_WIDTH = 2,     /* linspace(0, hi * width, n) */
    BINS_HEIGHT = 3,    /* linspace(0, hi * height, n) */
    BINS_POSTERIZE = 4, /* (8 - arange(n) / ((n - 1) / lo)).round() */
};

struct space_entry {
    int op;
    int kind;
    double lo, hi;
    int is_signed;
};

#define N_SPACE 14
#define TRANSLATE_RA (150.0 / 331.0)

/* TrivialAugmentWide._AUGMENTATION_SPACE */
static const struct space_entry ta_wide[N_SPACE] = {
    {TSOCK__AUG_IDENTITY, BINS_NONE, 0, 0, 0},
    {TSOCK__AUG_SHEAR_X, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_SHEAR_Y, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_TRANSLATE_X, BINS_LINEAR, 0.0, 32.0, 1},
    {TSOCK__AUG_TRANSLATE_Y, BINS_LINEAR, 0.0, 32.0, 1},
    {TSOCK__AUG_ROTATE, BINS_LINEAR, 0.0, 135.0, 1},
    {TSOCK__AUG_BRIGHTNESS, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_COLOR, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_CONTRAST, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_SHARPNESS, BINS_LINEAR, 0.0, 0.99, 1},
    {TSOCK__AUG_POSTERIZE, BINS_POSTERIZE, 6.0, 0, 0},
    {TSOCK__AUG_SOLARIZE, BINS_LINEAR, 1.0, 0.0, 0},
    {TSOCK__AUG_AUTOCONTRAST, BINS_NONE, 0, 0, 0},
    {TSOCK__AUG_EQUALIZE, BINS_NONE, 0, 0, 0},
};

/* RandAugment._AUGMENTATION_SPACE; AutoAugment's is the same plus Invert. */
static const struct space_entry ra_space[N_SPACE + 1] = {
    {TSOCK__AUG_IDENTITY, BINS_NONE, 0, 0, 0},
    {TSOCK__AUG_SHEAR_X, BINS_LINEAR, 0.0, 0.3, 1},
    {TSOCK__AUG_SHEAR_Y, BINS_LINEAR, 0.0, 0.3, 1},
    {TSOCK__AUG_TRANSLATE_X, BINS_WIDTH, 0.0, TRANSLATE_RA, 1},
    {TSOCK__AUG_TRANSLATE_Y, BINS_HEIGHT, 0.0, TRANSLATE_RA, 1},
    {TSOCK__AUG_ROTATE, BINS_LINEAR, 0.0, 30.0, 1},
    {TSOCK__AUG_BRIGHTNESS, BINS_LINEAR, 0.0, 0.9, 1},
    {TSOCK__AUG_COLOR, BINS_LINEAR, 0.0, 0.9, 1},
    {TSOCK__AUG_CONTRAST, BINS_LINEAR, 0.0, 0.9, 1},
    {TSOCK__AUG_SHARPNESS, BINS_LINEAR, 0.0, 0.9, 1},
    {TSOCK__AUG_POSTERIZE, BINS_POSTERIZE, 4.0, 0, 0},
    {TSOCK__AUG_SOLARIZE, BINS_LINEAR, 1.0, 0.0, 0},
    {TSOCK__AUG_AUTOCONTRAST, BINS_NONE, 0, 0, 0},
    {TSOCK__AUG_EQUALIZE, BINS_NONE, 0, 0, 0},
    {TSOCK__AUG_INVERT, BINS_NONE, 0, 0, 0},
};

/* AutoAugment's IMAGENET policy: 25 sub-policies of two (operation, probability, bin). */
struct sub_op {
    int op;
    double p;
    int bin; /* -1: no magnitude */
};
enum {
    PO = TSOCK__AUG_POSTERIZE,
    RO = TSOCK__AUG_ROTATE,
    SO = TSOCK__AUG_SOLARIZE,
    AC = TSOCK__AUG_AUTOCONTRAST,
    EQ = TSOCK__AUG_EQUALIZE,
    CO = TSOCK__AUG_COLOR,
    CT = TSOCK__AUG_CONTRAST,
    SH = TSOCK__AUG_SHARPNESS,
    IN = TSOCK__AUG_INVERT,
    SX = TSOCK__AUG_SHEAR_X
};
static const struct sub_op imagenet[25][2] = {
    {{PO, 0.4, 8}, {RO, 0.6, 9}},   {{SO, 0.6, 5}, {AC, 0.6, -1}},  {{EQ, 0.8, -1}, {EQ, 0.6, -1}},
    {{PO, 0.6, 7}, {PO, 0.6, 6}},   {{EQ, 0.4, -1}, {SO, 0.2, 4}},  {{EQ, 0.4, -1}, {RO, 0.8, 8}},
    {{SO, 0.6, 3}, {EQ, 0.6, -1}},  {{PO, 0.8, 5}, {EQ, 1.0, -1}},  {{RO, 0.2, 3}, {SO, 0.6, 8}},
    {{EQ, 0.6, -1}, {PO, 0.4, 6}},  {{RO, 0.8, 8}, {CO, 0.4, 0}},   {{RO, 0.4, 9}, {EQ, 0.6, -1}},
    {{EQ, 0.0, -1}, {EQ, 0.8, -1}}, {{IN, 0.6, -1}, {EQ, 1.0, -1}}, {{CO, 0.6, 4}, {CT, 1.0, 8}},
    {{RO, 0.8, 8}, {CO, 1.0, 2}},   {{CO, 0.8, 8}, {SO, 0.8, 7}},   {{SH, 0.4, 7}, {IN, 0.6, -1}},
    {{SX, 0.6, 5}, {EQ, 1.0, -1}},  {{CO, 0.4, 0}, {EQ, 0.6, -1}},  {{EQ, 0.4, -1}, {SO, 0.2, 4}},
    {{SO, 0.6, 5}, {AC, 0.6, -1}},  {{IN, 0.6, -1}, {EQ, 1.0, -1}}, {{CO, 0.6, 4}, {CT, 1.0, 8}},
    {{EQ, 0.8, -1}, {EQ, 0.6, -1}},
};

/* torch.linspace(lo, hi, n)[i] for float32: both ends rounded to float, the step computed in
 * float, the first half counted from lo and the second from hi. */
static double
linspace32(double lo, double hi, int n, int i)
{
    float start = (float)lo, end = (float)hi;
    float step = (end - start) / (float)(n - 1);
    /* torch's vectorised kernel fuses each multiply-add. */
    if (i < n / 2)
        return (double)tsock__fma32(step, (float)i, start);
    return (double)tsock__fma32(-step, (float)(n - 1 - i), end);
}

static double
bin_value(const struct space_entry *e, int n, int i, int w, int h)
{
    switch (e->kind) {
    case BINS_LINEAR: return linspace32(e->lo, e->hi, n, i);
    case BINS_WIDTH: return linspace32(0.0, e->hi * w, n, i);
    case BINS_HEIGHT: return linspace32(0.0, e->hi * h, n, i);
    case BINS_POSTERIZE: {
        float div = (float)((n - 1) / e->lo);
        return (double)nearbyintf(8.0f - (float)i / div);
    }
    default: return 0.0;
    }
}

/* The magnitude of entry e at bin i, negated when signed and rand() <= 0.5 (drawn only for
 * signed operations with magnitudes, as torchvision draws it). */
static double
signed_magnitude(struct tsock__rng *rng, const struct space_entry *e, int n, int i, int w, int h)
{
    if (e->kind == BINS_NONE)
        return 0.0;
    double m = bin_value(e, n, i, w, h);
    if (e->is_signed && tsock__rng_double(rng) <= 0.5)
        m = -m;
    return m;
}

static const struct space_entry *
ra_entry(int op)
{
    for (int k = 0; k < N_SPACE + 1; k++)
        if (ra_space[k].op == op)
            return &ra_space[k];
    return &ra_space[0];
}

static int
push(struct tsock__aug_step *steps, int cap, int n, int op, double m)
{
    if (n < cap)
        steps[n] = (struct tsock__aug_step){op, m};
    return n + 1;
}

int
tsock__aug_policy_draw(struct tsock__rng *rng, const struct tsock__aug_config *c, int w, int h,
                       struct tsock__aug_step *steps, int cap)
{
    int n = 0;
    if (c->policy == TSOCK__POLICY_TA_WIDE) {
        const struct space_entry *e = &ta_wide[tsock__rng_below(rng, N_SPACE)];
        int bin = e->kind == BINS_NONE ? 0 : (int)tsock__rng_below(rng, 31);
        n = push(steps, cap, n, e->op, signed_magnitude(rng, e, 31, bin, w, h));
    } else if (c->policy == TSOCK__POLICY_RA) {
        for (int k = 0; k < c->ra_ops; k++) {
            const struct space_entry *e = &ra_space[tsock__rng_below(rng, N_SPACE)];
            n = push(steps, cap, n, e->op, signed_magnitude(rng, e, 31, c->ra_magnitude, w, h));
        }
    } else if (c->policy == TSOCK__POLICY_IMAGENET) {
        const struct sub_op *sub = imagenet[tsock__rng_below(rng, 25)];
        for (int k = 0; k < 2; k++) {
            if (!(tsock__rng_double(rng) <= sub[k].p))
                continue;
            const struct space_entry *e = ra_entry(sub[k].op);
            double m = sub[k].bin < 0 ? 0.0 : signed_magnitude(rng, e, 10, sub[k].bin, w, h);
            n = push(steps, cap, n, sub[k].op, m);
        }
    }
    return n < cap ? n : cap;
}
