/*
 * Memory layout of the librkllmrt C API, runtime 1.3.0 (LP64).
 *
 * Written for this project from the field lists in Rockchip's public rkllm.h
 * (airockchip/rknn-llm, tag release-v1.3.0, see docs/rkllm_abi.md); only what
 * decides the memory layout is kept.  Differences from 1.2.x: RKLLMParam drops
 * img_start/img_end/img_content and gains ignore_eos_token; the multimodal input
 * carries nested image/video blocks; RKLLMInferParam gains sampling_params and
 * max_new_tokens; rkllm_init takes an RKLLMCallback struct.  Plain C11.
 */
#ifndef QWEN3ASR_RKLLM_LAYOUTS_1_3_H
#define QWEN3ASR_RKLLM_LAYOUTS_1_3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RKLLM_LAYOUT_ABI "1.3"

typedef void *LLMHandle;

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
    bool ignore_eos_token;
    bool is_async;
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

/* the header declares these two blocks as anonymous nested structs */
typedef struct {
    float *image_embed;
    size_t n_image_tokens;
    size_t n_image;
    const char *image_start;
    const char *image_end;
    const char *image_content;
    size_t image_width;
    size_t image_height;
} RKLLMImageInput;

typedef struct {
    float *video_embed;
    size_t n_frame_tokens;
    size_t n_frame_per_video;
    size_t n_video;
    const char *video_start;
    const char *video_end;
    const char *video_content;
    size_t frame_width;
    size_t frame_height;
} RKLLMVideoInput;

typedef struct {
    char *prompt;
    RKLLMImageInput image;
    RKLLMVideoInput video;
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
    int32_t top_k;
    float top_p;
    float temperature;
    float repeat_penalty;
    float frequency_penalty;
    float presence_penalty;
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
} RKLLMSamplingParam;

typedef struct {
    RKLLMInferMode mode;
    RKLLMLoraParam *lora_params;
    RKLLMPromptCacheParam *prompt_cache_params;
    RKLLMSamplingParam *sampling_params; /* NULL = use the init values */
    int keep_history;
    int32_t max_new_tokens;              /* <= 0 = use the init value */
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

/* return 0 = continue, 1 = pause, 2 = release the output buffer */
typedef int (*LLMResultCallback)(RKLLMResult *result, void *userdata, LLMCallState state);
typedef int (*LLMTokenizerCallback)(void *userdata, const char *text, int32_t text_len,
                                    int32_t *tokens, int32_t n_tokens_max);
typedef int (*LLMGetEmbedCallback)(void *userdata, int32_t *tokens, uint64_t num_tokens,
                                   void *embed, uint64_t len);

typedef struct {
    LLMResultCallback result_callback;
    void *result_userdata;
    LLMTokenizerCallback tokenizer_callback;
    void *tokenizer_userdata;
    LLMGetEmbedCallback embed_callback;
    void *embed_userdata;
} RKLLMCallback;

#endif
