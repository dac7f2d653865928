# koi train --profile: the Chrome trace checked by tests/trace_check.py (well-formed, nested
# spans, every step's parts, step spans within 5% of the metrics' step time). A few seconds.
add_test(NAME train_profile_trace COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/train_profile.py)
set_tests_properties(train_profile_trace PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 120)
