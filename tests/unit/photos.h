/* The photographs the image tests decode: the JPEG files under /usr/share/backgrounds (Debian's
 * mate-backgrounds, which scripts/deps.sh installs) or under TSOCK_TEST_PHOTOS, sorted by path
 * so that every run decodes the same ones. */
#ifndef TSOCK_TEST_PHOTOS_H
#define TSOCK_TEST_PHOTOS_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define TEST_PHOTOS_MAX 64

struct test_photos {
    char *path[TEST_PHOTOS_MAX];
    int n;
};

static struct test_photos *test_photos_filling; /* nftw's callback takes no argument */

static int
test_photos_add(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    struct test_photos *ph = test_photos_filling;
    size_t n = strlen(path);
    (void)st;
    (void)ftw;
    if (type == FTW_F && ph->n < TEST_PHOTOS_MAX && n > 4 &&
        (strcasecmp(path + n - 4, ".jpg") == 0 || strcasecmp(path + n - 5, ".jpeg") == 0))
        ph->path[ph->n++] = strdup(path);
    return 0;
}

static int
test_photos_by_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Fills ph; with no photograph, prints a SKIP line that says how to get some. Returns ph->n. */
static int
test_photos_collect(struct test_photos *ph)
{
    const char *dir =
        getenv("TSOCK_TEST_PHOTOS") ? getenv("TSOCK_TEST_PHOTOS") : "/usr/share/backgrounds";
    memset(ph, 0, sizeof *ph);
    test_photos_filling = ph;
    nftw(dir, test_photos_add, 16, FTW_PHYS);
    if (ph->n == 0)
        fprintf(stderr,
                "SKIP photographs: no JPEG under %s (install mate-backgrounds, as "
                "scripts/deps.sh does, or set TSOCK_TEST_PHOTOS)\n",
                dir);
    qsort(ph->path, (size_t)ph->n, sizeof *ph->path, test_photos_by_path);
    return ph->n;
}

/* A file's bytes (malloc'd), or NULL. */
static uint8_t *
test_photos_read(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    *size = buf ? (size_t)n : 0;
    fclose(f);
    return buf;
}

static void
test_photos_free(struct test_photos *ph)
{
    for (int i = 0; i < ph->n; i++)
        free(ph->path[i]);
    ph->n = 0;
}

#endif
