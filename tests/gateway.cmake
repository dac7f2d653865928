# koi gateway against real `koi serve` replicas, a real PostgreSQL and SQLite (see
# tests/gateway_harness.py). The one-minute limit test is labelled slow.
foreach(t e2e failover crash rollout limits admin_restart)
  add_test(NAME gateway_${t}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway_${t}.py)
  set_tests_properties(gateway_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS integration TIMEOUT 180)
endforeach()
set_tests_properties(gateway_limits PROPERTIES LABELS slow)
