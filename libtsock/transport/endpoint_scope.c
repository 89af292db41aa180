/* Which machines and users can reach a bound endpoint (see curve.h). A tcp endpoint is read
 * with libzmq's own grammar for bind (src/tcp_address.cpp and src/ip_resolver.cpp, 4.3):
 * an optional source address before the last ';', the port after the last ':', square
 * brackets trimmed only when they enclose the whole host, a zone id after the last '%', '*'
 * for every interface, then an interface name (tried first), then a numeric address
 * (getaddrinfo with AI_NUMERICHOST | AI_PASSIVE: libzmq never asks DNS for a bind). A prefix
 * test is not enough: "tcp://[127.0.0.1]:1;0.0.0.0:P" starts like loopback and binds
 * 0.0.0.0. Pure libc, no logging, so that the fuzz target can compile it alone. */
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/curve.h"

/* Longest host we resolve; libzmq has no limit, but no address or interface name is longer. */
#define HOST_MAX 255

int
tsock__tcp_endpoint_parse(const char *address, struct tsock__tcp_endpoint *out)
{
    memset(out, 0, sizeof *out);
    /* libzmq splits at the last ';' (strrchr): everything before it is a source address. */
    const char *semicolon = strrchr(address, ';');
    const char *dest = address;
    if (semicolon) {
        out->source = address;
        out->source_len = (size_t)(semicolon - address);
        dest = semicolon + 1;
    }
    const char *colon = strrchr(dest, ':');
    if (!colon || colon[1] == '\0')
        return -EINVAL; /* no port: libzmq refuses (EINVAL) */
    out->port = colon + 1;
    out->port_len = strlen(colon + 1);
    const char *host = dest;
    size_t len = (size_t)(colon - dest);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
        out->bracketed = 1;
    }
    /* The zone id (RFC 4007) follows the last '%' and must not be empty. */
    const char *percent = NULL;
    for (size_t i = 0; i < len; i++)
        if (host[i] == '%')
            percent = host + i;
    if (percent) {
        out->zone = percent + 1;
        out->zone_len = (size_t)(host + len - out->zone);
        if (out->zone_len == 0)
            return -EINVAL;
        len = (size_t)(percent - host);
    }
    out->host = host;
    out->host_len = len;
    return 0;
}

static int
sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127; /* ::ffff:127.x.y.z */
    }
    return 0;
}

/* An interface called `name`: 1 when all its addresses are loopback, 0 when one is not,
 * -1 when there is no such interface (libzmq then reads the host as a numeric address). */
static int
interface_is_loopback(const char *name)
{
    struct ifaddrs *list;
    if (getifaddrs(&list) < 0)
        return 0; /* cannot tell: judge it exposed */
    int found = 0, all_loopback = 1;
    for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
        if (strcmp(i->ifa_name, name) != 0 || !i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)
            continue;
        found = 1;
        all_loopback &= sockaddr_is_loopback(i->ifa_addr);
    }
    freeifaddrs(list);
    return found ? all_loopback : -1;
}

/* 1 when the numeric address `host` is a loopback address, whatever family libzmq binds. */
static int
numeric_is_loopback(const char *host)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE,
                             .ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    int all_loopback = 1;
    for (const struct addrinfo *r = res; r; r = r->ai_next)
        all_loopback &= sockaddr_is_loopback(r->ai_addr);
    freeaddrinfo(res);
    return all_loopback;
}

static enum tsock__exposure
tcp_exposure(const char *address, const char **why)
{
    struct tsock__tcp_endpoint ep;
    if (tsock__tcp_endpoint_parse(address, &ep) < 0) {
        *why = "it is not a tcp address libzmq can bind (tcp://HOST:PORT)";
        return TSOCK__EXPOSURE_NETWORK;
    }
    if (ep.source) {
        *why = "it has a source address (SOURCE;ADDRESS), and libzmq binds the part after "
               "the last ';', whatever the source";
        return TSOCK__EXPOSURE_NETWORK;
    }
    char host[HOST_MAX + 1];
    if (ep.host_len == 0 || ep.host_len > HOST_MAX || memchr(ep.host, '\0', ep.host_len)) {
        *why = "it names no host that libzmq can bind";
        return TSOCK__EXPOSURE_NETWORK;
    }
    memcpy(host, ep.host, ep.host_len);
    host[ep.host_len] = '\0';
    if (strcmp(host, "*") == 0) {
        *why = "'*' listens on every interface";
        return TSOCK__EXPOSURE_NETWORK;
    }
    int nic = interface_is_loopback(host); /* libzmq tries interface names first */
    if (nic == 1 || (nic < 0 && numeric_is_loopback(host)))
        return TSOCK__EXPOSURE_PRIVATE;
    *why = nic == 0 ? "that interface has an address other than loopback"
                    : "it is not a loopback address (127.0.0.0/8, ::1 or the lo interface)";
    return TSOCK__EXPOSURE_NETWORK;
}

enum tsock__exposure
tsock__endpoint_exposure(const char *endpoint, const char **why)
{
    const char *unused;
    if (!why)
        why = &unused;
    *why = "";
    if (strncmp(endpoint, "inproc://", 9) == 0)
        return TSOCK__EXPOSURE_PRIVATE;
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        if (endpoint[6] != '@')
            return TSOCK__EXPOSURE_PRIVATE; /* a file in a directory only we may enter */
        *why = "an abstract socket (ipc://@NAME) has no file permissions: any local user may "
               "connect, or take the name first and pose as the producer";
        return TSOCK__EXPOSURE_LOCAL_USERS;
    }
    if (strncmp(endpoint, "tcp://", 6) == 0)
        return tcp_exposure(endpoint + 6, why);
    *why = "only ipc://, inproc:// and tcp:// on a loopback address are private";
    return TSOCK__EXPOSURE_NETWORK;
}

int
tsock__endpoint_is_local(const char *endpoint)
{
    return tsock__endpoint_exposure(endpoint, NULL) == TSOCK__EXPOSURE_PRIVATE;
}
