/*
 * Test double of librkllmrt.so, built and driven by tests/doubles/rkllm_c.py
 * (tests/test_rkllm_protocol.py, tests/test_rk_backend.py, tests/test_rk_aligner.py).
 *
 * Exports the runtime's symbols with the struct layouts of one ABI
 * (build with -DABI_1_3 for 1.3.x, default 1.2.1-1.2.3), checks everything the
 * binding hands it and records violations in a text report, and replays a token
 * script through the result callback (GENERATE mode) or returns hidden states
 * (GET_LAST_HIDDEN_LAYER mode, below).
 *
 * Several handles may be live at once (the engine's ASR decoder and its forced aligner
 * are two RKLLM models in one process; runtime 1.2.2+ documents multi-instance use).
 * Each handle has its own parameters, callback, run state and KV-cache state; the test
 * API (expectations, script, options, report) is shared. A handle is never reused after
 * rkllm_destroy, so a stale handle is always caught.
 *
 * Build options:
 *   -DABI_1_3                     1.3.x layouts (RKLLMCallback struct, per-run max_new_tokens)
 *   -DFAKE_VERSION_STRING='"1.3.0"'  embed the literal "rkllm-runtime version: 1.3.0"
 *   -DFAKE_PRE_121                omit the symbols first exported by runtime 1.2.1
 *
 * Test API (all exported):
 *   fake_reset()                        forget everything (handles, expectations, script, options)
 *   fake_expect(name, value)            expected value of a param/run field, see field_value();
 *                                       run fields: keep_history, run_max_new_tokens,
 *                                       keep_system_prompt, mode (infer mode; default 0),
 *                                       mode_mask (bit m set: mode m allowed; over "mode")
 *   fake_expect_for(model_path, name, value)  the same, only for handles of that model file
 *                                       (overrides a global expectation of the same name)
 *   fake_expect_model_path(path)        every rkllm_init must name this model file
 *   fake_expect_embed(n_tokens, hidden, seed)  embeddings must equal fake_pattern_bits()
 *   fake_set_script(text)               ';'-separated items, see parse_script(); 0 = ok
 *   fake_set_option(name, value)        init_rc template_rc run_rc abort_rc clear_rc destroy_rc
 *                                       abort_run_rc abort_sends_finish(1), and for
 *                                       GET_LAST_HIDDEN_LAYER: embd_size hidden_empty_first
 *                                       hidden_rows(-1) hidden_embd hidden_token_after hidden_error
 *   fake_set_hidden_norm(weight, n, eps) return post-norm rows (n = 0: pre-norm, the default)
 *   fake_set_logits(rows, n_rows, vocab) the logits a GET_LOGITS run returns for its last n_rows
 *                                       input rows (row-major n_rows x vocab floats, copied)
 *   fake_get_report()                   "CALL ...", "EVENT ...", "VIOLATION ..." lines
 *
 * Abort: rkllm_abort only sets a flag; the replay checks it after each callback, sends
 * no further tokens, then (abort_sends_finish=1, default) a FINISH whose perf counts the
 * tokens sent, and rkllm_run returns abort_run_rc.  Whether the real runtime sends FINISH
 * after an abort is not documented; the binding must cope with both (docs/rkllm_abi.md).
 * Callback return values: 0 continue, 1 pause (run returns 0, no FINISH), 2 (1.3 only)
 * release the buffer and continue; anything else is a violation.
 *
 * GET_LAST_HIDDEN_LAYER (infer mode 1): the mode must be expected (fake_expect("mode", 1),
 * or fake_expect_for), keep_history must be 0, the handle's KV cache must have been cleared
 * since its previous run (rknn-llm issue #278: without it only the first EMBED run was
 * right) and the test must have set the model's width (option embd_size = E). The token
 * script is not used. The run sends, through the result callback:
 *   1. hidden_empty_first = 1: a NORMAL result with hidden_states NULL and num_tokens 0
 *      (issue #278 saw such a callback before the real one); = 2: a non-NULL pointer with
 *      embd_size E and num_tokens 0;
 *   2. one NORMAL result with token_id 9707, text "Hello" (a generated token, to be ignored)
 *      and last_hidden_layer = {buffer, E, n_tokens}: row i, column j of the buffer is
 *          f(x)[i][j] = 2 x[i][j] - x[i][(j + 1) % E] + (i + 1) / 64
 *      in float32, evaluated left to right, x being the EMBED input (n_tokens x E). With
 *      fake_set_hidden_norm(w, E, eps) each row r is then replaced by the final RMSNorm
 *      w[j] * r[j] / sqrt(mean(r^2) + eps) (mean in double), i.e. post-norm rows.
 *      hidden_rows = k >= 0 reports k rows instead (0: this result is not sent at all);
 *      hidden_embd = e > 0 reports width e (columns past E are 0);
 *   3. hidden_token_after = 1: a NORMAL result with token 87 "x" and no hidden states;
 *   4. FINISH with perf {prefill 0.25 ms per token, n_tokens, 0 ms, 1 token, 100.5 MB},
 *      or ERROR instead when hidden_error = 1.
 * After every callback the buffer is overwritten with -7.5 (and the text with 'X'): the
 * runtime frees it at the next callback, so a binding that keeps the pointer instead of
 * copying the rows reads -7.5. The buffer stays allocated until fake_reset.
 *
 * GET_LOGITS (infer mode 2), for draft verification: expected mode, keep_history 0 and a
 * cleared cache as above; the test must have given the logits of the last input rows
 * (fake_set_logits; the input must have at least that many rows). The run sends one NORMAL
 * result (token 9707 "Hello", to be ignored) with logits = {buffer, vocab, R} where R is the
 * number of input rows (option logits_rows = k >= 0: k rows, the last k, as a runtime that
 * returns only the last row would), then FINISH with perf {prefill 0.25 ms per token, n_tokens,
 * 0 ms, 1 token, 100.5 MB} (ERROR instead with option logits_error = 1). In the buffer the last rows are the test's; every earlier row i
 * is 0 but 100 at column (7919 i) % vocab, so a binding that reads the wrong rows picks other
 * ids. Scribbled after the callback like the hidden states.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ABI_1_3
#include "rkllm_layouts_1_3.h"
#else
#include "rkllm_layouts_1_2.h"
#endif

#define EXPORT __attribute__((visibility("default")))
#define MAX_EXPECT 64
#define MAX_ITEMS 1024
#define MAX_TEXT 64
#define MAX_HANDLES 64
#define MAX_PATH_LEN 512
#define SCRIBBLE (-7.5f)

#ifdef FAKE_VERSION_STRING
__attribute__((used)) static const char fake_version_banner[] =
    "rkllm-runtime version: " FAKE_VERSION_STRING;
#endif

/* 16-byte aligned so the low byte of their address is never 1 (see the ABI probe) */
#ifndef ABI_1_3
__attribute__((aligned(16))) static const char img_start_default[] = "<img>";
__attribute__((aligned(16))) static const char img_end_default[] = "</img>";
__attribute__((aligned(16))) static const char img_content_default[] = "<unk>";
#endif

typedef struct { char scope[MAX_PATH_LEN]; char name[48]; double value; } Expect;
typedef struct {
    char kind;                   /* N normal, W waiting, F finish, E error */
    int token_id;
    unsigned char text[MAX_TEXT];
    size_t text_len;
    RKLLMPerfStat perf;
} Item;

/* one model handle; its address is the LLMHandle given to the binding */
typedef struct {
    int destroyed, template_set, running, abort_requested, generated, cache_dirty;
    RKLLMParam param;
    char model_path[MAX_PATH_LEN];
    LLMResultCallback cb;
#ifdef ABI_1_3
    RKLLMCallback *cb_struct;
    RKLLMCallback cb_copy;
#endif
} Handle;

static Handle H[MAX_HANDLES];

static struct {
    int n_handles;               /* H[0 .. n_handles-1] were handed out, live or destroyed */
    Expect expect[MAX_EXPECT];
    int n_expect;
    char model_path[MAX_PATH_LEN];
    int have_model_path;
    size_t embed_n, embed_hidden;
    unsigned embed_seed;
    int have_embed;
    Item items[MAX_ITEMS];
    int n_items;
    int opt_init_rc, opt_template_rc, opt_run_rc, opt_abort_rc, opt_clear_rc, opt_destroy_rc;
    int opt_abort_run_rc, opt_abort_sends_finish;
    int opt_embd_size, opt_hidden_empty_first, opt_hidden_rows, opt_hidden_embd;
    int opt_hidden_token_after, opt_hidden_error, opt_logits_rows, opt_logits_error;
    float *logits;               /* fake_set_logits: the last rows' logits */
    size_t logits_rows, logits_vocab;
    float *norm;                 /* fake_set_hidden_norm: post-norm rows */
    size_t norm_n;
    float norm_eps;
    float *hidden;               /* the last hidden-state buffer (scribbled after each callback) */
    size_t hidden_cap;
    char *report;
    size_t report_len, report_cap;
} S;

static void say(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    if (S.report_len + n + 1 > S.report_cap) {
        size_t cap = S.report_cap ? S.report_cap * 2 : 4096;
        while (cap < S.report_len + n + 1) cap *= 2;
        S.report = realloc(S.report, cap);
        S.report_cap = cap;
    }
    memcpy(S.report + S.report_len, line, n);
    S.report_len += n;
    S.report[S.report_len] = 0;
}
#define VIOLATION(...) say("VIOLATION " __VA_ARGS__)

EXPORT const char *fake_abi(void) { return RKLLM_LAYOUT_ABI; }

EXPORT void fake_reset(void) {
    free(S.report);
    free(S.norm);
    free(S.hidden);
    free(S.logits);
    memset(&S, 0, sizeof S);
    memset(H, 0, sizeof H);
    S.opt_abort_sends_finish = 1;
    S.opt_hidden_rows = -1;
    S.opt_logits_rows = -1;
}

EXPORT void fake_set_logits(const float *rows, size_t n_rows, size_t vocab) {
    free(S.logits);
    S.logits = NULL;
    S.logits_rows = S.logits_vocab = 0;
    if (rows && n_rows && vocab) {
        S.logits = malloc(n_rows * vocab * sizeof(float));
        memcpy(S.logits, rows, n_rows * vocab * sizeof(float));
        S.logits_rows = n_rows;
        S.logits_vocab = vocab;
    }
}

EXPORT const char *fake_get_report(void) { return S.report ? S.report : ""; }

EXPORT void fake_expect_for(const char *scope, const char *name, double value) {
    if (!scope) scope = "";
    for (int i = 0; i < S.n_expect; i++)
        if (!strcmp(S.expect[i].name, name) && !strcmp(S.expect[i].scope, scope)) {
            S.expect[i].value = value;
            return;
        }
    if (S.n_expect == MAX_EXPECT) { VIOLATION("too many expectations"); return; }
    Expect *x = &S.expect[S.n_expect++];
    snprintf(x->scope, sizeof x->scope, "%s", scope);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->value = value;
}

EXPORT void fake_expect(const char *name, double value) { fake_expect_for("", name, value); }

EXPORT void fake_expect_model_path(const char *path) {
    snprintf(S.model_path, sizeof S.model_path, "%s", path);
    S.have_model_path = 1;
}

EXPORT void fake_expect_embed(size_t n_tokens, size_t hidden, unsigned seed) {
    S.embed_n = n_tokens;
    S.embed_hidden = hidden;
    S.embed_seed = seed;
    S.have_embed = 1;
}

EXPORT void fake_set_hidden_norm(const float *weight, size_t n, float eps) {
    free(S.norm);
    S.norm = NULL;
    S.norm_n = 0;
    if (n && weight) {
        S.norm = malloc(n * sizeof(float));
        memcpy(S.norm, weight, n * sizeof(float));
        S.norm_n = n;
        S.norm_eps = eps;
    }
}

/* bits of float i of the test pattern; tests/test_rkllm_protocol.py computes the same */
EXPORT unsigned fake_pattern_bits(unsigned seed, unsigned i) {
    unsigned h = (i + seed) * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    unsigned exponent = 112u + ((h >> 23) & 15u); /* |x| in [2^-15, 2) */
    return (h & 0x807FFFFFu) | (exponent << 23);
}

EXPORT void fake_set_option(const char *name, int value) {
    if (!strcmp(name, "init_rc")) S.opt_init_rc = value;
    else if (!strcmp(name, "template_rc")) S.opt_template_rc = value;
    else if (!strcmp(name, "run_rc")) S.opt_run_rc = value;
    else if (!strcmp(name, "abort_rc")) S.opt_abort_rc = value;
    else if (!strcmp(name, "clear_rc")) S.opt_clear_rc = value;
    else if (!strcmp(name, "destroy_rc")) S.opt_destroy_rc = value;
    else if (!strcmp(name, "abort_run_rc")) S.opt_abort_run_rc = value;
    else if (!strcmp(name, "abort_sends_finish")) S.opt_abort_sends_finish = value;
    else if (!strcmp(name, "embd_size")) S.opt_embd_size = value;
    else if (!strcmp(name, "hidden_empty_first")) S.opt_hidden_empty_first = value;
    else if (!strcmp(name, "hidden_rows")) S.opt_hidden_rows = value;
    else if (!strcmp(name, "hidden_embd")) S.opt_hidden_embd = value;
    else if (!strcmp(name, "hidden_token_after")) S.opt_hidden_token_after = value;
    else if (!strcmp(name, "hidden_error")) S.opt_hidden_error = value;
    else if (!strcmp(name, "logits_rows")) S.opt_logits_rows = value;
    else if (!strcmp(name, "logits_error")) S.opt_logits_error = value;
    else VIOLATION("fake_set_option: unknown option %s", name);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/*
 * Items separated by ';':
 *   N <token_id> <hex bytes>   NORMAL with that text ("-" = empty text)
 *   W <token_id> <hex bytes>   WAITING (text = the incomplete bytes)
 *   F <prefill_ms> <prefill_tokens> <generate_ms> <generate_tokens> <memory_mb>   FINISH
 *   E                          ERROR
 */
EXPORT int fake_set_script(const char *script) {
    S.n_items = 0;
    const char *p = script;
    while (*p) {
        while (*p == ' ' || *p == ';' || *p == '\n') p++;
        if (!*p) break;
        if (S.n_items == MAX_ITEMS) { VIOLATION("script too long"); return -1; }
        Item *it = &S.items[S.n_items];
        memset(it, 0, sizeof *it);
        it->kind = *p++;
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char buf[512];
        if (len >= sizeof buf) { VIOLATION("script item too long"); return -1; }
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len;
        if (it->kind == 'N' || it->kind == 'W') {
            char hex[2 * MAX_TEXT + 2];
            if (sscanf(buf, "%d %130s", &it->token_id, hex) != 2) goto bad;
            if (strcmp(hex, "-")) {
                size_t hl = strlen(hex);
                if (hl % 2 || hl / 2 >= MAX_TEXT) goto bad;
                for (size_t i = 0; i < hl / 2; i++) {
                    int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
                    if (a < 0 || b < 0) goto bad;
                    it->text[i] = (unsigned char)(a * 16 + b);
                }
                it->text_len = hl / 2;
            }
        } else if (it->kind == 'F') {
            RKLLMPerfStat *f = &it->perf;
            if (sscanf(buf, "%f %d %f %d %f", &f->prefill_time_ms, &f->prefill_tokens,
                       &f->generate_time_ms, &f->generate_tokens, &f->memory_usage_mb) != 5)
                goto bad;
        } else if (it->kind != 'E') {
            goto bad;
        }
        S.n_items++;
    }
    return 0;
bad:
    VIOLATION("bad script item near: %.40s", p);
    S.n_items = 0;
    return -1;
}

/* ------------------------------------------------------------------ checks */

static int field_value(const RKLLMParam *p, const char *name, double *out) {
    const RKLLMExtendParam *e = &p->extend_param;
#define F(n, expr) if (!strcmp(name, n)) { *out = (double)(expr); return 1; }
    F("max_context_len", p->max_context_len) F("max_new_tokens", p->max_new_tokens)
    F("top_k", p->top_k) F("n_keep", p->n_keep) F("top_p", p->top_p)
    F("temperature", p->temperature) F("repeat_penalty", p->repeat_penalty)
    F("frequency_penalty", p->frequency_penalty) F("presence_penalty", p->presence_penalty)
    F("mirostat", p->mirostat) F("skip_special_token", p->skip_special_token)
    F("is_async", p->is_async)
#ifdef ABI_1_3
    F("ignore_eos_token", p->ignore_eos_token)
#endif
    F("base_domain_id", e->base_domain_id) F("embed_flash", e->embed_flash)
    F("enabled_cpus_num", e->enabled_cpus_num) F("enabled_cpus_mask", e->enabled_cpus_mask)
    F("n_batch", e->n_batch) F("use_cross_attn", e->use_cross_attn)
#undef F
    return 0;
}

static int is_run_expectation(const char *name) {
    return !strcmp(name, "keep_history") || !strcmp(name, "run_max_new_tokens") ||
           !strcmp(name, "keep_system_prompt") || !strcmp(name, "mode") || !strcmp(name, "mode_mask");
}

/* the expectation of ``name`` for handle hd: one scoped to its model file, else a global one */
static const Expect *find_expect(const Handle *hd, const char *name) {
    const Expect *global = NULL;
    for (int i = 0; i < S.n_expect; i++) {
        const Expect *x = &S.expect[i];
        if (strcmp(x->name, name)) continue;
        if (!x->scope[0]) global = x;
        else if (hd && !strcmp(x->scope, hd->model_path)) return x;
    }
    return global;
}

static void check_params(const Handle *hd) {
    for (int i = 0; i < S.n_expect; i++) {
        const Expect *x = &S.expect[i];
        double got;
        if (is_run_expectation(x->name)) continue;
        if (find_expect(hd, x->name) != x) continue; /* another scope's, or overridden */
        if (!field_value(&hd->param, x->name, &got)) { VIOLATION("unknown expectation %s", x->name); continue; }
        /* float fields compare as float: the binding stores the value into a C float */
        if ((float)got != (float)x->value)
            VIOLATION("param %s = %.9g, expected %.9g", x->name, got, x->value);
    }
    if (S.have_model_path && strcmp(hd->model_path, S.model_path))
        VIOLATION("param model_path = %s, expected %s", hd->model_path, S.model_path);
}

/* the live handle h, or NULL after recording why it is not one */
static Handle *valid_handle(const char *fn, LLMHandle h) {
    for (int i = 0; i < S.n_handles; i++) {
        if (h != (LLMHandle)&H[i]) continue;
        if (H[i].destroyed) {
            if (!strcmp(fn, "rkllm_destroy")) VIOLATION("rkllm_destroy called twice");
            else VIOLATION("%s after rkllm_destroy", fn);
            return NULL;
        }
        return &H[i];
    }
    if (!S.n_handles) VIOLATION("%s before rkllm_init", fn);
    else VIOLATION("%s with a wrong handle", fn);
    return NULL;
}

static int handle_index(const Handle *hd) { return (int)(hd - H); }

/* ------------------------------------------------------------ runtime API */

EXPORT RKLLMParam rkllm_createDefaultParam(void) {
    RKLLMParam p;
    memset(&p, 0, sizeof p);
    p.max_context_len = 512;
    p.max_new_tokens = -1;
    p.top_k = 40;
    p.n_keep = -1;
    p.top_p = 0.9f;
    p.temperature = 0.8f;
    p.repeat_penalty = 1.1f;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.1f;
    p.skip_special_token = true;
#ifndef ABI_1_3
    p.img_start = img_start_default;
    p.img_end = img_end_default;
    p.img_content = img_content_default;
#endif
    p.extend_param.enabled_cpus_num = 4;
    p.extend_param.enabled_cpus_mask = 0xF0;
    p.extend_param.n_batch = 1;
    say("CALL rkllm_createDefaultParam");
    return p;
}

#ifdef ABI_1_3
EXPORT int rkllm_init(LLMHandle *handle, RKLLMParam *param, RKLLMCallback *callback)
#else
EXPORT int rkllm_init(LLMHandle *handle, RKLLMParam *param, LLMResultCallback callback)
#endif
{
    say("CALL rkllm_init");
#ifdef FAKE_VERSION_STRING
    say("EVENT %s", fake_version_banner);
#endif
    if (!handle || !param) { VIOLATION("rkllm_init with a NULL handle or param pointer"); return -1; }
    *handle = NULL;
    if (S.n_handles == MAX_HANDLES) { VIOLATION("more than %d rkllm_init calls", MAX_HANDLES); return -1; }
    Handle *hd = &H[S.n_handles];
    memset(hd, 0, sizeof *hd);
    hd->param = *param;
    snprintf(hd->model_path, sizeof hd->model_path, "%s", param->model_path ? param->model_path : "(null)");
    check_params(hd);
#ifdef ABI_1_3
    if (!callback || !callback->result_callback) {
        VIOLATION("rkllm_init without a result callback");
        return -1;
    }
    if (callback->tokenizer_callback || callback->embed_callback)
        VIOLATION("rkllm_init with a tokenizer/embed callback (the model has its own)");
    hd->cb_struct = callback;
    hd->cb_copy = *callback;
    hd->cb = callback->result_callback;
#else
    if (!callback) { VIOLATION("rkllm_init without a result callback"); return -1; }
    hd->cb = callback;
#endif
    if (S.opt_init_rc) return S.opt_init_rc;
    S.n_handles++;
    int live = 0;
    for (int i = 0; i < S.n_handles; i++) live += !H[i].destroyed;
    say("EVENT init handle=%d model=%s live=%d", handle_index(hd), hd->model_path, live);
    *handle = (LLMHandle)hd;
    return 0;
}

EXPORT int rkllm_set_chat_template(LLMHandle h, const char *system, const char *prefix,
                                   const char *postfix) {
    say("CALL rkllm_set_chat_template");
    Handle *hd = valid_handle("rkllm_set_chat_template", h);
    if (!hd) return -1;
    if (!system || !prefix || !postfix || system[0] || prefix[0] || postfix[0])
        VIOLATION("chat template is not (\"\", \"\", \"\")");
    else
        hd->template_set = 1;
    return S.opt_template_rc;
}

static int call_back(Handle *hd, RKLLMResult *res, void *userdata, LLMCallState state) {
#ifdef ABI_1_3
    if (hd->cb_struct->result_callback != hd->cb_copy.result_callback)
        VIOLATION("RKLLMCallback struct changed or freed after rkllm_init");
    if (!userdata) userdata = hd->cb_copy.result_userdata;
#endif
    int ret = hd->cb(res, userdata, state);
    if (ret == 2) {
#ifndef ABI_1_3
        VIOLATION("callback returned 2 (only defined by runtime 1.3)");
#endif
        say("EVENT callback released the buffer (returned 2)");
        ret = 0;
    } else if (ret != 0 && ret != 1) {
        VIOLATION("callback returned %d", ret);
        ret = 0;
    }
    return ret;
}

static const char *mode_name(int mode) {
    return mode == 0 ? "GENERATE" : mode == 1 ? "GET_LAST_HIDDEN_LAYER" : mode == 2 ? "GET_LOGITS" : "?";
}

static void check_run_input(Handle *hd, const RKLLMInput *in, const RKLLMInferParam *ip) {
    if (!hd->template_set) VIOLATION("rkllm_run before rkllm_set_chat_template(\"\", \"\", \"\")");
    if (!in->role || in->role[0]) VIOLATION("role is not \"\"");
    if (in->enable_thinking) VIOLATION("enable_thinking is true");
    const Expect *mm = find_expect(hd, "mode_mask");
    const Expect *md = find_expect(hd, "mode");
    int want_mode = md ? (int)md->value : 0;
    if (mm) {
        if (ip->mode < 0 || ip->mode > 2 || !(((int)mm->value >> ip->mode) & 1))
            VIOLATION("infer mode = %d (%s), not one of the mask %d", ip->mode, mode_name(ip->mode), (int)mm->value);
    } else if (ip->mode != want_mode) {
        VIOLATION("infer mode = %d, expected %d (%s)", ip->mode, want_mode, mode_name(want_mode));
    }
    if (in->input_type != 2) { VIOLATION("input_type = %d, expected 2 (EMBED)", in->input_type); return; }
    const float *x = in->embed_input.embed;
    size_t n = in->embed_input.n_tokens;
    say("EVENT run handle=%d mode=%d n_tokens=%zu", handle_index(hd), ip->mode, n);
    if (!x) VIOLATION("embed pointer is NULL");
    if (S.have_embed) {
        if (n != S.embed_n) {
            VIOLATION("n_tokens = %zu, expected %zu", n, S.embed_n);
        } else if (x) {
            size_t total = S.embed_n * S.embed_hidden;
            for (size_t i = 0; i < total; i++) {
                unsigned bits;
                memcpy(&bits, &x[i], 4);
                unsigned want = fake_pattern_bits(S.embed_seed, (unsigned)i);
                if (bits != want) {
                    VIOLATION("embed[%zu] bits %08x, expected %08x", i, bits, want);
                    break;
                }
            }
        }
    }
    if (ip->lora_params) VIOLATION("lora_params is not NULL");
    if (ip->prompt_cache_params) VIOLATION("prompt_cache_params is not NULL");
    const Expect *kh = find_expect(hd, "keep_history");
    if (kh && ip->keep_history != (int)kh->value)
        VIOLATION("keep_history = %d, expected %d", ip->keep_history, (int)kh->value);
#ifdef ABI_1_3
    if (ip->sampling_params) VIOLATION("sampling_params is not NULL");
    const Expect *mx = find_expect(hd, "run_max_new_tokens");
    if (mx && ip->max_new_tokens != (int)mx->value)
        VIOLATION("infer max_new_tokens = %d, expected %d", ip->max_new_tokens, (int)mx->value);
#endif
}

/* end of a run after rkllm_abort: FINISH or not (option), rkllm_run's code */
static int end_aborted(Handle *hd, void *userdata) {
    say("EVENT aborted after %d tokens", hd->generated);
    if (S.opt_abort_sends_finish) {
        RKLLMResult res;
        memset(&res, 0, sizeof res);
        res.perf.generate_tokens = hd->generated;
        call_back(hd, &res, userdata, 2);
    }
    hd->running = 0;
    return S.opt_abort_run_rc;
}

static void scribble(float *buf, size_t n, char *text) {
    for (size_t i = 0; i < n; i++) buf[i] = SCRIBBLE;
    memset(text, 'X', MAX_TEXT);
    text[MAX_TEXT] = 0;
}

/* the hidden-state rows f(x) (post-norm with fake_set_hidden_norm) into buf, zeros elsewhere */
static void fill_hidden(float *buf, size_t cap, const float *x, size_t n, size_t E, size_t rows, size_t width) {
    memset(buf, 0, cap * sizeof(float));
    for (size_t i = 0; i < rows && i < n; i++) {
        const float *xi = x + i * E;
        float *out = buf + i * width;
        for (size_t j = 0; j < E && j < width; j++)
            out[j] = 2.0f * xi[j] - xi[(j + 1) % E] + (float)(i + 1) / 64.0f;
        if (S.norm_n == E && width == E) {
            double ms = 0.0;
            for (size_t j = 0; j < width; j++) ms += (double)out[j] * (double)out[j];
            float inv = (float)(1.0 / sqrt(ms / (double)E + (double)S.norm_eps));
            for (size_t j = 0; j < width; j++) out[j] = S.norm[j] * (out[j] * inv);
        }
    }
}

/* a GET_LAST_HIDDEN_LAYER or GET_LOGITS run is independent: keep_history 0, the cache cleared since
 * the handle's previous run (rknn-llm issue #278: without it only the first EMBED run was right) */
static void check_prefill(const Handle *hd, const RKLLMInferParam *ip) {
    const char *mode = mode_name(ip->mode);
    if (ip->keep_history != 0)
        VIOLATION("%s run with keep_history = %d (these runs are independent)", mode, ip->keep_history);
    if (hd->cache_dirty)
        VIOLATION("%s run on a KV cache not cleared since the previous run (rknn-llm issue #278)", mode);
}

/* the end of such a run: FINISH with perf {0.25 ms per token, n tokens, 0 ms, 1 token, 100.5 MB},
 * or ERROR (error != 0); rkllm_run's code */
static int end_prefill(Handle *hd, void *userdata, size_t n, int error) {
    RKLLMResult res;
    memset(&res, 0, sizeof res);
    if (error) {
        call_back(hd, &res, userdata, 3);
    } else {
        res.perf.prefill_time_ms = 0.25f * (float)n;
        res.perf.prefill_tokens = (int)n;
        res.perf.generate_tokens = 1;
        res.perf.memory_usage_mb = 100.5f;
        call_back(hd, &res, userdata, 2);
    }
    hd->running = 0;
    hd->cache_dirty = 1;
    return S.opt_run_rc;
}

/* GET_LAST_HIDDEN_LAYER: the hidden-state protocol in the header comment */
static int run_hidden(Handle *hd, const RKLLMInput *in, const RKLLMInferParam *ip, void *userdata) {
    const float *x = in->embed_input.embed;
    size_t n = in->embed_input.n_tokens;
    int E = S.opt_embd_size;
    if (E <= 0) {
        VIOLATION("GET_LAST_HIDDEN_LAYER run but the test set no embd_size (fake_set_option)");
        return -1;
    }
    if (!x || !n) return -1;  /* reported by check_run_input */
    check_prefill(hd, ip);
    if (S.norm_n && S.norm_n != (size_t)E)
        VIOLATION("fake_set_hidden_norm got %zu weights, embd_size is %d", S.norm_n, E);
    size_t rows = S.opt_hidden_rows < 0 ? n : (size_t)S.opt_hidden_rows;
    size_t width = S.opt_hidden_embd > 0 ? (size_t)S.opt_hidden_embd : (size_t)E;
    size_t need = (rows > n ? rows : n) * (width > (size_t)E ? width : (size_t)E) + 1;
    if (need > S.hidden_cap) {
        S.hidden = realloc(S.hidden, need * sizeof(float));
        S.hidden_cap = need;
    }
    float *buf = S.hidden;
    hd->running = 1;
    hd->abort_requested = 0;
    hd->generated = 0;
    RKLLMResult res;
    char text[MAX_TEXT + 1];
    int ret = 0;
    if (S.opt_hidden_empty_first) {
        memset(&res, 0, sizeof res);
        strcpy(text, "");
        res.text = text;
        if (S.opt_hidden_empty_first == 2) {
            res.last_hidden_layer.hidden_states = buf;
            res.last_hidden_layer.embd_size = E;
        }
        ret = call_back(hd, &res, userdata, 0);
        scribble(buf, need, text);
        if (ret == 1) goto paused;
        if (hd->abort_requested) return end_aborted(hd, userdata);
    }
    if (rows > 0) {
        fill_hidden(buf, need, x, n, (size_t)E, rows, width);
        memset(&res, 0, sizeof res);
        strcpy(text, "Hello");
        res.text = text;
        res.token_id = 9707;
        res.last_hidden_layer.hidden_states = buf;
        res.last_hidden_layer.embd_size = (int)width;
        res.last_hidden_layer.num_tokens = (int)rows;
        say("EVENT hidden states rows=%zu embd_size=%zu norm=%s", rows, width,
            S.norm_n == (size_t)E ? "post" : "pre");
        ret = call_back(hd, &res, userdata, 0);
        hd->generated++;
        scribble(buf, need, text);
        if (ret == 1) goto paused;
        if (hd->abort_requested) return end_aborted(hd, userdata);
    }
    if (S.opt_hidden_token_after) {
        memset(&res, 0, sizeof res);
        strcpy(text, "x");
        res.text = text;
        res.token_id = 87;
        ret = call_back(hd, &res, userdata, 0);
        hd->generated++;
        scribble(buf, need, text);
        if (ret == 1) goto paused;
        if (hd->abort_requested) return end_aborted(hd, userdata);
    }
    return end_prefill(hd, userdata, n, S.opt_hidden_error);
paused:
    say("EVENT paused after %d tokens", hd->generated);
    hd->running = 0;
    hd->cache_dirty = 1;
    return 0;
}

/* GET_LOGITS: the protocol in the header comment */
static int run_logits(Handle *hd, const RKLLMInput *in, const RKLLMInferParam *ip, void *userdata) {
    size_t n = in->embed_input.n_tokens;
    if (!in->embed_input.embed || !n) return -1;  /* reported by check_run_input */
    check_prefill(hd, ip);
    if (!S.logits) {
        VIOLATION("GET_LOGITS run but the test gave no logits (fake_set_logits)");
        return -1;
    }
    if (n < S.logits_rows) {
        VIOLATION("GET_LOGITS run of %zu rows, the test gave logits for the last %zu", n, S.logits_rows);
        return -1;
    }
    size_t V = S.logits_vocab;
    size_t rows = S.opt_logits_rows < 0 ? n : ((size_t)S.opt_logits_rows < n ? (size_t)S.opt_logits_rows : n);
    size_t need = n * V + 1;
    if (need > S.hidden_cap) {
        S.hidden = realloc(S.hidden, need * sizeof(float));
        S.hidden_cap = need;
    }
    float *buf = S.hidden;
    memset(buf, 0, need * sizeof(float));
    for (size_t r = 0; r < rows; r++) {  /* row r of the result is input row n - rows + r */
        size_t i = n - rows + r;
        float *out = buf + r * V;
        if (i >= n - S.logits_rows) memcpy(out, S.logits + (i - (n - S.logits_rows)) * V, V * sizeof(float));
        else out[(7919u * i) % V] = 100.0f;
    }
    hd->running = 1;
    hd->abort_requested = 0;
    hd->generated = 0;
    RKLLMResult res;
    char text[MAX_TEXT + 1];
    memset(&res, 0, sizeof res);
    strcpy(text, "Hello");
    res.text = text;
    res.token_id = 9707;
    if (rows > 0) {
        res.logits.logits = buf;
        res.logits.vocab_size = (int)V;
        res.logits.num_tokens = (int)rows;
    }
    say("EVENT logits rows=%zu vocab=%zu", rows, V);
    int ret = call_back(hd, &res, userdata, 0);
    hd->generated++;
    scribble(buf, need, text);
    if (ret == 1) {
        say("EVENT paused after %d tokens", hd->generated);
        hd->running = 0;
        hd->cache_dirty = 1;
        return 0;
    }
    return end_prefill(hd, userdata, n, S.opt_logits_error);
}

EXPORT int rkllm_run(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *userdata) {
    say("CALL rkllm_run");
    Handle *hd = valid_handle("rkllm_run", h);
    if (!hd) return -1;
    if (!in || !ip) { VIOLATION("rkllm_run with NULL input or infer params"); return -1; }
    if (hd->running) { VIOLATION("rkllm_run re-entered"); return -1; }
    check_run_input(hd, in, ip);
    if (ip->mode == 1 && in->input_type == 2) return run_hidden(hd, in, ip, userdata);
    if (ip->mode == 2 && in->input_type == 2) return run_logits(hd, in, ip, userdata);

    int limit = hd->param.max_new_tokens;
#ifdef ABI_1_3
    if (ip->max_new_tokens > 0) limit = ip->max_new_tokens;
#endif
    const RKLLMPerfStat *script_perf = NULL;
    for (int i = 0; i < S.n_items; i++)
        if (S.items[i].kind == 'F') { script_perf = &S.items[i].perf; break; }

    RKLLMResult res;
    char text[MAX_TEXT + 1];
    hd->running = 1;
    hd->abort_requested = 0;
    hd->generated = 0;
    hd->cache_dirty = 1;
    int finished = 0;
    for (int i = 0; i < S.n_items && !hd->abort_requested && !finished; i++) {
        const Item *it = &S.items[i];
        memset(&res, 0, sizeof res);
        if (it->kind == 'N' || it->kind == 'W') {
            if (limit > 0 && hd->generated >= limit) break; /* runtime limit reached */
            memcpy(text, it->text, it->text_len);
            text[it->text_len] = 0;
            res.text = text;
            res.token_id = it->token_id;
            int ret = call_back(hd, &res, userdata, it->kind == 'N' ? 0 : 1);
            hd->generated++;
            memset(text, 'X', MAX_TEXT); /* the text is only valid during the callback */
            text[MAX_TEXT] = 0;
            if (ret == 1) {
                say("EVENT paused after %d tokens", hd->generated);
                hd->running = 0;
                return 0;
            }
        } else if (it->kind == 'F') {
            res.perf = it->perf;
            call_back(hd, &res, userdata, 2);
            finished = 1;
        } else if (it->kind == 'E') {
            call_back(hd, &res, userdata, 3);
        }
    }
    if (hd->abort_requested) return end_aborted(hd, userdata);
    if (!finished && limit > 0 && hd->generated >= limit) {
        say("EVENT limit of %d tokens reached", limit);
        memset(&res, 0, sizeof res);
        if (script_perf) res.perf = *script_perf;
        call_back(hd, &res, userdata, 2);
    }
    hd->running = 0;
    return S.opt_run_rc;
}

EXPORT int rkllm_abort(LLMHandle h) {
    say("CALL rkllm_abort");
    Handle *hd = valid_handle("rkllm_abort", h);
    if (!hd) return -1;
    if (!hd->running) VIOLATION("rkllm_abort outside a run");
    else hd->abort_requested = 1;
    return S.opt_abort_rc;
}

EXPORT int rkllm_clear_kv_cache(LLMHandle h, int keep_system_prompt, int *start_pos, int *end_pos) {
    say("CALL rkllm_clear_kv_cache keep_system_prompt=%d", keep_system_prompt);
    Handle *hd = valid_handle("rkllm_clear_kv_cache", h);
    if (!hd) return -1;
    if (hd->running) VIOLATION("rkllm_clear_kv_cache during a run");
    if (start_pos || end_pos) VIOLATION("rkllm_clear_kv_cache with a position range");
    const Expect *k = find_expect(hd, "keep_system_prompt");
    if (k && keep_system_prompt != (int)k->value)
        VIOLATION("keep_system_prompt = %d, expected %d", keep_system_prompt, (int)k->value);
    if (S.opt_clear_rc) return S.opt_clear_rc;
    hd->cache_dirty = 0;
    return 0;
}

EXPORT int rkllm_destroy(LLMHandle h) {
    say("CALL rkllm_destroy");
    Handle *hd = valid_handle("rkllm_destroy", h);
    if (!hd) return -1;
    if (hd->running) VIOLATION("rkllm_destroy during a run");
    hd->destroyed = 1;
    return S.opt_destroy_rc;
}

/* present in every supported runtime; the binding must not call them */
EXPORT int rkllm_run_async(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *u) {
    (void)h; (void)in; (void)ip; (void)u;
    VIOLATION("rkllm_run_async called");
    return -1;
}
EXPORT int rkllm_is_running(LLMHandle h) {
    for (int i = 0; i < S.n_handles; i++)
        if (h == (LLMHandle)&H[i]) return H[i].running;
    return 0;
}
EXPORT int rkllm_load_lora(LLMHandle h, void *adapter) {
    (void)h; (void)adapter;
    VIOLATION("rkllm_load_lora called");
    return -1;
}
EXPORT int rkllm_load_prompt_cache(LLMHandle h, const char *path) {
    (void)h; (void)path;
    VIOLATION("rkllm_load_prompt_cache called");
    return -1;
}
EXPORT int rkllm_release_prompt_cache(LLMHandle h) {
    (void)h;
    VIOLATION("rkllm_release_prompt_cache called");
    return -1;
}

#ifndef FAKE_PRE_121
/* first exported by runtime 1.2.1: the binding uses them to reject older runtimes */
EXPORT int rkllm_get_kv_cache_size(LLMHandle h, int *sizes) {
    (void)h;
    if (sizes) sizes[0] = 0;
    return 0;
}
EXPORT int rkllm_set_function_tools(LLMHandle h, const char *s, const char *t, const char *r) {
    (void)h; (void)s; (void)t; (void)r;
    VIOLATION("rkllm_set_function_tools called");
    return -1;
}
EXPORT int rkllm_set_cross_attn_params(LLMHandle h, void *params) {
    (void)h; (void)params;
    VIOLATION("rkllm_set_cross_attn_params called");
    return -1;
}
#endif
