/* tsock-keygen: writes a CURVE key pair for tsock's authenticated endpoints.
 *
 *   tsock-keygen NAME        writes NAME.key_secret (mode 0600) and NAME.key (mode 0644)
 *
 * Each file holds one key: 40 Z85 characters and a newline (docs/security.md). A producer
 * uses its NAME.key_secret with --curve-secret-key and hands NAME.key to its clients
 * (--curve-server-key); a client's NAME.key goes into the producer's authorized keys (a file
 * of such lines, or a directory of *.key files). Existing files are never replaced.
 *
 * Exit status: 0 written, 1 error (a file exists, no CURVE in libzmq, I/O), 2 bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tsock/tsock.h"

#define PROG "tsock-keygen"

static void
usage(void)
{
    printf("usage: " PROG " NAME\n"
           "\n"
           "Generates a CURVE key pair (ZeroMQ's, via libzmq) for tsock endpoints and writes\n"
           "  NAME.key_secret  the secret key, mode 0600: keep it where only its owner reads it\n"
           "  NAME.key         the public key, mode 0644: give it to the other side\n"
           "Each file is one line of 40 Z85 characters. Existing files are never replaced.\n"
           "\n"
           "Producer: --curve-secret-key NAME.key_secret --curve-authorized-keys DIR_OR_FILE\n"
           "Clients:  --curve-secret-key CLIENT.key_secret --curve-server-key NAME.key\n"
           "\n"
           "Exit status: 0 written, 1 error, 2 bad usage.\n");
}

static void
log_to_stderr(void *user, int level, const char *message)
{
    (void)user;
    fprintf(stderr, PROG ": %s: %s\n", level == TSOCK_LOG_ERROR ? "error" : "warning", message);
}

int
main(int argc, char **argv)
{
    cli_init(PROG);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage();
        return 0;
    }
    if (argc != 2)
        cli_bad_usage("expected one NAME (the files are NAME.key and NAME.key_secret)");
    if (argv[1][0] == '\0' || argv[1][0] == '-')
        cli_bad_usage("'%s' is not a usable NAME", argv[1]);
    tsock_set_log(log_to_stderr, NULL, TSOCK_LOG_WARN);
    size_t n = strlen(argv[1]) + sizeof ".key_secret";
    char *secret = malloc(n), *public_key = malloc(n);
    if (!secret || !public_key) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    snprintf(secret, n, "%s.key_secret", argv[1]);
    snprintf(public_key, n, "%s.key", argv[1]);
    int err = tsock_curve_keygen(secret, public_key);
    if (err == -EEXIST)
        fprintf(stderr, PROG ": %s or %s already exists; not replacing a key\n", secret,
                public_key);
    else if (err < 0)
        fprintf(stderr, PROG ": cannot write %s and %s: %s\n", secret, public_key,
                tsock_strerror(err));
    else
        printf("%s\n%s\n", public_key, secret);
    free(secret);
    free(public_key);
    return err < 0 ? 1 : 0;
}
