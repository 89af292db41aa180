/* What the decode benchmarks share: every JPEG file under a folder, read into memory; CPU
 * clocks; medians; a JSON string. Header-only, one program each. */
#ifndef TSOCK_BENCH_FILES_H
#define TSOCK_BENCH_FILES_H

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_REPEAT 15

struct file {
    char *path;
    uint8_t *data;
    size_t size;
    int width, height;
};

static struct file *g_files;
static size_t g_count, g_cap;

static double
thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double
median(const double *v, int n)
{
    double s[MAX_REPEAT];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static int
is_jpeg_name(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot && (strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".jpg") == 0);
}

static int
collect(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !S_ISREG(st->st_mode) || st->st_size <= 0 || !is_jpeg_name(path))
        return 0;
    if (g_count == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 1024;
        g_files = realloc(g_files, g_cap * sizeof *g_files);
        if (!g_files)
            return -1;
    }
    g_files[g_count].path = strdup(path);
    g_files[g_count].size = (size_t)st->st_size;
    g_count++;
    return 0;
}

static int
read_all(void)
{
    for (size_t i = 0; i < g_count; i++) {
        struct file *f = &g_files[i];
        FILE *fp = fopen(f->path, "rb");
        if (!fp)
            return -errno;
        f->data = malloc(f->size);
        size_t got = f->data ? fread(f->data, 1, f->size, fp) : 0;
        fclose(fp);
        if (got != f->size)
            return -EIO;
    }
    return 0;
}

/* A JSON string (the root path). */
static void
json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* One "--NAME VALUE" option of a benchmark's command line: VALUE goes to *text (a string) or,
 * read with atoi, to *number. */
struct bench_opt {
    const char *name;
    const char **text;
    int *number;
};

/* The decode benchmarks' command lines: every argument is --help or one of `opts` followed by
 * its value. Returns 0 when parsed, 1 for --help (printed to stdout), 2 for anything else
 * (printed to stderr); `usage` is the one line that says how to call the program. */
static int
bench_parse(int argc, char **argv, const struct bench_opt *opts, size_t n, const char *usage)
{
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        if (strcmp(argv[i], "--help") == 0) {
            printf("%s\n", usage);
            return 1;
        }
        while (k < n && (strcmp(argv[i], opts[k].name) != 0 || i + 1 >= argc))
            k++;
        if (k == n) {
            fprintf(stderr, "%s\n", usage);
            return 2;
        }
        i++;
        if (opts[k].text)
            *opts[k].text = argv[i];
        else
            *opts[k].number = atoi(argv[i]);
    }
    return 0;
}

/* Collects every JPEG file under root and reads them all. Returns the count, or 0 (said on
 * stderr, with `prog` first) when there is none or one cannot be read. */
static size_t
load_jpeg_tree(const char *prog, const char *root)
{
    if (nftw(root, collect, 32, FTW_PHYS) != 0 || g_count == 0) {
        fprintf(stderr, "%s: no JPEG files under %s\n", prog, root);
        return 0;
    }
    if (read_all() != 0) {
        fprintf(stderr, "%s: cannot read the files\n", prog);
        return 0;
    }
    return g_count;
}

#endif
