# End-to-end tests of the koi binary on real model files.
add_test(NAME stories260k_greedy_matches_llama2c
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/stories260k_greedy.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
add_test(NAME cli_bad_model_files_give_clear_errors
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_errors.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(stories260k_greedy_matches_llama2c cli_bad_model_files_give_clear_errors
  PROPERTIES LABELS integration TIMEOUT 300)
