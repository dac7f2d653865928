# End-to-end tests of `koi serve` on stories260K: curl, a table of bad requests, the official
# openai npm client, a real Prometheus scraping /metrics, and 256 concurrent streams.
set(KOI_SERVE_TEST ${CMAKE_CURRENT_LIST_DIR}/serve_test.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set(KOI_SERVE_NPM_TEST ${CMAKE_CURRENT_LIST_DIR}/serve_npm.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
add_test(NAME serve_curl COMMAND bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_curl.sh)
add_test(NAME serve_bad_requests COMMAND bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_bad_requests.mjs
         --api-key secret --max-body-bytes 65536 --io-timeout 1 --max-waiting 4)
add_test(NAME serve_openai_client COMMAND bash ${KOI_SERVE_NPM_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_openai.mjs
         --api-key secret)
add_test(NAME serve_prometheus COMMAND bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_prometheus.sh)
# 16MiB of KV: 819 blocks of stories260K's 20 KiB, room for the 256 streams of ~42 tokens at once
# (768 blocks) and nearly all touched by the first round. The pool is committed lazily and the
# free list hands out blocks in eviction order, so under a default-sized pool each round would
# touch fresh blocks and the between-rounds bound would measure the KV pool, not a leak.
add_test(NAME serve_256_streams COMMAND bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_concurrency.mjs
         --kv-cache-memory 16MiB)
set_tests_properties(serve_curl serve_bad_requests serve_openai_client serve_prometheus serve_256_streams
  PROPERTIES LABELS integration TIMEOUT 120)
add_test(NAME serve_sigterm_finishes_streams COMMAND bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_shutdown.sh)
add_test(NAME serve_sigterm_cancels_at_deadline
         COMMAND env EXPECT_FINISH=abort bash ${KOI_SERVE_TEST} ${CMAKE_CURRENT_LIST_DIR}/serve_shutdown.sh
         --shutdown-timeout 0.05)  # far less than 16 x 400 tokens take, on any machine
set_tests_properties(serve_sigterm_finishes_streams serve_sigterm_cancels_at_deadline
  PROPERTIES LABELS integration TIMEOUT 120)
# net::Server limits, on both `koi serve` and `koi gateway` (Python, tests/gateway_harness.py):
# a flood of ~20,000 idle connections cannot lock out /health, 431, HTTP/1.0 streams, bad ports.
add_test(NAME connection_flood COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/connection_flood.py)
set_tests_properties(connection_flood PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}"
  LABELS slow TIMEOUT 120 RUN_SERIAL TRUE)  # 20,000 sockets and a 100 ms bar: alone, in `make test-all`
# Greedy output over the API is byte-identical with --speculative ngram and draft, and /metrics
# counts the drafts (starts its own three servers).
add_test(NAME serve_speculative_greedy_is_identical
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/serve_speculative.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(serve_speculative_greedy_is_identical PROPERTIES LABELS integration TIMEOUT 120)
# No KV flag: the default follows the machine and the KV pool is touched only when used
# (resident memory within 10% of the model file + 64 MiB; Must show 4 of issue 21).
add_test(NAME serve_kv_default_follows_the_machine
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/serve_kv_default.sh $<TARGET_FILE:koi>)
set_tests_properties(serve_kv_default_follows_the_machine PROPERTIES LABELS integration TIMEOUT 300)
# koi serve --profile and koi bench offline --profile: the engine's Chrome trace checked by
# tests/trace_check.py (nested spans, every step's parts and layers, step spans within 5% of
# koi:engine_step_duration_seconds_sum, one span per request). A few seconds.
add_test(NAME serve_profile_trace COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/serve_profile.py)
set_tests_properties(serve_profile_trace PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_LIST_DIR}"
  LABELS integration TIMEOUT 120)
# Multi-LoRA serving (issue 19, Must show 1): three adapters trained on stories260K, served
# beside the base in one engine; mixed batches equal each merged model served alone; load and
# unload at run time under load fail no request; koi gateway routes adapter requests to the
# replica that serves them. About 8-20 s on the 2-core VM.
add_test(NAME serve_multi_lora
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/serve_lora.py $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(serve_multi_lora PROPERTIES LABELS integration TIMEOUT 120)
