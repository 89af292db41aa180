/* tsock's own Huffman decoder for sequential JPEG scans (see entropy.h for why and how it
 * plugs into libjpeg-turbo).
 *
 * The decoding follows ITU-T T.81 Annex F.2.2: a DC difference (a category, then that many
 * extra bits), then AC coefficients as (run, size) symbols, each followed by size extra bits,
 * until EOB; ZRL (run 15, size 0) skips 16 zeros. Coefficients go to the block in natural
 * order, not dequantized, as libjpeg's decoder leaves them for its IDCT.
 *
 * Where the time goes in a Huffman decoder is the per-symbol work, so:
 *  - the bits sit left-aligned in a 64-bit register, refilled 8 bytes at a time, or up to the
 *    next 0xFF (a stuffed byte or a marker), which alone goes byte by byte;
 *  - a code of up to LOOKUP_BITS bits is found with one table lookup, longer ones by comparing
 *    against each length's limit (canonical codes of one length are consecutive);
 *  - a second table gives, for the next LOOKUP_BITS bits, a whole symbol with its extra bits
 *    when they fit: an AC coefficient's run, value and length, EOB, ZRL, a DC difference. The
 *    commonest symbols cost one lookup, and two of them one refill;
 *  - MCUs decoded only to be dropped (above and beside a crop) need no coefficients, only how
 *    many bits each block takes: a third table gives, for the next SKIP_BITS bits, how many
 *    whole AC symbols they hold up to the first EOB, in how many bits and how far they move
 *    along the block, so that several symbols cost one lookup (three lookups per refill).
 * Decoding two restart intervals side by side (independent bit streams, to overlap their
 * table loads) was tried, and measured slower than one stream with two symbols per refill.
 *
 * Untrusted data: every read is bounded by the data's end; past it, and past a marker, bits
 * are fed and counted, and an MCU that used any of them fails. A restart interval must
 * end at its marker with less than a byte of padding left. Anything else a valid stream
 * cannot hold fails too (see entropy.h: the caller decodes the image again with libjpeg). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/entropy.h"
#include "image/image.h"

/* libjpeg's entropy decoder interface (struct jpeg_entropy_decoder), which jpeglib.h leaves
 * incomplete: from the installed library's own jpegint.h where there is one (Debian installs
 * it), so that the layout is the library's. Without it, libjpeg-turbo 2 and earlier have had
 * the same three members since libjpeg 6b; later versions may add members, so there tsock's
 * decoder is not used (the statistics' own_entropy stays 0). */
#if defined(__has_include) && __has_include(<jpegint.h>)
#include <jpegint.h>
#define ENTROPY_HOOK 1
#define HAVE_JPEGINT 1
#else
#define HAVE_JPEGINT 0
struct jpeg_entropy_decoder {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER < 3000000
#define ENTROPY_HOOK 1
#else
#define ENTROPY_HOOK 0
#endif
#endif

/* The per-symbol helpers work on a bit register passed by address: only when they are all
 * inlined does the register stay in machine registers (GCC leaves ac_step out of line at -O2
 * otherwise, and the decode then reads and writes the register in memory at every symbol). */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define LOOKUP_BITS 10
#define LOOKUP_SIZE (1 << LOOKUP_BITS)

/* The skip table's width: 13 bits (three lookups per refill) took the Huffman decoding of
 * dropped MCUs to 0.72 x of its time symbol by symbol on photographs, 12 bits to 0.76 x and 11
 * (two lookups per refill) to 0.82 x; 14 was no faster (tsock-bench-entropy, "entropy"). */
#define SKIP_BITS 13
#define SKIP_SIZE (1 << SKIP_BITS)

/* Zigzag position k -> natural (row-major) position in the 8 x 8 block (T.81, figure A.6). */
static const uint8_t natural_order[64] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

/* What the next LOOKUP_BITS bits hold, when it is a whole symbol with its extra bits: `length`
 * bits in all (0: not in the table). For an AC table, a coefficient of `value` after `run`
 * zeros, or EOB (run RUN_EOB) or ZRL (run 15, value 0: the zero written is no change); for a
 * DC table, the difference `value`. */
#define RUN_EOB 64
struct whole_entry {
    int16_t value;
    uint8_t run;
    uint8_t length;
};

/* One Huffman table, ready for decoding. */
struct table {
    int built;                    /* the fields below hold the table of bits/values */
    uint8_t bits[17];             /* the DHT segment's counts per code length (the cache key) */
    uint8_t values[256];          /* and its symbols */
    int count;                    /* symbols */
    uint16_t lookup[LOOKUP_SIZE]; /* next LOOKUP_BITS bits -> (length << 8) | symbol; 0: longer */
    uint32_t limit[17]; /* codes of length l, left-aligned to 16 bits, are all below limit[l] */
    int offset[17];     /* the code c of length l is values[c + offset[l]] */
    struct whole_entry whole[LOOKUP_SIZE]; /* symbols with their extra bits (struct whole_entry) */
};

/* An AC table's skip table: the next SKIP_BITS bits -> the whole symbols they begin with.
 * Making one costs about what it saves in 3 or 4 images, so it is made only for a table that a
 * second image uses: files whose encoder optimized the tables for each of them (one image
 * each) get none. They are kept by the AC table's content, SKIP_CACHE of them, the least
 * recently used making room, so that the skip tables of the tables most files share (the
 * standard ones) outlive the files with tables of their own in between. */
#define SKIP_CACHE 8

struct skip_table {
    uint8_t bits[17]; /* the AC table it is for (struct table's key) */
    uint8_t values[256];
    int count;           /* -1: holds none */
    unsigned images;     /* images that used it since it was cached, up to 2 */
    unsigned last_image; /* the decoder's image count when one last used it */
    int ready;           /* entry[] is made */
    uint16_t entry[SKIP_SIZE];
};

/* A skip-table entry: `length` bits (0: not even one whole symbol) hold AC symbols that move
 * `advance` positions along the block (a coefficient after r zeros 1 + r, ZRL 16) and then, if
 * `eob`, an EOB. Symbols are taken while their advance stays within 64, the block's length.
 * Packed as length | advance << 4 | eob << 11. */
#define SKIP_LENGTH(e) ((int)((e)&15u))
#define SKIP_ADVANCE(e) ((int)((e) >> 4 & 127u))
#define SKIP_EOB(e) ((int)((e) >> 11))
#define SKIP_ENTRY(length, advance, eob)                                                           \
    ((uint16_t)((unsigned)(length) | (unsigned)(advance) << 4 | (unsigned)(eob) << 11))

/* The bit register: `nbits` bits, left-aligned in `bits`, from the data at `p` on, which is
 * read up to `end`: the data's end, or the marker that ends the current restart interval once
 * it has been met. `fake` of the bits (the last) are fed after `end`; their values do not
 * matter, since an MCU that uses any of them fails. */
struct bitreader {
    uint64_t bits;
    int nbits, fake;
    const uint8_t *p, *end;
};

/* Where the decoder stood before one MCU: the next bit it decodes and the DC predictions, 16
 * bytes. Restoring it refills the register from that bit, so the decode resumes exactly as if
 * every MCU before it had just been decoded. `check` folds the 8 bytes around the bit's byte (4
 * before it, 4 from it), compared before a restore: a file rewritten since is not decoded from
 * the old file's positions. (The register itself, 8 bytes more, need not be kept: its bits are
 * the data's.) */
struct entry_point {
    uint32_t pos; /* the byte holding the next bit (from the scan data's start) << 3 | the bit */
    uint32_t check;
    int16_t dc_pred[MAX_COMPS_IN_SCAN]; /* within 16 bits in any sensible file (see save) */
};

/* Positions are kept in 29 bits of bytes: larger scans (512 MiB) go without entry points. */
#define POINT_MAX_BYTES ((size_t)1 << 29)

/* The grid: an entry point every ENTRY_STRIDE MCUs of a row, from its start. A decode that
 * needs columns x0 .. x1 of a row starts at most ENTRY_STRIDE - 1 MCUs left of x0, or at x0
 * itself where the file's last decode began there too (each row also keeps where the last
 * crop began in it). A stride of 4 was measured no faster (train and val within the spread
 * between rounds of tsock-bench-entry-points) for 75 % more memory. */
#define ENTRY_STRIDE 8

struct tsock__entry_points {
    /* what they were learnt from: the scan data's length and a sample of its bytes, and the
     * MCU grid; a file that differs in any has its points forgotten */
    size_t size;
    uint64_t sample;
    unsigned mcus_per_row, mcu_rows, blocks;
    unsigned per_row;       /* grid points per MCU row */
    unsigned count;         /* grid points: per_row * mcu_rows */
    unsigned known;         /* at[0 .. known-1] are recorded: always a prefix (see learn) */
    struct entry_point *at; /* the grid, then each row's crop start: count + mcu_rows */
    uint16_t *start_col;    /* per row, its crop start's column + 1; 0: none (in at's block) */
};

struct tsock__entropy {
    struct jpeg_entropy_decoder pub; /* first: libjpeg calls through cinfo->entropy */
    void (*fail)(j_decompress_ptr cinfo);
    struct bitreader br;
    const uint8_t *data_end; /* where the data ends (br.end stops at markers) */
    /* With entry points: which MCUs libjpeg uses, where the decode stands, what it learns. */
    struct tsock__entry_points *points; /* NULL: every MCU is decoded in order */
    const uint8_t *data;                /* the scan data's start (entry points count from it) */
    unsigned mcu;                       /* the MCU libjpeg asks for next */
    unsigned synced;                    /* the MCU the register stands before */
    unsigned next_learn;                /* the MCU where points->at[points->known] lies */
    unsigned use_x0, use_x1;            /* the MCU columns libjpeg runs the IDCT on */
    int jumped;                         /* an entry point was restored in this decode */
    int restarts_to_go;                 /* MCUs left in this restart interval */
    int next_restart;                   /* the RSTn expected at its end: 0..7 */
    int dc_pred[MAX_COMPS_IN_SCAN];
    int blocks; /* in an MCU, and per block its tables and component */
    const struct table *dc_of[D_MAX_BLOCKS_IN_MCU], *ac_of[D_MAX_BLOCKS_IN_MCU];
    const struct skip_table *skip_of[D_MAX_BLOCKS_IN_MCU]; /* NULL: none (yet, or not used) */
    int skipping;                                          /* some block has one */
    unsigned skipped; /* MCUs decoded and dropped through skip tables, this decode */
    unsigned images;  /* images attached so far (the skip cache's clock) */
    int comp_of[D_MAX_BLOCKS_IN_MCU];
    struct table dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS];
    struct skip_table *skip_for[NUM_HUFF_TBLS]; /* ac[n]'s, in skips[]; NULL: not looked up */
    struct skip_table skips[SKIP_CACHE];
    uint16_t narrower[SKIP_SIZE]; /* build_skip's scratch */
};

/* ---- bits ---- */

/* A mask with the top bit set in every byte of w that is 0xFF (a zero byte of ~w, found with
 * the borrow trick), zero when there is none. The borrow runs towards the first bytes in
 * memory, so a 0xFE just before a 0xFF may be flagged as well: the first flag is never after
 * the first 0xFF, and a 0xFE taken for one only goes down the byte-by-byte path. */
static uint64_t
ff_bytes(uint64_t w)
{
    uint64_t v = ~w;
    return (v - 0x0101010101010101ull) & ~v & 0x8080808080808080ull;
}

static uint64_t
load_be64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return __builtin_bswap64(w);
}

static void
push_byte(struct bitreader *br, unsigned byte)
{
    br->bits |= (uint64_t)byte << (56 - br->nbits);
    br->nbits += 8;
}

/* Byte by byte, for the bytes at a 0xFF: an FF 00 pair is one FF data byte; an FF before
 * anything else is a marker, where reading stops (`end` moves to it) and fake bits fill the
 * register. Data bytes fill it to 56 bits at most, so that a fill right after this one (a
 * restored entry point's first) still has room. Takes and returns the register by value: a
 * decoder whose register's address is never taken keeps it in machine registers, and this
 * path is rare. */
static __attribute__((noinline)) struct bitreader
refill_slow(struct bitreader br)
{
    while (br.nbits <= 48) {
        if (br.p < br.end && br.p[0] != 0xFF) {
            push_byte(&br, *br.p++);
        } else if (br.p + 1 < br.end && br.p[1] == 0x00) {
            push_byte(&br, 0xFF);
            br.p += 2;
        } else { /* a marker, or no data left */
            int zeros = (64 - br.nbits) & ~7;
            br.end = br.p;
            br.nbits += zeros;
            br.fake += zeros;
        }
    }
    return br;
}

/* At least 41 bits in the register: a code (16 bits at most) and its extra bits (15), and
 * after a symbol from the whole table (LOOKUP_BITS bits at most) room for another such pair.
 *
 * Where the next 8 bytes hold no 0xFF, they are ORed in below the register's bits without a
 * test of how many are needed: the bytes that fit are counted, and the bits of the rest,
 * beyond nbits, are the same bits a later refill ORs in again (Giesen's "variant 4"; the
 * register then holds 56 to 63 bits). Where they do, the bytes before the first 0xFF are
 * taken the same way, and only the 0xFF itself (stuffing or a marker) takes the byte-by-byte
 * path. Past `end`, fake bits are added here. */
ALWAYS_INLINE void
fill(struct bitreader *br)
{
    if (br->end - br->p >= 8) {
        uint64_t w = load_be64(br->p), ff = ff_bytes(w);
        int room = (63 - br->nbits) >> 3;
        if (ff) { /* only the bytes before it, so that what lies past nbits is still the data */
            int clean = __builtin_clzll(ff) >> 3;
            w &= clean ? ~0ull << (64 - 8 * clean) : 0;
            room = room < clean ? room : clean;
        }
        br->bits |= w >> br->nbits;
        br->p += room;
        br->nbits += 8 * room;
    }
    if (br->nbits < 41) {
        if (br->p < br->end) {
            *br = refill_slow(*br);
        } else {
            int zeros = (64 - br->nbits) & ~7;
            br->nbits += zeros;
            br->fake += zeros;
        }
    }
}

ALWAYS_INLINE unsigned
peek(const struct bitreader *br, int n)
{
    return (unsigned)(br->bits >> (64 - n));
}

ALWAYS_INLINE void
drop(struct bitreader *br, int n)
{
    br->bits <<= n;
    br->nbits -= n;
}

/* The next s (1..15) bits as a signed value (T.81, figure F.12). */
ALWAYS_INLINE int
take_signed(struct bitreader *br, int s)
{
    int v = (int)peek(br, s);
    drop(br, s);
    return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

/* The next symbol of table t, or -1 for a code the table does not hold. */
ALWAYS_INLINE int
symbol(struct bitreader *br, const struct table *t)
{
    unsigned e = t->lookup[peek(br, LOOKUP_BITS)];
    if (e) {
        drop(br, (int)(e >> 8));
        return (int)(e & 0xFF);
    }
    uint32_t c = (uint32_t)(br->bits >> 48);
    int l = LOOKUP_BITS + 1;
    while (l <= 16 && c >= t->limit[l])
        l++;
    if (l > 16)
        return -1;
    int i = (int)(c >> (16 - l)) + t->offset[l];
    if (i < 0 || i >= t->count)
        return -1;
    drop(br, l);
    return t->values[i];
}

/* ---- tables ---- */

/* The `whole` table: every LOOKUP_BITS-bit prefix that holds a symbol and its extra bits. */
static void
build_whole(struct table *t, int is_dc)
{
    for (unsigned p = 0; p < LOOKUP_SIZE; p++) {
        unsigned e = t->lookup[p];
        int len = (int)(e >> 8), sym = (int)(e & 0xFF);
        int r = is_dc ? 0 : sym >> 4, s = is_dc ? sym : sym & 15;
        struct whole_entry *w = &t->whole[p];
        w->length = 0;
        if (!e || len + s > LOOKUP_BITS)
            continue;
        w->value = 0;
        w->run = (uint8_t)(!is_dc && s == 0 && r != 15 ? RUN_EOB : r);
        w->length = (uint8_t)(len + s);
        if (s) {
            int v = (int)(p >> (LOOKUP_BITS - len - s)) & ((1 << s) - 1);
            w->value = (int16_t)(v < (1 << (s - 1)) ? v - (1 << s) + 1 : v);
        }
    }
}

/* The skip table (entries: SKIP_ENTRY), from the lookup table, for prefixes of every width w
 * up to SKIP_BITS in turn: a w-bit prefix's entry is its first symbol followed by the entry of
 * the w - l bits after it (l: the symbol's code and extra bits), already made. `narrower`
 * holds the entries of the widths below SKIP_BITS, width w from offset 2^w - 1. A code longer
 * than LOOKUP_BITS ends an entry: such symbols are rare, and the decode takes them one at a
 * time. */
static void
build_skip(struct skip_table *st, const struct table *t, uint16_t narrower[SKIP_SIZE])
{
    narrower[0] = 0; /* width 0: nothing */
    for (int w = 1; w <= SKIP_BITS; w++) {
        uint16_t *row = w < SKIP_BITS ? narrower + (1u << w) - 1 : st->entry;
        for (unsigned x = 0; x < 1u << w; x++) {
            unsigned code = w >= LOOKUP_BITS ? x >> (w - LOOKUP_BITS) : x << (LOOKUP_BITS - w);
            unsigned e = t->lookup[code];
            int l = (int)(e >> 8), r = (int)(e >> 4 & 15), size = (int)(e & 15);
            if (!e || l + size > w) {
                row[x] = 0;
                continue;
            }
            if (size == 0 && r != 15) { /* EOB */
                row[x] = SKIP_ENTRY(l, 0, 1);
                continue;
            }
            int used = l + size, advance = size ? r + 1 : 16, rest_w = w - used;
            unsigned rest = narrower[(1u << rest_w) - 1 + (x & ((1u << rest_w) - 1))];
            if (advance + SKIP_ADVANCE(rest) > 64)
                rest = 0;
            row[x] =
                SKIP_ENTRY(used + SKIP_LENGTH(rest), advance + SKIP_ADVANCE(rest), SKIP_EOB(rest));
        }
    }
    st->ready = 1;
}

/* Whether two Huffman tables are the same: their counts per code length and their symbols
 * (`count` of them in a, the DHT segment's values). */
static int
same_code(const uint8_t a_bits[17], const uint8_t *a_values, int a_count, const uint8_t b_bits[17],
          const uint8_t *b_values, int b_count)
{
    return a_count == b_count && memcmp(a_bits, b_bits, 17) == 0 &&
           memcmp(a_values, b_values, (size_t)a_count) == 0;
}

/* The canonical code of a DHT table (T.81, Annex C): codes of each length are consecutive,
 * and the first of the next length is one past the last, doubled. Returns 1 when t was (re)built,
 * 0 when it already held this table, or -1 for a table libjpeg would refuse as well (more than
 * 256 symbols, codes that overflow their length, a DC category over 15). */
static int
build_table(struct table *t, const JHUFF_TBL *h, int is_dc)
{
    int count = 0;
    for (int l = 1; l <= 16; l++)
        count += h->bits[l];
    if (count > 256)
        return -1;
    if (t->built && same_code(t->bits, t->values, t->count, h->bits, h->huffval, count))
        return 0; /* the last image's table: most files share theirs */
    t->built = 0;
    memset(t->lookup, 0, sizeof t->lookup);
    unsigned code = 0;
    int k = 0;
    for (int l = 1; l <= 16; l++) {
        t->offset[l] = k - (int)code;
        for (int i = 0; i < h->bits[l]; i++, k++, code++) {
            /* checked before the lookup is written: a code past its length's range would
             * write past the table (libjpeg refuses such tables before this runs) */
            if (code >= (1u << l) || (is_dc && h->huffval[k] > 15))
                return -1;
            if (l <= LOOKUP_BITS)
                for (unsigned f = code << (LOOKUP_BITS - l); f < (code + 1) << (LOOKUP_BITS - l);
                     f++)
                    t->lookup[f] = (uint16_t)((l << 8) | h->huffval[k]);
        }
        t->limit[l] = code << (16 - l);
        code <<= 1;
    }
    memcpy(t->bits, h->bits, sizeof t->bits);
    memcpy(t->values, h->huffval, (size_t)count);
    t->count = count;
    build_whole(t, is_dc);
    t->built = 1;
    return 1;
}

/* ---- decoding ---- */

/* A whole-table entry that ran past the block's end: EOB, ZRL up to the end (libjpeg
 * accepts both and writes nothing), or a coefficient beyond it (not valid). */
static int
past_end(struct bitreader *br, const struct whole_entry *f, int *k)
{
    if (f->run != RUN_EOB && (f->run != 15 || f->value != 0))
        return 0;
    drop(br, f->length);
    *k = 64;
    return 2;
}

/* One AC symbol of a block (T.81, figure F.13): a coefficient after its run of zeros, 16 zeros
 * (ZRL) or the end of the block (EOB, which sets *k to 64). Returns 2 when the symbol came
 * whole from the lookup (it used LOOKUP_BITS bits at most), 1 for a longer one, 0 on data a
 * valid stream cannot hold. The register holds at least 31 bits. */
ALWAYS_INLINE int
ac_step(struct bitreader *br, const struct table *ac, JCOEF *block, int *k)
{
    const struct whole_entry *f = &ac->whole[peek(br, LOOKUP_BITS)];
    if (f->length) { /* the commonest case: a whole symbol in one lookup */
        *k += f->run;
        if (*k > 63) /* EOB lands here too: it is no slower than a test of its own */
            return past_end(br, f, k);
        if (block)
            block[natural_order[*k]] = f->value;
        drop(br, f->length);
        ++*k;
        return 2;
    }
    int rs = symbol(br, ac);
    if (rs < 0)
        return 0;
    int r = rs >> 4, s = rs & 15;
    if (s) {
        *k += r;
        if (*k > 63)
            return 0;
        int v = take_signed(br, s);
        if (block)
            block[natural_order[*k]] = (JCOEF)v;
        ++*k;
    } else {
        *k = r == 15 ? *k + 16 : 64; /* ZRL, EOB */
    }
    return 1;
}

/* A block's DC coefficient: the difference to the component's last one (`pred`). */
ALWAYS_INLINE int
dc_step(struct bitreader *br, const struct table *dc, JCOEF *block, int *pred)
{
    const struct whole_entry *f = &dc->whole[peek(br, LOOKUP_BITS)];
    int diff;
    if (f->length) {
        diff = f->value;
        drop(br, f->length);
    } else {
        int s = symbol(br, dc);
        if (s < 0)
            return 0;
        diff = s ? take_signed(br, s) : 0;
    }
    /* libjpeg's sum, which wraps on corrupt data (unsigned here: no undefined overflow) */
    *pred = (int)((unsigned)*pred + (unsigned)diff);
    if (block)
        block[0] = (JCOEF)*pred;
    return 1;
}

/* A block's AC symbols from k on, up to two per refill: a symbol from the whole table leaves
 * at least 31 bits of the 41 that fill guarantees. */
ALWAYS_INLINE int
ac_symbols(struct bitreader *br, const struct table *ac, JCOEF *block, int k)
{
    while (k < 64) {
        fill(br);
        int r = ac_step(br, ac, block, &k);
        if (r == 2 && k < 64)
            r = ac_step(br, ac, block, &k);
        if (!r)
            return 0;
    }
    return 1;
}

/* The symbols of one skip-table entry, at position *k of a block: taken when they all lie in
 * the block (an EOB only while it is still open, *k < 64), as the whole table would take them
 * one by one. Returns 1 when taken, 0 when not (then the symbols go one at a time, and a run
 * past the block's end is judged there). Uses SKIP_BITS bits at most. */
ALWAYS_INLINE int
skip_step(struct bitreader *br, const struct skip_table *st, int *k)
{
    unsigned e = st->entry[peek(br, SKIP_BITS)];
    int length = SKIP_LENGTH(e), eob = SKIP_EOB(e);
    if (!length || *k + SKIP_ADVANCE(e) + eob > 64)
        return 0;
    drop(br, length);
    *k = eob ? 64 : *k + SKIP_ADVANCE(e);
    return 1;
}

/* A block's AC symbols, decoded and dropped: up to three skip-table entries per refill (each
 * uses SKIP_BITS bits at most, and fill leaves at least 41), else one symbol at a time. */
ALWAYS_INLINE int
skip_symbols(struct bitreader *br, const struct table *ac, const struct skip_table *st)
{
    int k = 1;
    while (k < 64) {
        fill(br);
        if (skip_step(br, st, &k)) {
            if (k < 64 && skip_step(br, st, &k) && k < 64)
                skip_step(br, st, &k);
        } else if (!ac_step(br, ac, NULL, &k)) {
            return 0;
        }
    }
    return 1;
}

/* One block's coefficients into `block` (zeroed by libjpeg; NULL: decoded and dropped, through
 * the skip table `st` where there is one). Returns 0 on data a valid stream cannot hold. */
ALWAYS_INLINE int
decode_block(struct bitreader *br, const struct table *dc, const struct table *ac,
             const struct skip_table *st, JCOEF *block, int *pred)
{
    fill(br);
    if (!dc_step(br, dc, block, pred))
        return 0;
    return !block && st ? skip_symbols(br, ac, st) : ac_symbols(br, ac, block, 1);
}

/* Forgets every point: the grid's and the crop starts. */
static void
forget(struct tsock__entry_points *p)
{
    p->known = 0;
    for (unsigned r = 0; r < p->mcu_rows; r++)
        p->start_col[r] = 0;
}

/* Data a valid stream cannot hold: the entry points learnt so far may be what led here (a file
 * rewritten in place that passed their checks), so they are forgotten before `fail`. */
static void
give_up(struct tsock__entropy *e, j_decompress_ptr cinfo)
{
    if (e->points)
        forget(e->points);
    e->fail(cinfo);
}

/* Moves past the RSTn marker that ends a restart interval, where libjpeg would: the
 * interval's data must be used up but for its padding (under 8 bits). */
static void
next_interval(struct tsock__entropy *e, j_decompress_ptr cinfo)
{
    struct bitreader *br = &e->br;
    const uint8_t *p = br->p;

    if (br->nbits - br->fake >= 8 || p >= e->data_end || *p != 0xFF)
        give_up(e, cinfo);
    while (p < e->data_end && *p == 0xFF) /* fill bytes may come before a marker */
        p++;
    if (p >= e->data_end || *p != JPEG_RST0 + e->next_restart)
        give_up(e, cinfo);
    br->p = p + 1;
    br->end = e->data_end;
    br->bits = 0;
    br->nbits = br->fake = 0;
    e->next_restart = (e->next_restart + 1) & 7;
    e->restarts_to_go = cinfo->restart_interval;
    memset(e->dc_pred, 0, sizeof e->dc_pred);
}

/* The MCU's blocks: `blocks` holds them, or is NULL for an MCU decoded and dropped (the
 * rows jpeg_skip_scanlines passes). Inlined twice, so that each copy knows which. */
ALWAYS_INLINE int
decode_blocks(struct tsock__entropy *e, struct bitreader *br, JBLOCKROW *blocks)
{
    for (int k = 0; k < e->blocks; k++)
        if (!decode_block(br, e->dc_of[k], e->ac_of[k], e->skip_of[k], blocks ? blocks[k][0] : NULL,
                          &e->dc_pred[e->comp_of[k]]))
            return 0;
    return 1;
}

/* Decodes the MCU the register stands before into `mcu` (NULL: decoded and dropped). */
static void
decode_one(struct tsock__entropy *e, j_decompress_ptr cinfo, JBLOCKROW *mcu)
{
    struct bitreader br = e->br; /* a local copy stays in registers */
    if (!(mcu ? decode_blocks(e, &br, mcu) : decode_blocks(e, &br, NULL)))
        give_up(e, cinfo);
    if (br.nbits < br.fake) /* the MCU used bits that are not in the data */
        give_up(e, cinfo);
    e->br = br;
    e->skipped += !mcu && e->skipping;
}

/* ---- entry points ---- */

/* The MCU where grid point s lies. */
static unsigned
point_mcu(const struct tsock__entry_points *p, unsigned s)
{
    return s / p->per_row * p->mcus_per_row + s % p->per_row * ENTRY_STRIDE;
}

/* The first MCU past the grid points known: restoring a point beyond it would leave the
 * grid's prefix unable to grow, so crop starts there are not used. */
static unsigned
known_end(const struct tsock__entry_points *p)
{
    return p->known < p->count ? point_mcu(p, p->known) : UINT_MAX;
}

/* A point's check: the 8 bytes from 4 before `offset`, folded to 32 bits; 0 where they are not
 * all in the data. */
static uint32_t
around(const struct tsock__entropy *e, size_t offset)
{
    if (offset < 4 || (size_t)(e->data_end - e->data) - offset < 4)
        return 0;
    uint64_t w = load_be64(e->data + offset - 4);
    return (uint32_t)(w ^ (w >> 32));
}

/* Records where the register stands into `a`. Returns 0, recording nothing, where it cannot
 * be: once the register has met a marker (the scan's end is near, and fake bits may be in
 * it), or where a DC prediction has left 16 bits (libjpeg keeps them in an int; an 8-bit JPEG
 * whose DC values do is valid Huffman data but no picture, and is decoded from its start). */
static int
save(const struct tsock__entropy *e, struct entry_point *a)
{
    if (e->br.fake != 0 || e->br.end != e->data_end)
        return 0;
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++)
        if (e->dc_pred[c] < INT16_MIN || e->dc_pred[c] > INT16_MAX)
            return 0;
    /* The register's nbits bits are the data's last bits before br.p: back over them, a byte
     * at a time (an FF 00 pair is one FF data byte; a 00 after anything else is data), to the
     * byte holding the next bit. */
    const uint8_t *q = e->br.p;
    int n = e->br.nbits;
    for (; n > 0; n -= 8)
        if (*--q == 0x00 && q > e->data && q[-1] == 0xFF)
            q--;
    size_t offset = (size_t)(q - e->data);
    a->pos = (uint32_t)(offset << 3 | (unsigned)-n);
    a->check = around(e, offset);
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++)
        a->dc_pred[c] = (int16_t)e->dc_pred[c];
    return 1;
}

/* Records the grid point the register stands at, when it is the next one to learn. Grid points
 * are learnt only in order, each from a decode that reached it from an earlier one, so the
 * known ones are always a prefix: a decode that jumps to one can reach every later MCU. */
static void
learn(struct tsock__entropy *e)
{
    struct tsock__entry_points *p = e->points;

    if (e->synced != e->next_learn)
        return;
    if (!save(e, &p->at[p->known])) {
        e->next_learn = UINT_MAX;
        return;
    }
    p->known++;
    e->next_learn = known_end(p);
}

/* Moves the decode to point `a` at MCU m, once the bytes before it are seen to be those it
 * was learnt from; otherwise every point is forgotten and the decode stays where it is. */
static void
restore(struct tsock__entropy *e, const struct entry_point *a, unsigned m)
{
    size_t offset = a->pos >> 3;
    if (offset > (size_t)(e->data_end - e->data) || around(e, offset) != a->check) {
        forget(e->points);
        e->next_learn = UINT_MAX;
        return;
    }
    e->br.bits = 0;
    e->br.nbits = e->br.fake = 0;
    e->br.p = e->data + offset;
    e->br.end = e->data_end;
    fill(&e->br);
    drop(&e->br, (int)(a->pos & 7));
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++)
        e->dc_pred[c] = a->dc_pred[c];
    e->synced = m;
    e->jumped = 1;
}

/* Brings the register to MCU m: from the last point at or before m (a grid point, or where
 * the last crop began in m's row) when that is ahead of where the register stands, then
 * decoding and dropping the MCUs in between. Where m itself is not a grid point, the state
 * there is kept as the row's crop start: the val preset's crop is the same every epoch, so its
 * next decode starts exactly there. */
static void
catch_up(struct tsock__entropy *e, j_decompress_ptr cinfo, unsigned m)
{
    struct tsock__entry_points *p = e->points;
    unsigned r = m / p->mcus_per_row, c = m % p->mcus_per_row, best = e->synced;
    const struct entry_point *from = NULL;
    unsigned start_col = p->start_col[r];

    if (p->known > 0) {
        unsigned s = r * p->per_row + c / ENTRY_STRIDE;
        if (s >= p->known)
            s = p->known - 1;
        if (point_mcu(p, s) > best) {
            best = point_mcu(p, s);
            from = &p->at[s];
        }
    }
    if (start_col && start_col - 1u <= c) {
        unsigned at = r * p->mcus_per_row + start_col - 1u;
        if (at > best && at < known_end(p)) {
            best = at;
            from = &p->at[p->count + r];
        }
    }
    if (from)
        restore(e, from, best);
    for (; e->synced < m; e->synced++) {
        learn(e);
        decode_one(e, cinfo, NULL);
    }
    if (c % ENTRY_STRIDE != 0)
        p->start_col[r] = save(e, &p->at[p->count + r]) ? (uint16_t)(c + 1) : 0;
}

/* decode_mcu with entry points: only the MCUs whose coefficients libjpeg uses are decoded,
 * not those jpeg_skip_scanlines passes (NULL) nor those outside jpeg_crop_scanline's columns
 * (libjpeg runs no IDCT on them; it has zeroed their buffer). */
static void
decode_used(struct tsock__entropy *e, j_decompress_ptr cinfo, JBLOCKROW *mcu)
{
    unsigned m = e->mcu++, c = m % e->points->mcus_per_row;

    if (!mcu || c < e->use_x0 || c >= e->use_x1)
        return;
    if (e->synced != m)
        catch_up(e, cinfo, m);
    learn(e);
    decode_one(e, cinfo, mcu);
    e->synced++;
}

static boolean
decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *mcu)
{
    struct tsock__entropy *e = (struct tsock__entropy *)cinfo->entropy;

    if (e->points) {
        decode_used(e, cinfo, mcu);
        return TRUE;
    }
    if (cinfo->restart_interval) {
        if (e->restarts_to_go == 0)
            next_interval(e, cinfo);
        e->restarts_to_go--;
    }
    decode_one(e, cinfo, mcu);
    return TRUE;
}

/* libjpeg calls start_pass at the start of each scan; the decoder is attached to a file of one
 * scan after it began, so a call means something this decoder does not handle. */
static void
start_pass(j_decompress_ptr cinfo)
{
    struct tsock__entropy *e = (struct tsock__entropy *)cinfo->entropy;
    give_up(e, cinfo);
}

struct tsock__entropy *
tsock__entropy_create(void)
{
    struct tsock__entropy *e = calloc(1, sizeof *e);
    if (e)
        for (int i = 0; i < SKIP_CACHE; i++)
            e->skips[i].count = -1;
    return e;
}

void
tsock__entropy_destroy(struct tsock__entropy *e)
{
    free(e);
}

/* Whether the scan is a single sequential Huffman scan of every component. */
static int
scan_supported(j_decompress_ptr cinfo)
{
    return !cinfo->progressive_mode && !cinfo->arith_code && cinfo->data_precision == 8 &&
           !jpeg_has_multiple_scans(cinfo) && cinfo->comps_in_scan == cinfo->num_components &&
           cinfo->blocks_in_MCU > 0 && cinfo->blocks_in_MCU <= D_MAX_BLOCKS_IN_MCU &&
           cinfo->Ss == 0 && cinfo->Se == DCTSIZE2 - 1 && cinfo->Ah == 0 && cinfo->Al == 0 &&
           cinfo->unread_marker == 0 && cinfo->src && cinfo->src->next_input_byte;
}

/* The cached skip table for AC table n (just built), or the least recently used one made
 * room for it (no image being attached uses that one: it holds at most 4 AC tables). */
static struct skip_table *
find_skip(struct tsock__entropy *e, int n)
{
    const struct table *t = &e->ac[n];
    struct skip_table *lru = &e->skips[0];
    for (int i = 0; i < SKIP_CACHE; i++) {
        struct skip_table *st = &e->skips[i];
        if (same_code(st->bits, st->values, st->count, t->bits, t->values, t->count))
            return st;
        if (st->last_image < lru->last_image)
            lru = st;
    }
    for (int m = 0; m < NUM_HUFF_TBLS; m++) /* it was some other table's */
        if (e->skip_for[m] == lru)
            e->skip_for[m] = NULL;
    memcpy(lru->bits, t->bits, sizeof lru->bits);
    memcpy(lru->values, t->values, (size_t)t->count);
    lru->count = t->count;
    lru->images = 0;
    lru->ready = 0;
    return lru;
}

/* One more image uses AC table n: its skip table is made at the second. */
static void
count_image(struct tsock__entropy *e, int n)
{
    if (!e->skip_for[n])
        e->skip_for[n] = find_skip(e, n);
    struct skip_table *st = e->skip_for[n];
    if (st->last_image == e->images) /* another of this image's slots holds the same table */
        return;
    st->last_image = e->images;
    if (!st->ready && ++st->images >= 2)
        build_skip(st, &e->ac[n], e->narrower);
}

/* The tables of each block of an MCU, and their skip tables where they are made and
 * `use_skip`. Returns 0, or -1 when one is missing or invalid. */
static int
map_blocks(struct tsock__entropy *e, j_decompress_ptr cinfo, int use_skip)
{
    unsigned ac_used = 0; /* a bit per AC table this image uses */
    int ac_no[D_MAX_BLOCKS_IN_MCU];

    e->blocks = cinfo->blocks_in_MCU;
    for (int b = 0; b < e->blocks; b++) {
        int ci = cinfo->MCU_membership[b];
        if (ci < 0 || ci >= cinfo->comps_in_scan)
            return -1;
        const jpeg_component_info *c = cinfo->cur_comp_info[ci];
        int dn = c->dc_tbl_no, an = c->ac_tbl_no;
        if (dn < 0 || dn >= NUM_HUFF_TBLS || an < 0 || an >= NUM_HUFF_TBLS ||
            !cinfo->dc_huff_tbl_ptrs[dn] || !cinfo->ac_huff_tbl_ptrs[an] ||
            build_table(&e->dc[dn], cinfo->dc_huff_tbl_ptrs[dn], 1) < 0)
            return -1;
        int built = build_table(&e->ac[an], cinfo->ac_huff_tbl_ptrs[an], 0);
        if (built < 0)
            return -1;
        if (built) /* another table in this slot: its skip table is looked up anew */
            e->skip_for[an] = NULL;
        ac_used |= 1u << an;
        ac_no[b] = an;
        e->dc_of[b] = &e->dc[dn];
        e->ac_of[b] = &e->ac[an];
        e->comp_of[b] = ci;
    }
    e->images++;
    for (int n = 0; n < NUM_HUFF_TBLS; n++)
        if (ac_used >> n & 1)
            count_image(e, n);
    e->skipping = 0;
    for (int b = 0; b < e->blocks; b++) {
        const struct skip_table *st = e->skip_for[ac_no[b]];
        e->skip_of[b] = use_skip && st->ready ? st : NULL;
        e->skipping |= e->skip_of[b] != NULL;
    }
    return 0;
}

struct tsock__entry_points *
tsock__entry_points_create(void)
{
    return calloc(1, sizeof(struct tsock__entry_points));
}

void
tsock__entry_points_destroy(struct tsock__entry_points *p)
{
    if (p)
        free(p->at);
    free(p);
}

size_t
tsock__entry_points_bytes(const struct tsock__entry_points *p)
{
    return sizeof *p + ((size_t)p->count + p->mcu_rows) * sizeof(struct entry_point) +
           (size_t)p->mcu_rows * sizeof *p->start_col;
}

/* A cheap fingerprint of the scan data: its first and last bytes (FNV-1a). With the length,
 * the grid and the bytes checked before each restore, it tells a rewritten file apart. */
static uint64_t
sample_bytes(const uint8_t *data, size_t size)
{
    size_t head = size < 32 ? size : 32, tail = size < 16 ? size : 16;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < head; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    for (size_t i = size - tail; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

/* Makes `p` the entry points of this decode: kept when learnt from the same data and grid,
 * else forgotten and made room for anew. Without the room (out of memory), or for a scan too
 * large to count its MCUs in 32 bits or its bytes in 29, the decode runs in order without
 * them. */
static void
use_points(struct tsock__entropy *e, j_decompress_ptr cinfo, struct tsock__entry_points *p)
{
    size_t size = (size_t)(e->data_end - e->data);
    uint64_t sample = sample_bytes(e->data, size);
    unsigned mpr = cinfo->MCUs_per_row, rows = cinfo->MCU_rows_in_scan;
    unsigned per_row = (mpr + ENTRY_STRIDE - 1) / ENTRY_STRIDE;

    if (size >= POINT_MAX_BYTES || mpr == 0 || mpr > UINT16_MAX - 1 || rows == 0 ||
        (uint64_t)mpr * rows >= UINT_MAX)
        return;
    if (p->size != size || p->sample != sample || p->mcus_per_row != mpr || p->mcu_rows != rows ||
        p->blocks != (unsigned)e->blocks) {
        unsigned count = per_row * rows;
        if (count != p->count || rows != p->mcu_rows) {
            free(p->at);
            p->count = p->mcu_rows = 0;
            /* one block: the points, then the rows' crop start columns */
            if (!(p->at = malloc(((size_t)count + rows) * sizeof *p->at +
                                 (size_t)rows * sizeof *p->start_col)))
                return;
            p->start_col = (uint16_t *)(void *)(p->at + count + rows);
            p->count = count;
            p->mcu_rows = rows;
        }
        p->size = size;
        p->sample = sample;
        p->mcus_per_row = mpr;
        p->blocks = (unsigned)e->blocks;
        p->per_row = per_row;
        forget(p);
    }
    e->points = p;
    e->mcu = e->synced = 0;
    e->next_learn = known_end(p);
#if HAVE_JPEGINT
    e->use_x0 = cinfo->master->first_iMCU_col;
    e->use_x1 = cinfo->master->last_iMCU_col + 1;
#else /* the crop's columns are in a struct whose layout only jpegint.h gives: all of them */
    e->use_x0 = 0;
    e->use_x1 = UINT_MAX;
#endif
}

int
tsock__entropy_jumped(const struct tsock__entropy *e)
{
    return e->jumped;
}

unsigned
tsock__entropy_skipped(const struct tsock__entropy *e)
{
    return e->skipped;
}

int
tsock__entropy_attach(struct tsock__entropy *e, j_decompress_ptr cinfo,
                      void (*fail)(j_decompress_ptr cinfo), struct tsock__entry_points *points,
                      int skip_table)
{
    if (!ENTROPY_HOOK || !scan_supported(cinfo) || map_blocks(e, cinfo, skip_table) != 0)
        return 0;
    e->fail = fail;
    e->br.bits = 0;
    e->br.nbits = e->br.fake = 0;
    e->br.p = cinfo->src->next_input_byte;
    e->br.end = e->data_end = e->br.p + cinfo->src->bytes_in_buffer;
    e->restarts_to_go = (int)cinfo->restart_interval;
    e->next_restart = 0;
    memset(e->dc_pred, 0, sizeof e->dc_pred);
    e->points = NULL;
    e->data = e->br.p;
    e->jumped = 0;
    e->skipped = 0;
    if (points && !cinfo->restart_interval)
        use_points(e, cinfo, points);
    e->pub.start_pass = start_pass;
    e->pub.decode_mcu = decode_mcu;
    e->pub.insufficient_data = FALSE;
    cinfo->entropy = &e->pub;
    return 1;
}
