/*
 * source/memory.c - samples whose bytes are already in memory.
 *
 * DESIGN: the buffers are borrowed, not copied: the caller (the Python
 * binding keeps the bytes objects referenced) guarantees they outlive the
 * pipeline. A read is then only a pointer handed over, so the source has no
 * batch reads and nothing to release.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/source.h"

typedef struct memory_source {
    rl_source base;
    const uint8_t **data;
    size_t *len;
    char **names; /* NULL: "<memory i>" */
} memory_source;

static const char *memory_backend(const rl_source *s)
{
    (void)s;
    return "memory";
}

static const char *memory_reason(const rl_source *s)
{
    (void)s;
    return "";
}

static void memory_where(const rl_source *s, int64_t id, char *buf, size_t cap)
{
    memory_source *m = (memory_source *)s;
    bool named = m->names != NULL && id >= 0 && id < s->count;
    snprintf(buf, cap, "%s", named ? m->names[id] : "<memory>");
}

static void memory_read_one(rl_source *s, rl_fetch *x)
{
    memory_source *m = (memory_source *)s;
    x->data = m->data[x->id];
    x->len = m->len[x->id];
    x->status = 0;
}

static void memory_release(rl_source *s, rl_fetch *x)
{
    (void)s;
    x->data = NULL;
}

static void memory_destroy(rl_source *s)
{
    memory_source *m = (memory_source *)s;
    if (m->names != NULL) {
        for (int64_t i = 0; i < s->count; i++) {
            free(m->names[i]);
        }
    }
    free(m->names);
    free(m->data);
    free(m->len);
    free(m);
}

static const rl_source_ops memory_ops = {
    .backend = memory_backend,
    .backend_reason = memory_reason,
    .where = memory_where,
    .read_batch = NULL,
    .read_one = memory_read_one,
    .release = memory_release,
    .destroy = memory_destroy,
};

rl_source *rl_memory_source_create(const uint8_t *const *data,
                                   const size_t *len, const char *const *names,
                                   int64_t n)
{
    size_t count = n > 0 ? (size_t)n : 1;
    memory_source *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return NULL;
    }
    m->base.ops = &memory_ops;
    m->base.count = n;
    m->data = malloc(sizeof(*m->data) * count);
    m->len = malloc(sizeof(*m->len) * count);
    if (names != NULL) {
        m->names = calloc(count, sizeof(char *));
    }
    if (m->data == NULL || m->len == NULL ||
        (names != NULL && m->names == NULL)) {
        memory_destroy(&m->base);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        m->data[i] = data[i];
        m->len[i] = len[i];
        if (names != NULL && (m->names[i] = strdup(names[i])) == NULL) {
            memory_destroy(&m->base);
            return NULL;
        }
    }
    return &m->base;
}
