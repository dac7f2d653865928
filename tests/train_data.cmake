# Token shards and a tokenizer from a path (issue 7): a new model pre-trained with the
# llama2.c tokenizer of stories260K; the shards equal koi tokenize's encoding of the whole
# corpus, are reused by the next run, and a damaged one is an error naming the file.
add_test(NAME train_tokenizer_path_and_shards
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_data.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(train_tokenizer_path_and_shards PROPERTIES LABELS integration TIMEOUT 120)
