# koi gateway against real `koi serve` replicas, a real PostgreSQL and SQLite (see
# tests/gateway_harness.py). The one-minute limit test is labelled slow. gateway_streaming
# also runs a test upstream in Python that paces its chunks by what the client received;
# gateway_replica_crash_streams drives the official openai npm client (see serve_npm.sh).
foreach(t e2e failover crash rollout limits streaming client_disconnect replica_crash_streams admin_restart grpc kv_index)
  add_test(NAME gateway_${t}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway_${t}.py)
  set_tests_properties(gateway_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS integration TIMEOUT 180)
endforeach()
set_tests_properties(gateway_limits PROPERTIES LABELS slow)
