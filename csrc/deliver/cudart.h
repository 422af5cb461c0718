/*
 * deliver/cudart.h - the CUDA runtime, loaded with dlopen on first use.
 *
 * deliver/cudart.c is the only file that loads CUDA. Nothing CUDA is needed to
 * build: the few entry points used are resolved at run time into a table
 * of function pointers with our own minimal typedefs. The library tried is
 * $RINGLOADER_CUDART if set (the tests point it at a fake runtime), else the
 * libcudart.so.<major> this process already loaded (torch's), else
 * libcudart.so.13, .12, .11.0 and libcudart.so in the loader's search path.
 *
 * Streams and events are opaque handles (uintptr_t / void *); every
 * function returns 0 or RL_ECUDA with the runtime's message in msg
 * (RL_MSG_MAX bytes). All are thread-safe (the runtime is) and may be
 * called without the GIL. A function given a device makes it current for
 * the call only and restores the calling thread's current device before it
 * returns (cudaGetDevice/cudaSetDevice): it may run on a user's thread,
 * whose current device belongs to torch. Those that may block (host
 * alloc/free, synchronize) say so; callers keep them outside their locks.
 */
#ifndef RL_CUDA_H
#define RL_CUDA_H

#include "rl.h"

/*
 * Loads the runtime once per process. Returns 0, or RL_ECUDA with msg saying
 * which libraries were tried and why they failed; later calls return the
 * same answer. *path (may be NULL) receives the library's file name.
 */
int rl_cuda_load(char *msg, const char **path);

/* Number of devices (cudaGetDeviceCount). */
int rl_cuda_device_count(int *n, char *msg);

/*
 * Page-locked host memory for batch slots (cudaHostAlloc / cudaFreeHost),
 * with `device` current (so that no other device's context is made). Both
 * may block: they synchronise the device implicitly.
 */
int rl_cuda_host_alloc(int device, void **p, size_t n, char *msg);
void rl_cuda_host_free(int device, void *p);

/*
 * On `device`: copies n bytes host -> device asynchronously on `stream` and
 * records *event after it (creating the event on first use). The host
 * memory must stay untouched until the event completes.
 */
int rl_cuda_copy_h2d(int device, void *dst, const void *src, size_t n,
                     uintptr_t stream, void **event, char *msg);

/* 0 when the event completed, RL_ETIMEDOUT while pending, or RL_ECUDA. */
int rl_cuda_event_query(void *event, char *msg);

/* Blocks until the event completed. */
int rl_cuda_event_sync(void *event, char *msg);

/* Makes later work on `stream` (on `device`) wait for `event`. */
int rl_cuda_stream_wait(int device, uintptr_t stream, void *event, char *msg);

/* Frees an event. Accepts NULL. */
void rl_cuda_event_destroy(void *event);

/*
 * A stream of the caller's own on `device`, created non-blocking
 * (cudaStreamNonBlocking: no implicit synchronisation with the legacy
 * default stream), and its destruction (accepts 0; work queued on it still
 * completes). The loader's copy stream is one (deliver/cuda.c), never a
 * stream of torch's pool that other code may share.
 */
int rl_cuda_stream_create(int device, uintptr_t *stream, char *msg);
void rl_cuda_stream_destroy(int device, uintptr_t stream);

/* Blocks until everything queued on `stream` completed. */
int rl_cuda_stream_sync(int device, uintptr_t stream, char *msg);

/*
 * Device memory for callers without torch's allocator (the fake runtime's
 * tests): cudaMalloc / cudaFree (which may block) on `device`.
 */
int rl_cuda_malloc(int device, void **p, size_t n, char *msg);
void rl_cuda_free(int device, void *p);

#endif /* RL_CUDA_H */
