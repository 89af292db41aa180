/* Resolving a WebDataset SPEC into its shards (see shards.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/array.h"
#include "core/core.h"
#include "core/file.h"
#include "dataset/index.h"
#include "dataset/shards.h"

/* The longest info or list file read. */
#define TEXT_MAX_BYTES ((size_t)64 << 20)

struct names {
    char **v;
    size_t n, cap;
};

static int
names_add(struct names *l, const char *s, size_t len)
{
    if (l->n >= TSOCK__SHARDS_MAX)
        return -E2BIG;
    if (tsock__array_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v) != 0)
        return -ENOMEM;
    /* Not strndup: `s` is a span of a buffer that need not be NUL-terminated (an info file's
     * text), and strndup may look for the NUL past `len` (ASan's strict_string_checks). */
    char *copy = malloc(len + 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return 0;
}

static void
names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (struct names){0};
}

/* ---- brace patterns ---------------------------------------------------------------------- */

/* Expands the first brace group of `pat` and recurses on each alternative. */
static int
expand(const char *pat, struct names *out)
{
    const char *open = strchr(pat, '{');
    if (!open)
        return names_add(out, pat, strlen(pat));
    const char *close = strchr(open, '}');
    if (!close || memchr(open + 1, '{', (size_t)(close - open - 1))) {
        tsock__log(TSOCK_LOG_ERROR, "shards: %s: unbalanced '{' in the pattern", pat);
        return -EINVAL;
    }
    size_t head = (size_t)(open - pat), body_len = (size_t)(close - open - 1);
    const char *body = open + 1, *tail = close + 1;
    char *buf = malloc(head + body_len + strlen(tail) + 32);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    const char *dots = strstr(body, "..");
    if (dots && dots < close) {
        char *end;
        unsigned long long a = strtoull(body, &end, 10), b;
        int ok = end == dots && body[0] >= '0' && body[0] <= '9';
        b = strtoull(dots + 2, &end, 10);
        ok = ok && end == close && dots[2] >= '0' && dots[2] <= '9' && a <= b &&
             b - a < TSOCK__SHARDS_MAX;
        if (!ok) {
            tsock__log(TSOCK_LOG_ERROR,
                       "shards: '{%.*s}' is not a range FIRST..LAST of "
                       "non-negative integers with FIRST <= LAST",
                       (int)body_len, body);
            free(buf);
            return -EINVAL;
        }
        int width = body[0] == '0' ? (int)(dots - body) : 0;
        for (unsigned long long k = a; k <= b && r == 0; k++) {
            snprintf(buf, head + body_len + strlen(tail) + 32, "%.*s%0*llu%s", (int)head, pat,
                     width, k, tail);
            r = expand(buf, out);
        }
    } else {
        for (const char *alt = body; r == 0;) {
            const char *comma = memchr(alt, ',', (size_t)(close - alt));
            const char *end = comma ? comma : close;
            snprintf(buf, head + body_len + strlen(tail) + 32, "%.*s%.*s%s", (int)head, pat,
                     (int)(end - alt), alt, tail);
            r = expand(buf, out);
            if (!comma)
                break;
            alt = comma + 1;
        }
    }
    free(buf);
    return r;
}

/* ---- a tiny JSON reader for info files ---------------------------------------------------- */

static const char *
ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Skips one JSON value; returns the byte after it, or NULL when malformed. */
static const char *
skip_value(const char *p, const char *end, int depth)
{
    p = ws(p, end);
    if (p >= end || depth > 32)
        return NULL;
    if (*p == '"') {
        for (p++; p < end && *p != '"'; p++)
            if (*p == '\\')
                p++;
        return p < end ? p + 1 : NULL;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = skip_value(p, end, depth + 1); /* the key */
                p = p ? ws(p, end) : NULL;
                if (!p || p >= end || *p != ':')
                    return NULL;
                p++;
            }
            p = skip_value(p, end, depth + 1);
            p = p ? ws(p, end) : NULL;
            if (!p || p >= end)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p != ',')
                return NULL;
            p++;
        }
    }
    while (p < end && !strchr(",}] \t\r\n", *p))
        p++;
    return p;
}

/* The value of `key` in the object at p (NULL: none or malformed). Keys are compared raw. */
static const char *
find_key(const char *p, const char *end, const char *key)
{
    p = ws(p, end);
    if (p >= end || *p != '{')
        return NULL;
    p = ws(p + 1, end);
    size_t klen = strlen(key);
    while (p < end && *p == '"') {
        const char *k = p + 1, *after = skip_value(p, end, 0);
        if (!after)
            return NULL;
        int match = (size_t)(after - 1 - k) == klen && memcmp(k, key, klen) == 0;
        p = ws(after, end);
        if (p >= end || *p != ':')
            return NULL;
        p = ws(p + 1, end);
        if (match)
            return p < end ? p : NULL; /* a key with no value before the end */
        p = skip_value(p, end, 0);
        p = p ? ws(p, end) : NULL;
        if (!p || p >= end || *p != ',')
            return NULL;
        p = ws(p + 1, end);
    }
    return NULL;
}

/* Reads an info file's split: its filenames and num_samples. */
static int
read_info(const char *text, size_t size, const char *info, const char *split, struct names *out,
          int64_t *expected)
{
    const char *end = text + size;
    const char *splits = find_key(text, end, "splits");
    const char *sp = NULL;
    const char *want[2] = {split, strcmp(split, "val") == 0 ? "validation" : NULL};
    for (int i = 0; i < 2 && !sp && splits && want[i]; i++)
        sp = find_key(splits, end, want[i]);
    if (!sp) {
        tsock__log(TSOCK_LOG_ERROR, "shards: %s has no split '%s' under \"splits\"", info, split);
        return -EINVAL;
    }
    const char *n = find_key(sp, end, "num_samples");
    *expected = -1;
    if (n && n < end && *n >= '0' && *n <= '9') {
        int64_t v = 0; /* bounded by `end`: the text need not be NUL-terminated */
        for (; n < end && *n >= '0' && *n <= '9' && v < INT64_MAX / 10 - 9; n++)
            v = v * 10 + (*n - '0');
        *expected = v;
    }
    const char *p = find_key(sp, end, "filenames");
    if (!p || *p != '[') {
        tsock__log(TSOCK_LOG_ERROR, "shards: %s: split '%s' has no \"filenames\" list", info,
                   split);
        return -EINVAL;
    }
    for (p = ws(p + 1, end); p < end && *p == '"';) {
        const char *s = p + 1, *after = skip_value(p, end, 0);
        if (!after || after - 1 == s || memchr(s, '\\', (size_t)(after - 1 - s)) ||
            memchr(s, '\0', (size_t)(after - 1 - s)))
            break; /* empty names, escapes and NULs are refused below */
        int r = names_add(out, s, (size_t)(after - 1 - s));
        if (r != 0)
            return r;
        p = ws(after, end);
        if (p < end && *p == ',')
            p = ws(p + 1, end);
    }
    if (p >= end || *p != ']' || out->n == 0) {
        tsock__log(TSOCK_LOG_ERROR,
                   "shards: %s: split '%s': \"filenames\" is not a non-empty "
                   "list of plain, non-empty strings",
                   info, split);
        return -EINVAL;
    }
    return 0;
}

int
tsock__shards_parse_info(const char *text, size_t size, const char *split, char ***names,
                         uint32_t *count, int64_t *expected)
{
    struct names l = {0};
    *names = NULL;
    *count = 0;
    *expected = -1;
    int r = read_info(text, size, "the info file", split, &l, expected);
    if (r != 0) {
        names_free(&l);
        return r;
    }
    *names = l.v;
    *count = (uint32_t)l.n;
    return 0;
}

/* ---- directories and list files -------------------------------------------------------- */

static int
cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int
read_text(const char *path, char **text, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = tsock__read_whole(fd, TEXT_MAX_BYTES, text, size);
    close(fd);
    return r;
}

static int
from_directory(const char *dir, const char *split, struct names *out, int64_t *expected,
               char **info_used)
{
    static const char *const infos[] = {"_info.json", "info.json"};
    for (int i = 0; i < 2; i++) {
        char path[TSOCK__INDEX_MAX_PATH + 32];
        char *text = NULL;
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s", dir, infos[i]);
        int r = read_text(path, &text, &size);
        if (r == -ENOENT)
            continue;
        if (r == 0 && split)
            r = read_info(text, size, path, split, out, expected);
        free(text);
        if (r != 0) {
            if (r != -EINVAL)
                tsock__log(TSOCK_LOG_ERROR, "shards: cannot read %s: %s", path, strerror(-r));
            return r;
        }
        if (split && !(*info_used = strdup(path)))
            return -ENOMEM;
        if (split)
            return 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        int r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "shards: cannot list %s: %s", dir, strerror(-r));
        return r;
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d)) != NULL)
        if (ends_with(e->d_name, ".tar") && e->d_name[0] != '.')
            r = names_add(out, e->d_name, strlen(e->d_name));
    closedir(d);
    if (r == 0)
        qsort(out->v, out->n, sizeof *out->v, cmp_name);
    return r;
}

static int
from_list(const char *list, struct names *out)
{
    char *text = NULL;
    size_t size = 0;
    int r = read_text(list, &text, &size);
    if (r != 0) {
        tsock__log(TSOCK_LOG_ERROR, "shards: cannot read the shard list %s: %s", list,
                   strerror(-r));
        return r;
    }
    for (char *s = text; r == 0 && s < text + size;) {
        char *nl = memchr(s, '\n', (size_t)(text + size - s));
        size_t len = nl ? (size_t)(nl - s) : (size_t)(text + size - s);
        char *line = s;
        s += len + 1;
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            len--;
        while (len && (*line == ' ' || *line == '\t')) {
            line++;
            len--;
        }
        if (len == 0 || line[0] == '#')
            continue;
        if (memchr(line, '\0', len)) {
            tsock__log(TSOCK_LOG_ERROR, "shards: %s: a NUL byte in a line", list);
            r = -EINVAL;
            break;
        }
        r = names_add(out, line, len);
    }
    free(text);
    return r;
}

/* Makes a path relative to root when it lies in it. */
static char *
relative_to(const char *root, const char *path)
{
    size_t n = strlen(root);
    if (strcmp(root, ".") != 0 && strncmp(path, root, n) == 0 && path[n] == '/' && path[n + 1])
        return strdup(path + n + 1);
    return strdup(path);
}

int
tsock__shards_resolve(const char *spec, const char *split, struct tsock__shard_list *out)
{
    struct names names = {0};
    struct stat st;
    int r;

    if (!spec || !spec[0] || !out || strlen(spec) > TSOCK__INDEX_MAX_PATH)
        return -EINVAL;
    *out = (struct tsock__shard_list){.expected = -1};
    int pattern = strchr(spec, '{') != NULL;
    int carry_root = pattern; /* the resolved paths start with the root */
    if (pattern) {
        /* The root is the directory part before the first brace. */
        const char *brace = strchr(spec, '{');
        const char *slash = brace;
        while (slash > spec && slash[-1] != '/')
            slash--;
        out->root = slash == spec ? strdup(".") : strndup(spec, (size_t)(slash - spec - 1));
        if (out->root && !out->root[0]) {
            free(out->root);
            out->root = strdup("/");
        }
        r = out->root ? expand(spec, &names) : -ENOMEM;
    } else if (stat(spec, &st) != 0) {
        r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "shards: %s: %s", spec, strerror(-r));
    } else if (S_ISDIR(st.st_mode)) {
        out->root = strdup(spec);
        r = out->root ? from_directory(spec, split, &names, &out->expected, &out->info) : -ENOMEM;
    } else if (ends_with(spec, ".tar")) {
        carry_root = 1;
        out->root = tsock__dir_of(spec);
        r = out->root ? names_add(&names, spec, strlen(spec)) : -ENOMEM;
    } else {
        out->root = tsock__dir_of(spec);
        r = out->root ? from_list(spec, &names) : -ENOMEM;
    }
    if (r == -E2BIG)
        tsock__log(TSOCK_LOG_ERROR, "shards: %s: more than %u shards", spec, TSOCK__SHARDS_MAX);
    if (r == 0 && names.n == 0) {
        tsock__log(TSOCK_LOG_ERROR, "shards: %s: no shard (no *.tar file)", spec);
        r = -ENOENT;
    }
    if (r == 0) {
        out->paths = calloc(names.n, sizeof *out->paths);
        if (!out->paths)
            r = -ENOMEM;
        /* Pattern paths carry the root; directory, list and info names are relative to it
         * already (or absolute). */
        for (size_t i = 0; r == 0 && i < names.n; i++) {
            out->paths[i] = carry_root ? relative_to(out->root, names.v[i]) : strdup(names.v[i]);
            if (!out->paths[i])
                r = -ENOMEM;
            out->count = (uint32_t)(i + 1);
        }
    }
    names_free(&names);
    if (r != 0)
        tsock__shards_free(out);
    return r < 0 ? (r == -E2BIG ? -EINVAL : r) : 0;
}

void
tsock__shards_free(struct tsock__shard_list *l)
{
    if (!l)
        return;
    for (uint32_t i = 0; i < l->count; i++)
        free(l->paths[i]);
    free(l->paths);
    free(l->root);
    free(l->info);
    *l = (struct tsock__shard_list){.expected = -1};
}
