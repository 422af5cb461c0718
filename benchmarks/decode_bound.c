/*
 * decode_bound: the decode-only bound of the ringloader benchmarks.
 *
 * Reads every file named in LIST (one path a line) into memory, then decodes
 * each one in full with the libjpeg API on THREADS threads, with libjpeg's
 * defaults as Pillow uses them (JDCT_ISLOW, fancy upsampling, no DCT
 * scaling), RGB out (CMYK/YCCK files as 4-channel CMYK, as libjpeg cannot
 * convert them).  No crop, no resize, no batching: the bound a loader that
 * decodes whole images cannot beat on these cores.
 *
 *   decode_bound LIST THREADS [EPOCHS]
 *
 * One untimed warm-up pass, then EPOCHS (default 2) timed passes.  Prints
 * one JSON object on stdout.
 *
 * Build: cc -O2 -o decode_bound decode_bound.c $(pkg-config --cflags --libs libjpeg) -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <jpeglib.h>

struct file {
    unsigned char *data;
    size_t size;
};

static struct file *files;
static size_t nfiles;
static atomic_size_t next_index;
static atomic_ullong pixels_out;
static atomic_int failures;

struct error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
};

static void on_error(j_common_ptr cinfo)
{
    struct error_mgr *err = (struct error_mgr *)cinfo->err;
    longjmp(err->jump, 1);
}

static void on_message(j_common_ptr cinfo) { (void)cinfo; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Decode one file in full; returns 0 on success. */
static int decode_one(struct jpeg_decompress_struct *cinfo, struct error_mgr *err,
                      const struct file *f, unsigned char **buf, size_t *cap)
{
    if (setjmp(err->jump)) {
        jpeg_abort_decompress(cinfo);
        return -1;
    }
    jpeg_mem_src(cinfo, f->data, (unsigned long)f->size);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK)
        cinfo->out_color_space = JCS_CMYK;
    else
        cinfo->out_color_space = JCS_RGB;
    jpeg_start_decompress(cinfo);
    size_t stride = (size_t)cinfo->output_width * (size_t)cinfo->output_components;
    size_t need = stride * (size_t)cinfo->output_height;
    if (need > *cap) {
        unsigned char *p = realloc(*buf, need);
        if (!p) {
            jpeg_abort_decompress(cinfo);
            return -1;
        }
        *buf = p;
        *cap = need;
    }
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW rows[4];
        int n = 0;
        for (; n < 4; n++)
            rows[n] = *buf + stride * (cinfo->output_scanline + (JDIMENSION)n);
        JDIMENSION left = cinfo->output_height - cinfo->output_scanline;
        jpeg_read_scanlines(cinfo, rows, left < 4 ? left : 4);
    }
    atomic_fetch_add(&pixels_out, (unsigned long long)cinfo->output_width *
                                      cinfo->output_height);
    jpeg_finish_decompress(cinfo);
    return 0;
}

static void *worker(void *arg)
{
    (void)arg;
    struct jpeg_decompress_struct cinfo;
    struct error_mgr err;
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.output_message = on_message;
    jpeg_create_decompress(&cinfo);
    unsigned char *buf = NULL;
    size_t cap = 0;
    for (;;) {
        size_t i = atomic_fetch_add(&next_index, 1);
        if (i >= nfiles)
            break;
        if (decode_one(&cinfo, &err, &files[i], &buf, &cap) != 0)
            atomic_fetch_add(&failures, 1);
    }
    free(buf);
    jpeg_destroy_decompress(&cinfo);
    return NULL;
}

static double run_pass(int threads)
{
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    atomic_store(&next_index, 0);
    double t0 = now();
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, worker, NULL) != 0) {
            perror("pthread_create");
            exit(1);
        }
    for (int t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    double dt = now() - t0;
    free(tids);
    return dt;
}

static int load_list(const char *list_path)
{
    FILE *list = fopen(list_path, "r");
    if (!list) {
        fprintf(stderr, "decode_bound: %s: %s\n", list_path, strerror(errno));
        return -1;
    }
    size_t cap = 1024;
    files = calloc(cap, sizeof *files);
    char line[4096];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0])
            continue;
        FILE *f = fopen(line, "rb");
        if (!f) {
            fprintf(stderr, "decode_bound: %s: %s\n", line, strerror(errno));
            return -1;
        }
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (nfiles == cap) {
            cap *= 2;
            files = realloc(files, cap * sizeof *files);
        }
        files[nfiles].data = malloc(size > 0 ? (size_t)size : 1);
        files[nfiles].size = fread(files[nfiles].data, 1, (size_t)size, f);
        fclose(f);
        nfiles++;
    }
    fclose(list);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIST THREADS [EPOCHS]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    int epochs = argc > 3 ? atoi(argv[3]) : 2;
    if (threads < 1 || epochs < 1) {
        fprintf(stderr, "decode_bound: THREADS and EPOCHS must be positive\n");
        return 2;
    }
    double t_load = now();
    if (load_list(argv[1]) != 0)
        return 1;
    if (nfiles == 0) {
        fprintf(stderr, "decode_bound: no files in %s\n", argv[1]);
        return 1;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < nfiles; i++)
        bytes += files[i].size;
    t_load = now() - t_load;

    double warm = run_pass(threads);
    atomic_store(&pixels_out, 0);
    atomic_store(&failures, 0);
    double cpu0 = cpu_seconds();
    double wall = 0;
    printf("{\"files\": %zu, \"bytes\": %zu, \"threads\": %d, \"load_s\": %.4f, "
           "\"warmup_s\": %.4f, \"epoch_s\": [",
           nfiles, bytes, threads, t_load, warm);
    for (int e = 0; e < epochs; e++) {
        double dt = run_pass(threads);
        wall += dt;
        printf("%s%.4f", e ? ", " : "", dt);
    }
    double cpu = cpu_seconds() - cpu0;
    double images = (double)nfiles * epochs;
    printf("], \"images\": %.0f, \"wall_s\": %.4f, \"cpu_s\": %.4f, "
           "\"images_per_s\": %.2f, \"cpu_s_per_image\": %.6f, "
           "\"megapixels_per_s\": %.2f, \"failures\": %d, \"libjpeg_version\": %d}\n",
           images, wall, cpu, images / wall, cpu / images,
           (double)atomic_load(&pixels_out) / wall / 1e6, atomic_load(&failures),
           JPEG_LIB_VERSION);
    return 0;
}
