/* The layout struct behind the opaque tsock_layout, and where its tensors sit in a slot. */
#ifndef TSOCK_LAYOUT_H
#define TSOCK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

struct tsock__layout_tensor {
    char name[TSOCK_MAX_NAME + 1];
    int dtype;
    int ndim;
    int64_t sample_shape[TSOCK_MAX_DIMS];
    size_t sample_bytes;
};

struct tsock_layout {
    int count;
    struct tsock__layout_tensor tensors[TSOCK_MAX_TENSORS];
};

/* Index of the tensor called `name`, or -ENOENT. */
int tsock__layout_find(const tsock_layout *layout, const char *name);

/* Places the tensors of a batch of `batch_size` samples one after another (64-byte aligned)
 * and rounds the slot up to whole pages. Returns 0 or TSOCK_E_LAYOUT on overflow. */
int tsock__layout_place(const tsock_layout *layout, uint32_t batch_size, size_t *offsets,
                        size_t *slot_stride);

#endif
