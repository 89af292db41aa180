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
tsock__preset_train_spec(struct tsock__rng *rng, const struct tsock__train_params *p, int w, int h,
                         struct tsock__resize_spec *s)
{
    struct tsock__box b;
    int r = tsock__rrc_box(rng, w, h, p->scale_min, p->scale_max, p->ratio_min, p->ratio_max, &b);
    if (r < 0)
        return r;
    memset(s, 0, sizeof *s);
    s->crop = b;
    s->resize_w = s->resize_h = s->out_w = s->out_h = p->size;
    /* RandomHorizontalFlip: torch.rand(1) < p. Drawn whatever p->flip says, so that the
     * stream of crops is the same with and without --no-flip. */
    s->flip = tsock__rng_double(rng) < 0.5 && p->flip;
    return 0;
}

int
tsock__preset_train(struct tsock__decoder *d, const uint8_t *data, size_t size,
                    struct tsock__rng *rng, const struct tsock__train_params *p, uint8_t *out,
                    struct tsock__box *box, int *flipped)
{
    struct tsock__image_info info;
    struct tsock__resize_spec s;
    int r;

    if (!d || !rng || !p || !out || p->size < 1)
        return -EINVAL;
    r = probe(d, data, size, &info);
    if (r != 0)
        return r;
    r = tsock__preset_train_spec(rng, p, info.width, info.height, &s);
    if (r < 0)
        return r;
    if (box)
        *box = s.crop;
    if (flipped)
        *flipped = s.flip;
    return tsock__decode_crop_resize(d, data, size, &s.crop, p->size, p->size, s.flip, out);
}

int
tsock__preset_val_spec(int w, int h, int resize, int crop, struct tsock__resize_spec *s)
{
    if (crop < 1 || resize < crop)
        return -EINVAL;
    memset(s, 0, sizeof *s);
    int r = tsock__val_resize_dims(w, h, resize, &s->resize_w, &s->resize_h);
    if (r != 0)
        return r;
    s->crop = (struct tsock__box){0, 0, w, h};
    s->out_w = s->out_h = crop;
    s->win_x = tsock__center_offset(s->resize_w, crop);
    s->win_y = tsock__center_offset(s->resize_h, crop);
    return 0;
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
    r = tsock__preset_val_spec(info.width, info.height, resize, crop, &s);
    if (r != 0)
        return r;
    return tsock__decode_resize(d, data, size, &s, out);
}
