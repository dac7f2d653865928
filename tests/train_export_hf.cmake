# koi train export --format hf: the directory generates as the GGUF export does and its
# tokenizer.json encodes in @lenml/tokenizers as in Koi (npm package cached outside the tree).
add_test(NAME train_export_hf
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_export_hf.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(train_export_hf PROPERTIES LABELS integration TIMEOUT 300)
