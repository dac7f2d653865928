# `make run` with MODEL given: serve, query with the printed command, Ctrl-C.
add_test(NAME run_main_serves_model
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_main.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(run_main_serves_model PROPERTIES LABELS integration TIMEOUT 60)
