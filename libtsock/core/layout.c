/* Batch layouts and dtypes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [TSOCK_UINT8] = {"uint8", 1},     [TSOCK_INT8] = {"int8", 1},
    [TSOCK_INT16] = {"int16", 2},     [TSOCK_INT32] = {"int32", 4},
    [TSOCK_INT64] = {"int64", 8},     [TSOCK_FLOAT16] = {"float16", 2},
    [TSOCK_FLOAT32] = {"float32", 4}, [TSOCK_FLOAT64] = {"float64", 8},
    [TSOCK_UINT16] = {"uint16", 2},   [TSOCK_UINT32] = {"uint32", 4},
    [TSOCK_UINT64] = {"uint64", 8},   [TSOCK_BFLOAT16] = {"bfloat16", 2},
};

size_t
tsock_dtype_size(int dtype)
{
    if (dtype < TSOCK_UINT8 || dtype > TSOCK_BFLOAT16)
        return 0;
    return dtypes[dtype].size;
}

const char *
tsock_dtype_name(int dtype)
{
    if (dtype < TSOCK_UINT8 || dtype > TSOCK_BFLOAT16)
        return "unknown";
    return dtypes[dtype].name;
}

int
tsock_layout_create(tsock_layout **out)
{
    if (!out)
        return -EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

void
tsock_layout_destroy(tsock_layout *layout)
{
    free(layout);
}

int
tsock__layout_find(const tsock_layout *layout, const char *name)
{
    for (int i = 0; i < layout->count; i++)
        if (strcmp(layout->tensors[i].name, name) == 0)
            return i;
    return -ENOENT;
}

int
tsock_layout_add(tsock_layout *layout, const char *name, int dtype, int ndim,
                 const int64_t *sample_shape)
{
    if (!layout || !name || (ndim > 0 && !sample_shape))
        return -EINVAL;
    size_t len = strlen(name);
    if (len == 0 || len > TSOCK_MAX_NAME || !tsock__name_is_printable(name) || ndim < 0 ||
        ndim > TSOCK_MAX_DIMS || tsock_dtype_size(dtype) == 0)
        return -EINVAL;
    if (layout->count == TSOCK_MAX_TENSORS || tsock__layout_find(layout, name) >= 0)
        return TSOCK_E_LAYOUT;
    size_t bytes = tsock_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (sample_shape[d] <= 0)
            return -EINVAL;
        if (tsock__mul_size(bytes, (size_t)sample_shape[d], &bytes) < 0)
            return TSOCK_E_LAYOUT;
    }
    struct tsock__layout_tensor *t = &layout->tensors[layout->count];
    memcpy(t->name, name, len + 1);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->sample_shape[d] = sample_shape[d];
    t->sample_bytes = bytes;
    return layout->count++;
}

int
tsock__layout_place(const tsock_layout *layout, uint32_t batch_size, size_t *offsets,
                    size_t *slot_stride)
{
    size_t at = 0;
    if (layout->count == 0 || batch_size == 0)
        return TSOCK_E_LAYOUT;
    for (int i = 0; i < layout->count; i++) {
        size_t bytes;
        if (tsock__mul_size(layout->tensors[i].sample_bytes, batch_size, &bytes) < 0 ||
            at > SIZE_MAX / 2 || bytes > SIZE_MAX / 2 - at)
            return TSOCK_E_LAYOUT;
        offsets[i] = at;
        /* 64-byte alignment keeps every tensor on its own cache lines and suits SIMD loads. */
        at = tsock__align_up(at + bytes, 64);
    }
    /* Page-aligned slots: a slot never shares a page with its neighbour. */
    *slot_stride = tsock__align_up(at, 4096);
    return 0;
}
