# Pipeline and expert parallel training over MPI (issue 17): real ranks under Debian's mpirun;
# the loss curves of 1F1B, GPipe, EP=2, TP=2 x PP=2 and DP=2 x PP=2 against a single process,
# checkpoints across layouts (TP=2 x PP=2 <-> DP=4 and 1 process).
foreach(t pipeline expert_parallel tp_pp)
  add_test(NAME train_mpi_${t}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_mpi_${t}.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
  set_tests_properties(train_mpi_${t} PROPERTIES LABELS integration TIMEOUT 120)
endforeach()
