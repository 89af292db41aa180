/* The GPU entry points where they can be checked without a GPU, and the parts of them that do
 * not depend on one: argument checks, TSOCK_E_NO_DEVICE from a producer or a consumer that
 * needs a device this machine lacks (or a device index past the last), a consumer refusing a
 * CUDA WELCOME whose handles cannot be opened, and the GPU calls on a host batch. The same
 * assertions hold on a machine with a GPU, except where noted. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "proto/proto.h"
#include "scratch.h"
#include "tsock/tsock.h"

static char endpoint[256];

static void
make_endpoint(const char *tag)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "gpuapi");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, tag);
}

static tsock_layout *
layout(void)
{
    tsock_layout *l;
    int64_t shape[1] = {8};
    CHECK_EQ(tsock_layout_create(&l), 0);
    CHECK_EQ(tsock_layout_add(l, "x", TSOCK_UINT8, 1, shape), 0);
    return l;
}

static void
test_producer_device(int devices)
{
    tsock_layout *l = layout();
    tsock_producer *p;
    make_endpoint("p");
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 2), 0);
    CHECK_EQ(tsock_producer_set_device(NULL, 0), -EINVAL);
    CHECK_EQ(tsock_producer_set_device(p, -2), -EINVAL);
    /* An index no machine has: refused at start, on any machine. */
    CHECK_EQ(tsock_producer_set_device(p, 4096), 0);
    CHECK_EQ(tsock_producer_start(p), TSOCK_E_NO_DEVICE);
    tsock_producer_destroy(p);

    if (devices < 0) {
        CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 2), 0);
        CHECK_EQ(tsock_producer_set_device(p, 0), 0);
        CHECK_EQ(tsock_producer_start(p), TSOCK_E_NO_DEVICE);
        tsock_producer_destroy(p);
    }

    /* A CUDA ring has at most 256 slots (its WELCOME carries an event handle per slot). */
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 300), 0);
    CHECK_EQ(tsock_producer_set_device(p, 0), 0);
    CHECK_EQ(tsock_producer_start(p), -EINVAL);
    tsock_producer_destroy(p);

    /* Back to the host ring: -1 works as before, and setters are refused after start. */
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 2), 0);
    CHECK_EQ(tsock_producer_set_device(p, 0), 0);
    CHECK_EQ(tsock_producer_set_device(p, -1), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_producer_set_device(p, 0), TSOCK_E_STATE);
    CHECK_EQ(tsock_producer_set_output(p, NULL, TSOCK_FLOAT32, TSOCK_NCHW), TSOCK_E_STATE);
    tsock_producer_destroy(p);
    tsock_layout_destroy(l);
}

/* A raw ROUTER plays a producer whose ring is on a GPU, with handles no driver will open. */
struct fake {
    void *ctx, *router;
};

static void *
welcome_cuda(void *arg)
{
    struct fake *f = arg;
    uint8_t id[256], buf[TSOCK__PROTO_MAX_MESSAGE];
    int idn = zmq_recv(f->router, id, sizeof id, 0);
    CHECK(idn > 0);
    CHECK(zmq_recv(f->router, buf, sizeof buf, 0) > 0); /* HELLO */
    static struct tsock__msg m;
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_WELCOME;
    struct tsock__msg_welcome *w = &m.u.welcome;
    w->batch_size = 4;
    w->slot_count = 2;
    w->slot_stride = 4096;
    w->ring_bytes = 8192;
    w->heartbeat_ms = 250;
    w->device = TSOCK_DEVICE_CUDA;
    w->nodes = 1;
    /* The attach blob: device id, memory handle, one event handle per slot. */
    static uint8_t blob[TSOCK__PROTO_DEVICE_ID_SIZE + 3 * TSOCK__PROTO_HANDLE_SIZE];
    memset(blob, 0x5A, TSOCK__PROTO_DEVICE_ID_SIZE);
    memset(blob + TSOCK__PROTO_DEVICE_ID_SIZE, 0xA5, TSOCK__PROTO_HANDLE_SIZE);
    memset(blob + TSOCK__PROTO_DEVICE_ID_SIZE + TSOCK__PROTO_HANDLE_SIZE, 0x33,
           2 * TSOCK__PROTO_HANDLE_SIZE);
    w->attach = blob;
    w->attach_len = sizeof blob;
    w->tensor_count = 1;
    strcpy(w->tensors[0].name, "x");
    w->tensors[0].dtype = TSOCK_UINT8;
    w->tensors[0].sample_bytes = 1;
    int n = tsock__msg_encode(&m, buf, sizeof buf);
    CHECK(n > 0);
    zmq_send(f->router, id, (size_t)idn, ZMQ_SNDMORE);
    zmq_send(f->router, buf, (size_t)n, 0);
    return NULL;
}

static void
test_consumer_cuda_welcome(int devices)
{
    struct fake f;
    make_endpoint("fake");
    f.ctx = zmq_ctx_new();
    f.router = zmq_socket(f.ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(f.router, ZMQ_LINGER, &linger, sizeof linger);
    CHECK_EQ(zmq_bind(f.router, endpoint), 0);
    tsock_consumer *c;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_device(NULL, 0), -EINVAL);
    CHECK_EQ(tsock_consumer_set_device(c, -2), -EINVAL);
    CHECK_EQ(tsock_consumer_set_device(c, -1), 0);
    pthread_t t;
    pthread_create(&t, NULL, welcome_cuda, &f);
    int err = tsock_consumer_start(c, 5000);
    pthread_join(t, NULL);
    /* No GPU: TSOCK_E_NO_DEVICE. With one, the fake handles fail to open (a logged CUDA error):
     * never success, never a crash. */
    if (devices < 0)
        CHECK_EQ(err, TSOCK_E_NO_DEVICE);
    else
        CHECK(err < 0 && err != -ETIMEDOUT);
    CHECK_EQ(tsock_consumer_set_device(c, 0), TSOCK_E_STATE);
    tsock_batch *b;
    CHECK(tsock_consumer_next(c, 0, &b) < 0);
    tsock_consumer_destroy(c);
    zmq_close(f.router);
    zmq_ctx_term(f.ctx);
}

/* A host ring's batch: on the CPU, no device, and the GPU calls accept it and do nothing. */
static void
test_host_batch(void)
{
    tsock_layout *l = layout();
    tsock_producer *p;
    make_endpoint("host");
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, 4, 2), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    tsock_consumer *c;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_device(c, 3), 0); /* ignored: the ring is on the host */
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 5000), 1);
    for (int i = 0; i < 2; i++) {
        tsock_slot *s;
        CHECK_EQ(tsock_producer_acquire(p, 5000, &s), 0);
        memset(tsock_slot_data(s, 0), 7 + i, 32);
        CHECK_EQ(tsock_producer_publish(p, s, 4), 0);
    }
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), 0);
    CHECK_EQ(tsock_batch_tensor_device(b, 0), TSOCK_DEVICE_CPU);
    CHECK_EQ(tsock_batch_device_index(b), -1);
    CHECK_EQ(tsock_batch_wait(b, NULL), 0);
    CHECK_EQ(((const uint8_t *)tsock_batch_tensor_data(b, 0))[31], 7);
    CHECK_EQ(tsock_consumer_release_on_stream(c, b, NULL), 0);
    CHECK_EQ(tsock_consumer_release_on_stream(c, b, NULL), TSOCK_E_NOT_HELD);
    CHECK_EQ(tsock_batch_wait(NULL, NULL), -EINVAL);
    CHECK_EQ(tsock_batch_device_index(NULL), -EINVAL);
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), 0);
    CHECK_EQ(((const uint8_t *)tsock_batch_tensor_data(b, 0))[0], 8);
    CHECK_EQ(tsock_consumer_release(c, b), 0);
    CHECK_EQ(tsock_batch_wait(b, NULL), -EINVAL); /* released: not held any more */
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
    tsock_layout_destroy(l);
}

static void
log_line(void *user, int level, const char *message)
{
    fprintf(stderr, "[tsock %d] %s\n", level, message);
}

int
main(void)
{
    tsock_set_log(log_line, NULL, TSOCK_LOG_WARN);
    int devices = tsock_cuda_device_count();
    printf("tsock_cuda_device_count() = %d (%s)\n", devices,
           devices < 0 ? tsock_strerror(devices) : "devices");
    CHECK(devices > 0 || devices == TSOCK_E_NO_DEVICE);
    test_producer_device(devices);
    test_consumer_cuda_welcome(devices);
    test_host_batch();
    return CHECK_DONE();
}
