/* libFuzzer target for the bind-endpoint check (libtsock/transport/endpoint_scope.c): the rule
 * that decides whether a producer may serve an endpoint without keys.
 *
 * Every input is tried as an endpoint as it is and behind "tcp://". The parser must keep every
 * part inside the string and split it as libzmq does (the source before the last ';', the port
 * after the last ':', a non-empty zone id). The exposure must be total and consistent, with a
 * reason whenever it is not private. And no prefix may launder an exposed destination: an
 * endpoint judged private has no ';' at all, and putting a loopback source address in front of
 * any input (the bypass of issue 18) is never private. A breach aborts so the fuzzer reports
 * it. Built with -fsanitize=fuzzer as fuzz_endpoint, and with replay_main.c as replay_endpoint,
 * which replays the corpus (libzmq's address grammar, tests/fuzz/corpus/endpoint) in ctest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/curve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 512

static int
inside(const char *s, size_t len, const char *p, size_t n)
{
    return !p ? n == 0 : p >= s && p + n <= s + len;
}

static void
check_parse(const char *s)
{
    struct tsock__tcp_endpoint ep;
    size_t len = strlen(s);
    if (tsock__tcp_endpoint_parse(s, &ep) != 0)
        return;
    if (!inside(s, len, ep.source, ep.source_len) || !inside(s, len, ep.host, ep.host_len) ||
        !inside(s, len, ep.zone, ep.zone_len) || !inside(s, len, ep.port, ep.port_len))
        abort();
    if (ep.port_len == 0 || ep.port[-1] != ':' || memchr(ep.port, ':', ep.port_len) ||
        memchr(ep.port, ';', ep.port_len))
        abort();
    if (ep.source && (ep.source != s || ep.source[ep.source_len] != ';'))
        abort();
    if (ep.zone && (ep.zone_len == 0 || ep.zone[-1] != '%' || memchr(ep.zone, '%', ep.zone_len)))
        abort();
    if (memchr(ep.host, ';', ep.host_len)) /* the host may hold a '%': the zone is the last */
        abort();
}

static void
check_exposure(const char *endpoint)
{
    const char *why = NULL;
    enum tsock__exposure e = tsock__endpoint_exposure(endpoint, &why);
    if (e != TSOCK__EXPOSURE_PRIVATE && e != TSOCK__EXPOSURE_LOCAL_USERS &&
        e != TSOCK__EXPOSURE_NETWORK)
        abort();
    if (!why || (e != TSOCK__EXPOSURE_PRIVATE) != (why[0] != '\0'))
        abort();
    if (tsock__endpoint_is_local(endpoint) != (e == TSOCK__EXPOSURE_PRIVATE))
        abort();
    if (strncmp(endpoint, "tcp://", 6) != 0 || e != TSOCK__EXPOSURE_PRIVATE)
        return;
    struct tsock__tcp_endpoint ep;
    if (strchr(endpoint, ';') || tsock__tcp_endpoint_parse(endpoint + 6, &ep) != 0 ||
        ep.host_len == 0 || (ep.host_len == 1 && ep.host[0] == '*'))
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char bypass[] = "tcp://[127.0.0.1]:1;";
    char raw[MAX_INPUT + 1], tcp[sizeof bypass + MAX_INPUT];
    if (size > MAX_INPUT)
        size = MAX_INPUT;
    memcpy(raw, data, size);
    raw[size] = '\0'; /* an embedded NUL ends the endpoint, as it does for zmq_bind */

    check_parse(raw);
    check_exposure(raw);
    memcpy(tcp, "tcp://", 6);
    memcpy(tcp + 6, raw, strlen(raw) + 1);
    check_exposure(tcp);
    memcpy(tcp, bypass, sizeof bypass - 1);
    memcpy(tcp + sizeof bypass - 1, raw, strlen(raw) + 1);
    check_exposure(tcp);
    if (tsock__endpoint_is_local(tcp))
        abort(); /* a source address never makes a bind endpoint private */
    return 0;
}
