/* Names of return codes, and the version query. */
#include <string.h>

#include "core/core.h"

static const char *const tsock_messages[] = {
    [0] = "tsock error",
    [1] = "protocol error: malformed or unexpected message",
    [2] = "protocol version mismatch between producer and consumer",
    [3] = "producer lost: no heartbeat within the timeout",
    [4] = "producer stopped before the end of the stream",
    [5] = "end of stream: the producer published its last batch",
    [6] = "call not allowed in the current state",
    [7] = "invalid batch layout",
    [8] = "producer has no room for another consumer",
    [9] = "rejected by the producer",
    [10] = "batch not held by this consumer",
    [11] = "endpoint already served by a live producer",
    [12] = "epoch interrupted: the producer went away mid-epoch; the next call starts a new one",
    [13] = "bad sample: a file could not be read or decoded (on-error fail)",
    [14] = "no usable GPU (no device, driver or runtime, bad device index, or no peer access)",
    [15] = "a GPU exists but this process cannot use it (old driver, exclusive mode, fork, IPC)",
    [16] = "cancelled: a *_cancel call stopped the wait",
    [17] = "refused to serve an endpoint other hosts or users can reach without authentication "
           "(give CURVE keys, bind one loopback address or an ipc socket file, or opt out "
           "explicitly)",
    [18] = "authentication failed: the producer refused this client's CURVE handshake (key not "
           "authorized, keys on one side only, or another server key)",
    [19] = "bad consumer state: corrupt, truncated, another version, or foreign to this producer",
    [20] = "group incomplete: ranks of the group did not join within the group timeout",
    [21] = "group mismatch: this rank disagrees with the group's other ranks (world size, batch "
           "size, drop_last), repeats a joined rank, or is out of range",
    [22] = "group lost: another rank of the group left or died, so the group cannot go on",
};

/* Every code in the reserved range must have a message. */
_Static_assert(sizeof tsock_messages / sizeof tsock_messages[0] == TSOCK_E_BASE - TSOCK_E_LAST,
               "tsock_messages must name every TSOCK_E_* code");

const char *
tsock_strerror(int code)
{
    if (code == 0)
        return "success";
    if (code <= TSOCK_E_BASE && code > TSOCK_E_LAST)
        return tsock_messages[TSOCK_E_BASE - code];
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error code";
}

int
tsock_version(void)
{
    return TSOCK_VERSION_NUMBER;
}

const char *
tsock_version_string(void)
{
    return TSOCK_VERSION_STRING;
}

/* The build's features, fixed at compile time (CMake's TSOCK_HAVE_* definitions). */
#ifdef TSOCK_HAVE_CUDA
#define BUILD_CUDA "1"
#else
#define BUILD_CUDA "0"
#endif
#ifdef TSOCK_HAVE_URING
#define BUILD_URING "1"
#else
#define BUILD_URING "0"
#endif

const char *
tsock_build_info(void)
{
    return "version=" TSOCK_VERSION_STRING " cuda=" BUILD_CUDA " io_uring=" BUILD_URING;
}
