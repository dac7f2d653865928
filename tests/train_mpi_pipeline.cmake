# Pipeline parallel training over MPI (issue 17): real ranks under Debian's mpirun, the loss
# curves of 1F1B and GPipe against a single process, checkpoints across stage counts.
add_test(NAME train_mpi_pipeline
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_mpi_pipeline.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
set_tests_properties(train_mpi_pipeline PROPERTIES LABELS integration TIMEOUT 120)
