/* Command-line helpers shared by the tsock programs: one way to reject a bad option (a message
 * naming it, a pointer to --help, exit status 2) and checked integer parsing. */
#ifndef TSOCK_CLI_H
#define TSOCK_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Names the program in every message; call first thing in main. */
void cli_init(const char *program);

/* Prints "program: <message>" and a pointer to --help on stderr, and exits with status 2. */
void cli_bad_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* A decimal integer in [min, max] for option `opt` (named without its dashes); anything else
 * ends the program through cli_bad_usage with a message naming the option and the range. */
uint64_t cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max);
int64_t cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max);

/* A finite number at the start of `s` for option `opt`; *end is set past it (the caller checks
 * what follows: a separator or the string's end). No number, an overflow or an infinity/NaN
 * ends the program through cli_bad_usage. */
double cli_parse_double(const char *opt, const char *s, char **end);

/* The position of `value` among `names` (NULL-terminated) for option `opt`; any other value
 * ends the program through cli_bad_usage with a message listing the names. */
int cli_parse_choice(const char *opt, const char *value, const char *const *names);

/* Writes `s` to f as a JSON string: quoted, with '"', '\\' and control characters escaped
 * (other bytes are copied: the programs' strings are UTF-8 or plain ASCII). */
void cli_json_string(FILE *f, const char *s);

/* --heartbeat-ms and --heartbeat-timeout-ms (0: the library's default, 250 and 3000): the
 * timeout must exceed the interval, else cli_bad_usage. */
void cli_check_heartbeat(int interval_ms, int timeout_ms);

/* --curve-secret-key and --curve-server-key of a client: both or neither, not empty, else
 * cli_bad_usage. */
void cli_check_curve_client(const char *secret_key_file, const char *server_key_file);

/* Seconds on the monotonic clock, and CPU seconds (user + system) of this process. */
double now_s(void);
double cpu_seconds(void);

#endif
