/* The index cache codec: the bytes of an index cache file (format in index_cache.c).
 *
 * Pure code: no I/O and no global state, so it is safe on any thread and can be fuzzed in
 * isolation (tests/fuzz/fuzz_index.c). The bytes come from a file anyone may have written:
 * the decoder trusts no field, offset or length. index_store.c puts these bytes on disk.
 */
#ifndef TSOCK_DATASET_INDEX_CACHE_H
#define TSOCK_DATASET_INDEX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/index.h"

/* Encode: returns 0 and a malloc'ed buffer (*out, *size), or -EINVAL, -ENOMEM, -EOVERFLOW.
 * Decode: validates every field, offset and length of untrusted bytes and returns 0 and a new
 * index (owned by the caller), or -EBADMSG, -ENOMEM, -EINVAL (out is NULL); `verify_checksum`
 * = 0 skips only the checksum comparison (for the fuzzer, which could never forge one). The
 * decoder copies what it keeps, so the caller may free `data` at once. */
int tsock__index_encode(const struct tsock__index *idx, uint8_t **out, size_t *size);
int tsock__index_decode(const uint8_t *data, size_t size, int verify_checksum,
                        struct tsock__index **out);

#endif
