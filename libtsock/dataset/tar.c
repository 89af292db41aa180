/* The tar index parser (see tar.h). One pass over the headers; member data is only looked at
 * for the small cls and json members that carry labels. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/tar.h"

#define BLOCK 512u
/* Bigger PAX records or GNU long names are refused: no real member path comes near. */
#define MAX_EXTENDED (1u << 20)
/* The longest cls or json member read for a label. */
#define MAX_LABEL_MEMBER (1u << 20)

const char *
tsock__tar_problem_text(int problem)
{
    switch (problem) {
    case TSOCK__TAR_BAD_CHECKSUM:
        return "a header's checksum is wrong (not a tar file, or corrupt); the rest of the shard "
               "is left out";
    case TSOCK__TAR_TRUNCATED:
        return "truncated: a header or a member's data runs past the end of the shard; the rest "
               "of the shard is left out";
    case TSOCK__TAR_BAD_HEADER:
        return "a malformed header (size, PAX record or long name); the rest of the shard is "
               "left out";
    case TSOCK__TAR_NO_IMAGE: return "the sample has no image member (jpg, jpeg, png or webp)";
    case TSOCK__TAR_NO_LABEL: return "the sample has no label (no cls member, or no json field)";
    case TSOCK__TAR_BAD_LABEL: return "the label is not a decimal integer in 0..4294967294";
    case TSOCK__TAR_DUPLICATE_KEY:
        return "duplicate key: an earlier sample of this shard has the same key";
    case TSOCK__TAR_DUPLICATE_MEMBER: return "the sample has two members of the same extension";
    case TSOCK__TAR_EMPTY_IMAGE: return "the image member is empty";
    case TSOCK__TAR_TOO_LARGE: return "the image member has 4 GiB or more, or its path is too long";
    default: return "unknown problem";
    }
}

/* ---- header fields --------------------------------------------------------------------- */

/* An octal field (leading spaces, digits, then NUL or space), or GNU's base-256 form (first
 * byte's high bit set). Returns 0 and *v, or -1. */
static int
parse_number(const uint8_t *f, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return -1; /* negative, or too large for 64 bits */
        for (size_t i = 1; i < n; i++) {
            if (x >> 56)
                return -1;
            x = x << 8 | f[i];
        }
        *v = x;
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (x >> 60)
            return -1;
        x = x << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    if (digits == 0)
        return -1;
    *v = x;
    return 0;
}

static int
checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (parse_number(h + 148, 8, &want) != 0)
        return 0;
    uint64_t u = 0;
    int64_t s = 0;
    for (size_t i = 0; i < BLOCK; i++) {
        uint8_t b = i >= 148 && i < 156 ? ' ' : h[i];
        u += b;
        s += (int8_t)b;
    }
    return u == want || (uint64_t)s == want;
}

static int
all_zero(const uint8_t *h)
{
    for (size_t i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* ---- PAX records: "LEN KEY=VALUE\n" ---------------------------------------------------- */

struct overrides {
    const char *path; /* PAX path or GNU long name (points into the data) */
    size_t path_len;
    int have_size;
    uint64_t size;
};

/* Reads the records of a PAX extended header. Returns 0, or -1 when malformed. */
static int
parse_pax(const uint8_t *p, size_t n, struct overrides *o)
{
    size_t at = 0;
    while (at < n) {
        if (p[at] == '\0')
            break; /* padding some writers leave */
        size_t len = 0, i = at;
        while (i < n && p[i] >= '0' && p[i] <= '9' && len < MAX_EXTENDED)
            len = len * 10 + (size_t)(p[i++] - '0');
        if (i >= n || p[i] != ' ' || len == 0 || len > n - at || p[at + len - 1] != '\n')
            return -1;
        const uint8_t *kv = p + i + 1, *end = p + at + len - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return -1;
        size_t klen = (size_t)(eq - kv);
        const uint8_t *val = eq + 1;
        size_t vlen = (size_t)(end - val);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            o->path = (const char *)val;
            o->path_len = vlen;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 19)
                return -1;
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9')
                    return -1;
                v = v * 10 + (uint64_t)(val[k] - '0');
            }
            o->have_size = 1;
            o->size = v;
        }
        at += len;
    }
    return 0;
}

/* ---- keys seen in this shard ------------------------------------------------------------- */

struct keyset {
    char *bytes; /* the keys back to back */
    size_t len, cap;
    uint64_t *slots; /* 0 empty, else (offset + 1) << 20 | key length */
    size_t nslots, used;
};

static uint64_t
hash_key(const char *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 0x100000001b3u;
    return h;
}

/* Adds a key; returns 1 when it was there already, 0 when added, -ENOMEM. */
static int
keyset_add(struct keyset *s, const char *k, size_t n)
{
    if (s->used * 2 >= s->nslots) {
        size_t cap = s->nslots ? s->nslots * 2 : 1024;
        uint64_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -ENOMEM;
        for (size_t i = 0; i < s->nslots; i++) {
            uint64_t e = s->slots[i];
            if (!e)
                continue;
            size_t off = (size_t)(e >> 20) - 1, len = (size_t)(e & 0xFFFFF);
            size_t j = hash_key(s->bytes + off, len) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = e;
        }
        free(s->slots);
        s->slots = slots;
        s->nslots = cap;
    }
    size_t j = hash_key(k, n) & (s->nslots - 1);
    for (; s->slots[j]; j = (j + 1) & (s->nslots - 1)) {
        size_t off = (size_t)(s->slots[j] >> 20) - 1, len = (size_t)(s->slots[j] & 0xFFFFF);
        if (len == n && memcmp(s->bytes + off, k, n) == 0)
            return 1;
    }
    if (!s->bytes || s->len + n > s->cap) { /* allocated even for an empty first key: a null
                                               pointer plus 0 is undefined (fuzz_tar found it) */
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n)
            cap *= 2;
        char *b = realloc(s->bytes, cap);
        if (!b)
            return -ENOMEM;
        s->bytes = b;
        s->cap = cap;
    }
    memcpy(s->bytes + s->len, k, n);
    s->slots[j] = ((uint64_t)s->len + 1) << 20 | n;
    s->len += n;
    s->used++;
    return 0;
}

/* ---- samples ----------------------------------------------------------------------------- */

enum { EXT_JPG, EXT_JPEG, EXT_PNG, EXT_WEBP, EXT_CLS, EXT_JSON, EXT_COUNT };

struct member {
    int present;
    uint64_t offset, size;
};

struct sample {
    char key[TSOCK__TAR_MAX_PATH + 1];
    size_t key_len;
    int open;
    uint64_t header;
    int problem; /* the first problem met, or 0 */
    struct member m[EXT_COUNT];
};

struct scan {
    const uint8_t *data;
    size_t size;
    const struct tsock__tar_callbacks *cb;
    struct keyset keys;
    int64_t good;
};

static void
report(struct scan *s, int problem, uint64_t offset, const char *key, size_t key_len)
{
    if (s->cb->problem)
        s->cb->problem(s->cb->arg, problem, offset, key, key_len);
}

/* A decimal integer in 0..2^32-2, white space around it allowed. */
static int
parse_label(const uint8_t *p, size_t n, uint32_t *label)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        v = v * 10 + (uint64_t)(p[i] - '0');
        if (v > UINT32_MAX - 1)
            return -1;
    }
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    if (digits == 0 || i != n)
        return -1;
    *label = (uint32_t)v;
    return 0;
}

/* The integer value of field `key` of a JSON object's top level. Only nesting and strings are
 * tracked, which is all it takes to find a top-level key; the value must be a plain decimal.
 * Returns 0, TSOCK__TAR_NO_LABEL or TSOCK__TAR_BAD_LABEL. */
static int
json_label(const uint8_t *p, size_t n, const char *key, uint32_t *label)
{
    size_t klen = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == '"') {
            size_t start = ++i;
            while (i < n && p[i] != '"')
                i += p[i] == '\\' ? 2 : 1;
            if (i >= n)
                return TSOCK__TAR_NO_LABEL;
            if (depth != 1 || i - start != klen || memcmp(p + start, key, klen) != 0)
                continue;
            size_t j = i + 1;
            while (j < n && (p[j] == ' ' || p[j] == '\t' || p[j] == '\n' || p[j] == '\r'))
                j++;
            if (j >= n || p[j] != ':')
                continue; /* a string value that happens to equal the key */
            j++;
            while (j < n && (p[j] == ' ' || p[j] == '\t' || p[j] == '\n' || p[j] == '\r'))
                j++;
            size_t e = j;
            while (e < n && p[e] >= '0' && p[e] <= '9')
                e++;
            if (e == j || e - j > 10)
                return TSOCK__TAR_BAD_LABEL;
            return parse_label(p + j, e - j, label) == 0 ? 0 : TSOCK__TAR_BAD_LABEL;
        }
    }
    return TSOCK__TAR_NO_LABEL;
}

/* Ends the open sample: passes it on, or reports why not. Returns 0 or the callback's stop. */
static int
close_sample(struct scan *s, struct sample *smp)
{
    if (!smp->open)
        return 0;
    smp->open = 0;
    int problem = smp->problem;
    const struct member *img = NULL;
    for (int e = EXT_JPG; e <= EXT_WEBP && !img; e++)
        if (smp->m[e].present)
            img = &smp->m[e];
    uint32_t label = 0;
    if (!problem) {
        int dup = keyset_add(&s->keys, smp->key, smp->key_len);
        if (dup < 0)
            return dup;
        if (dup)
            problem = TSOCK__TAR_DUPLICATE_KEY;
    }
    if (!problem && !img)
        problem = TSOCK__TAR_NO_IMAGE;
    if (!problem && img->size == 0)
        problem = TSOCK__TAR_EMPTY_IMAGE;
    if (!problem && img->size > UINT32_MAX)
        problem = TSOCK__TAR_TOO_LARGE;
    if (!problem) {
        const struct member *lm = s->cb->label_key ? &smp->m[EXT_JSON] : &smp->m[EXT_CLS];
        if (!lm->present)
            problem = TSOCK__TAR_NO_LABEL;
        else if (lm->size > MAX_LABEL_MEMBER)
            problem = TSOCK__TAR_BAD_LABEL;
        else if (s->cb->label_key)
            problem = json_label(s->data + lm->offset, (size_t)lm->size, s->cb->label_key, &label);
        else if (parse_label(s->data + lm->offset, (size_t)lm->size, &label) != 0)
            problem = TSOCK__TAR_BAD_LABEL;
    }
    if (problem) {
        report(s, problem, smp->header, smp->key, smp->key_len);
        return 0;
    }
    struct tsock__tar_sample out = {.key = smp->key,
                                    .key_len = smp->key_len,
                                    .header = smp->header,
                                    .offset = img->offset,
                                    .size = (uint32_t)img->size,
                                    .label = label};
    s->good++;
    return s->cb->sample ? s->cb->sample(s->cb->arg, &out) : 0;
}

static int
ext_of(const char *ext, size_t n)
{
    static const char *const names[EXT_COUNT] = {"jpg", "jpeg", "png", "webp", "cls", "json"};
    char low[8];
    if (n == 0 || n >= sizeof low)
        return -1;
    for (size_t i = 0; i < n; i++)
        low[i] = ext[i] >= 'A' && ext[i] <= 'Z' ? (char)(ext[i] - 'A' + 'a') : ext[i];
    for (int e = 0; e < EXT_COUNT; e++)
        if (strlen(names[e]) == n && memcmp(low, names[e], n) == 0)
            return e;
    return -1;
}

/* Adds one regular member to the open sample (starting a new sample when its key differs).
 * Returns 0 or the callback's stop value. */
static int
add_member(struct scan *s, struct sample *smp, const char *path, size_t path_len, uint64_t header,
           uint64_t offset, uint64_t size)
{
    const char *slash = memrchr(path, '/', path_len);
    const char *name = slash ? slash + 1 : path;
    const char *dot = memchr(name, '.', path_len - (size_t)(name - path));
    size_t key_len = dot ? (size_t)(dot - path) : path_len;
    int too_long = key_len > TSOCK__TAR_MAX_PATH;
    if (too_long)
        key_len = TSOCK__TAR_MAX_PATH;

    if (!smp->open || smp->key_len != key_len || memcmp(smp->key, path, key_len) != 0) {
        int r = close_sample(s, smp);
        if (r != 0)
            return r;
        memset(smp->m, 0, sizeof smp->m);
        memcpy(smp->key, path, key_len);
        smp->key_len = key_len;
        smp->open = 1;
        smp->header = header;
        smp->problem = 0;
    }
    if (too_long && !smp->problem)
        smp->problem = TSOCK__TAR_TOO_LARGE;
    int e = dot ? ext_of(dot + 1, path_len - (size_t)(dot + 1 - path)) : -1;
    if (e < 0)
        return 0;
    if (smp->m[e].present && !smp->problem)
        smp->problem = TSOCK__TAR_DUPLICATE_MEMBER;
    smp->m[e] = (struct member){.present = 1, .offset = offset, .size = size};
    return 0;
}

/* The path of a regular member: a PAX path or GNU long name, else ustar's prefix/name. */
static const char *
member_path(const uint8_t *h, const struct overrides *ov, char *joined, size_t *len)
{
    if (ov->path) {
        *len = ov->path_len;
        return ov->path;
    }
    size_t nlen = strnlen((const char *)h, 100);
    size_t plen = memcmp(h + 257, "ustar", 5) == 0 ? strnlen((const char *)h + 345, 155) : 0;
    size_t k = 0;
    if (plen) {
        memcpy(joined, h + 345, plen);
        joined[plen] = '/';
        k = plen + 1;
    }
    memcpy(joined + k, h, nlen);
    *len = k + nlen;
    return joined;
}

/* The key part of a member path (see tar.h), for naming a member in a report. */
static size_t
key_length(const char *path, size_t len)
{
    const char *slash = memrchr(path, '/', len);
    const char *name = slash ? slash + 1 : path;
    const char *dot = memchr(name, '.', len - (size_t)(name - path));
    size_t n = dot ? (size_t)(dot - path) : len;
    return n > TSOCK__TAR_MAX_PATH ? TSOCK__TAR_MAX_PATH : n;
}

/* Ends the scan of a shard at a header that cannot be followed: the open sample is judged on
 * the members it has (they were whole), then the problem is reported with the key of the
 * member concerned when its header could be read. Returns close_sample's value. */
static int64_t
stop(struct scan *s, struct sample *smp, int problem, uint64_t at, const char *key, size_t len)
{
    int64_t r = close_sample(s, smp);
    report(s, problem, at, key ? key : "", key ? len : 0);
    return r;
}

int64_t
tsock__tar_scan(const uint8_t *data, size_t size, const struct tsock__tar_callbacks *cb)
{
    struct scan s = {.data = data, .size = size, .cb = cb};
    struct sample *smp = calloc(1, sizeof *smp);
    struct overrides ov = {0};
    char joined[256 + 156];
    uint64_t at = 0;
    int64_t r = 0;

    if (!smp)
        return -ENOMEM;
    while (at < size) {
        const uint8_t *h = data + at;
        if (size - at < BLOCK) {
            r = stop(&s, smp, TSOCK__TAR_TRUNCATED, at, NULL, 0);
            break;
        }
        if (all_zero(h))
            break; /* end of archive */
        if (!checksum_ok(h)) {
            r = stop(&s, smp, TSOCK__TAR_BAD_CHECKSUM, at, NULL, 0);
            break;
        }
        char type = (char)h[156];
        int regular = type == '0' || type == '\0' || type == '7';
        size_t path_len = 0;
        const char *path = regular ? member_path(h, &ov, joined, &path_len) : NULL;
        size_t key_len = path ? key_length(path, path_len) : 0;
        uint64_t msize;
        if (parse_number(h + 124, 12, &msize) != 0) {
            r = stop(&s, smp, TSOCK__TAR_BAD_HEADER, at, path, key_len);
            break;
        }
        if (ov.have_size && type != 'x' && type != 'g' && type != 'L')
            msize = ov.size;
        uint64_t data_at = at + BLOCK;
        if (msize > size - data_at) {
            r = stop(&s, smp, TSOCK__TAR_TRUNCATED, at, path, key_len);
            break;
        }
        /* The padding after the last member's data may be cut: the data itself is whole. */
        uint64_t rest = size - data_at - msize, pad = (BLOCK - msize % BLOCK) % BLOCK;
        uint64_t next = data_at + msize + (pad < rest ? pad : rest);
        if (type == 'x' || type == 'L') {
            struct overrides nov = ov;
            int bad = msize > MAX_EXTENDED;
            if (!bad && type == 'x')
                bad = parse_pax(data + data_at, (size_t)msize, &nov) != 0;
            if (!bad && type == 'L') {
                size_t n = (size_t)msize;
                while (n && data[data_at + n - 1] == '\0')
                    n--; /* the name's terminating NUL */
                nov.path = (const char *)data + data_at;
                nov.path_len = n;
            }
            if (bad) {
                r = stop(&s, smp, TSOCK__TAR_BAD_HEADER, at, NULL, 0);
                break;
            }
            ov = nov;
            at = next;
            continue;
        }
        /* Global PAX settings ('g'), GNU long link names ('K'), directories, links, devices:
         * nothing a sample needs. */
        if (regular && path_len && (r = add_member(&s, smp, path, path_len, at, data_at, msize)))
            break;
        ov = (struct overrides){0};
        at = next;
    }
    if (r == 0)
        r = close_sample(&s, smp); /* a no-op when a stop has judged it already */
    free(smp);
    free(s.keys.bytes);
    free(s.keys.slots);
    return r != 0 ? r : s.good;
}
