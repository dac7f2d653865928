# koi tokenizer train on tinyshakespeare: compression and id-for-id agreement with
# @lenml/tokenizers on the tokenizer.json it writes (npm package cached outside the tree).
add_test(NAME tokenizer_train
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tokenizer_train.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(tokenizer_train PROPERTIES LABELS integration TIMEOUT 300)
