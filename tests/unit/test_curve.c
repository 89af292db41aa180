/* CURVE key files, the authorized-keys set, the local-endpoint rule and the channel's refusal
 * to bind a network endpoint without keys (transport/curve.c, transport/channel.c). Real
 * files in a private temporary directory; the keys come from tsock_curve_keygen (libzmq). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "scratch.h"
#include "transport/channel.h"
#include "transport/curve.h"
#include "tsock/tsock.h"

/* CHECK, then the case that failed (cond is evaluated twice: pure calls only). */
#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        CHECK(cond);                                                                               \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  case: " __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static char dir[128];

static const char *
path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void
write_file(const char *p, const char *text, mode_t mode)
{
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
}

static void
read_text(const char *p, char *out, size_t cap)
{
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
}

static void
test_local_endpoints(void)
{
    /* Judged with libzmq's bind grammar: each "local" one binds loopback only (checked by
     * hand with zmq_bind and ZMQ_LAST_ENDPOINT, libzmq 4.3.4). */
    const char *local[] = {"ipc:///tmp/x.sock",
                           "inproc://x",
                           "tcp://127.0.0.1:5555",
                           "tcp://127.3.4.5:1",
                           "tcp://[::1]:5555",
                           "tcp://lo:5555",
                           "tcp://127.1:5",
                           "tcp://[127.0.0.1]:5",
                           "tcp://127.0.0.1%lo:5",
                           "tcp://[::1%lo]:5",
                           "tcp://[::ffff:127.0.0.1]:5",
                           "tcp://2130706433:0",
                           "tcp://127.0.0.1:*"};
    const char *network[] = {
        "tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://[::]:5555", "tcp://192.168.1.2:5555",
        "tcp://eth0:5555", "tcp://example.org:1", "tcp://128.0.0.1:1", "tcp://127.0.0.1",
        "udp://127.0.0.1:1", "ws://127.0.0.1:1", "pgm://eth0;239.1.1.1:5555",
        /* issue 18 item 9: libzmq binds the part after the last ';' */
        "tcp://[127.0.0.1]:1;0.0.0.0:5555", "tcp://127.0.0.1:1;0.0.0.0:5", "tcp://[::1]:1;[::]:5",
        "tcp://lo:1;*:5", "tcp://127.0.0.1;127.0.0.1:5", "tcp://[127.0.0.1]x:5",
        "tcp://127.0.0.1%:5", "tcp://:5", "tcp://[]:5", "tcp://localhost:9", "TCP://127.0.0.1:5",
        "tcp://[127.0.0.1]:"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        CHECK_MSG(tsock__endpoint_is_local(local[i]), "%s judged exposed", local[i]);
    for (size_t i = 0; i < sizeof network / sizeof *network; i++)
        CHECK_MSG(!tsock__endpoint_is_local(network[i]), "%s judged local", network[i]);
    /* issue 18 item 10: an abstract name has no permissions. */
    const char *why = NULL;
    CHECK_EQ(tsock__endpoint_exposure("ipc://@abstract", &why), TSOCK__EXPOSURE_LOCAL_USERS);
    CHECK(why && strstr(why, "abstract"));
    CHECK_EQ(tsock__endpoint_exposure("tcp://[127.0.0.1]:1;0.0.0.0:5", &why),
             TSOCK__EXPOSURE_NETWORK);
    CHECK(why && strstr(why, "source address"));

    struct tsock__tcp_endpoint ep;
    const char *addr = "[fe80::1%eth0]:1;[::1%lo]:77";
    CHECK_EQ(tsock__tcp_endpoint_parse(addr, &ep), 0);
    CHECK(ep.source == addr && ep.source_len == 16);
    CHECK(ep.host_len == 3 && memcmp(ep.host, "::1", 3) == 0 && ep.bracketed);
    CHECK(ep.zone_len == 2 && memcmp(ep.zone, "lo", 2) == 0);
    CHECK(ep.port_len == 2 && memcmp(ep.port, "77", 2) == 0);
    CHECK_EQ(tsock__tcp_endpoint_parse("127.0.0.1", &ep), -EINVAL);
    CHECK_EQ(tsock__tcp_endpoint_parse("[::1%]:5", &ep), -EINVAL);
}

/* libzmq appends ":UID:GID:PID" to an ipc peer's address in a ZAP request (SO_PEERCRED). */
static void
test_zap_peer_uid(void)
{
    unsigned long uid = 99;
    const char *a = "localhost:1000:100:4242";
    CHECK_EQ(tsock__zap_peer_uid(a, strlen(a), &uid), 0);
    CHECK_EQ(uid, 1000);
    a = "localhost:0:0:1";
    CHECK_EQ(tsock__zap_peer_uid(a, strlen(a), &uid), 0);
    CHECK_EQ(uid, 0);
    const char *none[] = {"127.0.0.1", "",         "localhost",
                          "::1",       "a:1:2",    "x:1:2:",
                          "x:1::3",    "x:1:2:3z", "x:99999999999999999999999:1:1"};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++)
        CHECK_MSG(tsock__zap_peer_uid(none[i], strlen(none[i]), &uid) == -ENOENT, "%s", none[i]);
}

static void
test_key_files(void)
{
    CHECK_EQ(tsock_curve_keygen(path("a.key_secret"), path("a.key")), 0);
    CHECK_EQ(tsock_curve_keygen(path("a.key_secret"), path("other.key")), -EEXIST);
    CHECK_EQ(tsock_curve_keygen(NULL, path("x.key")), -EINVAL);
    struct stat st;
    CHECK(stat(path("a.key_secret"), &st) == 0 && (st.st_mode & 0777) == 0600);
    struct tsock__z85_key secret, public_key, derived;
    CHECK_EQ(tsock__curve_read_key(path("a.key_secret"), 1, &secret), 0);
    CHECK_EQ(tsock__curve_read_key(path("a.key"), 0, &public_key), 0);
    CHECK_EQ(tsock__curve_public_of(&secret, &derived), 0);
    CHECK(strcmp(derived.text, public_key.text) == 0);

    char text[64];
    read_text(path("a.key_secret"), text, sizeof text);
    struct tsock__z85_key k;
    CHECK_EQ(tsock__curve_read_key(path("missing"), 1, &k), -ENOENT);
    write_file(path("loose"), text, 0644);
    CHECK_EQ(tsock__curve_read_key(path("loose"), 1, &k), -EACCES);
    CHECK_EQ(tsock__curve_read_key(path("loose"), 0, &k), 0); /* a public key may be readable */
    text[39] = '\0';
    write_file(path("short"), text, 0600);
    CHECK_EQ(tsock__curve_read_key(path("short"), 1, &k), -EINVAL);
    write_file(path("tilde"), "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n", 0600);
    CHECK_EQ(tsock__curve_read_key(path("tilde"), 1, &k), -EINVAL);
    write_file(path("crlf"), "0123456789012345678901234567890123456789\r\n", 0600);
    CHECK_EQ(tsock__curve_read_key(path("crlf"), 1, &k), -EINVAL);
    write_file(path("empty"), "", 0600);
    CHECK_EQ(tsock__curve_read_key(path("empty"), 1, &k), -EINVAL);
    CHECK_EQ(tsock__curve_read_key(dir, 0, &k), -EINVAL); /* a directory */
}

static void
test_authorized_keys(void)
{
    CHECK_EQ(tsock_curve_keygen(path("b.key_secret"), path("b.key")), 0);
    char a[64], b[64], list[256];
    read_text(path("a.key"), a, sizeof a);
    read_text(path("b.key"), b, sizeof b);
    a[40] = b[40] = '\0';
    snprintf(list, sizeof list, "# jobs\n\n  %s job-a\n%s\t# job b\n", a, b);
    write_file(path("list"), list, 0644);
    struct tsock__key_set set;
    CHECK_EQ(tsock__curve_load_authorized(path("list"), &set), 0);
    CHECK_EQ(set.count, 2);
    uint8_t bin[32];
    zmq_z85_decode(bin, a);
    CHECK(tsock__key_set_has(&set, bin));
    bin[0] ^= 1;
    CHECK(!tsock__key_set_has(&set, bin));
    tsock__key_set_free(&set);

    write_file(path("open_list"), list, 0666);
    CHECK_EQ(tsock__curve_load_authorized(path("open_list"), &set), -EACCES);
    write_file(path("no_keys"), "# nobody\n\n", 0644);
    CHECK_EQ(tsock__curve_load_authorized(path("no_keys"), &set), -EINVAL);
    write_file(path("bad_line"), "short-key\n", 0644);
    CHECK_EQ(tsock__curve_load_authorized(path("bad_line"), &set), -EINVAL);
    CHECK_EQ(tsock__curve_load_authorized(path("nowhere"), &set), -ENOENT);

    /* A directory: its *.key files count, secret files and others are skipped. */
    mkdir(path("keys"), 0700);
    write_file(path("keys/a.key"), a, 0644);
    write_file(path("keys/a.key_secret"), "not a public key", 0600);
    write_file(path("keys/README"), "not a key", 0644);
    CHECK_EQ(tsock__curve_load_authorized(path("keys"), &set), 0);
    CHECK_EQ(set.count, 1);
    tsock__key_set_free(&set);
    chmod(path("keys"), 0777);
    CHECK_EQ(tsock__curve_load_authorized(path("keys"), &set), -EACCES);
    chmod(path("keys"), 0700);

    /* issue 18 item 11: a *.key file others may change is refused like a list file. */
    chmod(path("keys/a.key"), 0666);
    CHECK_EQ(tsock__curve_load_authorized(path("keys"), &set), -EACCES);
    chmod(path("keys/a.key"), 0620);
    CHECK_EQ(tsock__curve_load_authorized(path("keys"), &set), -EACCES);
    chmod(path("keys/a.key"), 0644);

    /* issue 18 item 12: a line of any length is one line; a key deep in its comment is only
     * a comment. */
    size_t long_len = 5000;
    char *longer = malloc(long_len + 200);
    int n = snprintf(longer, long_len + 200, "%s # revoked: ", a);
    memset(longer + n, 'x', long_len - (size_t)n);
    snprintf(longer + long_len, 200, " %s old laptop\n%s\n", b, a);
    write_file(path("long_line"), longer, 0644);
    CHECK_EQ(tsock__curve_load_authorized(path("long_line"), &set), 0);
    CHECK_EQ(set.count, 2); /* a, then a again: b stays inside the comment */
    zmq_z85_decode(bin, b);
    CHECK(!tsock__key_set_has(&set, bin));
    tsock__key_set_free(&set);
    /* At the old 1,024-byte boundary too. */
    for (size_t cut = 1018; cut <= 1026; cut++) {
        n = snprintf(longer, long_len + 200, "%s #", a);
        memset(longer + n, 'y', cut - (size_t)n);
        snprintf(longer + cut, 200, "%s\n", b);
        write_file(path("long_line"), longer, 0644);
        CHECK_EQ(tsock__curve_load_authorized(path("long_line"), &set), 0);
        CHECK_MSG(set.count == 1 && !tsock__key_set_has(&set, bin), "cut at %zu", cut);
        tsock__key_set_free(&set);
    }
    free(longer);
}

/* issue 18 item 13: a FIFO is refused at once; without O_NONBLOCK open() waits for a writer
 * forever (the alarm turns that hang into a failure). */
static void
test_fifo_key_files(void)
{
    struct tsock__z85_key k;
    struct tsock__key_set set;
    CHECK_EQ(mkfifo(path("fifo.key_secret"), 0600), 0);
    CHECK_EQ(mkfifo(path("fifo_list"), 0644), 0);
    mkdir(path("fifo_keys"), 0700);
    CHECK_EQ(mkfifo(path("fifo_keys/a.key"), 0644), 0);
    alarm(20);
    CHECK_EQ(tsock__curve_read_key(path("fifo.key_secret"), 1, &k), -EINVAL);
    CHECK_EQ(tsock__curve_read_key(path("fifo.key_secret"), 0, &k), -EINVAL);
    CHECK_EQ(tsock__curve_load_authorized(path("fifo_list"), &set), -EINVAL);
    CHECK_EQ(tsock__curve_load_authorized(path("fifo_keys"), &set), -EINVAL);
    alarm(0);
}

static void
test_channel_security(void)
{
    struct tsock__channel_security sec;
    memset(&sec, 0, sizeof sec);
    CHECK_EQ(tsock__channel_security_set(&sec, 1, path("a.key_secret"), NULL), -EINVAL);
    CHECK_EQ(tsock__channel_security_set(&sec, 0, "", path("a.key")), -EINVAL);
    CHECK_EQ(tsock__channel_security_set(&sec, 1, path("loose"), path("list")), -EACCES);
    CHECK(sec.secret_key_file[0] == '\0'); /* a failed set changes nothing */
    CHECK_EQ(tsock__channel_security_set(&sec, 0, path("a.key_secret"), path("b.key")), 0);

    struct tsock__channel_handlers h;
    memset(&h, 0, sizeof h);
    struct tsock__channel_timing t = {100, 1000};
    struct tsock__channel *ch = NULL;
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://0.0.0.0:*", &h, t, NULL), TSOCK_E_INSECURE);
    CHECK(ch == NULL);
    struct tsock__channel_security open_sec;
    memset(&open_sec, 0, sizeof open_sec);
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://*:*", &h, t, &open_sec), TSOCK_E_INSECURE);
    open_sec.insecure_network = 1;
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://0.0.0.0:*", &h, t, &open_sec), 0);
    tsock__channel_close(ch, 0);
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://127.0.0.1:*", &h, t, NULL), 0);
    tsock__channel_close(ch, 0);
    /* issue 18 items 9 and 10: the source-address form and an abstract name are refused
     * without keys, and served with the opt-out. */
    ch = NULL;
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://[127.0.0.1]:1;0.0.0.0:*", &h, t, NULL),
             TSOCK_E_INSECURE);
    CHECK(ch == NULL);
    char abstract[64];
    snprintf(abstract, sizeof abstract, "ipc://@tsock-test-curve-%d", (int)getpid());
    CHECK_EQ(tsock__channel_bind(&ch, abstract, &h, t, NULL), TSOCK_E_INSECURE);
    CHECK(ch == NULL);
    CHECK_EQ(tsock__channel_bind(&ch, abstract, &h, t, &open_sec), 0);
    tsock__channel_close(ch, 0);
    struct tsock__channel_security keyed;
    memset(&keyed, 0, sizeof keyed);
    CHECK_EQ(tsock__channel_security_set(&keyed, 1, path("a.key_secret"), path("list")), 0);
    CHECK_EQ(tsock__channel_bind(&ch, "tcp://0.0.0.0:*", &h, t, &keyed), 0);
    tsock__channel_close(ch, 0);
}

int
main(void)
{
    if (tsock__curve_available() < 0) {
        printf("SKIP: this libzmq has no CURVE\n");
        return 77;
    }
    test_scratch_dir(dir, sizeof dir, "curve");
    test_local_endpoints();
    test_zap_peer_uid();
    test_key_files();
    test_authorized_keys();
    test_fifo_key_files();
    test_channel_security();
    return CHECK_DONE(); /* the scratch folder goes at exit */
}
