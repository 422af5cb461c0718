/*
 * testing/hooks.c - the test build's switches (testing/hooks.h).
 */
#define _GNU_SOURCE
#include "testing/hooks.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rl__test_hook(const char *var, const char *value)
{
    const char *v = getenv(var);
    return v != NULL && strcmp(v, value) == 0;
}

typedef void (*lock_note_fn)(int);

/* Looked up until found: the runtime is loaded only when a device
 * pipeline is made, after host pipelines may have taken their locks. */
static _Atomic(lock_note_fn) lock_note;

/* Pipeline locks this thread holds (a thread holds one at a time today;
 * counted, so that holding two would be seen too). */
static _Thread_local int locks_held;

int rl__test_locks_held(void)
{
    return locks_held;
}

void rl__test_unlocked(const char *call)
{
    if (locks_held != 0) {
        fprintf(stderr,
                "ringloader: the source's %s was called while this thread "
                "holds the pipeline's lock (core/pipeline_internal.h: never)\n",
                call);
        abort();
    }
}

void rl__test_lock_note(int delta)
{
    locks_held += delta;
    lock_note_fn f = atomic_load(&lock_note);
    if (f == NULL) {
        const char *path = getenv("RINGLOADER_CUDART");
        void *lib = path != NULL && path[0] != '\0'
                        ? dlopen(path, RTLD_NOW | RTLD_NOLOAD)
                        : NULL;
        if (lib == NULL) {
            return;
        }
        void *sym = dlsym(lib, "fake_cuda_lock_note");
        dlclose(lib); /* the runtime's own handle keeps it loaded */
        if (sym == NULL) {
            return;
        }
        memcpy(&f, &sym, sizeof(f));
        atomic_store(&lock_note, f);
    }
    f(delta);
}
