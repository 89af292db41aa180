/* libFuzzer target for the index cache decoder (libtsock/dataset/index_cache.c).
 *
 * Any input must decode, with and without checksum verification, without touching memory
 * outside it and with one of the promised results. The checksum would stop the fuzzer at the
 * door, so the deep validation is exercised with verification off. An accepted input must be
 * the encoding of what it decodes to (re-encoding gives back the same bytes, the checksum
 * aside), and everything a caller may reach through the index must lie inside it: each
 * sample's path and each class name is a string within the pool, each label below the class
 * count. A breach aborts so the fuzzer reports it. Built with -fsanitize=fuzzer as
 * fuzz_index, and with replay_main.c as replay_index, which replays the corpus in the normal
 * test run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/index.h"
#include "dataset/index_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_reachable(const struct tsock__index *idx)
{
    uint64_t total = 0;

    if (idx->pool_size == 0 || idx->pool[idx->pool_size - 1] != '\0')
        abort();
    for (uint64_t i = 0; i < idx->count; i++) {
        const char *p = tsock__index_path(idx, i);
        if (!p || p < idx->pool || p >= idx->pool + idx->pool_size || !p[0])
            abort();
        if (strlen(p) >= idx->pool_size - idx->entries[i].path)
            abort();
        if (idx->entries[i].label >= idx->classes || idx->entries[i].size == 0)
            abort();
        total += idx->entries[i].size;
    }
    if (total != idx->total_bytes || tsock__index_path(idx, idx->count) != NULL)
        abort();
    for (uint32_t c = 0; idx->source == TSOCK__INDEX_FOLDER && c < idx->classes; c++) {
        const char *name = tsock__index_class_name(idx, c);
        if (!name || !name[0] || strchr(name, '/'))
            abort();
    }
    for (uint32_t w = 0; w < idx->watch_count; w++)
        if (idx->watch[w].path >= idx->pool_size)
            abort();
    if (idx->empty_classes > idx->classes || !idx->root || !idx->source_path)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tsock__index *idx, *again;
    uint8_t *enc;
    size_t enc_size;
    int verified = tsock__index_decode(data, size, 1, &idx);

    if (verified == 0)
        tsock__index_destroy(idx);
    else if (verified != -EBADMSG && verified != -ENOMEM)
        abort();

    int r = tsock__index_decode(data, size, 0, &idx);
    if (r != 0) {
        if (r != -EBADMSG && r != -ENOMEM)
            abort();
        if (verified == 0)
            abort(); /* verification only adds a check */
        return 0;
    }
    check_reachable(idx);
    if (tsock__index_encode(idx, &enc, &enc_size) != 0)
        abort();
    if (enc_size != size || memcmp(enc, data, size - 8) != 0)
        abort();
    /* The re-encoding carries a correct checksum, so it passes verification. */
    if (tsock__index_decode(enc, enc_size, 1, &again) != 0)
        abort();
    if (again->count != idx->count || again->pool_size != idx->pool_size ||
        memcmp(again->pool, idx->pool, idx->pool_size) != 0 ||
        (idx->count &&
         memcmp(again->entries, idx->entries, idx->count * sizeof *idx->entries) != 0))
        abort();
    tsock__index_destroy(again);
    free(enc);
    tsock__index_destroy(idx);
    return 0;
}
