/* The index-time header check: reads the start of every file of a fresh scan and leaves out
 * those whose header already shows that decoding them would fail, so that they are reported
 * once, at startup, instead of being discovered mid-epoch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"

/* Bytes read from each file: enough for the header of nearly every JPEG (up to its first
 * scan) and every PNG. A JPEG whose metadata (EXIF, ICC profiles) is larger says how much it
 * needs, and is read again with that much. */
#define PREFIX_BYTES 4096u
/* The most a header may take before the file counts as corrupt. */
#define MAX_HEADER_BYTES (16u << 20)
/* Left-out files logged one by one; beyond that, only counted. */
#define LOG_EXAMPLES 100

struct check_state {
    const struct tsock__index *idx;
    struct tsock__reader *reader;
    uint8_t *drop;
    uint64_t dropped;
};

static const char *
reason(int code)
{
    switch (code) {
    case -ENODATA: return "empty";
    case -EILSEQ: return "not an image";
    case -ENOTSUP:
        return "an image kind tsock does not decode (GIF, BMP, WebP, TIFF, 12-bit "
               "or lossless JPEG...)";
    case -EPROTO: return "corrupt or truncated image header";
    case -EFBIG: return "more pixels than the decoder's limit";
    default: return strerror(-code);
    }
}

static void
leave_out(struct check_state *st, uint64_t i, int code)
{
    st->drop[i] = 1;
    if (st->dropped++ < LOG_EXAMPLES) {
        char name[TSOCK__INDEX_MAX_PATH * 2 + 64];
        tsock__log(TSOCK_LOG_WARN, "pipeline: left out %s: %s",
                   tsock__index_describe(st->idx, i, name, sizeof name), reason(code));
    } else if (st->dropped == LOG_EXAMPLES + 1)
        tsock__log(TSOCK_LOG_WARN, "pipeline: more files left out; counting without logging");
}

/* The verdict on a header: 0 (keep), a negative code (leave out), or the number of bytes to
 * read to go on (a header longer than what was read, in a file that has more). */
static int64_t
verdict(const uint8_t *data, size_t got, int whole_file)
{
    struct tsock__image_info info;
    int r = tsock__image_probe(data, got, &info);

    if (r == -EPROTO && !whole_file && info.need > got && info.need <= MAX_HEADER_BYTES)
        return (int64_t)info.need;
    if (r != 0)
        return r;
    if ((uint64_t)info.width * (uint64_t)info.height > TSOCK__IMAGE_MAX_PIXELS)
        return -EFBIG;
    return 0;
}

/* The request for the first `want` bytes of sample i: the start of its file, or of its member
 * in a tar shard (exactly min(want, member size) bytes at the member's offset). */
static struct tsock__read_req
prefix_request(const struct tsock__index *idx, uint64_t i, uint8_t *buf, size_t want)
{
    const char *shard = tsock__index_shard_path(idx, i);
    uint32_t size = idx->entries[i].size;
    if (shard)
        return (struct tsock__read_req){.path = shard,
                                        .buf = buf,
                                        .capacity = want < size ? want : size,
                                        .range = 1,
                                        .offset = tsock__index_offset(idx, i)};
    return (struct tsock__read_req){.path = tsock__index_path(idx, i),
                                    .expected = size,
                                    .buf = buf,
                                    .capacity = want,
                                    .prefix = 1};
}

/* Whether a prefix read of `want` bytes got the whole sample. */
static int
got_whole(const struct tsock__index *idx, uint64_t i, const struct tsock__read_req *q, size_t want)
{
    return (size_t)q->result < want || (q->range && (uint64_t)q->result == idx->entries[i].size);
}

/* Re-reads one file's longer header, as much as the probe asks for, until the verdict is
 * final. */
static int
check_long_header(struct check_state *st, uint64_t i, size_t need)
{
    for (;;) {
        uint8_t *buf = malloc(need);
        if (!buf)
            return -ENOMEM;
        struct tsock__read_req q = prefix_request(st->idx, i, buf, need);
        tsock__reader_read(st->reader, &q, 1);
        int64_t v = q.result < 0 ? q.result
                                 : verdict(buf, (size_t)q.result, got_whole(st->idx, i, &q, need));
        free(buf);
        if (v <= 0) {
            if (v < 0)
                leave_out(st, i, (int)v);
            return 0;
        }
        need = (size_t)v; /* larger than before: verdict asks only for more than it had */
    }
}

int
tsock__pipeline_header_check(void *arg, const struct tsock__index *idx, uint8_t *drop)
{
    struct tsock_pipeline *pl = arg;
    struct check_state st = {.idx = idx, .drop = drop};
    size_t depth = (size_t)pl->io_depth;
    uint64_t t0 = tsock__now_ns();

    pl->from_cache = 0;
    int r = tsock__reader_create(&st.reader, pl->io_mode, (unsigned)depth, idx->root);
    if (r != 0)
        return r;
    uint8_t *bufs = malloc(depth * PREFIX_BYTES);
    struct tsock__read_req *reqs = calloc(depth, sizeof *reqs);
    if (!bufs || !reqs) {
        r = -ENOMEM;
        goto out;
    }
    for (uint64_t first = 0; first < idx->count && r == 0; first += depth) {
        if (atomic_load(&pl->cancel)) {
            r = TSOCK_E_CANCELLED; /* between two rounds of reads: at most io_depth files */
            break;
        }
        size_t n = idx->count - first < depth ? (size_t)(idx->count - first) : depth;
        for (size_t k = 0; k < n; k++)
            reqs[k] = prefix_request(idx, first + k, bufs + k * PREFIX_BYTES, PREFIX_BYTES);
        tsock__reader_read(st.reader, reqs, n);
        for (size_t k = 0; k < n && r == 0; k++) {
            int64_t v = reqs[k].result < 0
                            ? reqs[k].result
                            : verdict(reqs[k].buf, (size_t)reqs[k].result,
                                      got_whole(idx, first + k, &reqs[k], PREFIX_BYTES));
            if (v > 0)
                r = check_long_header(&st, first + k, (size_t)v);
            else if (v < 0)
                leave_out(&st, first + k, (int)v);
        }
    }
    if (r == 0)
        tsock__log(TSOCK_LOG_INFO, "pipeline: header check of %llu files in %.2f s: %llu left out",
                   (unsigned long long)idx->count, (double)(tsock__now_ns() - t0) * 1e-9,
                   (unsigned long long)st.dropped);
out:
    free(bufs);
    free(reqs);
    tsock__reader_destroy(st.reader);
    return r;
}
