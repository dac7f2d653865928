// llama.cpp's own quantizer (llama_model_quantize in node-llama-cpp's bundled libllama), for
// kquant_exactness: node-llama-cpp ships the library but not the llama-quantize tool.
// Usage: llama_quantize IN.gguf OUT.gguf FTYPE   (llama_ftype: 15 Q4_K_M, 17 Q5_K_M, 18 Q6_K)
// The parameter struct is llama.h's of llama.cpp as bundled by node-llama-cpp 3.21.1 (the
// enums are ints).
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct llama_model_quantize_params {
  int32_t nthread;
  int32_t ftype;
  int32_t output_tensor_type;
  int32_t token_embedding_type;
  bool allow_requantize;
  bool quantize_output_tensor;
  bool only_copy;
  bool pure;
  bool keep_split;
  bool dry_run;
  const void* imatrix;
  const void* kv_overrides;
  const void* tt_overrides;
  const int32_t* prune_layers;
  size_t max_buf_size;
};

struct llama_model_quantize_params llama_model_quantize_default_params(void);
uint32_t llama_model_quantize(const char* fname_inp, const char* fname_out,
                              const struct llama_model_quantize_params* params);
void llama_backend_init(void);

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  struct llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = atoi(argv[3]);
  p.nthread = 2;
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  if (rc != 0) fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
