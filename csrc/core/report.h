/*
 * core/report.h - a done batch's report (core/report.c). Internal to
 * core/pipeline.c; rl_batch_report itself is core/pipeline.h's.
 */
#ifndef RL_CORE_REPORT_H
#define RL_CORE_REPORT_H

#include "core/pipeline_internal.h"

/* Fills rep from a done batch's jobs, without mu (it asks the source's
 * where() and allocates). Returns 0, the first failure's status
 * (rep->error filled; the fallback positions are listed all the same, so
 * the caller can say what was decoded how), or -ENOMEM. With fields, a
 * successful batch's field bytes move from its jobs into the report. */
int rl__report_make(const rl_pipeline *p, rl_batch *b, rl_batch_report *rep);

#endif /* RL_CORE_REPORT_H */
