/* test_same_bytes.c - the pixel kernels give the same bytes on every CPU
 * that rounds alike. Each case (a kernel, its arguments and a fixed image:
 * the colour ops, blurs, warps, the policies' sub-ops, Pillow's ops, the
 * resampler into every dtype, the Dirichlet weights, whole JPEG samples
 * through decode, crop and store) is run at every SIMD
 * level this machine has and reduced to a 64-bit digest, keyed by the case
 * and by how it rounds: "exact" for integer work and for float work that
 * rounds every step (the same everywhere), "fused" or "plain" for the
 * steps that torch fuses on some CPUs (rl_color_fused(), rl_warp_fused():
 * fused at the AVX2 level and, for the colour ops, on aarch64; plain
 * below). A key met twice must give one digest.
 *
 *   test_same_bytes                 that, on this machine
 *   test_same_bytes --write FILE    and writes the digests to FILE
 *   test_same_bytes --against FILE  and checks each key against FILE's
 *
 * make check-aarch64 writes FILE with the native build (x86-64: c, sse2
 * and avx2, so both roundings) and checks the aarch64 builds (gcc's and
 * clang's) against it under qemu-user: a key FILE lacks (a rounding the
 * reference machine cannot run) fails too, as does any byte that differs.
 * Every differing case is listed before the test fails. On aarch64 the
 * colour ops must fuse (README). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "augment/kernels.h"
#include "check.h"
#include "core/sample.h"
#include "jpegmake.h"
#include "place/place.h"
#include "rng.h"
#include "simd.h"

enum { W = 61, H = 47, MAXCASES = 512, KEYLEN = 96 };
enum { EXACT, COLOR, WARP }; /* what a case's rounding depends on */

typedef struct entry {
    char key[KEYLEN];
    uint64_t digest;
} entry;

static entry seen[MAXCASES], ref[MAXCASES];
static int nseen, nref, differ;
static const char *level_name = "c";

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

static entry *find(entry *t, int n, const char *key)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(t[i].key, key) == 0) {
            return &t[i];
        }
    }
    return NULL;
}

/* Records a case's digest: the same as any earlier one of its key, and as
 * the reference's when there is one. */
static void record(const char *name, int dep, uint64_t digest)
{
    const char *how = dep == COLOR  ? (rl_color_fused() ? "fused" : "plain")
                      : dep == WARP ? (rl_warp_fused() ? "fused" : "plain")
                                    : "exact";
    char key[KEYLEN];
    snprintf(key, sizeof(key), "%s/%s", name, how);
    entry *e = find(seen, nseen, key);
    if (e == NULL) {
        CHECK(nseen < MAXCASES);
        e = &seen[nseen++];
        snprintf(e->key, sizeof(e->key), "%s", key);
        e->digest = digest;
    } else if (e->digest != digest) {
        fprintf(stderr, "%s: %016llx at %s, %016llx at a lower level\n", key,
                (unsigned long long)digest, level_name,
                (unsigned long long)e->digest);
        differ++;
    }
    rl_test_checks++;
    if (nref > 0) {
        entry *r = find(ref, nref, key);
        if (r == NULL) {
            fprintf(stderr, "%s: not in the reference\n", key);
            differ++;
        } else if (r->digest != digest) {
            fprintf(stderr, "%s: %016llx here (%s), %016llx in the reference\n",
                    key, (unsigned long long)digest, level_name,
                    (unsigned long long)r->digest);
            differ++;
        }
    }
}

/* The test image: gradients, a checkerboard and noise, so that every value
 * and every rounding case is met somewhere. */
static uint8_t base[H][W][3];

static void make_base(void)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++) {
            for (int c = 0; c < 3; c++) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                int v = (x * 255 / (W - 1)) * (c != 1) +
                        (y * 255 / (H - 1)) * (c != 0) +
                        (((x / 4 + y / 4) & 1) ? 40 : 0) + (int)(s % 61) - 30;
                base[y][x][c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

/* The working copy a kernel runs on (rows padded: stride > w * 3). */
enum { STRIDE = W * 3 + 5 };
static uint8_t work[H * STRIDE];

static rl_image fresh(void)
{
    memset(work, 0x5A, sizeof(work));
    for (int y = 0; y < H; y++) {
        memcpy(work + (size_t)y * STRIDE, base[y], (size_t)W * 3);
    }
    return (rl_image){work, W, H, STRIDE};
}

static uint64_t digest_of(const rl_image *im)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int y = 0; y < im->h; y++) {
        h = fnv(im->data + (size_t)y * im->stride, (size_t)im->w * 3, h);
    }
    return h;
}

/* name: kernel call on a fresh image, its result recorded. */
#define CASE(name, dep, call)                   \
    do {                                        \
        rl_image img = fresh();                 \
        CHECK_EQ((call), 0);                    \
        record((name), (dep), digest_of(&img)); \
    } while (0)

static void colour_cases(void)
{
    char n[64];
    static const double f[] = {0.0, 0.3, 0.77, 1.4, 2.6};
    for (int i = 0; i < 5; i++) {
        snprintf(n, sizeof(n), "brightness %g", f[i]);
        CASE(n, COLOR, rl_k_brightness(&img, f[i]));
        snprintf(n, sizeof(n), "contrast %g", f[i]);
        CASE(n, COLOR, rl_k_contrast(&img, f[i]));
        snprintf(n, sizeof(n), "saturation %g", f[i]);
        CASE(n, COLOR, rl_k_saturation(&img, f[i]));
        snprintf(n, sizeof(n), "sharpness %g", f[i]);
        CASE(n, COLOR, rl_k_sharpness(&img, f[i]));
        snprintf(n, sizeof(n), "hue %g", f[i] / 5.3 - 0.25);
        CASE(n, COLOR, rl_k_hue(&img, f[i] / 5.3 - 0.25));
    }
    CASE("grayscale", COLOR, rl_k_grayscale(&img));
    CASE("autocontrast", EXACT, rl_k_autocontrast(&img));
    CASE("equalize", EXACT, rl_k_equalize(&img));
    CASE("posterize 3", EXACT, rl_k_posterize(&img, 3));
    CASE("solarize 100", EXACT, rl_k_solarize(&img, 100));
    CASE("invert", EXACT, rl_k_invert(&img));
    CASE("gaussian_blur 5x7", EXACT, rl_k_gaussian_blur(&img, 5, 7, 1.2, 0.8));
    CASE("gaussian_blur 23", EXACT, rl_k_gaussian_blur(&img, 23, 23, 2, 2));
}

static void warp_cases(void)
{
    static const double fill[3] = {12, 200, 91};
    char n[64];
    for (int t = 0; t < 4; t++) {
        double m[6];
        rl_affine_inverse(0.5 * t, -1.0, 17.0 * t - 20, 3.25 * t, -2.5, 1.1,
                          5.0 * t, -3.0, m);
        for (int interp = 0; interp < 2; interp++) {
            snprintf(n, sizeof(n), "affine %d interp %d", t, interp);
            CASE(n, WARP, rl_k_affine(&img, m, (rl_interp)interp, fill));
        }
        snprintf(n, sizeof(n), "rotate %g", 33.3 * t + 1);
        CASE(n, WARP,
             rl_k_rotate(&img, 33.3 * t + 1, RL_INTERP_BILINEAR, NULL, NULL));
    }
    /* The policies' sub-ops, Identity .. Invert, each at two magnitudes:
     * 1 .. 5 are geometric (the warp), 6 .. 9 the colour blends. */
    for (int kind = 0; kind < RL_POLICY_N_KINDS; kind++) {
        for (int s = -1; s <= 1; s += 2) {
            double mag = kind == 11 ? 140 : kind == 10 ? 3 : s * 0.43;
            int dep = kind >= 1 && kind <= 5   ? WARP
                      : kind >= 6 && kind <= 9 ? COLOR
                                               : EXACT;
            snprintf(n, sizeof(n), "policy %d %g", kind, mag);
            CASE(n, dep,
                 rl_policy_apply(&img, kind,
                                 kind >= 3 && kind <= 4 ? mag * 20
                                 : kind == 5            ? mag * 70
                                                        : mag,
                                 RL_INTERP_NEAREST + (s > 0), fill));
        }
    }
}

/* Pillow's ops round every step (no fused multiply-add on any CPU). */
static void pillow_cases(void)
{
    static const uint8_t fill[3] = {3, 140, 250};
    CASE("pil color", EXACT, rl_pil_color(&img, 0.4));
    CASE("pil contrast", EXACT, rl_pil_contrast(&img, 1.6));
    CASE("pil brightness", EXACT, rl_pil_brightness(&img, 0.7));
    CASE("pil sharpness", EXACT, rl_pil_sharpness(&img, 1.8));
    CASE("pil autocontrast", EXACT, rl_pil_autocontrast(&img));
    CASE("pil equalize", EXACT, rl_pil_equalize(&img));
    CASE("pil posterize", EXACT, rl_pil_posterize(&img, 2));
    CASE("pil solarize_add", EXACT, rl_pil_solarize_add(&img, 60, 128));
    CASE("pil gaussian_blur", EXACT, rl_pil_gaussian_blur(&img, 1.7));
    const double a[6] = {0.93, 0.21, -4.5, -0.17, 1.08, 3.25};
    CASE("pil affine bilinear", EXACT,
         rl_pil_affine(&img, a, RL_PIL_BILINEAR, fill));
    CASE("pil affine bicubic", EXACT,
         rl_pil_affine(&img, a, RL_PIL_BICUBIC, fill));
    CASE("pil rotate", EXACT, rl_pil_rotate(&img, 29.5, RL_PIL_BICUBIC, fill));
}

/* The resampler and the stores: every filter, up and down, into every
 * dtype and layout (Normalize's mul and add for the floats). */
static void resample_cases(void)
{
    static uint8_t rgbx[H * W * 4];
    static uint8_t out[97 * 71 * 3 * 4];
    for (int i = 0; i < W * H; i++) {
        memcpy(rgbx + 4 * i, &base[0][0][0] + 3 * i, 3);
        rgbx[4 * i + 3] = 0;
    }
    rl_pixels px = {rgbx, (size_t)W * 4, 0, 0, W, H, W, H};
    static const int sizes[][2] = {{97, 71}, {23, 17}};
    char n[64];
    for (int f = 0; f < RL_FILTER_COUNT; f++) {
        for (int s = 0; s < 2; s++) {
            for (int dt = RL_DTYPE_U8; dt <= RL_DTYPE_BF16; dt++) {
                int ow = sizes[s][0], oh = sizes[s][1];
                rl_place_config c = {
                    .out_w = ow,
                    .out_h = oh,
                    .layout = (rl_layout)(dt & 1),
                    .dtype = (rl_dtype)dt,
                    .mul = {1 / (255 * 0.229f), 1 / (255 * 0.224f), 1 / 255.0f},
                    .add = {-0.485f / 0.229f, -0.456f / 0.224f, 0.0f}};
                rl_dst d;
                rl_place_dst(&c, out, &d);
                memset(out, 0, sizeof(out));
                CHECK_EQ(rl_resample(&px, (rl_filter)f, RL_PASSES_PILLOW13, 1.5,
                                     2.25, W - 4.0, H - 3.5, ow, oh, s == 1,
                                     false, &d),
                         0);
                snprintf(n, sizeof(n), "resample %s %dx%d dtype %d",
                         rl_filter_name(f), ow, oh, dt);
                record(
                    n, EXACT,
                    fnv(out, rl_place_sample_bytes(&c), 0xcbf29ce484222325ull));
            }
        }
    }
}

/* Whole samples: JPEGs (baseline and progressive) decoded by libjpeg-turbo
 * (NEON on aarch64, SSE2/AVX2 on x86-64) at the DCT scale and region the
 * plan asks, RandomResizedCrop's draws (libm's log and exp) or Resize then
 * CenterCrop, the resampler and the store into uint8 and normalised
 * float32. */
static void sample_cases(void)
{
    rl_decoders jpeg = {.defs = {&rl_jpeg_decoder}, .n = 1};
    rl_sample_ctx *ctx = rl_sample_ctx_create(&jpeg);
    CHECK(ctx != NULL);
    static uint8_t out[56 * 72 * 3 * 4];
    char n[64];
    for (int kind = RL_T_RESIZE_CROP; kind <= RL_T_RANDOM_CROP; kind++) {
        for (int dt = RL_DTYPE_U8; dt <= RL_DTYPE_F32; dt++) {
            rl_view view;
            memset(&view, 0, sizeof(view));
            rl_transform *t = &view.transform;
            t->kind = (rl_transform_kind)kind;
            t->out_w = view.place.out_w = 72;
            t->out_h = view.place.out_h = 56;
            t->resize_short = 64;
            t->scale_lo = 0.08;
            t->scale_hi = 1.0;
            t->ratio_lo = 0.75;
            t->ratio_hi = 4.0 / 3.0;
            t->flip_p = 0.5;
            t->filter = kind == RL_T_RANDOM_CROP ? RL_FILTER_BICUBIC
                                                 : RL_FILTER_BILINEAR;
            view.place.layout = RL_LAYOUT_NCHW;
            view.place.dtype = (rl_dtype)dt;
            for (int c = 0; c < 3; c++) {
                view.place.mul[c] = dt ? 1 / (255 * 0.226f) : 1;
                view.place.add[c] = dt ? -0.45f / 0.226f : 0;
            }
            rl_sample_spec spec = {
                .limits = {.max_pixels = RL_DEFAULT_MAX_PIXELS,
                           .max_scans = RL_DEFAULT_MAX_SCANS,
                           .max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES},
                .seed = 42,
                .views = &view,
                .nviews = 1};
            uint64_t h = 0xcbf29ce484222325ull;
            for (int i = 0; i < 12; i++) {
                size_t len;
                uint8_t *data = make_jpeg(300 + 17 * i, 200 + 11 * i, i, &len);
                CHECK(data != NULL);
                rl_dst dst;
                rl_place_dst(&view.place, out, &dst);
                rl_sample_note note;
                char msg[RL_MSG_MAX];
                CHECK_EQ(rl_sample_run(ctx, &spec, data, len, 0, i, &dst, &note,
                                       msg),
                         0);
                h = fnv(out, rl_place_sample_bytes(&view.place), h);
                free(data);
            }
            snprintf(n, sizeof(n), "sample transform %d dtype %d", kind, dt);
            record(n, EXACT, h);
        }
    }
    rl_sample_ctx_destroy(ctx);
}

/* AugMix's mixing weights: the gamma draws' libm calls, rounded to
 * float32. */
static void dirichlet_cases(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 2000; i++) {
        rl_rng g;
        rl_rng_init(&g, 7, 1, i, RL_RNG_AUGMENT);
        double w[4];
        rl__dirichlet_f32(&g, i % 2 ? 1.0 : 0.35, 3 + i % 2, w);
        h = fnv(w, sizeof(w[0]) * (size_t)(3 + i % 2), h);
    }
    record("dirichlet", EXACT, h);
}

static void load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    char line[KEYLEN + 32];
    while (fgets(line, sizeof(line), f) != NULL) {
        char *tab = strchr(line, '\t');
        CHECK(tab != NULL && nref < MAXCASES);
        size_t len = (size_t)(tab - line);
        CHECK(len < KEYLEN);
        memcpy(ref[nref].key, line, len);
        ref[nref].key[len] = '\0';
        ref[nref].digest = strtoull(tab + 1, NULL, 16);
        nref++;
    }
    fclose(f);
    CHECK(nref > 0);
}

int main(int argc, char **argv)
{
    const char *write = NULL;
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        write = argv[2];
    } else if (argc == 3 && strcmp(argv[1], "--against") == 0) {
        load(argv[2]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--write FILE | --against FILE]\n", argv[0]);
        return 2;
    }
#if defined(__aarch64__)
    /* README: on aarch64 the colour ops round torch's add with alpha once,
     * as torch's NEON kernels do, whichever compiler built them. */
    CHECK(rl_color_fused());
#endif
    make_base();
    rl_simd best = rl_simd_cap(RL_SIMD_AVX2);
    for (int l = RL_SIMD_C; l <= (int)best; l++) {
        CHECK_EQ(rl_simd_cap((rl_simd)l), l);
        level_name = rl_simd_name((rl_simd)l);
        colour_cases();
        warp_cases();
        pillow_cases();
        resample_cases();
        dirichlet_cases();
        sample_cases();
    }
    rl_simd_cap(best);
    if (write != NULL) {
        FILE *f = fopen(write, "w");
        CHECK(f != NULL);
        for (int i = 0; i < nseen; i++) {
            fprintf(f, "%s\t%016llx\n", seen[i].key,
                    (unsigned long long)seen[i].digest);
        }
        CHECK(fclose(f) == 0);
    }
    printf("  %d cases at levels c..%s, %s\n", nseen, rl_simd_name(best),
           nref ? "checked against the reference" : "on this machine");
    CHECK_EQ(differ, 0);
    PASS("test_same_bytes");
}
