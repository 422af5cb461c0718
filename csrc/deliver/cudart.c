/*
 * deliver/cudart.c - the CUDA runtime through dlopen (the only file that loads it).
 *
 * DESIGN: the runtime is a plain C API, so a table of function pointers with
 * our own typedefs is all the "header" we need: cudaError_t is an int,
 * streams and events are pointers, cudaMemcpyHostToDevice is 1. Loading
 * happens once per process under pthread_once; a process that never asks
 * for a device never touches CUDA. The library torch already loaded is
 * preferred (RTLD_NOLOAD finds it without loading a second copy), because
 * two runtimes in one process would each have their own context and
 * streams from one would be meaningless to the other.
 */
#define _GNU_SOURCE
#include "deliver/cudart.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cuda_err;
typedef void *cuda_stream;
typedef void *cuda_event;

enum { CUDA_SUCCESS = 0, CUDA_NOT_READY = 600, H2D = 1 };
enum { EVENT_DISABLE_TIMING = 2, STREAM_NON_BLOCKING = 1 };

static struct {
    cuda_err (*GetDeviceCount)(int *);
    cuda_err (*GetDevice)(int *);
    cuda_err (*SetDevice)(int);
    cuda_err (*HostAlloc)(void **, size_t, unsigned);
    cuda_err (*FreeHost)(void *);
    cuda_err (*Malloc)(void **, size_t);
    cuda_err (*Free)(void *);
    cuda_err (*MemcpyAsync)(void *, const void *, size_t, int, cuda_stream);
    cuda_err (*EventCreateWithFlags)(cuda_event *, unsigned);
    cuda_err (*EventRecord)(cuda_event, cuda_stream);
    cuda_err (*EventQuery)(cuda_event);
    cuda_err (*EventSynchronize)(cuda_event);
    cuda_err (*EventDestroy)(cuda_event);
    cuda_err (*StreamWaitEvent)(cuda_stream, cuda_event, unsigned);
    cuda_err (*StreamCreateWithFlags)(cuda_stream *, unsigned);
    cuda_err (*StreamDestroy)(cuda_stream);
    cuda_err (*StreamSynchronize)(cuda_stream);
    const char *(*GetErrorString)(cuda_err);
} rt;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status;
static char load_msg[RL_MSG_MAX];
static char load_path[512];

static int resolve(void *lib)
{
#define SYM(name)                                                        \
    do {                                                                 \
        void *f = dlsym(lib, "cuda" #name);                              \
        if (f == NULL) {                                                 \
            snprintf(load_msg, sizeof(load_msg), "%.180s has no cuda%s", \
                     load_path, #name);                                  \
            return RL_ECUDA;                                             \
        }                                                                \
        memcpy(&rt.name, &f, sizeof(f));                                 \
    } while (0)
    SYM(GetDeviceCount);
    SYM(GetDevice);
    SYM(SetDevice);
    SYM(HostAlloc);
    SYM(FreeHost);
    SYM(Malloc);
    SYM(Free);
    SYM(MemcpyAsync);
    SYM(EventCreateWithFlags);
    SYM(EventRecord);
    SYM(EventQuery);
    SYM(EventSynchronize);
    SYM(EventDestroy);
    SYM(StreamWaitEvent);
    SYM(StreamCreateWithFlags);
    SYM(StreamDestroy);
    SYM(StreamSynchronize);
    SYM(GetErrorString);
#undef SYM
    return 0;
}

static void load(void)
{
    static const char *names[] = {"libcudart.so.13", "libcudart.so.12",
                                  "libcudart.so.11.0", "libcudart.so"};
    const char *forced = getenv("RINGLOADER_CUDART");
    void *lib = NULL;
    char tried[RL_MSG_MAX] = "";
    if (forced != NULL && forced[0] != '\0') {
        lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
        snprintf(load_path, sizeof(load_path), "%s", forced);
        if (lib == NULL) {
            snprintf(tried, sizeof(tried), "%s", dlerror());
        }
    } else {
        /* First a runtime already in the process (torch's), then any. */
        for (int pass = 0; pass < 2 && lib == NULL; pass++) {
            for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
                int flags =
                    RTLD_NOW | RTLD_LOCAL | (pass == 0 ? RTLD_NOLOAD : 0);
                lib = dlopen(names[i], flags);
                if (lib != NULL) {
                    snprintf(load_path, sizeof(load_path), "%s", names[i]);
                    break;
                }
            }
        }
        if (lib == NULL) {
            snprintf(tried, sizeof(tried),
                     "none of libcudart.so.13/.12/.11.0/.so could be loaded");
        }
    }
    if (lib == NULL) {
        snprintf(load_msg, sizeof(load_msg), "no CUDA runtime: %.200s", tried);
        load_status = RL_ECUDA;
        return;
    }
    load_status = resolve(lib);
}

int rl_cuda_load(char *msg, const char **path)
{
    pthread_once(&load_once, load);
    if (msg != NULL) {
        snprintf(msg, RL_MSG_MAX, "%s", load_status ? load_msg : "");
    }
    if (path != NULL) {
        *path = load_status ? NULL : load_path;
    }
    return load_status;
}

/* Turns a runtime error into our status with its message. */
static int check(cuda_err e, const char *what, char *msg)
{
    if (e == CUDA_SUCCESS) {
        return 0;
    }
    if (msg != NULL) {
        const char *s = rt.GetErrorString ? rt.GetErrorString(e) : NULL;
        snprintf(msg, RL_MSG_MAX, "%s failed: %s (error %d)", what,
                 s ? s : "unknown error", e);
    }
    return RL_ECUDA;
}

#define LOADED(msg)                        \
    do {                                   \
        int rc_ = rl_cuda_load(msg, NULL); \
        if (rc_ != 0) {                    \
            return rc_;                    \
        }                                  \
    } while (0)

int rl_cuda_device_count(int *n, char *msg)
{
    LOADED(msg);
    *n = 0;
    return check(rt.GetDeviceCount(n), "cudaGetDeviceCount", msg);
}

/*
 * The device a call needs is made current for the call only: the thread
 * may be the user's (the training loop in next(), the loader's creation),
 * whose current device is torch's business. enter() saves the current
 * device and switches when it differs; leave() switches back.
 */
static int enter(int device, int *saved, const char *what, char *msg)
{
    *saved = device;
    int rc = check(rt.GetDevice(saved), "cudaGetDevice", msg);
    if (rc == 0 && *saved != device) {
        rc = check(rt.SetDevice(device), "cudaSetDevice", msg);
    }
    if (rc != 0 && msg != NULL) {
        size_t len = strlen(msg);
        snprintf(msg + len, RL_MSG_MAX - len, " (before %s)", what);
    }
    return rc;
}

static void leave(int device, int saved)
{
    if (saved != device) {
        rt.SetDevice(saved);
    }
}

int rl_cuda_host_alloc(int device, void **p, size_t n, char *msg)
{
    LOADED(msg);
    int saved;
    int rc = enter(device, &saved, "cudaHostAlloc", msg);
    if (rc == 0) {
        rc = check(rt.HostAlloc(p, n, 0), "cudaHostAlloc", msg);
        leave(device, saved);
    }
    return rc;
}

void rl_cuda_host_free(int device, void *p)
{
    int saved;
    if (p != NULL && rl_cuda_load(NULL, NULL) == 0 &&
        enter(device, &saved, "cudaFreeHost", NULL) == 0) {
        rt.FreeHost(p);
        leave(device, saved);
    }
}

int rl_cuda_copy_h2d(int device, void *dst, const void *src, size_t n,
                     uintptr_t stream, void **event, char *msg)
{
    LOADED(msg);
    int saved;
    int rc = enter(device, &saved, "cudaMemcpyAsync", msg);
    if (rc != 0) {
        return rc;
    }
    if (*event == NULL) {
        rc = check(rt.EventCreateWithFlags(event, EVENT_DISABLE_TIMING),
                   "cudaEventCreateWithFlags", msg);
    }
    if (rc == 0) {
        rc = check(rt.MemcpyAsync(dst, src, n, H2D, (cuda_stream)stream),
                   "cudaMemcpyAsync", msg);
    }
    if (rc == 0) {
        rc = check(rt.EventRecord(*event, (cuda_stream)stream),
                   "cudaEventRecord", msg);
        if (rc != 0) {
            /* The copy is queued but nothing will say when it is done:
             * wait for it here, so the caller may refill the slot. */
            rt.StreamSynchronize((cuda_stream)stream);
        }
    }
    leave(device, saved);
    return rc;
}

int rl_cuda_event_query(void *event, char *msg)
{
    LOADED(msg);
    cuda_err e = rt.EventQuery(event);
    return e == CUDA_NOT_READY ? RL_ETIMEDOUT : check(e, "cudaEventQuery", msg);
}

int rl_cuda_event_sync(void *event, char *msg)
{
    LOADED(msg);
    return check(rt.EventSynchronize(event), "cudaEventSynchronize", msg);
}

int rl_cuda_stream_wait(int device, uintptr_t stream, void *event, char *msg)
{
    LOADED(msg);
    int saved;
    int rc = enter(device, &saved, "cudaStreamWaitEvent", msg);
    if (rc == 0) {
        rc = check(rt.StreamWaitEvent((cuda_stream)stream, event, 0),
                   "cudaStreamWaitEvent", msg);
        leave(device, saved);
    }
    return rc;
}

void rl_cuda_event_destroy(void *event)
{
    if (event != NULL && rl_cuda_load(NULL, NULL) == 0) {
        rt.EventDestroy(event);
    }
}

int rl_cuda_malloc(int device, void **p, size_t n, char *msg)
{
    LOADED(msg);
    int saved;
    int rc = enter(device, &saved, "cudaMalloc", msg);
    if (rc == 0) {
        rc = check(rt.Malloc(p, n), "cudaMalloc", msg);
        leave(device, saved);
    }
    return rc;
}

void rl_cuda_free(int device, void *p)
{
    int saved;
    if (p != NULL && rl_cuda_load(NULL, NULL) == 0 &&
        enter(device, &saved, "cudaFree", NULL) == 0) {
        rt.Free(p);
        leave(device, saved);
    }
}

int rl_cuda_stream_create(int device, uintptr_t *stream, char *msg)
{
    LOADED(msg);
    cuda_stream s = NULL;
    int saved;
    int rc = enter(device, &saved, "cudaStreamCreateWithFlags", msg);
    if (rc == 0) {
        rc = check(rt.StreamCreateWithFlags(&s, STREAM_NON_BLOCKING),
                   "cudaStreamCreateWithFlags", msg);
        leave(device, saved);
    }
    *stream = rc == 0 ? (uintptr_t)s : 0;
    return rc;
}

void rl_cuda_stream_destroy(int device, uintptr_t stream)
{
    int saved;
    if (stream != 0 && rl_cuda_load(NULL, NULL) == 0 &&
        enter(device, &saved, "cudaStreamDestroy", NULL) == 0) {
        rt.StreamDestroy((cuda_stream)stream);
        leave(device, saved);
    }
}

int rl_cuda_stream_sync(int device, uintptr_t stream, char *msg)
{
    LOADED(msg);
    int saved;
    int rc = enter(device, &saved, "cudaStreamSynchronize", msg);
    if (rc == 0) {
        rc = check(rt.StreamSynchronize((cuda_stream)stream),
                   "cudaStreamSynchronize", msg);
        leave(device, saved);
    }
    return rc;
}
