/*
 * Capture shim around the librkllmrt.so double (fake_rkllm.c), for tests/test_rk_backend.py.
 *
 * Linked with fake_rkllm.c compiled with -Drkllm_run=fake_inner_rkllm_run (see
 * tests/doubles/rkllm_c.py): this rkllm_run keeps a copy of the EMBED input it is handed, so a
 * test can compare it bit for bit with the ONNX engine's spliced prompt embeddings, optionally
 * sleeps (a decoder that takes time, as on the board), then calls the double's rkllm_run.
 *
 * Test API (all exported):
 *   shim_set_hidden(hidden)   floats per embedding row (0: capture nothing)
 *   shim_set_delay_ms(ms)     sleep in every rkllm_run
 *   shim_n_tokens()           rows of the last EMBED input
 *   shim_embeds()             the last EMBED input, shim_n_tokens() x hidden floats
 *   shim_n_runs()             EMBED inputs kept since the last shim_set_hidden (at most MAX_RUNS)
 *   shim_run_n_tokens(k) / shim_run_embeds(k)  the k-th of them (0 = the first)
 */
#define _POSIX_C_SOURCE 199309L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef ABI_1_3
#include "rkllm_layouts_1_3.h"
#else
#include "rkllm_layouts_1_2.h"
#endif
#define EXPORT __attribute__((visibility("default")))
int fake_inner_rkllm_run(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *u);
#define MAX_RUNS 8
static float *cap[MAX_RUNS];
static size_t cap_n[MAX_RUNS], hidden;
static int n_runs, last = -1;
static long delay_ns;
EXPORT void shim_set_hidden(size_t h) { hidden = h; n_runs = 0; last = -1; }
EXPORT void shim_set_delay_ms(long ms) { delay_ns = ms * 1000000L; }
EXPORT size_t shim_n_tokens(void) { return last < 0 ? 0 : cap_n[last]; }
EXPORT const float *shim_embeds(void) { return last < 0 ? NULL : cap[last]; }
EXPORT int shim_n_runs(void) { return n_runs; }
EXPORT size_t shim_run_n_tokens(int k) { return k >= 0 && k < n_runs ? cap_n[k] : 0; }
EXPORT const float *shim_run_embeds(int k) { return k >= 0 && k < n_runs ? cap[k] : NULL; }
EXPORT int rkllm_run(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *u) {
    if (in && in->input_type == 2 && in->embed_input.embed && hidden) {
        int k = n_runs < MAX_RUNS ? n_runs++ : MAX_RUNS - 1;  /* past MAX_RUNS the last slot is reused */
        cap_n[k] = in->embed_input.n_tokens;
        cap[k] = realloc(cap[k], cap_n[k] * hidden * sizeof(float));
        memcpy(cap[k], in->embed_input.embed, cap_n[k] * hidden * sizeof(float));
        last = k;
    }
    if (delay_ns) {  /* a decoder that takes time, as on the board (ctypes releases the GIL) */
        struct timespec t = {delay_ns / 1000000000L, delay_ns % 1000000000L};
        nanosleep(&t, NULL);
    }
    return fake_inner_rkllm_run(h, in, ip, u);
}
