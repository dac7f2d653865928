# Prefill/decode disaggregation (docs/kv-transfer.md): real prefill and decode workers on
# stories260K (quick), and on a random TinyLlama-shape model with kills while blocks are in
# flight (slow: a 600 MB model and CPU prefills of a thousand tokens).
add_test(NAME pd_disagg COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/pd_disagg.py)
add_test(NAME pd_disagg_tinyllama COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/pd_disagg_tinyllama.py)
set_tests_properties(pd_disagg pd_disagg_tinyllama PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 180)
set_tests_properties(pd_disagg_tinyllama PROPERTIES LABELS slow TIMEOUT 900)
# Sliding-window layers kept apart on both sides (both block tables on the wire), on tiny random
# Gemma 2- and Mistral-style models made by python3-torch.
add_test(NAME pd_disagg_window COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/pd_disagg_window.py)
set_tests_properties(pd_disagg_window PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 300)
