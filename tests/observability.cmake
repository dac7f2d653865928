# Observability (docs/observability.md, tests/observability.py): a control plane, a gateway
# with a koi serve replica and a koi train run with --metrics-port, started by the test.
# observability_dashboard scrapes them and checks every query of deploy/grafana/koi.json
# names an exported metric; observability_prometheus has a real Prometheus (Debian's)
# scrape them and reads each family back through its query API (about 10 s each).
foreach(t dashboard prometheus)
  add_test(NAME observability_${t} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/observability.py ${t})
  set_tests_properties(observability_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS integration TIMEOUT 120)
endforeach()
