/* The conversion plan and the CPU reference of the GPU conversion (convert.h says why both
 * sides share the element arithmetic). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "backend/convert.h"
#include "core/layout.h"

/* uint8 [H, W, C] with C in 1..4: the shape the pipeline writes an image in. */
static int
convertible(const struct tsock__layout_tensor *t)
{
    return t->dtype == TSOCK_UINT8 && t->ndim == 3 && t->sample_shape[2] >= 1 &&
           t->sample_shape[2] <= TSOCK__CONVERT_MAX_CHANNELS &&
           t->sample_shape[0] <= UINT32_MAX / t->sample_shape[1] &&
           t->sample_shape[0] * t->sample_shape[1] <= UINT32_MAX / 4;
}

static int
output_dtype(const struct tsock__convert_request *req)
{
    if (req->dtype == 0)
        return req->normalize ? TSOCK_FLOAT32 : TSOCK_UINT8;
    return req->dtype;
}

/* Checks the request against the tensor; logs why it cannot be honoured. */
static int
check_request(const struct tsock__convert_request *req, const struct tsock__layout_tensor *t)
{
    int dtype = output_dtype(req);
    if (!convertible(t)) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot convert tensor \"%s\": it must be uint8 with shape "
                   "[height, width, channels], 1..4 channels",
                   t->name);
        return -EINVAL;
    }
    if (dtype != TSOCK_UINT8 && dtype != TSOCK_FLOAT16 && dtype != TSOCK_FLOAT32) {
        tsock__log(TSOCK_LOG_ERROR, "output dtype %s is not supported (uint8, float16, float32)",
                   tsock_dtype_name(dtype));
        return -EINVAL;
    }
    if (req->normalize && dtype == TSOCK_UINT8) {
        tsock__log(TSOCK_LOG_ERROR, "normalisation needs a float16 or float32 output");
        return -EINVAL;
    }
    if (req->normalize && req->channels != t->sample_shape[2]) {
        tsock__log(TSOCK_LOG_ERROR, "normalisation gives %d mean/std values for %lld channels",
                   req->channels, (long long)t->sample_shape[2]);
        return -EINVAL;
    }
    return 0;
}

/* y = (x / 255 - mean) / std as one fused multiply-add: x * scale + bias, computed in double
 * and rounded once to float. Without normalisation floats are x / 255 (torchvision's
 * ToTensor scale). */
static void
set_coefficients(const struct tsock__convert_request *req, struct tsock__convert_plan *cv)
{
    for (uint32_t c = 0; c < cv->channels; c++) {
        double mean = req->normalize ? req->mean[c] : 0.0, std = req->normalize ? req->std[c] : 1.0;
        cv->scale[c] = (float)(1.0 / (255.0 * std));
        cv->bias[c] = (float)(-mean / std);
    }
}

/* The converted tensor in the published layout. */
static void
convert_tensor(struct tsock__layout_tensor *t, const struct tsock__convert_plan *cv)
{
    int64_t h = t->sample_shape[0], w = t->sample_shape[1], c = t->sample_shape[2];
    if (cv->channels_first) {
        t->sample_shape[0] = c;
        t->sample_shape[1] = h;
        t->sample_shape[2] = w;
    }
    t->dtype = cv->out_dtype;
    t->sample_bytes = (size_t)(h * w * c) * tsock_dtype_size(cv->out_dtype);
}

int
tsock__convert_plan_make(const struct tsock__convert_request *req, const tsock_layout *in,
                         uint32_t batch_size, tsock_layout *out, size_t *out_offsets,
                         size_t *out_stride, struct tsock__convert_plan *cv)
{
    memset(cv, 0, sizeof *cv);
    cv->tensor = -1;
    *out = *in;
    if (req->tensor[0]) {
        int t = tsock__layout_find(in, req->tensor);
        if (t < 0) {
            tsock__log(TSOCK_LOG_ERROR, "no tensor \"%s\" to convert in the layout", req->tensor);
            return -EINVAL;
        }
        int err = check_request(req, &in->tensors[t]);
        if (err < 0)
            return err;
        const struct tsock__layout_tensor *src = &in->tensors[t];
        cv->tensor = t;
        cv->out_dtype = output_dtype(req);
        cv->channels_first = req->channels_first != 0;
        cv->height = (uint32_t)src->sample_shape[0];
        cv->width = (uint32_t)src->sample_shape[1];
        cv->channels = (uint32_t)src->sample_shape[2];
        set_coefficients(req, cv);
        convert_tensor(&out->tensors[t], cv);
    }
    size_t in_offsets[TSOCK_MAX_TENSORS], in_stride;
    int err = tsock__layout_place(in, batch_size, in_offsets, &in_stride);
    if (err == 0)
        err = tsock__layout_place(out, batch_size, out_offsets, out_stride);
    if (err < 0)
        return err;
    cv->tensor_count = in->count;
    for (int t = 0; t < in->count; t++) {
        cv->in_offset[t] = in_offsets[t];
        cv->out_offset[t] = out_offsets[t];
        cv->in_sample_bytes[t] = in->tensors[t].sample_bytes;
        cv->out_sample_bytes[t] = out->tensors[t].sample_bytes;
    }
    return 0;
}

void
tsock__convert_ref_range(const struct tsock__convert_plan *cv, const uint8_t *in_slot,
                         uint8_t *out_slot, uint32_t first, uint32_t count)
{
    for (int t = 0; t < cv->tensor_count; t++) {
        const uint8_t *in = in_slot + cv->in_offset[t] + cv->in_sample_bytes[t] * first;
        uint8_t *out = out_slot + cv->out_offset[t] + cv->out_sample_bytes[t] * first;
        if (t != cv->tensor) {
            memcpy(out, in, cv->in_sample_bytes[t] * count);
            continue;
        }
        uint32_t elements = cv->height * cv->width * cv->channels;
        for (uint32_t s = 0; s < count; s++)
            for (uint32_t i = 0; i < elements; i++)
                tsock__convert_element(cv, in + (size_t)s * cv->in_sample_bytes[t],
                                       out + (size_t)s * cv->out_sample_bytes[t], i);
    }
}

void
tsock__convert_ref(const struct tsock__convert_plan *cv, const uint8_t *in_slot, uint8_t *out_slot,
                   uint32_t samples)
{
    tsock__convert_ref_range(cv, in_slot, out_slot, 0, samples);
}
