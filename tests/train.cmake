# The trainer against PyTorch autograd (needs Debian's python3-torch).
koi_add_test(train_reference_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_reference_test.cc
  DEPS koi_train LABEL integration)

# kill -9 and --resume give bitwise the weights of an uninterrupted run; a trained model
# exports to GGUF and runs in koi generate and koi eval.
add_test(NAME train_resume_is_bitwise_identical
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_resume.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
add_test(NAME train_export_generate_eval
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_export.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(train_resume_is_bitwise_identical train_export_generate_eval
  PROPERTIES LABELS integration TIMEOUT 120)

# Quantized KV cache (--kv-dtype): bytes per token and the perplexity change of a trained model.
add_test(NAME kv_dtype_memory_and_perplexity
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kv_dtype_eval.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(kv_dtype_memory_and_perplexity PROPERTIES LABELS integration TIMEOUT 180)
