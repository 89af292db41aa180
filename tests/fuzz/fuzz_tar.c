/* libFuzzer target for the tar index parser (libtsock/dataset/tar.c), the decoder of the
 * untrusted bytes of a WebDataset shard.
 *
 * Any input must scan without touching memory outside it, with a result the header promises
 * (the number of good samples, never negative). Every sample handed out must lie inside the
 * input (its image member's bytes, which the pipeline will read at that offset), have a
 * non-empty key no longer than TSOCK__TAR_MAX_PATH and a label below 2^32 - 1; every problem
 * must be a known one at an offset inside the input. The first byte picks the label source
 * (cls, or a json field), so both paths are explored. An input that starts with '{' is also
 * read as the timm info file that may lie beside the shards (dataset/shards.c): every name it
 * gives must be a non-empty string without NUL. A breach aborts so the fuzzer reports it. Built
 * with -fsanitize=fuzzer as fuzz_tar, and with replay_main.c as replay_tar, which replays the
 * corpus in the normal test run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/shards.h"
#include "dataset/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    size_t size;
    int64_t samples;
};

static int
on_sample(void *arg, const struct tsock__tar_sample *s)
{
    struct seen *st = arg;
    if (s->offset > st->size || s->size > st->size - s->offset || s->size == 0)
        abort();
    if (s->key_len == 0 || s->key_len > TSOCK__TAR_MAX_PATH || s->header >= st->size ||
        s->label == UINT32_MAX)
        abort();
    volatile uint8_t touch = ((const uint8_t *)s->key)[s->key_len - 1];
    (void)touch;
    st->samples++;
    return 0;
}

static void
on_problem(void *arg, int problem, uint64_t offset, const char *key, size_t key_len)
{
    struct seen *st = arg;
    if (problem < TSOCK__TAR_BAD_CHECKSUM || problem > TSOCK__TAR_TOO_LARGE || offset > st->size ||
        key_len > TSOCK__TAR_MAX_PATH || (key_len && !key))
        abort();
    if (!tsock__tar_problem_text(problem)[0])
        abort();
}

static void
info_file(const uint8_t *data, size_t size)
{
    static const char *const splits[] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        char **names = NULL;
        uint32_t count = 0;
        int64_t expected = 0;
        int r = tsock__shards_parse_info((const char *)data, size, splits[k], &names, &count,
                                         &expected);
        if (r != 0 && (names || count))
            abort();
        for (uint32_t i = 0; i < count; i++) {
            if (!names[i] || !names[i][0] || strlen(names[i]) > size)
                abort();
            free(names[i]);
        }
        free(names);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size && data[0] == '{')
        info_file(data, size);
    struct seen st = {.size = size};
    struct tsock__tar_callbacks cb = {.sample = on_sample,
                                      .problem = on_problem,
                                      .arg = &st,
                                      .label_key = size && (data[0] & 1) ? "label" : NULL};
    int64_t r = tsock__tar_scan(data, size, &cb);
    if (r < 0 || r != st.samples)
        abort();
    return 0;
}
