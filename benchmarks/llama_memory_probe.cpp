// Loads a GGUF (no weights allocated: no_alloc) and creates a context with the given settings,
// then prints what llama.cpp itself would allocate: model, context (KV cache + recurrent state) and
// compute buffers per buffer type, in bytes, as one JSON line. Built by benchmarks/llama_cpp_sizing.py.
#include "llama.h"
#include "llama-ext.h"
#include "ggml-backend.h"
#include "gguf.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static ggml_type type_named(const char * s) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * name = ggml_type_name((ggml_type) t);
        if (name && strcmp(name, s) == 0) return (ggml_type) t;
    }
    fprintf(stderr, "unknown type %s\n", s);
    exit(2);
}

static void quiet(ggml_log_level level, const char * text, void *) {
    if (getenv("PROBE_LOG")) fputs(text, stderr);
    (void) level;
}

int main(int argc, char ** argv) {
    if (argc < 11) {
        fprintf(stderr, "usage: %s MODEL N_CTX N_SEQ TYPE_K TYPE_V FA(-1|0|1) SWA_FULL(0|1) UNIFIED(0|1) N_UBATCH N_BATCH\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.no_alloc = true;
    mp.load_mode = LLAMA_LOAD_MODE_NONE; // no_alloc maps nothing: it only simulates the allocations
    // "meta:PATH": only the file's metadata; llama.cpp creates every tensor its loader asks for itself
    // (llama_model_init_from_user), so a header with the architecture's keys and no tensors will do.
    llama_model * model = nullptr;
    if (strncmp(argv[1], "meta:", 5) == 0) {
        gguf_init_params gp = { /*no_alloc =*/ true, /*ctx =*/ nullptr };
        gguf_context * meta = gguf_init_from_file(argv[1] + 5, gp);
        if (!meta) { printf("{\"error\": \"metadata\"}\n"); return 1; }
        model = llama_model_init_from_user(meta, [](ggml_tensor *, void *) {}, nullptr, mp);
    } else {
        model = llama_model_load_from_file(argv[1], mp);
    }
    if (!model) { printf("{\"error\": \"load\"}\n"); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) atoi(argv[2]);
    cp.n_seq_max = (uint32_t) atoi(argv[3]);
    cp.type_k = type_named(argv[4]);
    cp.type_v = type_named(argv[5]);
    int fa = atoi(argv[6]);
    cp.flash_attn_type = fa < 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO : fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.swa_full = atoi(argv[7]) != 0;
    cp.kv_unified = atoi(argv[8]) != 0;
    cp.n_ubatch = (uint32_t) atoi(argv[9]);
    cp.n_batch = (uint32_t) atoi(argv[10]);
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { printf("{\"error\": \"context\"}\n"); return 1; }
    size_t model_b = 0, context_b = 0, compute_b = 0;
    for (const auto & [buft, d] : llama_get_memory_breakdown(ctx)) {
        model_b += d.model; context_b += d.context; compute_b += d.compute;
    }
    printf("{\"model\": %zu, \"context\": %zu, \"compute\": %zu, \"n_ctx\": %u}\n", model_b, context_b, compute_b,
           llama_n_ctx(ctx));
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
