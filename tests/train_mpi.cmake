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
# Sharded data parallel (issue 17): ZeRO-2 and ZeRO-3 against a single process, resharding
# checkpoints, bytes per step; ZeRO-3's memory per rank on 4 ranks.
foreach(t zero zero_memory)
  add_test(NAME train_mpi_${t}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_mpi_${t}.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR})
  set_tests_properties(train_mpi_${t} PROPERTIES LABELS integration TIMEOUT 120)
endforeach()
add_test(NAME train_mpi_watchdog_zero3
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/train_mpi_watchdog.sh $<TARGET_FILE:koi> ${KOI_SHARED_DIR} --zero 3)
set_tests_properties(train_mpi_watchdog_zero3 PROPERTIES LABELS integration TIMEOUT 90)
