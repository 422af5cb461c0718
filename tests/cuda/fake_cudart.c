/*
 * fake_cudart.c - a CUDA runtime double for tests on machines without a
 * GPU. Build: cc -shared -fPIC -O1 -pthread fake_cudart.c -o fake_cudart.so
 * and point RINGLOADER_CUDART at it.
 *
 * DESIGN: "device" memory is host memory, and every asynchronous operation
 * (copies, event records) goes through one FIFO served by a background
 * thread that sleeps a random 0-2 ms (FAKE_CUDA_DELAY_US) before each copy,
 * so work really does
 * complete after the call returns. The double checks what a real GPU would
 * only show as corrupted batches:
 *   - a copy's source (a pinned slot) must be unchanged between the call and
 *     the copy: the loader must not refill a slot before its event completed;
 *   - a copy must come from cudaHostAlloc memory and go to cudaMalloc memory
 *     of the device current on the calling thread; a copy from pageable
 *     (ordinary) host memory is a violation unless FAKE_CUDA_ALLOW_PAGEABLE
 *     is 1 (the loader's samples past a varying batch's arena), and a
 *     pageable source is read only when the copy runs, as a real staged
 *     copy may: it must then still be mapped and unchanged (not freed, not
 *     reused) since the call;
 *   - no byte of device memory receives two copies (a buffer handed out
 *     once; copies into disjoint parts of one buffer are fine);
 *   - pinned memory is not freed while a copy from it is pending;
 *   - copies run on a stream created non-blocking (cudaStreamNonBlocking),
 *     as the loader's own copy stream is; streams are counted until
 *     destroyed;
 *   - a copy's pinned source was allocated with the copy's device current
 *     (cudaHostAlloc pins for the current device's context, device 0 on a
 *     thread that never set one, making that context if need be);
 *   - no call that may block (host or device alloc/free, synchronize) is
 *     made while the calling thread holds a pipeline's lock: test builds of
 *     ringloader call fake_cuda_lock_note(+1/-1) as they take and release
 *     it (csrc/testing/hooks.h);
 * and device buffers start filled with 0xCD, so a consumer that reads
 * without waiting for the copy's event (cudaStreamWaitEvent, then a
 * synchronize of its own stream) sees the poison. The current device is
 * per thread and unset (-1) on a new thread, where cudaGetDevice says 0 as
 * the real one does; fake_cuda_thread_device() tells the two apart.
 * Counters of violations and
 * outstanding allocations (pinned, device, events, streams) are exported
 * for the tests (fake_cuda_*). FAKE_CUDA_DEVICE_BYTES bounds the device
 * memory outstanding: past it cudaMalloc fails as an out-of-memory GPU
 * does.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_INVALID_DEVICE = 101,
    ERR_NOT_READY = 600
};
enum { OP_COPY, OP_RECORD };

typedef struct fake_stream {
    uint64_t last;  /* seq of the last op this stream depends on */
    unsigned flags; /* 1: cudaStreamNonBlocking */
} fake_stream;

typedef struct fake_event {
    uint64_t seq; /* seq of its last record, 0 if never recorded */
} fake_event;

typedef struct op {
    int kind;
    uint64_t seq;
    void *dst;
    const void *src;
    size_t n;
    uint64_t sum;
    int device;
    int pageable; /* the source was not pinned memory at the call */
    struct op *next;
} op;

typedef struct range {
    size_t at, n;
} range;

typedef struct alloc {
    void *p;
    size_t n;
    int device;
    range *filled; /* device memory: the parts copies wrote */
    int nfilled, capfilled;
} alloc;

#define MAX_ALLOCS 65536

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static op *q_head, *q_tail;
static uint64_t enq_seq, done_seq;
static pthread_t worker;
static int worker_started;
static alloc hosts[MAX_ALLOCS], devs[MAX_ALLOCS];
static int n_hosts, n_devs;
static long violations, copies;
static int n_events;
static size_t dev_bytes; /* device memory outstanding */
static char last_violation[256];
static fake_stream default_stream = {0, 1};
static __thread int current_device = -1; /* -1: none set on this thread */
static __thread int lock_depth;          /* pipeline locks held */
static int n_streams;
static unsigned rng_state = 12345;

/* Longest random delay before a copy runs: FAKE_CUDA_DELAY_US, default
 * 2000. Longer delays widen the window in which a loader that recycles a
 * slot too early is caught. */
static long max_delay_us(void)
{
    const char *e = getenv("FAKE_CUDA_DELAY_US");
    return e ? atol(e) : 2000;
}

static void violation(const char *what)
{
    violations++;
    snprintf(last_violation, sizeof(last_violation), "%s", what);
    fprintf(stderr, "fake_cudart: VIOLATION: %s\n", what);
}

/* The device calls on this thread use: 0 until one was set. */
static int device_in_use(void)
{
    return current_device < 0 ? 0 : current_device;
}

/* A call that may block (it synchronises the device, or waits): flagged
 * when the calling thread holds a pipeline's lock. */
static void blocking(const char *what)
{
    if (lock_depth > 0) {
        char buf[160];
        snprintf(buf, sizeof(buf), "%s while the pipeline's lock is held",
                 what);
        pthread_mutex_lock(&mu);
        violation(buf);
        pthread_mutex_unlock(&mu);
    }
}

static uint64_t checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}

static alloc *find(alloc *a, int n, const void *p, size_t len)
{
    for (int i = 0; i < n; i++) {
        const char *s = a[i].p;
        if ((const char *)p >= s && (const char *)p + len <= s + a[i].n) {
            return &a[i];
        }
    }
    return NULL;
}

static void drop(alloc *a, int *n, alloc *e)
{
    free(e->filled);
    *e = a[--*n];
}

/* Records that a copy wrote n bytes at p into device allocation d; 0 when
 * a byte of them had been written by an earlier copy. */
static int fill(alloc *d, const void *p, size_t n)
{
    size_t at = (size_t)((const char *)p - (const char *)d->p);
    int fresh = 1;
    for (int i = 0; i < d->nfilled && n > 0; i++) {
        const range *r = &d->filled[i];
        fresh = fresh && (at + n <= r->at || r->at + r->n <= at);
    }
    if (n == 0) {
        return 1;
    }
    if (d->nfilled == d->capfilled) {
        int cap = d->capfilled ? 2 * d->capfilled : 4;
        range *more = realloc(d->filled, sizeof(range) * (size_t)cap);
        if (more == NULL) {
            return fresh;
        }
        d->filled = more;
        d->capfilled = cap;
    }
    d->filled[d->nfilled++] = (range){at, n};
    return fresh;
}

/* Whether each page of the n bytes at p is mapped (mincore fails with
 * ENOMEM on a page that is not): a pageable source freed back to the
 * system (munmap) is caught before it is read. */
static int mapped(const void *p, size_t n)
{
    if (n == 0) {
        return 1;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(page - 1);
    size_t len = (uintptr_t)p + n - start;
    unsigned char *vec = malloc((len + page - 1) / page);
    int ok = vec != NULL && mincore((void *)start, len, vec) == 0;
    free(vec);
    return ok;
}

/* FAKE_CUDA_ALLOW_PAGEABLE=1: copies from pageable memory are allowed. */
static int pageable_allowed(void)
{
    const char *e = getenv("FAKE_CUDA_ALLOW_PAGEABLE");
    return e != NULL && strcmp(e, "1") == 0;
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (q_head == NULL) {
            pthread_cond_wait(&work_cv, &mu);
        }
        op *o = q_head;
        if (o->kind == OP_COPY) {
            /* Let the caller run ahead, as a real DMA engine does. */
            pthread_mutex_unlock(&mu);
            long us =
                max_delay_us() > 0 ? rand_r(&rng_state) % max_delay_us() : 0;
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&mu);
            int readable = 1;
            if (o->pageable) {
                if (!pageable_allowed()) {
                    violation("copy from pageable memory, not cudaHostAlloc's "
                              "(FAKE_CUDA_ALLOW_PAGEABLE=1 allows it)");
                }
                readable = mapped(o->src, o->n);
                if (!readable || checksum(o->src, o->n) != o->sum) {
                    violation("pageable copy source freed or modified before "
                              "its copy ran");
                    /* nothing of it is copied: the bytes may be another
                     * allocation's, or freed memory (which an ASan build
                     * of the caller would report once more, as a crash) */
                    readable = 0;
                }
            } else {
                alloc *h = find(hosts, n_hosts, o->src, o->n);
                if (h == NULL) {
                    violation("copy source is no longer pinned memory");
                } else if (h->device != o->device) {
                    violation("copy from memory pinned with another device "
                              "current (cudaHostAlloc in its context)");
                } else if (checksum(o->src, o->n) != o->sum) {
                    violation("pinned slot modified before its copy "
                              "completed");
                }
            }
            alloc *d = find(devs, n_devs, o->dst, o->n);
            if (d == NULL) {
                violation("copy destination is not device memory");
            } else {
                if (d->device != o->device) {
                    violation("copy issued with another device current");
                }
                if (!fill(d, o->dst, o->n)) {
                    violation("device buffer received two copies");
                }
                if (readable) {
                    memcpy(o->dst, o->src, o->n);
                }
            }
            copies++;
        }
        q_head = o->next;
        if (q_head == NULL) {
            q_tail = NULL;
        }
        done_seq = o->seq;
        free(o);
        pthread_cond_broadcast(&done_cv);
    }
    return NULL;
}

/* Queues an op; called with mu held. Returns its seq. */
static uint64_t enqueue(op *o)
{
    if (!worker_started) {
        pthread_create(&worker, NULL, worker_main, NULL);
        pthread_detach(worker);
        worker_started = 1;
    }
    o->seq = ++enq_seq;
    o->next = NULL;
    if (q_tail) {
        q_tail->next = o;
    } else {
        q_head = o;
    }
    q_tail = o;
    pthread_cond_signal(&work_cv);
    return o->seq;
}

static void wait_seq(uint64_t seq)
{
    while (done_seq < seq) {
        pthread_cond_wait(&done_cv, &mu);
    }
}

static int ndevices(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICES");
    return e ? atoi(e) : 2;
}

/* ---- the runtime API subset ---- */

int cudaGetDeviceCount(int *n)
{
    *n = ndevices();
    return OK;
}

int cudaGetDevice(int *d)
{
    *d = device_in_use();
    return OK;
}

int cudaSetDevice(int d)
{
    if (d < 0 || d >= ndevices()) {
        return ERR_INVALID_DEVICE;
    }
    current_device = d;
    return OK;
}

int cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    blocking("cudaHostAlloc");
    pthread_mutex_lock(&mu);
    if (n_hosts == MAX_ALLOCS || (*p = malloc(n ? n : 1)) == NULL) {
        pthread_mutex_unlock(&mu);
        return 2; /* cudaErrorMemoryAllocation */
    }
    /* Made in the context of the device current (device 0 when none was
     * set): pinned for that context only (no cudaHostAllocPortable). */
    hosts[n_hosts++] = (alloc){*p, n, device_in_use(), NULL, 0, 0};
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaFreeHost(void *p)
{
    blocking("cudaFreeHost");
    pthread_mutex_lock(&mu);
    alloc *a = find(hosts, n_hosts, p, 0);
    if (a == NULL || a->p != p) {
        violation("cudaFreeHost of memory not from cudaHostAlloc");
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_VALUE;
    }
    for (op *o = q_head; o; o = o->next) {
        if (o->kind == OP_COPY && (const char *)o->src >= (char *)p &&
            (const char *)o->src < (char *)p + a->n) {
            violation("pinned memory freed while a copy from it is pending");
        }
    }
    drop(hosts, &n_hosts, a);
    pthread_mutex_unlock(&mu);
    free(p);
    return OK;
}

int cudaMalloc(void **p, size_t n)
{
    blocking("cudaMalloc");
    pthread_mutex_lock(&mu);
    const char *limit = getenv("FAKE_CUDA_DEVICE_BYTES");
    if (n_devs == MAX_ALLOCS ||
        (limit != NULL && dev_bytes + n > (size_t)atoll(limit)) ||
        (*p = malloc(n ? n : 1)) == NULL) {
        pthread_mutex_unlock(&mu);
        return 2; /* cudaErrorMemoryAllocation */
    }
    memset(*p, 0xCD, n);
    devs[n_devs++] = (alloc){*p, n, device_in_use(), NULL, 0, 0};
    dev_bytes += n;
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaFree(void *p)
{
    if (p == NULL) {
        return OK;
    }
    blocking("cudaFree");
    pthread_mutex_lock(&mu);
    /* Like the real one, cudaFree waits for work touching the memory. */
    uint64_t last = 0;
    for (op *o = q_head; o; o = o->next) {
        if (o->kind == OP_COPY && o->dst == p) {
            last = o->seq;
        }
    }
    wait_seq(last);
    alloc *a = find(devs, n_devs, p, 0);
    if (a == NULL || a->p != p) {
        violation("cudaFree of memory not from cudaMalloc");
        pthread_mutex_unlock(&mu);
        return ERR_INVALID_VALUE;
    }
    dev_bytes -= a->n;
    drop(devs, &n_devs, a);
    pthread_mutex_unlock(&mu);
    free(p);
    return OK;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind,
                    void *stream)
{
    if (kind != 1) {
        return ERR_INVALID_VALUE;
    }
    fake_stream *s = stream ? stream : &default_stream;
    if (!(s->flags & 1)) {
        pthread_mutex_lock(&mu);
        violation("copy on a stream not created cudaStreamNonBlocking");
        pthread_mutex_unlock(&mu);
    }
    op *o = calloc(1, sizeof(*o));
    o->kind = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->n = n;
    o->device = device_in_use();
    o->sum = checksum(src, n);
    pthread_mutex_lock(&mu);
    o->pageable = find(hosts, n_hosts, src, n) == NULL;
    s->last = enqueue(o);
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaEventCreateWithFlags(void **ev, unsigned flags)
{
    (void)flags;
    *ev = calloc(1, sizeof(fake_event));
    if (*ev == NULL) {
        return 2;
    }
    pthread_mutex_lock(&mu);
    n_events++;
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaEventRecord(void *ev, void *stream)
{
    fake_stream *s = stream ? stream : &default_stream;
    op *o = calloc(1, sizeof(*o));
    o->kind = OP_RECORD;
    pthread_mutex_lock(&mu);
    ((fake_event *)ev)->seq = enqueue(o);
    s->last = ((fake_event *)ev)->seq;
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaEventQuery(void *ev)
{
    pthread_mutex_lock(&mu);
    int done = done_seq >= ((fake_event *)ev)->seq;
    pthread_mutex_unlock(&mu);
    return done ? OK : ERR_NOT_READY;
}

int cudaEventSynchronize(void *ev)
{
    blocking("cudaEventSynchronize");
    pthread_mutex_lock(&mu);
    wait_seq(((fake_event *)ev)->seq);
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaEventDestroy(void *ev)
{
    pthread_mutex_lock(&mu);
    n_events--;
    pthread_mutex_unlock(&mu);
    free(ev);
    return OK;
}

int cudaStreamWaitEvent(void *stream, void *ev, unsigned flags)
{
    (void)flags;
    fake_stream *s = stream ? stream : &default_stream;
    pthread_mutex_lock(&mu);
    if (((fake_event *)ev)->seq > s->last) {
        s->last = ((fake_event *)ev)->seq;
    }
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaStreamCreateWithFlags(void **stream, unsigned flags)
{
    fake_stream *s = calloc(1, sizeof(fake_stream));
    if (s == NULL) {
        return 2;
    }
    s->flags = flags;
    pthread_mutex_lock(&mu);
    n_streams++;
    pthread_mutex_unlock(&mu);
    *stream = s;
    return OK;
}

int cudaStreamCreate(void **stream)
{
    return cudaStreamCreateWithFlags(stream, 0);
}

int cudaStreamDestroy(void *stream)
{
    if (stream == NULL) {
        return ERR_INVALID_VALUE;
    }
    /* Like the real one, work still queued completes: ops refer to the
     * stream by seq only, so it may go now. */
    pthread_mutex_lock(&mu);
    n_streams--;
    pthread_mutex_unlock(&mu);
    free(stream);
    return OK;
}

int cudaStreamSynchronize(void *stream)
{
    blocking("cudaStreamSynchronize");
    fake_stream *s = stream ? stream : &default_stream;
    pthread_mutex_lock(&mu);
    wait_seq(s->last);
    pthread_mutex_unlock(&mu);
    return OK;
}

const char *cudaGetErrorString(int e)
{
    switch (e) {
    case OK:
        return "no error";
    case ERR_INVALID_VALUE:
        return "invalid argument";
    case ERR_INVALID_DEVICE:
        return "invalid device ordinal";
    case ERR_NOT_READY:
        return "device not ready";
    default:
        return "out of memory";
    }
}

/* ---- what the tests read ---- */

long fake_cuda_violations(void)
{
    return violations;
}

const char *fake_cuda_last_violation(void)
{
    return last_violation;
}

int fake_cuda_host_outstanding(void)
{
    return n_hosts;
}

int fake_cuda_device_outstanding(void)
{
    return n_devs;
}

long fake_cuda_copies(void)
{
    return copies;
}

int fake_cuda_streams_outstanding(void)
{
    return n_streams;
}

int fake_cuda_events_outstanding(void)
{
    return n_events;
}

/* 1 when the n bytes at p lie in one device allocation (cudaMalloc). */
int fake_cuda_is_device(const void *p, size_t n)
{
    pthread_mutex_lock(&mu);
    int found = find(devs, n_devs, p, n) != NULL;
    pthread_mutex_unlock(&mu);
    return found;
}

/* The calling thread's current device, -1 when none was ever set. */
int fake_cuda_thread_device(void)
{
    return current_device;
}

/* ringloader's test builds: +1 after taking a pipeline's lock, -1 before
 * releasing it, on the thread that holds it. */
void fake_cuda_lock_note(int delta)
{
    lock_depth += delta;
}
