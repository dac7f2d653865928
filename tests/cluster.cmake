# koi cluster: the control plane with the local executor, driven through the koi CLI and its
# REST API (tests/cluster_harness.py): tenants and quotas on a 4-GPU inventory, the restart
# budget across a control-plane kill -9, a kill -9 while jobs run, and koi train jobs that
# are killed or preempted and resume bit-identically.
foreach(t tenants budget_restart crash hang train_resume train_preempt pipeline isolation)
  add_test(NAME cluster_${t} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster_${t}.py)
  set_tests_properties(cluster_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS integration TIMEOUT 120)
endforeach()
# The control plane's store tests against a real PostgreSQL (the SQLite ones are unit tests).
add_test(NAME cluster_store_postgres
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/store_postgres.py $<TARGET_FILE:koi_cluster_test>)
set_tests_properties(cluster_store_postgres PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 180)
