/* The GPU conversion's arithmetic, checked on the CPU through its C reference (libtsock/image/
 * convert.c), which runs the very element function the CUDA kernel runs: float16 rounding
 * against the compiler's own _Float16 conversion, normalisation against a double-precision
 * formula, NCHW placement, the published layout, and the setters' and planner's refusals. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/convert.h"
#include "check.h"
#include "core/layout.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define H 4
#define W 5
#define C 3
#define BATCH 3

static uint64_t rng_state = 0x2545F4914F6CDD1Du;

static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#ifdef __FLT16_MAX__ /* used only where the compiler has _Float16 */
static float
float_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#endif

static void
test_half_known_values(void)
{
    static const struct {
        float in;
        uint16_t out;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {0.5f, 0x3800},
        {65504.0f, 0x7BFF},
        {65520.0f, 0x7C00}, /* ties up to inf */
        {65519.0f, 0x7BFF},
        {1e9f, 0x7C00},
        {-1e9f, 0xFC00},
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {0x1p-25f, 0x0000}, /* tie between 0 and it: to even, 0 */
        {0x1.8p-25f, 0x0001},
        {0x1p-14f, 0x0400},        /* smallest normal */
        {0x1.ffcp-15f, 0x0400},    /* rounds up into the normals */
        {1.0f + 0x1p-11f, 0x3C00}, /* tie, even stays */
        {1.0f + 0x3p-11f, 0x3C02}, /* tie, odd goes up */
        {0.1f, 0x2E66},
        {1.0f / 3.0f, 0x3555},
        {-2.1179039f, 0xC03C},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = tsock__half_from_float(cases[i].in);
        if (got != cases[i].out)
            fprintf(stderr, "half(%a) = %#06x, want %#06x\n", (double)cases[i].in, got,
                    cases[i].out);
        CHECK_EQ(got, cases[i].out);
    }
    CHECK_EQ(tsock__half_from_float(INFINITY), 0x7C00);
    CHECK_EQ(tsock__half_from_float(-INFINITY), 0xFC00);
    uint16_t nan = tsock__half_from_float(NAN);
    CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x03FF) != 0);
}

/* Against the compiler's float -> _Float16 conversion (round to nearest even) on random bit
 * patterns and on every float that a uint8 can normalise to near the half range's edges. */
static void
test_half_against_compiler(void)
{
#ifdef __FLT16_MAX__
    long mismatches = 0;
    for (long i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)rnd();
        float f = float_from_bits(bits);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        mismatches += tsock__half_from_float(f) != want;
    }
    for (uint32_t bits = 0x33000000u; bits < 0x33800000u; bits += 97) { /* around 2^-25 */
        float f = float_from_bits(bits);
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        mismatches += tsock__half_from_float(f) != want;
    }
    CHECK_EQ(mismatches, 0);
#else
    printf("no _Float16 in this compiler: the comparison with it is left out\n");
#endif
}

static tsock_layout *
image_layout(void)
{
    tsock_layout *l;
    int64_t hwc[3] = {H, W, C};
    CHECK_EQ(tsock_layout_create(&l), 0);
    CHECK_EQ(tsock_layout_add(l, "image", TSOCK_UINT8, 3, hwc), 0);
    CHECK_EQ(tsock_layout_add(l, "label", TSOCK_INT64, 0, NULL), 1);
    return l;
}

static struct tsock__convert_request
request(int dtype, int nchw, int normalize)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    struct tsock__convert_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.tensor, "image");
    r.dtype = dtype;
    r.channels_first = nchw;
    r.normalize = normalize;
    r.channels = 3;
    memcpy(r.mean, mean, sizeof mean);
    memcpy(r.std, std, sizeof std);
    return r;
}

static void
test_plan_layout(void)
{
    tsock_layout *in = image_layout(), out;
    size_t offsets[TSOCK_MAX_TENSORS], stride;
    struct tsock__convert_plan cv;
    struct tsock__convert_request r = request(TSOCK_FLOAT16, 1, 1);

    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), 0);
    CHECK_EQ(out.count, 2);
    CHECK_EQ(out.tensors[0].dtype, TSOCK_FLOAT16);
    CHECK_EQ(out.tensors[0].sample_shape[0], C);
    CHECK_EQ(out.tensors[0].sample_shape[1], H);
    CHECK_EQ(out.tensors[0].sample_shape[2], W);
    CHECK_EQ(out.tensors[0].sample_bytes, H * W * C * 2);
    CHECK_EQ(out.tensors[1].dtype, TSOCK_INT64);
    CHECK_EQ(offsets[0], 0);
    CHECK_EQ(offsets[1], 384); /* 3 x 120 bytes, rounded up to 64 */
    CHECK_EQ(stride, 4096);
    CHECK_EQ(cv.tensor, 0);
    CHECK_EQ(cv.in_offset[1], 192); /* 3 x 60 uint8 bytes, rounded up to 64 */
    CHECK_EQ(cv.out_offset[1], 384);

    /* Normalising without a dtype means float32; NHWC keeps the shape. */
    r = request(0, 0, 1);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), 0);
    CHECK_EQ(out.tensors[0].dtype, TSOCK_FLOAT32);
    CHECK_EQ(out.tensors[0].sample_shape[0], H);
    CHECK_EQ(out.tensors[0].sample_shape[2], C);

    /* No request: the plan copies every tensor as it is. */
    memset(&r, 0, sizeof r);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), 0);
    CHECK_EQ(cv.tensor, -1);
    CHECK(memcmp(&out, in, sizeof out) == 0);

    /* Refusals: unknown tensor, a tensor that is not uint8 [H, W, C], uint8 normalised, a
     * mean/std count that is not the channel count. */
    r = request(TSOCK_FLOAT32, 0, 0);
    strcpy(r.tensor, "pixels");
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), -EINVAL);
    strcpy(r.tensor, "label");
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), -EINVAL);
    r = request(TSOCK_UINT8, 0, 1);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), -EINVAL);
    r = request(TSOCK_FLOAT32, 0, 1);
    r.channels = 1;
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), -EINVAL);
    r = request(TSOCK_INT32, 0, 0);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), -EINVAL);
    tsock_layout_destroy(in);
}

/* Fills a staging slot with random pixels and labels; returns the plan's output slot. */
static void
fill_staging(const struct tsock__convert_plan *cv, uint8_t *slot)
{
    for (size_t i = 0; i < (size_t)BATCH * H * W * C; i++)
        slot[cv->in_offset[0] + i] = (uint8_t)rnd();
    for (int s = 0; s < BATCH; s++) {
        int64_t label = (int64_t)(rnd() % 1000);
        memcpy(slot + cv->in_offset[1] + 8 * (size_t)s, &label, 8);
    }
}

static float
load_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* float32, NCHW, ImageNet normalisation: every element against (x / 255 - mean) / std in
 * double, the labels copied, the layout permuted. */
static void
test_reference_float32(void)
{
    static const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
    tsock_layout *in = image_layout(), out;
    size_t offsets[TSOCK_MAX_TENSORS], stride;
    struct tsock__convert_plan cv;
    struct tsock__convert_request r = request(TSOCK_FLOAT32, 1, 1);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv), 0);
    uint8_t *src = calloc(1, 4096), *dst = calloc(1, stride);
    fill_staging(&cv, src);
    tsock__convert_ref(&cv, src, dst, BATCH);
    double worst = 0;
    for (int s = 0; s < BATCH; s++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    uint8_t v = src[cv.in_offset[0] + (size_t)s * H * W * C + (y * W + x) * C + c];
                    double want = (v / 255.0 - mean[c]) / std[c];
                    float got = load_f32(dst + offsets[0] + (size_t)s * H * W * C * 4 +
                                         ((size_t)(c * H + y) * W + x) * 4);
                    double err = fabs(got - want);
                    worst = err > worst ? err : worst;
                }
    /* One float rounding of the coefficients and one of the fused result: a few ulps. */
    CHECK(worst < 2e-6);
    CHECK(memcmp(dst + offsets[1], src + cv.in_offset[1], 8 * BATCH) == 0);
    free(src);
    free(dst);
    tsock_layout_destroy(in);
}

/* float16 NHWC is the float32 result rounded once more; uint8 NCHW is a pure permutation; plain
 * float32 is x / 255. */
static void
test_reference_other_outputs(void)
{
    tsock_layout *in = image_layout(), out;
    size_t offsets[TSOCK_MAX_TENSORS], stride;
    struct tsock__convert_plan cv32, cv16, cvu8, cvplain;
    struct tsock__convert_request r = request(TSOCK_FLOAT32, 0, 1);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv32), 0);
    r = request(TSOCK_FLOAT16, 0, 1);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cv16), 0);
    r = request(TSOCK_UINT8, 1, 0);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cvu8), 0);
    r = request(TSOCK_FLOAT32, 0, 0);
    CHECK_EQ(tsock__convert_plan_make(&r, in, BATCH, &out, offsets, &stride, &cvplain), 0);
    uint8_t *src = calloc(1, 4096), *d32 = calloc(1, 8192), *d16 = calloc(1, 8192),
            *du8 = calloc(1, 8192), *dplain = calloc(1, 8192);
    fill_staging(&cv32, src);
    tsock__convert_ref(&cv32, src, d32, BATCH);
    tsock__convert_ref(&cv16, src, d16, BATCH);
    tsock__convert_ref(&cvu8, src, du8, BATCH);
    tsock__convert_ref(&cvplain, src, dplain, BATCH);
    int bad16 = 0, badu8 = 0, badplain = 0;
    for (size_t i = 0; i < (size_t)BATCH * H * W * C; i++) {
        uint16_t h;
        memcpy(&h, d16 + cv16.out_offset[0] + 2 * i, 2);
        bad16 += h != tsock__half_from_float(load_f32(d32 + cv32.out_offset[0] + 4 * i));
        badplain += load_f32(dplain + 4 * i) != fmaf((float)src[i], (float)(1.0 / 255.0), 0.0f);
    }
    for (int s = 0; s < BATCH; s++)
        for (int i = 0; i < H * W; i++)
            for (int c = 0; c < C; c++)
                badu8 += du8[(size_t)s * H * W * C + (size_t)c * H * W + i] !=
                         src[(size_t)s * H * W * C + (size_t)i * C + c];
    CHECK_EQ(bad16, 0);
    CHECK_EQ(badu8, 0);
    CHECK_EQ(badplain, 0);
    CHECK_EQ(load_f32(dplain), (float)src[0] / 255.0f);
    free(src);
    free(d32);
    free(d16);
    free(du8);
    free(dplain);
    tsock_layout_destroy(in);
}

/* The public setters' argument checks, and a conversion asked of a host ring. */
static void
test_setters(void)
{
    tsock_layout *l = image_layout();
    tsock_producer *p;
    char dir[128], endpoint[256];
    test_scratch_dir(dir, sizeof dir, "convert");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/p.sock", dir);
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, BATCH, 2), 0);
    static const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
    static const float zero_std[3] = {0.25f, 0.0f, 0.25f}, nan_mean[3] = {0.5f, NAN, 0.5f};
    CHECK_EQ(tsock_producer_set_output(p, NULL, TSOCK_INT32, TSOCK_NCHW), -EINVAL);
    CHECK_EQ(tsock_producer_set_output(p, NULL, TSOCK_FLOAT32, 2), -EINVAL);
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 3, mean, NULL), -EINVAL);
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 3, mean, zero_std), -EINVAL);
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 3, nan_mean, std), -EINVAL);
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 5, mean, std), -EINVAL);
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 1, NULL, NULL), -EINVAL);
    CHECK_EQ(tsock_producer_set_output(p, "image", TSOCK_FLOAT16, TSOCK_NCHW), 0);
    CHECK_EQ(tsock_producer_set_normalize(p, "label", 3, mean, std), -EINVAL); /* another */
    CHECK_EQ(tsock_producer_set_normalize(p, NULL, 0, NULL, NULL), 0);         /* ImageNet's */
    CHECK_EQ(tsock_producer_set_device(p, -2), -EINVAL);
    tsock_producer_destroy(p);
    tsock_layout_destroy(l);
}

/* A host ring converts once at publish (no GPU): a consumer reads exactly the bytes the C
 * reference gives for what the producer wrote, in every output the GPU offers. Before, start
 * refused the conversion on a host ring (-ENOTSUP). */
static void
host_ring_case(int dtype, int nchw, int normalize)
{
    tsock_layout *l = image_layout();
    struct tsock__convert_request req = request(dtype, nchw, normalize);
    tsock_layout plan_out;
    size_t out_offsets[TSOCK_MAX_TENSORS], out_stride;
    struct tsock__convert_plan cv;
    CHECK_EQ(tsock__convert_plan_make(&req, l, BATCH, &plan_out, out_offsets, &out_stride, &cv), 0);

    char dir[128], endpoint[256];
    test_scratch_dir(dir, sizeof dir, "convert");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/host.sock", dir);
    tsock_producer *p;
    CHECK_EQ(tsock_producer_create(&p, endpoint, l, BATCH, 2), 0);
    CHECK_EQ(tsock_producer_set_output(p, NULL, dtype ? dtype : TSOCK_UINT8,
                                       nchw ? TSOCK_NCHW : TSOCK_NHWC),
             0);
    if (normalize)
        CHECK_EQ(tsock_producer_set_normalize(p, NULL, req.channels, req.mean, req.std), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    tsock_consumer *c;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 5000), 1);

    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 5000, &slot), 0);
    uint8_t *staging = tsock_slot_data(slot, 0); /* uint8 NHWC, where the caller writes */
    uint8_t *input = malloc(cv.in_offset[1] + 8 * BATCH);
    fill_staging(&cv, input);
    memcpy(staging, input + cv.in_offset[0], (size_t)BATCH * H * W * C);
    memcpy(tsock_slot_data(slot, 1), input + cv.in_offset[1], 8 * BATCH);
    CHECK_EQ(tsock_producer_publish(p, slot, BATCH), 0);

    uint8_t *expect = calloc(1, out_stride);
    tsock__convert_ref(&cv, input, expect, BATCH);
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), 0);
    CHECK_EQ(tsock_batch_tensor_dtype(b, 0), plan_out.tensors[0].dtype);
    size_t bytes = cv.out_sample_bytes[0] * BATCH;
    CHECK_EQ(memcmp(tsock_batch_tensor_data(b, 0), expect + cv.out_offset[0], bytes), 0);
    CHECK_EQ(memcmp(tsock_batch_tensor_data(b, 1), expect + cv.out_offset[1], 8 * BATCH), 0);
    tsock_consumer_release(c, b);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
    free(expect);
    free(input);
    tsock_layout_destroy(l);
}

static void
test_host_ring(void)
{
    host_ring_case(TSOCK_FLOAT32, 1, 1);
    host_ring_case(TSOCK_FLOAT16, 1, 1);
    host_ring_case(TSOCK_FLOAT32, 0, 0);
    host_ring_case(TSOCK_UINT8, 1, 0);
}

int
main(void)
{
    test_half_known_values();
    test_half_against_compiler();
    test_plan_layout();
    test_reference_float32();
    test_reference_other_outputs();
    test_setters();
    test_host_ring();
    return CHECK_DONE();
}
