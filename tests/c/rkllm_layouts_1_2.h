/*
 * Memory layout of the librkllmrt C API, runtime 1.2.1 - 1.2.3 (LP64).
 *
 * Written for this project from the field lists in Rockchip's public rkllm.h
 * (airockchip/rknn-llm, tags release-v1.2.1 .. release-v1.2.3, see docs/rkllm_abi.md);
 * only what decides the memory layout is kept: field order, C types, array sizes.
 * Used by tests/test_rkllm_abi.py (sizeof/offsetof against ctypes) and by the
 * test double tests/c/fake_rkllm.c.  Plain C11 (anonymous union).
 */
#ifndef QWEN3ASR_RKLLM_LAYOUTS_1_2_H
#define QWEN3ASR_RKLLM_LAYOUTS_1_2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RKLLM_LAYOUT_ABI "1.2"

typedef void *LLMHandle;

/* enums are int-sized */
typedef int LLMCallState;   /* 0 NORMAL, 1 WAITING, 2 FINISH, 3 ERROR */
typedef int RKLLMInputType; /* 0 PROMPT, 1 TOKEN, 2 EMBED, 3 MULTIMODAL */
typedef int RKLLMInferMode; /* 0 GENERATE, 1 GET_LAST_HIDDEN_LAYER, 2 GET_LOGITS */

typedef struct {
    int32_t base_domain_id;
    int8_t embed_flash;
    int8_t enabled_cpus_num;
    uint32_t enabled_cpus_mask;
    uint8_t n_batch;
    int8_t use_cross_attn;
    uint8_t reserved[104];
} RKLLMExtendParam;

typedef struct {
    const char *model_path;
    int32_t max_context_len;
    int32_t max_new_tokens;
    int32_t top_k;
    int32_t n_keep;
    float top_p;
    float temperature;
    float repeat_penalty;
    float frequency_penalty;
    float presence_penalty;
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
    bool skip_special_token;
    bool is_async;
    const char *img_start;
    const char *img_end;
    const char *img_content;
    RKLLMExtendParam extend_param;
} RKLLMParam;

typedef struct {
    float *embed;    /* n_tokens x hidden float32, row-major */
    size_t n_tokens;
} RKLLMEmbedInput;

typedef struct {
    int32_t *input_ids;
    size_t n_tokens;
} RKLLMTokenInput;

typedef struct {
    char *prompt;
    float *image_embed;
    size_t n_image_tokens;
    size_t n_image;
    size_t image_width;
    size_t image_height;
} RKLLMMultiModalInput;

typedef struct {
    const char *role;
    bool enable_thinking;
    RKLLMInputType input_type;
    union {
        const char *prompt_input;
        RKLLMEmbedInput embed_input;
        RKLLMTokenInput token_input;
        RKLLMMultiModalInput multimodal_input;
    };
} RKLLMInput;

typedef struct {
    const char *lora_adapter_name;
} RKLLMLoraParam;

typedef struct {
    int save_prompt_cache;
    const char *prompt_cache_path;
} RKLLMPromptCacheParam;

typedef struct {
    RKLLMInferMode mode;
    RKLLMLoraParam *lora_params;
    RKLLMPromptCacheParam *prompt_cache_params;
    int keep_history;
} RKLLMInferParam;

typedef struct {
    const float *hidden_states;
    int embd_size;
    int num_tokens;
} RKLLMResultLastHiddenLayer;

typedef struct {
    const float *logits;
    int vocab_size;
    int num_tokens;
} RKLLMResultLogits;

typedef struct {
    float prefill_time_ms;
    int prefill_tokens;
    float generate_time_ms;
    int generate_tokens;
    float memory_usage_mb;
} RKLLMPerfStat;

typedef struct {
    const char *text;
    int32_t token_id;
    RKLLMResultLastHiddenLayer last_hidden_layer;
    RKLLMResultLogits logits;
    RKLLMPerfStat perf;
} RKLLMResult;

/* return 0 = continue, 1 = pause */
typedef int (*LLMResultCallback)(RKLLMResult *result, void *userdata, LLMCallState state);

#endif
