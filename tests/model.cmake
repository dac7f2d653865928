# Forward pass vs the PyTorch reference (needs Debian's python3-torch).
koi_add_test(model_reference_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_reference_test.cc
  DEPS koi_engine LABEL integration)  # koi_engine: the engine serves each architecture
add_dependencies(model_reference_test koi)  # runs `koi convert` on each tiny model

# Engine over real forward passes: batch invariance, prefix caching.
koi_add_test(engine_batch_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_batch_test.cc
  DEPS koi_engine LABEL integration)
