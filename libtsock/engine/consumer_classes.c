/* The producer's class names, from its WELCOME (docs/protocol.md): kept by the service thread,
 * read by any thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/consumer_internal.h"

int
tsock__classes_keep(tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    long count = tsock__proto_class_count(w->classes, w->classes_len);
    if (count < 0)
        return TSOCK_E_PROTOCOL; /* the decoder checked it: never here */
    char *blob = NULL;
    const char **names = NULL;
    if (count > 0) {
        blob = malloc(w->classes_len);
        names = malloc((size_t)count * sizeof *names);
        if (!blob || !names) {
            free(blob);
            free(names);
            return -ENOMEM;
        }
        memcpy(blob, w->classes, w->classes_len);
        size_t at = 0;
        for (long i = 0; i < count; i++) {
            names[i] = blob + at;
            at += strlen(blob + at) + 1;
        }
    }
    tsock__classes_free(c);
    c->class_blob = blob;
    c->class_names = names;
    c->class_count = (uint32_t)count;
    return 0;
}

void
tsock__classes_free(tsock_consumer *c)
{
    free(c->class_blob);
    free(c->class_names);
    c->class_blob = NULL;
    c->class_names = NULL;
    c->class_count = 0;
}

uint32_t
tsock_consumer_classes(const tsock_consumer *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    uint32_t n = c->ready_to_read ? c->class_count : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return n;
}

const char *
tsock_consumer_class_name(const tsock_consumer *c, uint32_t label)
{
    if (!c)
        return NULL;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    const char *name = c->ready_to_read && label < c->class_count ? c->class_names[label] : NULL;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return name;
}
