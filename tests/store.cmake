# store::Database's backend-parameterized unit tests against a real PostgreSQL (started by
# tests/store_postgres.py with the gateway harness); SQLite runs in the unit tests.
add_test(NAME store_postgres
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/store_postgres.py $<TARGET_FILE:koi_store_test>)
set_tests_properties(store_postgres PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 180)
