/* Posterize, solarize, invert: functions of each byte alone. */
#include "augment/augment.h"

void
tsock__aug_posterize(uint8_t *img, int w, int h, int bits)
{
    if (bits >= 8)
        return;
    uint8_t mask = (uint8_t)(((1u << bits) - 1u) << (8 - bits));
    size_t n = (size_t)w * (size_t)h * 3;
    for (size_t i = 0; i < n; i++)
        img[i] &= mask;
}

/* torch.where(image >= threshold, 255 - image, image): the comparison of a uint8 tensor with
 * a Python float happens in float32. */
void
tsock__aug_solarize(uint8_t *img, int w, int h, double threshold)
{
    float t = (float)threshold;
    size_t n = (size_t)w * (size_t)h * 3;
    for (size_t i = 0; i < n; i++)
        if ((float)img[i] >= t)
            img[i] = (uint8_t)(255 - img[i]);
}

void
tsock__aug_invert(uint8_t *img, int w, int h)
{
    size_t n = (size_t)w * (size_t)h * 3;
    for (size_t i = 0; i < n; i++)
        img[i] = (uint8_t)(255 - img[i]);
}
