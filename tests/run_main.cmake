# `make run` with MODEL given: serve, query with the printed command, Ctrl-C.
add_test(NAME run_main_serves_model
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_main.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(run_main_serves_model PROPERTIES LABELS integration TIMEOUT 60)
# `make run` without MODEL: the platform (control plane, gateway, a short pipeline that trains,
# gates, registers and deploys), queried with the printed commands, Ctrl-C, and a second run
# that reuses the registered model.
add_test(NAME run_main_platform
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_main_platform.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(run_main_platform PROPERTIES LABELS integration TIMEOUT 300)
