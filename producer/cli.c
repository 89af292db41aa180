/* Command-line helpers shared by the tsock programs (see cli.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"

static const char *program = "tsock";

void
cli_init(const char *name)
{
    program = name;
}

void
cli_bad_usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", program);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s: try '%s --help'\n", program, program);
    exit(2);
}

uint64_t
cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end = NULL;
    errno = 0;
    /* strtoull would accept "-1" (as a huge value) and leading spaces: insist on a digit. */
    unsigned long long v = (s[0] >= '0' && s[0] <= '9') ? strtoull(s, &end, 10) : 0;
    if (!end || errno != 0 || *end != '\0' || v < min || v > max)
        cli_bad_usage("--%s: '%s' is not a valid value (expected an integer in %" PRIu64
                      "..%" PRIu64 ")",
                      opt, s, min, max);
    return (uint64_t)v;
}

int64_t
cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max)
{
    char *end = NULL;
    const char *digits = s[0] == '-' ? s + 1 : s;
    errno = 0;
    long long v = (digits[0] >= '0' && digits[0] <= '9') ? strtoll(s, &end, 10) : 0;
    if (!end || errno != 0 || *end != '\0' || v < min || v > max)
        cli_bad_usage("--%s: '%s' is not a valid value (expected an integer in %" PRId64
                      "..%" PRId64 ")",
                      opt, s, min, max);
    return (int64_t)v;
}

void
cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void
cli_check_heartbeat(int interval_ms, int timeout_ms)
{
    if (!interval_ms && !timeout_ms)
        return;
    int interval = interval_ms ? interval_ms : 250;
    int timeout = timeout_ms ? timeout_ms : 3000;
    if (timeout <= interval)
        cli_bad_usage("--heartbeat-timeout-ms (%d) must be greater than --heartbeat-ms (%d)",
                      timeout, interval);
}

void
cli_check_curve_client(const char *secret_key_file, const char *server_key_file)
{
    if ((secret_key_file && !secret_key_file[0]) || (server_key_file && !server_key_file[0]))
        cli_bad_usage("--curve-%s-key: the path must not be empty",
                      secret_key_file && !secret_key_file[0] ? "secret" : "server");
    if (!secret_key_file != !server_key_file)
        cli_bad_usage("--curve-%s-key: CURVE needs both --curve-secret-key and "
                      "--curve-server-key",
                      secret_key_file ? "secret" : "server");
}

double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double
cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

double
cli_parse_double(const char *opt, const char *s, char **end)
{
    errno = 0;
    double v = strtod(s, end);
    if (*end == s || errno != 0 || !isfinite(v))
        cli_bad_usage("--%s: '%s' is not a number", opt, s);
    return v;
}

int
cli_parse_choice(const char *opt, const char *value, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    char list[128] = "";
    for (int i = 0; names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    cli_bad_usage("--%s: '%s' is not a valid value (expected one of: %s)", opt, value, list);
}
