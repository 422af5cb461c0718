/* recipes.h - what the recipe tests share (tests/c/test_recipes.c): JPEGs
 * made in memory, a memory source of them, a pipeline configuration, and a
 * run of every batch of an epoch into one buffer. One file a recipe:
 * recipe_source.c, recipe_decoder.c, recipe_op.c, recipe_views.c. */
#ifndef RL_TEST_RECIPES_H
#define RL_TEST_RECIPES_H

#include "core/pipeline.h"
#include "jpegmake.h"

#define NJPEG 12
#define OUT_W 24
#define OUT_H 20
#define SAMPLE_U8 ((size_t)OUT_W * OUT_H * 3)

extern uint8_t *jpegs[NJPEG];
extern size_t jpeg_lens[NJPEG];

rl_source *memory_source(void);
/* The one view of the configs config() makes (each call starts it anew). */
extern rl_view recipe_view;
rl_pipeline_config config(int threads, rl_source *src);
void run_all(const rl_pipeline_config *cfg, int n, int bs, int64_t epoch,
             uint8_t *out, rl_pipeline_stats *st);

/* Each runs one recipe's test and returns the checks its file made. */
int test_source(void);
int test_decoder(void);
int test_op(void);
int test_views(void);

#endif /* RL_TEST_RECIPES_H */
