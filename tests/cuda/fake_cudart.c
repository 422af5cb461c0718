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
 *     of the device current on the calling thread;
 *   - a device buffer receives at most one copy (handed out once);
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
 * outstanding allocations are exported for the tests (fake_cuda_*).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    struct op *next;
} op;

typedef struct alloc {
    void *p;
    size_t n;
    int device;
    int filled;
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
    *e = a[--*n];
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
            alloc *h = find(hosts, n_hosts, o->src, o->n);
            if (h == NULL) {
                violation("copy source is not (or no longer) pinned memory");
            } else if (h->device != o->device) {
                violation("copy from memory pinned with another device "
                          "current (cudaHostAlloc in its context)");
            } else if (checksum(o->src, o->n) != o->sum) {
                violation("pinned slot modified before its copy completed");
            }
            alloc *d = find(devs, n_devs, o->dst, o->n);
            if (d == NULL) {
                violation("copy destination is not device memory");
            } else {
                if (d->device != o->device) {
                    violation("copy issued with another device current");
                }
                if (d->filled) {
                    violation("device buffer received two copies");
                }
                d->filled = 1;
                memcpy(o->dst, o->src, o->n);
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
    hosts[n_hosts++] = (alloc){*p, n, device_in_use(), 0};
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
    if (n_devs == MAX_ALLOCS || (*p = malloc(n ? n : 1)) == NULL) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    memset(*p, 0xCD, n);
    devs[n_devs++] = (alloc){*p, n, device_in_use(), 0};
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
    s->last = enqueue(o);
    pthread_mutex_unlock(&mu);
    return OK;
}

int cudaEventCreateWithFlags(void **ev, unsigned flags)
{
    (void)flags;
    *ev = calloc(1, sizeof(fake_event));
    return *ev ? OK : 2;
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
