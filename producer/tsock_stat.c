/* tsock-stat: shows a running producer's statistics and those of each consumer connected to it.
 *
 *   tsock-stat [ENDPOINT] [--watch [SECONDS]] [--count N] [--json] [--timeout-ms N]
 *              [--curve-secret-key FILE --curve-server-key FILE]
 *
 * Asks the producer once (or every SECONDS with --watch) with tsock_stats_query and prints a
 * table, or with --json the library's JSON snapshot, one object per line. It never joins as a
 * consumer, so watching a run changes nothing in it. docs/stats.md explains the figures.
 *
 * Exit status: 0 shown (or a watch ended by --count or SIGINT/SIGTERM); 1 no producer answered
 * within the timeout, or another error; 2 bad command line.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "tsock/tsock.h"

#define PROG "tsock-stat"

static volatile sig_atomic_t g_signal;

static void
on_signal(int sig)
{
    g_signal = sig;
}

struct options {
    const char *endpoint; /* NULL: the default endpoint */
    int watch;
    uint64_t interval_s;
    uint64_t count; /* reports to show; 0: until interrupted */
    int json;
    int timeout_ms;
    const char *curve_secret_key, *curve_server_key; /* NULL: no CURVE */
};

static void
usage(void)
{
    printf("usage: " PROG " [ENDPOINT] [--watch [SECONDS]] [--count N] [--json] "
           "[--timeout-ms N]\n"
           "       [--curve-secret-key FILE --curve-server-key FILE]\n"
           "\n"
           "Shows the statistics of the tsock producer serving ENDPOINT (default: the per-user\n"
           "default endpoint) and of every consumer connected to it.\n"
           "\n"
           "  --watch [SECONDS]   repeat every SECONDS (default 2) until interrupted\n"
           "  --count N           stop after N reports (implies --watch)\n"
           "  --json              print each report as one JSON object on one line\n"
           "  --timeout-ms N      how long to wait for the producer's answer (default 3000)\n"
           "  --curve-secret-key FILE\n"
           "                      authenticate with CURVE: this client's secret key file\n"
           "                      (its public key must be among the producer's authorized keys)\n"
           "  --curve-server-key FILE\n"
           "                      with --curve-secret-key: the producer's public key file\n"
           "  -h, --help          this text\n"
           "\n"
           "Exit status: 0 shown, 1 no producer answered (or another error), 2 bad usage.\n");
}

/* The value of option `name` at argv[*i]: "--name=value" or "--name value". */
static const char *
option_value(int argc, char **argv, int *i, const char *name)
{
    const char *eq = strchr(argv[*i], '=');
    if (eq)
        return eq + 1;
    if (*i + 1 >= argc)
        cli_bad_usage("--%s needs a value", name);
    return argv[++*i];
}

/* Whether `arg` is "--name" or "--name=...". */
static int
is_option(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return arg[0] == '-' && arg[1] == '-' && strncmp(arg + 2, name, n) == 0 &&
           (arg[2 + n] == '\0' || arg[2 + n] == '=');
}

static int
all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* --watch takes an optional value: "--watch=5", or "--watch 5" when the next word is a number
 * (an endpoint never is). */
static void
parse_watch(int argc, char **argv, int *i, struct options *o)
{
    o->watch = 1;
    const char *eq = strchr(argv[*i], '=');
    if (eq)
        o->interval_s = cli_parse_u64("watch", eq + 1, 1, 86400);
    else if (*i + 1 < argc && all_digits(argv[*i + 1]))
        o->interval_s = cli_parse_u64("watch", argv[++*i], 1, 86400);
}

static void
parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){.interval_s = 2, .timeout_ms = 3000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            exit(0);
        } else if (is_option(a, "watch")) {
            parse_watch(argc, argv, &i, o);
        } else if (is_option(a, "count")) {
            o->count = cli_parse_u64("count", option_value(argc, argv, &i, "count"), 1, UINT32_MAX);
            o->watch = 1;
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (is_option(a, "timeout-ms")) {
            o->timeout_ms = (int)cli_parse_u64(
                "timeout-ms", option_value(argc, argv, &i, "timeout-ms"), 1, 3600000);
        } else if (is_option(a, "curve-secret-key")) {
            o->curve_secret_key = option_value(argc, argv, &i, "curve-secret-key");
        } else if (is_option(a, "curve-server-key")) {
            o->curve_server_key = option_value(argc, argv, &i, "curve-server-key");
        } else if (a[0] == '-') {
            cli_bad_usage("unknown option '%s'", a);
        } else if (o->endpoint) {
            cli_bad_usage("unexpected argument '%s' (one ENDPOINT at most)", a);
        } else if (a[0] == '\0') {
            cli_bad_usage("the ENDPOINT must not be empty");
        } else {
            o->endpoint = a;
        }
    }
    cli_check_curve_client(o->curve_secret_key, o->curve_server_key);
}

/* The library explains a bad key file in a log line: show warnings and errors. */
static void
log_to_stderr(void *user, int level, const char *message)
{
    (void)user;
    fprintf(stderr, PROG ": %s: %s\n", level == TSOCK_LOG_ERROR ? "error" : "warning", message);
}

/* ---- the table --------------------------------------------------------------------------- */

static uint64_t
get(const tsock_stats *s, int consumer, int key)
{
    uint64_t v = 0;
    (void)tsock_stats_get(s, consumer, key, &v); /* every key used here exists on its side */
    return v;
}

static double
secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

static void
print_producer(const tsock_stats *s, const char *endpoint)
{
    uint64_t slots = get(s, -1, TSOCK_STAT_SLOTS), free_slots = get(s, -1, TSOCK_STAT_FREE_SLOTS);
    printf("producer pid %" PRIu64 " on %s, up %.1f s\n", get(s, -1, TSOCK_STAT_PID), endpoint,
           secs(get(s, -1, TSOCK_STAT_UPTIME_NS)));
    printf("  published  %" PRIu64 " batches, %" PRIu64 " samples, %" PRIu64
           " epochs completed; %" PRIu64 " releases\n",
           get(s, -1, TSOCK_STAT_BATCHES), get(s, -1, TSOCK_STAT_SAMPLES),
           get(s, -1, TSOCK_STAT_EPOCHS), get(s, -1, TSOCK_STAT_RELEASED));
    printf("  slots      %" PRIu64 ": %" PRIu64 " in use (%" PRIu64 " held by consumers), %" PRIu64
           " free; waited %.3f s for a free slot\n",
           slots, slots - free_slots, get(s, -1, TSOCK_STAT_HELD), free_slots,
           secs(get(s, -1, TSOCK_STAT_WAIT_NS)));
    printf("  consumers  %" PRIu64 " connected, %" PRIu64 " joined, %" PRIu64 " lost; %" PRIu64
           " bad messages\n",
           get(s, -1, TSOCK_STAT_CONSUMERS), get(s, -1, TSOCK_STAT_JOINED),
           get(s, -1, TSOCK_STAT_LOST), get(s, -1, TSOCK_STAT_BAD_MESSAGES));
    const char *status = tsock_stats_status(s);
    if (status && status[0])
        printf("  status     %s\n", status);
}

static void
print_consumers(const tsock_stats *s)
{
    int n = tsock_stats_consumer_count(s);
    if (n <= 0) {
        printf("no consumer connected\n");
        return;
    }
    printf("%4s %8s %-16s %6s %9s %9s %4s %4s %9s %9s %10s %6s %9s\n", "ID", "PID", "NAME", "STATE",
           "SENT", "RELEASED", "HELD", "LAG", "RATE/S", "CONSUMED", "SAMPLES", "EPOCHS", "WAIT_S");
    for (int i = 0; i < n; i++) {
        const char *name = tsock_stats_consumer_name(s, i);
        printf("%4" PRIu64 " %8" PRIu64 " %-16.16s %6s %9" PRIu64 " %9" PRIu64 " %4" PRIu64
               " %4" PRIu64 " %9.2f %9" PRIu64 " %10" PRIu64 " %6" PRIu64 " %9.3f\n",
               get(s, i, TSOCK_STAT_ID), get(s, i, TSOCK_STAT_PID), name && name[0] ? name : "-",
               get(s, i, TSOCK_STAT_PAUSED) ? "paused" : "active", get(s, i, TSOCK_STAT_BATCHES),
               get(s, i, TSOCK_STAT_RELEASED), get(s, i, TSOCK_STAT_HELD),
               get(s, i, TSOCK_STAT_LAG), (double)get(s, i, TSOCK_STAT_RATE_MILLI) / 1000.0,
               get(s, i, TSOCK_STAT_CONSUMED_BATCHES), get(s, i, TSOCK_STAT_CONSUMED_SAMPLES),
               get(s, i, TSOCK_STAT_EPOCHS), secs(get(s, i, TSOCK_STAT_WAIT_NS)));
    }
}

/* ---- main -------------------------------------------------------------------------------- */

/* Asks once and prints. Returns 0, or 1 after printing why it failed. */
static int
report(const struct options *o, const char *endpoint, int first)
{
    tsock_stats *s = NULL;
    int err = tsock_stats_query_curve(&s, o->endpoint, o->timeout_ms, o->curve_secret_key,
                                      o->curve_server_key);
    if (err == -EINTR && g_signal)
        return 0;
    if (err == -ENOENT) {
        fprintf(stderr, PROG ": no producer on %s: its socket file does not exist\n", endpoint);
        return 1;
    }
    if (err == -ETIMEDOUT) {
        fprintf(stderr, PROG ": no producer answered on %s within %d ms\n", endpoint,
                o->timeout_ms);
        return 1;
    }
    if (err < 0) {
        fprintf(stderr, PROG ": cannot query %s: %s\n", endpoint, tsock_strerror(err));
        return 1;
    }
    if (o->json) {
        printf("%s\n", tsock_stats_json(s));
    } else {
        if (o->watch) {
            char when[32];
            time_t now = time(NULL);
            struct tm tm;
            strftime(when, sizeof when, "%H:%M:%S", localtime_r(&now, &tm));
            printf("%s---- %s\n", first ? "" : "\n", when);
        }
        print_producer(s, endpoint);
        print_consumers(s);
    }
    fflush(stdout);
    tsock_stats_destroy(s);
    return 0;
}

/* Sleeps `seconds`, returning early on a signal. */
static void
pause_for(uint64_t seconds)
{
    struct timespec step = {0, 100000000};
    for (uint64_t i = 0; i < seconds * 10 && !g_signal; i++)
        nanosleep(&step, NULL);
}

int
main(int argc, char **argv)
{
    cli_init(PROG);
    struct options o;
    parse_args(argc, argv, &o);
    tsock_set_log(log_to_stderr, NULL, TSOCK_LOG_WARN);
    char endpoint[1024];
    if (o.endpoint)
        snprintf(endpoint, sizeof endpoint, "%s", o.endpoint);
    else if (tsock_default_endpoint(endpoint, sizeof endpoint) < 0)
        snprintf(endpoint, sizeof endpoint, "the default endpoint");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (uint64_t shown = 0; !g_signal; shown++) {
        if (report(&o, endpoint, shown == 0) != 0)
            return 1;
        if (!o.watch || (o.count && shown + 1 >= o.count))
            break;
        pause_for(o.interval_s);
    }
    return 0;
}
