/* ImageFolder tree -> WebDataset shards (see shards.h). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "formats.h"
#include "shards.h"

#define BLOCK 512

static int
push(struct file_list *l, const char *path, uint32_t label)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (p)
            l->paths = p;
        uint32_t *b = realloc(l->labels, cap * sizeof *b);
        if (b)
            l->labels = b;
        if (!p || !b)
            return -1;
        l->cap = cap;
    }
    if (!(l->paths[l->n] = strdup(path)))
        return -1;
    l->labels[l->n++] = label;
    return 0;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* torchvision's IMG_EXTENSIONS, case-insensitively. */
static int
is_image_name(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t m = strlen(ext[i]);
        if (n > m && strcasecmp(name + n - m, ext[i]) == 0)
            return 1;
    }
    return 0;
}

/* The sorted names of a directory's entries that are directories (dirs != 0) or files. */
static char **
list_names(const char *dir, int dirs, size_t *count)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t n = 0;
    if (!d)
        return NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[8192];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || (dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
            continue;
        char **p = realloc(v, (n + 1) * sizeof *v);
        if (!p)
            break;
        v = p;
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    *count = n;
    if (!v) /* (not after qsort, whose pointer the compiler may assume non-NULL) */
        return calloc(1, sizeof *v);
    qsort(v, n, sizeof *v, cmp_str);
    return v;
}

static void
free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Adds the image files under tree/rel, files first then subfolders, each sorted by name. */
static int
walk_class(const char *tree, const char *rel, uint32_t label, struct file_list *out)
{
    char dir[8192];
    size_t nf = 0, nd = 0;
    snprintf(dir, sizeof dir, "%s/%s", tree, rel);
    char **files = list_names(dir, 0, &nf), **dirs = list_names(dir, 1, &nd);
    int r = files && dirs ? 0 : -1;
    for (size_t i = 0; r == 0 && i < nf; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", rel, files[i]);
        if (is_image_name(files[i]))
            r = push(out, path, label);
    }
    for (size_t i = 0; r == 0 && i < nd; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", rel, dirs[i]);
        r = walk_class(tree, path, label, out);
    }
    free_names(files, nf);
    free_names(dirs, nd);
    return r;
}

/* ---- tar --------------------------------------------------------------------------------- */

static void
octal(char *field, size_t width, uint64_t v)
{
    snprintf(field, width, "%0*" PRIo64, (int)width - 1, v);
}

static void
finish_header(unsigned char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

static void
basic_header(unsigned char *h, uint64_t size, char type)
{
    memset(h, 0, BLOCK);
    octal((char *)h + 100, 8, 0644);
    octal((char *)h + 108, 8, 0);
    octal((char *)h + 116, 8, 0);
    octal((char *)h + 124, 12, size);
    octal((char *)h + 136, 12, 0); /* mtime 0: the output depends on the tree only */
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
}

static int
write_padded(FILE *f, const void *p, size_t n)
{
    static const unsigned char zero[BLOCK];
    if (n && fwrite(p, 1, n, f) != n)
        return -1;
    size_t pad = (BLOCK - n % BLOCK) % BLOCK;
    return pad && fwrite(zero, 1, pad, f) != pad ? -1 : 0;
}

/* One member: a ustar header (the path split into prefix and name where it must be), or a GNU
 * long-name member first when it cannot be split. */
static int
write_member(FILE *f, const char *path, const void *data, size_t size)
{
    unsigned char h[BLOCK];
    size_t len = strlen(path);
    const char *split = NULL;
    if (len > 100)
        for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/'))
            if ((size_t)(s - path) <= 155 && len - (size_t)(s - path) - 1 <= 100) {
                split = s;
                break;
            }
    if (len > 100 && !split) {
        basic_header(h, len + 1, 'L');
        memcpy(h, "././@LongLink", 13);
        finish_header(h);
        if (fwrite(h, 1, BLOCK, f) != BLOCK || write_padded(f, path, len + 1) != 0)
            return -1;
    }
    basic_header(h, size, '0');
    if (split) {
        memcpy(h + 345, path, (size_t)(split - path));
        memcpy(h, split + 1, len - (size_t)(split - path) - 1);
    } else {
        memcpy(h, path, len > 100 ? 100 : len);
    }
    finish_header(h);
    return fwrite(h, 1, BLOCK, f) == BLOCK ? write_padded(f, data, size) : -1;
}

/* KEY for a file CLASS/.../NAME.EXT: its path without the extension, other dots made '_'. */
static void
member_key(const char *rel, char *key, size_t size, const char **ext)
{
    const char *dot = strrchr(rel, '.');
    snprintf(key, size, "%.*s", (int)(dot - rel), rel);
    for (char *c = strrchr(key, '/'); c && *c; c++)
        if (*c == '.')
            *c = '_';
    *ext = dot + 1;
}

static int
write_one_shard(const char *tree, const char *path, const struct file_list *l, size_t from,
                size_t to, uint64_t *bytes, char *err, size_t err_size)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, err_size, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    int r = 0;
    for (size_t i = from; r == 0 && i < to; i++) {
        char src[8192], key[8192], member[8300], ext[16], cls[16];
        const char *e;
        size_t size = 0;
        snprintf(src, sizeof src, "%s/%s", tree, l->paths[i]);
        unsigned char *data = read_whole_file(src, &size);
        if (!data) {
            snprintf(err, err_size, "cannot read %s: %s", src, strerror(errno));
            r = -1;
            break;
        }
        member_key(l->paths[i], key, sizeof key, &e);
        size_t k = 0;
        for (; e[k] && k + 1 < sizeof ext; k++)
            ext[k] = (char)(e[k] >= 'A' && e[k] <= 'Z' ? e[k] - 'A' + 'a' : e[k]);
        ext[k] = '\0';
        snprintf(member, sizeof member, "%s.%s", key, ext);
        int n = snprintf(cls, sizeof cls, "%u", l->labels[i]);
        r = write_member(f, member, data, size);
        snprintf(member, sizeof member, "%s.cls", key);
        if (r == 0)
            r = write_member(f, member, cls, (size_t)n);
        *bytes += size;
        free(data);
        if (r != 0)
            snprintf(err, err_size, "cannot write %s: %s", path, strerror(errno));
    }
    static const unsigned char end[2 * BLOCK];
    if (r == 0 && fwrite(end, 1, sizeof end, f) != sizeof end) {
        snprintf(err, err_size, "cannot write %s: %s", path, strerror(errno));
        r = -1;
    }
    if (fclose(f) != 0 && r == 0) {
        snprintf(err, err_size, "cannot write %s: %s", path, strerror(errno));
        r = -1;
    }
    if (r != 0)
        remove(path);
    return r;
}

static int
write_info(const char *out, const char *prefix, const char *split, const struct file_list *l,
           uint64_t per_shard, uint64_t shards, char *err, size_t err_size)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/_info.json", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_size, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f,
            "{\"name\": \"%s\", \"splits\": {\"%s\": {\"name\": \"%s\", \"num_samples\": %zu, "
            "\"filenames\": [",
            prefix, split, split, l->n);
    for (uint64_t s = 0; s < shards; s++)
        fprintf(f, "%s\"%s-%06" PRIu64 ".tar\"", s ? ", " : "", prefix, s);
    fprintf(f, "], \"shard_lengths\": [");
    for (uint64_t s = 0; s < shards; s++) {
        uint64_t left = l->n - s * per_shard;
        fprintf(f, "%s%" PRIu64, s ? ", " : "", left < per_shard ? left : per_shard);
    }
    fprintf(f, "]}}}\n");
    if (fclose(f) != 0) {
        snprintf(err, err_size, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int
list_tree_files(const char *tree, struct file_list *l, uint64_t *nclasses, char *err,
                size_t err_size)
{
    size_t n = 0;
    char **classes = list_names(tree, 1, &n);
    int r = 0;

    *l = (struct file_list){0};
    *nclasses = n;
    if (!classes || n == 0) {
        snprintf(err, err_size, "%s: no class directory (expected an ImageFolder tree)", tree);
        free_names(classes, n);
        return -1;
    }
    for (size_t c = 0; r == 0 && c < n; c++)
        r = walk_class(tree, classes[c], (uint32_t)c, l);
    if (r == 0 && l->n == 0) {
        snprintf(err, err_size, "%s: no image file in its class directories", tree);
        r = -1;
    } else if (r != 0) {
        snprintf(err, err_size, "%s: cannot list the tree: %s", tree, strerror(errno));
    }
    l->classes = classes;
    return r;
}

void
file_list_free(struct file_list *l, uint64_t nclasses)
{
    free_names(l->classes, nclasses);
    free_names(l->paths, l->n);
    free(l->labels);
    *l = (struct file_list){0};
}

int
write_shards(const char *tree, const char *out, const char *prefix, const char *split,
             uint64_t per_shard, struct shard_summary *sum, char *err, size_t err_size)
{
    struct file_list l;
    uint64_t nclasses = 0;
    int r = list_tree_files(tree, &l, &nclasses, err, err_size);

    *sum = (struct shard_summary){0};
    uint64_t shards = r == 0 ? (l.n + per_shard - 1) / per_shard : 0;
    for (uint64_t s = 0; r == 0 && s < shards; s++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s-%06" PRIu64 ".tar", out, prefix, s);
        size_t to = (s + 1) * per_shard < l.n ? (size_t)((s + 1) * per_shard) : l.n;
        r = write_one_shard(tree, path, &l, (size_t)(s * per_shard), to, &sum->bytes, err,
                            err_size);
    }
    if (r == 0)
        r = write_info(out, prefix, split, &l, per_shard, shards, err, err_size);
    sum->samples = l.n;
    sum->shards = shards;
    sum->classes = nclasses;
    file_list_free(&l, nclasses);
    return r;
}
