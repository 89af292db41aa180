/* CURVE key files, the authorized-keys set, key generation and the local-endpoint rule. See
 * curve.h. Keys are handled only as text and bytes here: libzmq does every cryptographic
 * operation (zmq_curve_keypair, zmq_curve_public, the handshake itself). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "core/core.h"
#include "transport/curve.h"

int
tsock__curve_available(void)
{
    if (zmq_has("curve"))
        return 0;
    tsock__log(TSOCK_LOG_ERROR, "this libzmq was built without CURVE security (libsodium); "
                                "authenticated endpoints need a libzmq with CURVE");
    return -ENOTSUP;
}

static int
is_z85_char(char ch)
{
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";
    return ch != '\0' && strchr(alphabet, ch) != NULL;
}

/* 0 when `text` holds exactly one Z85 key (40 characters that decode), else -EINVAL. */
static int
parse_key(const char *text, size_t len, struct tsock__z85_key *out)
{
    if (len != TSOCK__Z85_KEY_LEN)
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        if (!is_z85_char(text[i]))
            return -EINVAL;
    memcpy(out->text, text, len);
    out->text[len] = '\0';
    uint8_t bin[32];
    return zmq_z85_decode(bin, out->text) ? 0 : -EINVAL;
}

/* What a key file holds, which decides the mode it may have. */
enum key_file_kind {
    KEY_PUBLIC,     /* a server's public key: anyone may read or change it (it is checked) */
    KEY_SECRET,     /* a secret key: only its owner may read or write it */
    KEY_AUTHORIZED, /* a list or a key file that says who may connect: only its owner may
                       change it, since whoever can write it can add a key */
};

/* Others who may write the list could add their own key: refuse, as ssh does. */
static int
check_not_writable_by_others(const char *path, const struct stat *st)
{
    if (!(st->st_mode & 022))
        return 0;
    tsock__log(TSOCK_LOG_ERROR,
               "authorized keys %s: mode %04o lets group or others change it; "
               "chmod go-w %s",
               path, (unsigned)(st->st_mode & 07777), path);
    return -EACCES;
}

/* Opens a key file and checks its type and its mode. O_NONBLOCK: opening a FIFO for reading
 * would otherwise wait for a writer forever; the type check below then refuses it. */
static int
open_key_file(const char *path, enum key_file_kind kind, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int err = -errno;
        tsock__log(TSOCK_LOG_ERROR, "key file %s: %s", path, strerror(-err));
        return err;
    }
    int err = fstat(fd, st) < 0 ? -errno : 0;
    if (err == 0 && !S_ISREG(st->st_mode)) {
        tsock__log(TSOCK_LOG_ERROR,
                   "key file %s: not a regular file (a FIFO, device or socket is never read); "
                   "give the path of a file written by tsock-keygen",
                   path);
        err = -EINVAL;
    } else if (err == 0 && kind == KEY_SECRET && (st->st_mode & 077)) {
        tsock__log(TSOCK_LOG_ERROR,
                   "secret key file %s: mode %04o lets group or others read it; "
                   "it must be 0600 or stricter (chmod 600 %s)",
                   path, (unsigned)(st->st_mode & 07777), path);
        err = -EACCES;
    } else if (err == 0 && kind == KEY_AUTHORIZED) {
        err = check_not_writable_by_others(path, st);
    }
    if (err < 0) {
        close(fd);
        return err;
    }
    return fd;
}

static int
read_key(const char *path, enum key_file_kind kind, struct tsock__z85_key *out)
{
    int secret = kind == KEY_SECRET;
    struct stat st;
    int fd = open_key_file(path, kind, &st);
    if (fd < 0)
        return fd;
    char buf[TSOCK__Z85_KEY_LEN + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    int err = n < 0 ? -errno : 0;
    close(fd);
    if (err < 0) {
        tsock__log(TSOCK_LOG_ERROR, "key file %s: %s", path, strerror(-err));
        return err;
    }
    size_t len = (size_t)n;
    if (len == TSOCK__Z85_KEY_LEN + 1 && buf[TSOCK__Z85_KEY_LEN] == '\n')
        len--;
    if (len != TSOCK__Z85_KEY_LEN) {
        tsock__log(TSOCK_LOG_ERROR,
                   "key file %s: expected a %s key of 40 Z85 characters and an optional "
                   "newline, found %lld bytes",
                   path, secret ? "secret" : "public", (long long)st.st_size);
        return -EINVAL;
    }
    if (parse_key(buf, len, out) < 0) {
        tsock__log(TSOCK_LOG_ERROR, "key file %s: not a Z85 key (see tsock-keygen)", path);
        return -EINVAL;
    }
    return 0;
}

int
tsock__curve_read_key(const char *path, int secret, struct tsock__z85_key *out)
{
    return read_key(path, secret ? KEY_SECRET : KEY_PUBLIC, out);
}

int
tsock__curve_public_of(const struct tsock__z85_key *secret, struct tsock__z85_key *out)
{
    return zmq_curve_public(out->text, secret->text) == 0 ? 0 : -EINVAL;
}

/* ---- authorized keys --------------------------------------------------------------------- */

static int
key_set_add(struct tsock__key_set *s, const struct tsock__z85_key *k)
{
    uint8_t(*grown)[32] = realloc(s->keys, (s->count + 1) * sizeof *s->keys);
    if (!grown)
        return -ENOMEM;
    s->keys = grown;
    zmq_z85_decode(s->keys[s->count], k->text);
    s->count++;
    return 0;
}

void
tsock__key_set_free(struct tsock__key_set *s)
{
    free(s->keys);
    s->keys = NULL;
    s->count = 0;
}

int
tsock__key_set_has(const struct tsock__key_set *s, const uint8_t key[32])
{
    for (size_t i = 0; i < s->count; i++)
        if (memcmp(s->keys[i], key, 32) == 0)
            return 1;
    return 0;
}

/* One line of an authorized-keys file: "KEY [comment]", blank, or "# comment". */
static int
add_line(struct tsock__key_set *s, const char *path, int lineno, char *line)
{
    line[strcspn(line, "\r\n")] = '\0';
    char *p = line + strspn(line, " \t");
    if (*p == '\0' || *p == '#')
        return 0;
    size_t len = strcspn(p, " \t");
    struct tsock__z85_key k;
    if (parse_key(p, len, &k) < 0) {
        tsock__log(TSOCK_LOG_ERROR,
                   "authorized keys %s line %d: not a public key of 40 Z85 characters", path,
                   lineno);
        return -EINVAL;
    }
    return key_set_add(s, &k);
}

/* Reads whole lines, of any length: a line cut at a buffer's size would let a key hidden
 * far into a comment be read as a line of its own. */
static int
load_key_file_list(const char *path, struct tsock__key_set *s)
{
    struct stat st;
    int fd = open_key_file(path, KEY_AUTHORIZED, &st);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int err = -errno;
        close(fd);
        return err;
    }
    char *line = NULL;
    size_t cap = 0;
    int err = 0;
    errno = 0;
    for (int lineno = 1; err == 0 && getline(&line, &cap, f) >= 0; lineno++)
        err = add_line(s, path, lineno, line);
    if (err == 0 && ferror(f))
        err = errno ? -errno : -EIO;
    free(line);
    fclose(f);
    return err;
}

static int
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int
load_key_dir(const char *path, struct tsock__key_set *s)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int err = 0;
    for (struct dirent *e; err == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".key"))
            continue;
        char file[4096];
        if (snprintf(file, sizeof file, "%s/%s", path, e->d_name) >= (int)sizeof file) {
            err = -ENAMETOOLONG;
            break;
        }
        struct tsock__z85_key k;
        err = read_key(file, KEY_AUTHORIZED, &k);
        if (err == 0)
            err = key_set_add(s, &k);
    }
    closedir(d);
    return err;
}

int
tsock__curve_load_authorized(const char *path, struct tsock__key_set *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) < 0) {
        int err = -errno;
        tsock__log(TSOCK_LOG_ERROR, "authorized keys %s: %s", path, strerror(-err));
        return err;
    }
    int err = check_not_writable_by_others(path, &st);
    if (err == 0)
        err = S_ISDIR(st.st_mode) ? load_key_dir(path, out) : load_key_file_list(path, out);
    if (err == 0 && out->count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "authorized keys %s: no key in it (%s)", path,
                   S_ISDIR(st.st_mode) ? "a directory needs *.key public key files"
                                       : "one public key per line");
        err = -EINVAL;
    }
    if (err < 0)
        tsock__key_set_free(out);
    return err;
}

/* ---- key generation ---------------------------------------------------------------------- */

/* Writes `key` and a newline to a new file; never replaces an existing one. */
static int
write_new_key_file(const char *path, const char *key, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    char line[TSOCK__Z85_KEY_LEN + 1];
    memcpy(line, key, TSOCK__Z85_KEY_LEN);
    line[TSOCK__Z85_KEY_LEN] = '\n';
    int err = write(fd, line, sizeof line) == (ssize_t)sizeof line ? 0 : -EIO;
    /* The umask may have loosened nothing, but fchmod makes the mode exact either way. */
    if (err == 0 && fchmod(fd, mode) < 0)
        err = -errno;
    if (close(fd) < 0 && err == 0)
        err = -errno;
    if (err < 0)
        unlink(path);
    return err;
}

int
tsock_curve_keygen(const char *secret_key_file, const char *public_key_file)
{
    if (!secret_key_file || !public_key_file || !*secret_key_file || !*public_key_file)
        return -EINVAL;
    int err = tsock__curve_available();
    if (err < 0)
        return err;
    char pub[TSOCK__Z85_KEY_LEN + 1], sec[TSOCK__Z85_KEY_LEN + 1];
    if (zmq_curve_keypair(pub, sec) != 0)
        return -zmq_errno();
    err = write_new_key_file(secret_key_file, sec, 0600);
    if (err == 0) {
        err = write_new_key_file(public_key_file, pub, 0644);
        if (err < 0)
            unlink(secret_key_file);
    }
    memset(sec, 0, sizeof sec);
    return err;
}
