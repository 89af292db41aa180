/* tsock-producer's recipe options (see augment_options.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment_options.h"
#include "cli.h"

const char augment_options_usage[] =
    "Recipe (torchvision's reference script's flags; train preset unless said):\n"
    "  --train-crop-size N        RandomResizedCrop output side (sets --image-size with\n"
    "                             --split train)\n"
    "  --val-resize-size N        val: Resize's shorter side (default size*256/224)\n"
    "  --val-crop-size N          val: CenterCrop side (sets --image-size with --split val)\n"
    "  --interpolation bilinear|bicubic\n"
    "                             the resizing filter of both presets, PIL's (default\n"
    "                             bilinear)\n"
    "  --auto-augment ta_wide|ra|imagenet\n"
    "                             TrivialAugmentWide, RandAugment or AutoAugment(IMAGENET),\n"
    "                             after the crop and flip\n"
    "  --ra-magnitude M           RandAugment's magnitude bin, 0..30 (default 9)\n"
    "  --ra-ops N                 RandAugment's operations per image, 0..64 (default 2)\n"
    "  --augment-interpolation nearest|bilinear\n"
    "                             the policies' geometric resampling (default nearest,\n"
    "                             torchvision's; its reference script passes bilinear)\n"
    "  --color-jitter B,C,S,H     ColorJitter(brightness, contrast, saturation, hue)\n"
    "  --random-erase P           RandomErasing with probability P, filled with ImageNet's\n"
    "                             mean (124,116,104)\n"
    "\n";

void
augment_options_init(struct augment_options *a)
{
    memset(a, 0, sizeof *a);
    a->ra_magnitude = 9;
    a->ra_ops = 2;
    a->augment_interp = TSOCK_AUGMENT_NEAREST;
}

static void
parse_jitter(const char *value, struct augment_options *a)
{
    const char *p = value;
    for (int i = 0; i < 4; i++) {
        char *end;
        a->jitter[i] = cli_parse_double("color-jitter", p, &end);
        if (*end != (i < 3 ? ',' : '\0'))
            cli_bad_usage("--color-jitter: expected four numbers B,C,S,H (for example "
                          "0.4,0.4,0.4,0), got '%s'",
                          value);
        p = end + 1;
    }
    for (int i = 0; i < 3; i++)
        if (a->jitter[i] < 0)
            cli_bad_usage("--color-jitter: brightness, contrast and saturation must be 0 or "
                          "more, got '%s'",
                          value);
    if (!(a->jitter[3] >= 0 && a->jitter[3] <= 0.5))
        cli_bad_usage("--color-jitter: hue must be in [0, 0.5], got '%s'", value);
}

/* A signed integer within [min, max]: a negative value gets its own message. */
static int
parse_int(const char *opt, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0)
        cli_bad_usage("--%s: '%s' is not an integer", opt, s);
    if (v < min || v > max)
        cli_bad_usage("--%s: must be from %ld to %ld, got %s", opt, min, max, s);
    return (int)v;
}

static void
parse_erase(const char *arg, struct augment_options *a)
{
    char *end;
    a->random_erase = cli_parse_double("random-erase", arg, &end);
    if (*end != '\0' || !(a->random_erase >= 0 && a->random_erase <= 1))
        cli_bad_usage("--random-erase: a probability in [0, 1], got '%s'", arg);
}

int
augment_options_parse(int c, const char *arg, struct augment_options *a)
{
    static const char *const policies[] = {"none", "ta_wide", "ra", "imagenet", NULL};
    static const char *const interps[] = {"nearest", "bilinear", NULL};
    static const char *const resizes[] = {"bilinear", "bicubic", NULL};
    const char *name = NULL;
    switch (c) {
    case OPT_TRAIN_CROP_SIZE:
        a->train_crop_size = cli_parse_u64("train-crop-size", arg, 1, 8192);
        name = "--train-crop-size";
        break;
    case OPT_VAL_RESIZE_SIZE:
        a->val_resize_size = cli_parse_u64("val-resize-size", arg, 1, 8192);
        name = "--val-resize-size";
        break;
    case OPT_VAL_CROP_SIZE:
        a->val_crop_size = cli_parse_u64("val-crop-size", arg, 1, 8192);
        name = "--val-crop-size";
        break;
    case OPT_INTERPOLATION:
        a->bicubic = cli_parse_choice("interpolation", arg, resizes);
        name = "--interpolation";
        break;
    case OPT_AUTO_AUGMENT:
        a->auto_augment = cli_parse_choice("auto-augment", arg, policies);
        a->train_only = a->train_only || a->auto_augment != 0;
        name = "--auto-augment";
        break;
    case OPT_RA_MAGNITUDE:
        a->ra_magnitude = parse_int("ra-magnitude", arg, 0, TSOCK_AUGMENT_RA_BINS - 1);
        a->ra_given = 1;
        name = "--ra-magnitude";
        break;
    case OPT_RA_OPS:
        a->ra_ops = parse_int("ra-ops", arg, 0, TSOCK_AUGMENT_MAX_OPS);
        a->ra_given = 1;
        name = "--ra-ops";
        break;
    case OPT_AUGMENT_INTERPOLATION:
        a->augment_interp = cli_parse_choice("augment-interpolation", arg, interps);
        name = "--augment-interpolation";
        break;
    case OPT_RANDOM_ERASE:
        parse_erase(arg, a);
        a->train_only = a->train_only || a->random_erase > 0;
        name = "--random-erase";
        break;
    case OPT_COLOR_JITTER:
        parse_jitter(arg, a);
        a->train_only = 1;
        name = "--color-jitter";
        break;
    default: return 0;
    }
    a->first = a->first ? a->first : name;
    return 1;
}

static void
take_size(uint64_t crop, const char *flag, uint64_t *image_size, int image_size_given)
{
    if (!crop)
        return;
    if (image_size_given && *image_size != crop)
        cli_bad_usage("%s %llu contradicts --image-size %llu: give one of them", flag,
                      (unsigned long long)crop, (unsigned long long)*image_size);
    *image_size = crop;
}

void
augment_options_check(struct augment_options *a, int val, uint64_t *image_size,
                      int image_size_given)
{
    if (a->ra_given && a->auto_augment != TSOCK_AUTO_AUGMENT_RA)
        cli_bad_usage("--ra-magnitude, --ra-ops: only with --auto-augment ra");
    if (val && a->train_only)
        cli_bad_usage("--auto-augment, --color-jitter, --random-erase: training augmentations, "
                      "not for --split val");
    if (val) {
        take_size(a->val_crop_size, "--val-crop-size", image_size, image_size_given);
        if (a->val_resize_size && a->val_resize_size < *image_size)
            cli_bad_usage("--val-resize-size %llu: must be at least the crop size %llu",
                          (unsigned long long)a->val_resize_size, (unsigned long long)*image_size);
    } else {
        take_size(a->train_crop_size, "--train-crop-size", image_size, image_size_given);
    }
}

int
augment_options_apply(const struct augment_options *a, tsock_pipeline *pl)
{
    int rc = tsock_pipeline_set_val_resize(pl, (int)a->val_resize_size);
    if (rc == 0)
        rc = tsock_pipeline_set_interpolation(pl, a->bicubic ? TSOCK_INTERPOLATION_BICUBIC
                                                             : TSOCK_INTERPOLATION_BILINEAR);
    if (rc == 0)
        rc = tsock_pipeline_set_auto_augment(pl, a->auto_augment, a->ra_magnitude, a->ra_ops,
                                             a->augment_interp);
    if (rc == 0)
        rc = tsock_pipeline_set_color_jitter(pl, a->jitter[0], a->jitter[1], a->jitter[2],
                                             a->jitter[3]);
    if (rc == 0)
        rc = tsock_pipeline_set_random_erase(pl, a->random_erase);
    return rc;
}

int
augment_options_describe(const struct augment_options *a, char *buf, size_t size)
{
    static const char *const policies[] = {"", "TrivialAugmentWide", "RandAugment",
                                           "AutoAugment(IMAGENET)"};
    static const char *const interps[] = {"nearest", "bilinear"};
    size_t at = 0;
    int n = 0;
    buf[0] = '\0';
    if (a->auto_augment) {
        at += (size_t)snprintf(buf, size, "%s (%s", policies[a->auto_augment],
                               interps[a->augment_interp]);
        if (a->auto_augment == TSOCK_AUTO_AUGMENT_RA && at < size)
            at += (size_t)snprintf(buf + at, size - at, ", %d ops, magnitude %d", a->ra_ops,
                                   a->ra_magnitude);
        if (at < size)
            at += (size_t)snprintf(buf + at, size - at, ")");
        n++;
    }
    if ((a->jitter[0] > 0 || a->jitter[1] > 0 || a->jitter[2] > 0 || a->jitter[3] > 0) &&
        at < size) {
        at += (size_t)snprintf(buf + at, size - at, "%sColorJitter(%g, %g, %g, %g)", n ? ", " : "",
                               a->jitter[0], a->jitter[1], a->jitter[2], a->jitter[3]);
        n++;
    }
    if (a->random_erase > 0 && at < size) {
        snprintf(buf + at, size - at, "%sRandomErasing(%g)", n ? ", " : "", a->random_erase);
        n++;
    }
    return n;
}

const char *
augment_options_cpu_only(const struct augment_options *a)
{
    if (a->auto_augment)
        return "--auto-augment";
    if (a->jitter[0] > 0 || a->jitter[1] > 0 || a->jitter[2] > 0 || a->jitter[3] > 0)
        return "--color-jitter";
    if (a->random_erase > 0)
        return "--random-erase";
    if (a->bicubic)
        return "--interpolation bicubic";
    if (a->val_resize_size)
        return "--val-resize-size";
    return NULL;
}
