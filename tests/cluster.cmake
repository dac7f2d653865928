# koi cluster: the control plane with the local executor, driven through the koi CLI and its
# REST API (tests/cluster_harness.py): tenants and quotas on a 4-GPU inventory, the restart
# budget across a control-plane kill -9, a kill -9 while jobs run, and koi train jobs that
# are killed or preempted and resume bit-identically, a job past its memory limit (OOMKilled),
# diagnoses (a segfault: Crashed; SIGSTOP: Hung naming the process; a slowed MPI rank:
# Straggler, SlowProgress, then Hung naming the rank; about 25 s),
# a 2-replica koi train job run as 2 MPI ranks, pipelines, and tenant isolation
# with malformed specs for models and pipelines, and live scheduling against `koi sim` (one
# workload; cluster_sim_agree_seeds, slow, runs four more).
foreach(t tenants budget_restart crash hang crashed straggler train_resume train_preempt oom train_mpi pipeline isolation sim_agree)
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
# The whole control plane on PostgreSQL: the kill -9 test (no object, event or job lost) with
# `koi cluster serve --store postgres://...` on a private server.
add_test(NAME cluster_crash_postgres
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/store_postgres.py ${CMAKE_CURRENT_SOURCE_DIR}/cluster_crash.py)
set_tests_properties(cluster_crash_postgres PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
  LABELS integration TIMEOUT 180)
# The Slurm executor against a real Slurm cluster (scripts/slurm_cluster.py: munged,
# slurmctld, one slurmd per network-namespace host; needs root, slurm-wlm, munge, iproute2).
# The smoke test is quick; the others train, lose nodes and restart the control plane.
foreach(t smoke train gang node_loss preempt restart)
  add_test(NAME cluster_slurm_${t} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster_slurm_${t}.py)
  set_tests_properties(cluster_slurm_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS "integration;slurm" TIMEOUT 180)
endforeach()
foreach(t node_loss restart)
  set_tests_properties(cluster_slurm_${t} PROPERTIES LABELS "slow;slurm" TIMEOUT 300)
endforeach()
# Deployments (docs/cluster.md): koi serve replicas of stories260K as jobs, registered with a
# real koi gateway; rollouts and autoscaling under load from the official openai npm client.
foreach(t deploy_rollout deploy_autoscale)
  add_test(NAME cluster_${t} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster_${t}.py)
  set_tests_properties(cluster_${t} PROPERTIES
    ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}"
    LABELS integration TIMEOUT 180)
endforeach()
# Live scheduling against `koi sim` on more workloads (about 45 s each).
add_test(NAME cluster_sim_agree_seeds COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster_sim_agree.py)
set_tests_properties(cluster_sim_agree_seeds PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};KOI_SIM_AGREE_SEEDS=1,4,7,11"
  LABELS slow TIMEOUT 400)
# The web console (src/cluster/control_plane/console/) in headless Chromium (Debian's), driven by
# playwright-core from npm: logging in, a growing loss curve, a waiting job's reason, a
# deployment's QPS and latency charts under load, the tenant boundary; screenshots are kept in
# the build folder's test-artifacts/console.
add_test(NAME cluster_console COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster_console.py)
set_tests_properties(cluster_console PROPERTIES
  ENVIRONMENT "KOI_BIN=$<TARGET_FILE:koi>;KOI_SHARED_DIR=${KOI_SHARED_DIR};PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR};KOI_ARTIFACT_DIR=${CMAKE_BINARY_DIR}/test-artifacts/console"
  LABELS integration TIMEOUT 240)
