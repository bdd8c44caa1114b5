/*
 * Test double of librkllmrt.so, built and driven by tests/doubles/rkllm_c.py
 * (tests/test_rkllm_protocol.py, tests/test_rk_backend.py).
 *
 * Exports the runtime's symbols with the struct layouts of one ABI
 * (build with -DABI_1_3 for 1.3.x, default 1.2.1-1.2.3), checks everything the
 * binding hands it and records violations in a text report, and replays a token
 * script through the result callback.
 *
 * Build options:
 *   -DABI_1_3                     1.3.x layouts (RKLLMCallback struct, per-run max_new_tokens)
 *   -DFAKE_VERSION_STRING='"1.3.0"'  embed the literal "rkllm-runtime version: 1.3.0"
 *   -DFAKE_PRE_121                omit the symbols first exported by runtime 1.2.1
 *
 * Test API (all exported):
 *   fake_reset()                        forget everything (state, expectations, script)
 *   fake_expect(name, value)            expected value of a param/run field, see field_value()
 *   fake_expect_model_path(path)
 *   fake_expect_embed(n_tokens, hidden, seed)  embeddings must equal fake_pattern_bits()
 *   fake_set_script(text)               ';'-separated items, see parse_script(); 0 = ok
 *   fake_set_option(name, value)        init_rc template_rc run_rc abort_rc clear_rc destroy_rc
 *                                       abort_run_rc abort_sends_finish(1)
 *   fake_get_report()                   "CALL ...", "EVENT ...", "VIOLATION ..." lines
 *
 * Abort: rkllm_abort only sets a flag; the replay checks it after each callback, sends
 * no further tokens, then (abort_sends_finish=1, default) a FINISH whose perf counts the
 * tokens sent, and rkllm_run returns abort_run_rc.  Whether the real runtime sends FINISH
 * after an abort is not documented; the binding must cope with both (docs/rkllm_abi.md).
 * Callback return values: 0 continue, 1 pause (run returns 0, no FINISH), 2 (1.3 only)
 * release the buffer and continue; anything else is a violation.
 */
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

typedef struct { char name[48]; double value; } Expect;
typedef struct {
    char kind;                   /* N normal, W waiting, F finish, E error */
    int token_id;
    unsigned char text[MAX_TEXT];
    size_t text_len;
    RKLLMPerfStat perf;
} Item;

static struct {
    int inited, destroyed, template_set, running, abort_requested, generated;
    RKLLMParam param;
    LLMResultCallback cb;
#ifdef ABI_1_3
    RKLLMCallback *cb_struct;
    RKLLMCallback cb_copy;
#endif
    Expect expect[MAX_EXPECT];
    int n_expect;
    char model_path[512];
    int have_model_path;
    size_t embed_n, embed_hidden;
    unsigned embed_seed;
    int have_embed;
    Item items[MAX_ITEMS];
    int n_items;
    int opt_init_rc, opt_template_rc, opt_run_rc, opt_abort_rc, opt_clear_rc, opt_destroy_rc;
    int opt_abort_run_rc, opt_abort_sends_finish;
    char *report;
    size_t report_len, report_cap;
} S;

static int handle_token; /* its address is the handle */

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
    memset(&S, 0, sizeof S);
    S.opt_abort_sends_finish = 1;
}

EXPORT const char *fake_get_report(void) { return S.report ? S.report : ""; }

EXPORT void fake_expect(const char *name, double value) {
    for (int i = 0; i < S.n_expect; i++)
        if (!strcmp(S.expect[i].name, name)) { S.expect[i].value = value; return; }
    if (S.n_expect == MAX_EXPECT) { VIOLATION("too many expectations"); return; }
    snprintf(S.expect[S.n_expect].name, sizeof S.expect[0].name, "%s", name);
    S.expect[S.n_expect++].value = value;
}

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

static int field_value(const char *name, double *out) {
    const RKLLMParam *p = &S.param;
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
           !strcmp(name, "keep_system_prompt");
}

static const Expect *find_expect(const char *name) {
    for (int i = 0; i < S.n_expect; i++)
        if (!strcmp(S.expect[i].name, name)) return &S.expect[i];
    return NULL;
}

static void check_params(void) {
    for (int i = 0; i < S.n_expect; i++) {
        const Expect *x = &S.expect[i];
        double got;
        if (is_run_expectation(x->name)) continue;
        if (!field_value(x->name, &got)) { VIOLATION("unknown expectation %s", x->name); continue; }
        /* float fields compare as float: the binding stores the value into a C float */
        if ((float)got != (float)x->value)
            VIOLATION("param %s = %.9g, expected %.9g", x->name, got, x->value);
    }
    if (S.have_model_path &&
        (!S.param.model_path || strcmp(S.param.model_path, S.model_path)))
        VIOLATION("param model_path = %s, expected %s",
                  S.param.model_path ? S.param.model_path : "(null)", S.model_path);
}

static int valid_handle(const char *fn, LLMHandle h) {
    if (!S.inited) { VIOLATION("%s before rkllm_init", fn); return 0; }
    if (S.destroyed) { VIOLATION("%s after rkllm_destroy", fn); return 0; }
    if (h != (LLMHandle)&handle_token) { VIOLATION("%s with a wrong handle", fn); return 0; }
    return 1;
}

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
    if (S.inited && !S.destroyed) VIOLATION("rkllm_init twice without rkllm_destroy");
    if (!handle || !param) { VIOLATION("rkllm_init with a NULL handle or param pointer"); return -1; }
    *handle = NULL;
    S.param = *param;
    check_params();
#ifdef ABI_1_3
    if (!callback || !callback->result_callback) {
        VIOLATION("rkllm_init without a result callback");
        return -1;
    }
    if (callback->tokenizer_callback || callback->embed_callback)
        VIOLATION("rkllm_init with a tokenizer/embed callback (the model has its own)");
    S.cb_struct = callback;
    S.cb_copy = *callback;
    S.cb = callback->result_callback;
#else
    if (!callback) { VIOLATION("rkllm_init without a result callback"); return -1; }
    S.cb = callback;
#endif
    if (S.opt_init_rc) return S.opt_init_rc;
    S.inited = 1;
    S.destroyed = 0;
    S.template_set = 0;
    *handle = (LLMHandle)&handle_token;
    return 0;
}

EXPORT int rkllm_set_chat_template(LLMHandle h, const char *system, const char *prefix,
                                   const char *postfix) {
    say("CALL rkllm_set_chat_template");
    if (!valid_handle("rkllm_set_chat_template", h)) return -1;
    if (!system || !prefix || !postfix || system[0] || prefix[0] || postfix[0])
        VIOLATION("chat template is not (\"\", \"\", \"\")");
    else
        S.template_set = 1;
    return S.opt_template_rc;
}

static int call_back(RKLLMResult *res, void *userdata, LLMCallState state) {
#ifdef ABI_1_3
    if (S.cb_struct->result_callback != S.cb_copy.result_callback)
        VIOLATION("RKLLMCallback struct changed or freed after rkllm_init");
    if (!userdata) userdata = S.cb_copy.result_userdata;
#endif
    int ret = S.cb(res, userdata, state);
    if (ret == 2) {
#ifndef ABI_1_3
        VIOLATION("callback returned 2 (only defined by runtime 1.3)");
#endif
        ret = 0;
    } else if (ret != 0 && ret != 1) {
        VIOLATION("callback returned %d", ret);
        ret = 0;
    }
    return ret;
}

static void check_run_input(const RKLLMInput *in, const RKLLMInferParam *ip) {
    if (!S.template_set) VIOLATION("rkllm_run before rkllm_set_chat_template(\"\", \"\", \"\")");
    if (!in->role || in->role[0]) VIOLATION("role is not \"\"");
    if (in->enable_thinking) VIOLATION("enable_thinking is true");
    if (in->input_type != 2) { VIOLATION("input_type = %d, expected 2 (EMBED)", in->input_type); return; }
    const float *x = in->embed_input.embed;
    size_t n = in->embed_input.n_tokens;
    say("EVENT run n_tokens=%zu", n);
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
    if (ip->mode != 0) VIOLATION("infer mode = %d, expected 0 (GENERATE)", ip->mode);
    if (ip->lora_params) VIOLATION("lora_params is not NULL");
    if (ip->prompt_cache_params) VIOLATION("prompt_cache_params is not NULL");
    const Expect *kh = find_expect("keep_history");
    if (kh && ip->keep_history != (int)kh->value)
        VIOLATION("keep_history = %d, expected %d", ip->keep_history, (int)kh->value);
#ifdef ABI_1_3
    if (ip->sampling_params) VIOLATION("sampling_params is not NULL");
    const Expect *mx = find_expect("run_max_new_tokens");
    if (mx && ip->max_new_tokens != (int)mx->value)
        VIOLATION("infer max_new_tokens = %d, expected %d", ip->max_new_tokens, (int)mx->value);
#endif
}

EXPORT int rkllm_run(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *userdata) {
    say("CALL rkllm_run");
    if (!valid_handle("rkllm_run", h)) return -1;
    if (!in || !ip) { VIOLATION("rkllm_run with NULL input or infer params"); return -1; }
    if (S.running) { VIOLATION("rkllm_run re-entered"); return -1; }
    check_run_input(in, ip);

    int limit = S.param.max_new_tokens;
#ifdef ABI_1_3
    if (ip->max_new_tokens > 0) limit = ip->max_new_tokens;
#endif
    const RKLLMPerfStat *script_perf = NULL;
    for (int i = 0; i < S.n_items; i++)
        if (S.items[i].kind == 'F') { script_perf = &S.items[i].perf; break; }

    RKLLMResult res;
    char text[MAX_TEXT + 1];
    S.running = 1;
    S.abort_requested = 0;
    S.generated = 0;
    int finished = 0;
    for (int i = 0; i < S.n_items && !S.abort_requested && !finished; i++) {
        const Item *it = &S.items[i];
        memset(&res, 0, sizeof res);
        if (it->kind == 'N' || it->kind == 'W') {
            if (limit > 0 && S.generated >= limit) break; /* runtime limit reached */
            memcpy(text, it->text, it->text_len);
            text[it->text_len] = 0;
            res.text = text;
            res.token_id = it->token_id;
            int ret = call_back(&res, userdata, it->kind == 'N' ? 0 : 1);
            S.generated++;
            memset(text, 'X', MAX_TEXT); /* the text is only valid during the callback */
            text[MAX_TEXT] = 0;
            if (ret == 1) {
                say("EVENT paused after %d tokens", S.generated);
                S.running = 0;
                return 0;
            }
        } else if (it->kind == 'F') {
            res.perf = it->perf;
            call_back(&res, userdata, 2);
            finished = 1;
        } else if (it->kind == 'E') {
            call_back(&res, userdata, 3);
        }
    }
    if (S.abort_requested) {
        say("EVENT aborted after %d tokens", S.generated);
        if (S.opt_abort_sends_finish) {
            memset(&res, 0, sizeof res);
            res.perf.generate_tokens = S.generated;
            call_back(&res, userdata, 2);
        }
        S.running = 0;
        return S.opt_abort_run_rc;
    }
    if (!finished && limit > 0 && S.generated >= limit) {
        say("EVENT limit of %d tokens reached", limit);
        memset(&res, 0, sizeof res);
        if (script_perf) res.perf = *script_perf;
        call_back(&res, userdata, 2);
    }
    S.running = 0;
    return S.opt_run_rc;
}

EXPORT int rkllm_abort(LLMHandle h) {
    say("CALL rkllm_abort");
    if (!valid_handle("rkllm_abort", h)) return -1;
    if (!S.running) VIOLATION("rkllm_abort outside a run");
    else S.abort_requested = 1;
    return S.opt_abort_rc;
}

EXPORT int rkllm_clear_kv_cache(LLMHandle h, int keep_system_prompt, int *start_pos, int *end_pos) {
    say("CALL rkllm_clear_kv_cache keep_system_prompt=%d", keep_system_prompt);
    if (!valid_handle("rkllm_clear_kv_cache", h)) return -1;
    if (S.running) VIOLATION("rkllm_clear_kv_cache during a run");
    if (start_pos || end_pos) VIOLATION("rkllm_clear_kv_cache with a position range");
    const Expect *k = find_expect("keep_system_prompt");
    if (k && keep_system_prompt != (int)k->value)
        VIOLATION("keep_system_prompt = %d, expected %d", keep_system_prompt, (int)k->value);
    return S.opt_clear_rc;
}

EXPORT int rkllm_destroy(LLMHandle h) {
    say("CALL rkllm_destroy");
    if (S.inited && S.destroyed) { VIOLATION("rkllm_destroy called twice"); return -1; }
    if (!valid_handle("rkllm_destroy", h)) return -1;
    if (S.running) VIOLATION("rkllm_destroy during a run");
    S.destroyed = 1;
    return S.opt_destroy_rc;
}

/* present in every supported runtime; the binding must not call them */
EXPORT int rkllm_run_async(LLMHandle h, RKLLMInput *in, RKLLMInferParam *ip, void *u) {
    (void)h; (void)in; (void)ip; (void)u;
    VIOLATION("rkllm_run_async called");
    return -1;
}
EXPORT int rkllm_is_running(LLMHandle h) { (void)h; return S.running; }
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
