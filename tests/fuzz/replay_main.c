/* Replays fuzz inputs without libFuzzer: each argument is a file or a directory of files, and
 * every file is handed to LLVMFuzzerTestOneInput once, in an exactly-sized heap buffer so that
 * AddressSanitizer sees any read past the input. Exits non-zero when an argument cannot be read
 * or no input was found, so a mistyped corpus path fails the test instead of passing empty. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs one file. Returns 0, or -1 when it cannot be read. */
static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    long size;
    int ok = 0;

    if (!f)
        return -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = malloc(size ? (size_t)size : 1);
        ok = data && fread(data, 1, (size_t)size, f) == (size_t)size;
        if (ok)
            LLVMFuzzerTestOneInput(data, (size_t)size);
    }
    free(data);
    fclose(f);
    return ok ? 0 : -1;
}

/* Runs every regular file of a directory (not recursive). Returns the count, or -1. */
static int
replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    struct stat st;
    int count = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            continue;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (replay_file(path) != 0) {
            fprintf(stderr, "replay: cannot read %s\n", path);
            closedir(d);
            return -1;
        }
        count++;
    }
    closedir(d);
    return count;
}

int
main(int argc, char **argv)
{
    struct stat st;
    int total = 0;

    for (int i = 1; i < argc; i++) {
        int n = -1;
        if (stat(argv[i], &st) == 0)
            n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) == 0 ? 1 : -1);
        if (n < 0) {
            fprintf(stderr, "replay: cannot read %s\n", argv[i]);
            return 1;
        }
        total += n;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
