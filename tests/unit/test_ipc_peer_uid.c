/* An ipc endpoint without CURVE admits only the producer's user and root (issue 18 item 10):
 * libzmq reads the connecting peer's SO_PEERCRED credentials and hands them to the channel's
 * ZAP handler, which refuses other users. An abstract name (ipc://@NAME) has no file
 * permissions, so this check is all that keeps another user out once the risk-naming opt-out
 * serves it. Real libzmq, real processes: a child that becomes user `nobody` (65534) connects
 * and must be refused; a child of our own user must be admitted. Each child execs this program
 * again (--connect UID ENDPOINT) rather than using ZeroMQ after fork in a process with threads.
 * Switching users needs root: otherwise the test reports a skip. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "transport/channel.h"
#include "tsock/tsock.h"

#define OTHER_UID 65534
#define ADMITTED 10
#define REFUSED 11
#define UNDECIDED 12

/* Child: connects a NULL-mechanism DEALER and reports the handshake's verdict as exit code. */
static int
connect_and_report(const char *endpoint)
{
    void *ctx = zmq_ctx_new();
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(sock, "inproc://watch", events) != 0)
        return UNDECIDED;
    void *watch = zmq_socket(ctx, ZMQ_PAIR);
    zmq_connect(watch, "inproc://watch");
    /* A deadline for a failure only: the verdict, not the time, decides the result. */
    int timeout_ms = 20000;
    zmq_setsockopt(watch, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_connect(sock, endpoint);
    uint8_t head[6];
    int verdict = UNDECIDED;
    if (zmq_recv(watch, head, sizeof head, 0) == (int)sizeof head) {
        uint16_t event;
        memcpy(&event, head, sizeof event);
        verdict = event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED ? ADMITTED : REFUSED;
    }
    return verdict; /* the process ends here: no teardown needed */
}

/* Runs a child as `uid` against the bound channel, serving the channel (and so its ZAP
 * handler) until the child exits. Returns the child's verdict. */
static int
try_as(struct tsock__channel *ch, const char *endpoint, uid_t uid)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* Exec first, as root (this program's folder may be closed to the other user), and
         * become that user in the new image, before it starts ZeroMQ. */
        char uid_text[16];
        snprintf(uid_text, sizeof uid_text, "%u", (unsigned)uid);
        execl("/proc/self/exe", "test_ipc_peer_uid", "--connect", uid_text, endpoint, (char *)NULL);
        _exit(UNDECIDED);
    }
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        tsock__channel_wait(ch, 50);
        tsock__channel_dispatch(ch);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int
main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--connect") == 0) {
        uid_t uid = (uid_t)strtoul(argv[2], NULL, 10);
        if (uid != getuid() && (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
                                setresuid(uid, uid, uid) != 0))
            return UNDECIDED;
        return connect_and_report(argv[3]);
    }
    if (geteuid() != 0) {
        printf("SKIP: switching to another user needs root\n");
        return 77;
    }
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "ipc://@tsock-test-peer-uid-%d", (int)getpid());
    struct tsock__channel_handlers h;
    memset(&h, 0, sizeof h);
    struct tsock__channel_timing t = {100, 0};
    struct tsock__channel_security open_sec;
    memset(&open_sec, 0, sizeof open_sec);
    open_sec.insecure_network = 1; /* the opt-out an abstract name needs without keys */
    struct tsock__channel *ch = NULL;
    CHECK_EQ(tsock__channel_bind(&ch, endpoint, &h, t, &open_sec), 0);
    if (!ch)
        return CHECK_DONE();
    int own = try_as(ch, endpoint, getuid());
    CHECK_EQ(own, ADMITTED);
    int other = try_as(ch, endpoint, OTHER_UID);
    CHECK_EQ(other, REFUSED);
    printf("own user: %s, user %d: %s\n", own == ADMITTED ? "admitted" : "not admitted", OTHER_UID,
           other == REFUSED ? "refused" : "not refused");
    tsock__channel_close(ch, 0);
    return CHECK_DONE();
}
