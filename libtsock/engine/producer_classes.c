/* The dataset's class names, announced in every WELCOME (docs/protocol.md): what a training
 * script reads as loader.dataset.classes, taken from the producer rather than from a dataset
 * folder the job may not see. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/producer_internal.h"
#include "proto/wire.h"

int
tsock_producer_set_classes(tsock_producer *p, uint32_t count, const char *const *names)
{
    if (!p || (count && !names))
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    size_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t n = names[i] ? strlen(names[i]) : 0;
        if (n < 1 || n > TSOCK__PROTO_MAX_CLASS_NAME || !tsock__wire_name_bytes_ok(names[i], n))
            return -EINVAL;
        total += n + 1;
        if (total > TSOCK__PROTO_MAX_CLASS_BYTES)
            return -E2BIG;
    }
    uint8_t *blob = malloc(total ? total : 1);
    if (!blob)
        return -ENOMEM;
    size_t at = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t n = strlen(names[i]) + 1;
        memcpy(blob + at, names[i], n);
        at += n;
    }
    free(p->classes);
    p->classes = blob;
    p->classes_len = (uint32_t)total;
    return 0;
}
