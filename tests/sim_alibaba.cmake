# koi sim end to end on the real Alibaba 2023 trace (a slice), and the scheduler's randomized
# invariants at full size (3000 random clusters and workloads).
add_test(NAME sim_alibaba_slice
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sim_alibaba.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(sim_alibaba_slice PROPERTIES LABELS integration TIMEOUT 300)
add_test(NAME cluster_random_invariants_3000
  COMMAND koi_cluster_test --gtest_filter=ClusterInvariants.*)
set_tests_properties(cluster_random_invariants_3000 PROPERTIES LABELS slow TIMEOUT 900
  ENVIRONMENT KOI_CLUSTER_RANDOM_RUNS=3000)
