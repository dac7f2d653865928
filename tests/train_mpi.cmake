# Data parallel training over MPI (issue 7): each test starts real ranks with Debian's
# mpirun. Loss curves and checkpoints against a single process; the collective watchdog
# against a rank frozen with SIGSTOP; the restarting supervisor; a slowed rank flagged as a
# straggler; tensor parallelism on a device mesh against one process, and checkpoints
# moved between meshes (issue 17).
foreach(t data_parallel watchdog restart straggler tensor_parallel reshard)
  add_test(NAME train_mpi_${t}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_mpi_${t}.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
  set_tests_properties(train_mpi_${t} PROPERTIES LABELS integration TIMEOUT 90)
endforeach()
