/* The ImageNet presets: box choice from the header, then one decode straight into the output. */
#include <errno.h>
#include <string.h>

#include "image/image_int.h"

/* The header, which the box depends on. On failure the decoder's report says only what the
 * probe found, as after a failed decode. */
static int
probe(struct tsock__decoder *d, const uint8_t *data, size_t size, struct tsock__image_info *info)
{
    int r = tsock__image_probe(data, size, info);
    if (r != 0) {
        memset(&d->report, 0, sizeof d->report);
        d->report.format = info->format;
    }
    return r;
}

int
tsock__preset_train(struct tsock__decoder *d, const uint8_t *data, size_t size,
                    struct tsock__rng *rng, const struct tsock__train_params *p, uint8_t *out,
                    struct tsock__box *box, int *flipped)
{
    struct tsock__image_info info;
    struct tsock__box b;
    int r, flip;

    if (!d || !rng || !p || !out || p->size < 1)
        return -EINVAL;
    r = probe(d, data, size, &info);
    if (r != 0)
        return r;
    r = tsock__rrc_box(rng, info.width, info.height, p->scale_min, p->scale_max, p->ratio_min,
                       p->ratio_max, &b);
    if (r < 0)
        return r;
    /* RandomHorizontalFlip: torch.rand(1) < p. Drawn whatever p->flip says, so that the
     * stream of crops is the same with and without --no-flip. */
    flip = tsock__rng_double(rng) < 0.5 && p->flip;
    if (box)
        *box = b;
    if (flipped)
        *flipped = flip;
    return tsock__decode_crop_resize(d, data, size, &b, p->size, p->size, flip, out);
}

int
tsock__preset_val(struct tsock__decoder *d, const uint8_t *data, size_t size, int resize, int crop,
                  uint8_t *out)
{
    struct tsock__image_info info;
    struct tsock__resize_spec s;
    int r;

    if (!d || !out || crop < 1 || resize < crop)
        return -EINVAL;
    r = probe(d, data, size, &info);
    if (r != 0)
        return r;
    memset(&s, 0, sizeof s);
    r = tsock__val_resize_dims(info.width, info.height, resize, &s.resize_w, &s.resize_h);
    if (r != 0)
        return r;
    s.out_w = s.out_h = crop;
    s.win_x = tsock__center_offset(s.resize_w, crop);
    s.win_y = tsock__center_offset(s.resize_h, crop);
    return tsock__decode_resize(d, data, size, &s, out);
}
