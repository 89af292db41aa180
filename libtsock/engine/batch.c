/* Reading a batch: its place in the stream and its tensors. Every pointer returned is owned by
 * the batch and valid until it is released. */
#include <errno.h>
#include <string.h>

#include "engine/consumer_internal.h"

uint32_t
tsock_batch_samples(const tsock_batch *b)
{
    return b ? b->samples : 0;
}

uint64_t
tsock_batch_seq(const tsock_batch *b)
{
    return b ? b->seq : 0;
}

uint64_t
tsock_batch_epoch(const tsock_batch *b)
{
    return b ? b->epoch : 0;
}

uint64_t
tsock_batch_index_in_epoch(const tsock_batch *b)
{
    return b ? b->index : 0;
}

int
tsock_batch_is_epoch_end(const tsock_batch *b)
{
    return b ? b->epoch_end : 0;
}

int
tsock_batch_is_view(const tsock_batch *b)
{
    return b ? b->view : 0;
}

static const struct tsock__tensor_desc *
tensor_desc(const tsock_batch *b, int tensor)
{
    if (!b || tensor < 0 || (uint32_t)tensor >= b->owner->welcome.tensor_count)
        return NULL;
    return &b->owner->welcome.tensors[tensor];
}

int
tsock_batch_tensor_count(const tsock_batch *b)
{
    return b ? (int)b->owner->welcome.tensor_count : -EINVAL;
}

int
tsock_batch_find(const tsock_batch *b, const char *name)
{
    for (int t = 0; name && t < tsock_batch_tensor_count(b); t++)
        if (strcmp(b->owner->welcome.tensors[t].name, name) == 0)
            return t;
    return -ENOENT;
}

const char *
tsock_batch_tensor_name(const tsock_batch *b, int tensor)
{
    const struct tsock__tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->name : NULL;
}

int
tsock_batch_tensor_dtype(const tsock_batch *b, int tensor)
{
    const struct tsock__tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->dtype : -EINVAL;
}

int
tsock_batch_tensor_ndim(const tsock_batch *b, int tensor)
{
    const struct tsock__tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->ndim + 1 : -EINVAL;
}

int64_t
tsock_batch_tensor_dim(const tsock_batch *b, int tensor, int dim)
{
    const struct tsock__tensor_desc *d = tensor_desc(b, tensor);
    if (!d || dim < 0 || dim > d->ndim)
        return -EINVAL;
    return dim == 0 ? (int64_t)b->samples : d->sample_shape[dim - 1];
}

size_t
tsock_batch_tensor_bytes(const tsock_batch *b, int tensor)
{
    const struct tsock__tensor_desc *d = tensor_desc(b, tensor);
    return d ? (size_t)d->sample_bytes * b->samples : 0;
}

const void *
tsock_batch_tensor_data(const tsock_batch *b, int tensor)
{
    return tensor_desc(b, tensor) ? b->data[tensor] : NULL;
}

int
tsock_batch_tensor_device(const tsock_batch *b, int tensor)
{
    if (!tensor_desc(b, tensor))
        return -EINVAL;
    return b->device >= 0 ? TSOCK_DEVICE_CUDA : TSOCK_DEVICE_CPU;
}

int
tsock_batch_device_index(const tsock_batch *b)
{
    return b ? b->device : -EINVAL;
}

int
tsock_batch_wait(const tsock_batch *b, void *cuda_stream)
{
    if (!b || !b->held)
        return -EINVAL;
    /* Gathers were complete when next returned. */
    if (!b->ring)
        return 0;
    /* The ring a held view points into stays open (even past a reconnect) until it is
     * released. Its events do not: once the session ended the producer may destroy them, and
     * using an imported event after that is undefined in CUDA (issue 20). A batch is announced
     * only once its copy completed, so there is nothing left to wait for then. */
    tsock_consumer *c = b->owner;
    pthread_mutex_lock(&c->mu);
    int ended = b->ring != c->ring || c->terminal_error != 0;
    pthread_mutex_unlock(&c->mu);
    if (ended)
        return 0;
    return b->ring->ops->wait(b->ring, b->view_slot, cuda_stream);
}
