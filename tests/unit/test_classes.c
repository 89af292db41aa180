/* The dataset's class names, from tsock_producer_set_classes to a consumer's WELCOME
 * (tsock_consumer_classes / _class_name), and the setter's refusals. Real sockets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

static tsock_producer *
producer(const char *endpoint)
{
    tsock_layout *l;
    CHECK_EQ(tsock_layout_create(&l), 0);
    CHECK_EQ(tsock_layout_add(l, "label", TSOCK_INT64, 0, NULL), 0);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 2), 0);
    tsock_layout_destroy(l);
    return p;
}

int
main(void)
{
    char dir[128], endpoint[256];
    test_scratch_dir(dir, sizeof dir, "classes");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/p.sock", dir);
    tsock_producer *p = producer(endpoint);
    static const char *const names[] = {"cat", "dog", "n01440764"};
    static const char *const bad_control[] = {"cat", "d\tg"};
    static const char *const bad_empty[] = {""};
    static const char *const bad_null[] = {NULL};
    CHECK_EQ(tsock_producer_set_classes(NULL, 1, names), -EINVAL);
    CHECK_EQ(tsock_producer_set_classes(p, 1, NULL), -EINVAL);
    CHECK_EQ(tsock_producer_set_classes(p, 2, bad_control), -EINVAL);
    CHECK_EQ(tsock_producer_set_classes(p, 1, bad_empty), -EINVAL);
    CHECK_EQ(tsock_producer_set_classes(p, 1, bad_null), -EINVAL);
    /* 129 names of 255 bytes take 129 x 256 bytes: more than a WELCOME carries. */
    char big[256];
    memset(big, 'x', 255);
    big[255] = '\0';
    const char *many[129];
    for (int i = 0; i < 129; i++)
        many[i] = big;
    CHECK_EQ(tsock_producer_set_classes(p, 129, many), -E2BIG);
    CHECK_EQ(tsock_producer_set_classes(p, 128, many), 0); /* 32768 bytes: fits */
    CHECK_EQ(tsock_producer_set_classes(p, 3, names), 0);  /* replaces them */
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_producer_set_classes(p, 3, names), TSOCK_E_STATE);

    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_classes(c), 0); /* not started */
    CHECK(tsock_consumer_class_name(c, 0) == NULL);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_consumer_classes(c), 3);
    for (uint32_t i = 0; i < 3; i++)
        CHECK(tsock_consumer_class_name(c, i) &&
              strcmp(tsock_consumer_class_name(c, i), names[i]) == 0);
    CHECK(tsock_consumer_class_name(c, 3) == NULL);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);

    /* A producer without names: none, not an empty list. */
    p = producer(endpoint);
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_consumer_classes(c), 0);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
    CHECK_EQ(tsock_consumer_classes(NULL), 0);
    CHECK(tsock_consumer_class_name(NULL, 0) == NULL);
    return CHECK_DONE();
}
