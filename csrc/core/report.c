/*
 * core/report.c - a done batch's report: what rl_pipeline_next() tells the
 * caller besides the slot (core/report.h, rl_batch_report in
 * core/pipeline.h).
 *
 * DESIGN. The jobs of a batch each leave their outcome in their rl__job
 * (status, message, the decoder used, the replacement the skip policy
 * found, the sample's field bytes); this file turns them into the one
 * report the owner reads: the ids and each position's random key (a
 * replacement's own), the positions a fallback decoded, the
 * replacements with why each first sample failed, the first failure that
 * fails the batch (named by the source's where()), the field bytes,
 * moved rather than copied, and, for a varying batch copied to a device,
 * where each sample lies in its buffer. It runs in next() after the batch
 * left the FIFO, without the pipeline's lock, since it asks the source
 * and allocates.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/report.h"

void rl_batch_report_free(rl_batch_report *r)
{
    free(r->ids);
    free(r->keys);
    free(r->fallback);
    free(r->replaced);
    for (int i = 0; r->fields != NULL && i < r->n; i++) {
        free(r->fields[i]);
    }
    free(r->fields);
    free(r->fields_len);
    free(r->places);
    r->places = NULL;
    r->spill_bytes = 0; /* spill and spill_owner: the caller's */
    r->fields = NULL;
    r->fields_len = NULL;
    r->ids = NULL;
    r->keys = NULL;
    r->fallback = NULL;
    r->replaced = NULL;
    r->n_fallback = r->n_replaced = 0;
}

static void describe(const rl_pipeline *p, const rl__job *j, rl_sample_error *e)
{
    e->status = j->status;
    e->pos = j->pos;
    e->id = j->fetch.id;
    rl__src_where(p, j->fetch.id, e->where, sizeof(e->where));
    snprintf(e->msg, sizeof(e->msg), "%s", j->msg);
}

/* Whether job j was decoded by a fallback (Pillow), not a native decoder. */
static bool by_fallback(const rl_pipeline *p, const rl__job *j)
{
    return j->decoder >= 0 &&
           rl_decoder_is_fallback(p->cfg.decoders.defs[j->decoder]);
}

/* A successful batch's field bytes moved from its jobs into rep->fields
 * (the caller's to free). Returns 0 or -ENOMEM. */
static int report_fields(rl_batch *b, rl_batch_report *rep)
{
    rep->fields = calloc((size_t)b->n, sizeof(uint8_t *));
    rep->fields_len = calloc((size_t)b->n, sizeof(size_t));
    if (rep->fields == NULL || rep->fields_len == NULL) {
        return -ENOMEM;
    }
    for (int i = 0; i < b->n; i++) {
        rep->fields[i] = b->jobs[i].fields;
        rep->fields_len[i] = b->jobs[i].fields_len;
        b->jobs[i].fields = NULL; /* the report's now */
    }
    return 0;
}

/* A varying device batch's samples' places: their offsets in the arena,
 * which the copy keeps in the device buffer, or, for those past it, one
 * after the other (each RL_PLACE_VIEW_ALIGN-aligned) in the batch's spill
 * buffer, whose size is then rep->spill_bytes. 0 or -ENOMEM. */
static int report_places(const rl_batch *b, rl_batch_report *rep)
{
    rep->places = malloc(sizeof(rl_sample_place) * (size_t)b->n);
    if (rep->places == NULL) {
        return -ENOMEM;
    }
    for (int i = 0; i < b->n; i++) {
        rl_sample_place *at = &rep->places[i];
        const rl__placed *placed = &b->slot->placed[i];
        at->w = placed->w;
        at->h = placed->h;
        at->spilled = placed->own != NULL;
        if (at->spilled) {
            at->offset = rep->spill_bytes;
            rep->spill_bytes += (placed->bytes + RL_PLACE_VIEW_ALIGN - 1) /
                                RL_PLACE_VIEW_ALIGN * RL_PLACE_VIEW_ALIGN;
        } else {
            at->offset = (size_t)(placed->data - b->slot->data);
        }
    }
    return 0;
}

/* Fills rep from a done batch's jobs. Returns 0, the first failure's
 * status (rep->error filled; the fallback positions are listed all the
 * same, so the caller can say what was decoded how), or -ENOMEM. */
int rl__report_make(const rl_pipeline *p, rl_batch *b, rl_batch_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->n = b->n;
    rep->ticket = b->ticket;
    rep->error.pos = -1;
    rep->error.id = -1;
    int nfb = 0, nrep = 0;
    for (int i = 0; i < b->n; i++) {
        nfb += by_fallback(p, &b->jobs[i]);
        nrep += b->jobs[i].replaced_by >= 0;
    }
    rep->ids = malloc(sizeof(int64_t) * (size_t)b->n);
    rep->keys = malloc(sizeof(int64_t) * (size_t)b->n);
    rep->fallback = nfb ? malloc(sizeof(int) * (size_t)nfb) : NULL;
    rep->replaced = nrep ? malloc(sizeof(rl_replacement) * (size_t)nrep) : NULL;
    if (rep->ids == NULL || rep->keys == NULL ||
        (nfb && rep->fallback == NULL) || (nrep && rep->replaced == NULL)) {
        rl_batch_report_free(rep);
        rep->error.status = -ENOMEM;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "out of memory");
        return -ENOMEM;
    }
    int status = 0;
    for (int i = 0; i < b->n; i++) {
        const rl__job *j = &b->jobs[i];
        rep->ids[i] = j->fetch.id;
        rep->keys[i] = j->replaced_by >= 0 ? j->replaced_key : j->key;
        if (by_fallback(p, j)) {
            rep->fallback[rep->n_fallback++] = i;
        }
        if (j->replaced_by >= 0) {
            rl_replacement *r = &rep->replaced[rep->n_replaced++];
            r->id = j->replaced_by;
            describe(p, j, &r->error);
            r->error.status = j->first_status;
        }
        if (status == 0 && rl__job_fails_batch(j)) {
            describe(p, j, &rep->error);
            status = j->status;
        }
    }
    if (status == 0 && b->copy_status != 0) {
        rep->error.status = status = b->copy_status;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "%s", b->copy_msg);
    }
    bool places = p->varying && p->cfg.deliver->device;
    if ((status == 0 && places && report_places(b, rep) != 0) ||
        (status == 0 && rl__has_fields(p) && report_fields(b, rep) != 0)) {
        rl_batch_report_free(rep);
        rep->error.status = status = -ENOMEM;
        snprintf(rep->error.msg, sizeof(rep->error.msg), "out of memory");
    }
    return status;
}
