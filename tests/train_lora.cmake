# Fine-tuning and LoRA (src/train/finetune.h, lora.h) on stories260K: perplexity before and
# after, merged GGUF and PEFT adapter exports.
add_test(NAME train_lora_stories260k
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_lora.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(train_lora_stories260k PROPERTIES LABELS integration TIMEOUT 120)

# Fine-tuning Hugging Face directories (PyTorch-made tiny models with a BPE tokenizer.json).
add_test(NAME train_finetune_hf_models
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_finetune_hf.sh $<TARGET_FILE:koi> ${PROJECT_SOURCE_DIR})
set_tests_properties(train_finetune_hf_models PROPERTIES LABELS integration TIMEOUT 60)
