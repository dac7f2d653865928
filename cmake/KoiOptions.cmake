# Compile flags, sanitizers and the helpers every module uses to declare itself.
add_compile_options(-Wall -Wextra -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 reports false -Wrestrict positives inside libstdc++ string concatenation (GCC bug 105329).
  add_compile_options(-Wno-restrict)
endif()
if(KOI_WERROR)
  add_compile_options(-Werror)
endif()
if(KOI_NATIVE)
  add_compile_options(-march=native)
endif()
set(_koi_san "")
if(KOI_ASAN)
  list(APPEND _koi_san address)
endif()
if(KOI_UBSAN)
  list(APPEND _koi_san undefined)
endif()
if(KOI_TSAN)
  list(APPEND _koi_san thread)
endif()
if(KOI_FUZZ)
  # Coverage instrumentation for every library; fuzz/CMakeLists.txt links the fuzzer runtime.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(_koi_san)
  list(JOIN _koi_san "," _koi_san_list)
  add_compile_options(-fsanitize=${_koi_san_list} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=${_koi_san_list})
endif()

# koi_add_library(NAME SOURCES ... DEPS ...): one static library per module, include root is src/.
function(koi_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_SOURCES)  # a module that is headers only, so far
    add_library(koi_${name} INTERFACE)
    target_include_directories(koi_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(koi_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(koi_${name} STATIC ${ARG_SOURCES})
  target_include_directories(koi_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(koi_${name} PUBLIC ${ARG_DEPS})
endfunction()

# koi_add_test(NAME SOURCES ... DEPS ... LABEL unit|integration|slow): one GoogleTest binary whose
# tests are registered one by one with CTest under the given label.
function(koi_add_test name)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    KOI_SHARED_DIR="${KOI_SHARED_DIR}" KOI_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KOI_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT})
endfunction()

# koi_add_module(NAME DEPS ... [EXCLUDE file.cc ...]): the library koi_NAME from every *.cc in
# the calling folder (subfolders included) except *_test.cc, *_fuzz.cc and the EXCLUDEd files
# (built as a smaller library of their own), and the unit-test binary koi_NAME_test from every
# *_test.cc there. New files are picked up without editing CMake.
function(koi_add_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;TEST_DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE _all CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  foreach(f ${ARG_EXCLUDE})
    list(REMOVE_ITEM _all ${CMAKE_CURRENT_SOURCE_DIR}/${f})
  endforeach()
  set(_lib_srcs "")
  set(_test_srcs "")
  foreach(f ${_all})
    if(f MATCHES "_test\\.cc$")
      list(APPEND _test_srcs ${f})
    elseif(NOT f MATCHES "_fuzz\\.cc$")
      list(APPEND _lib_srcs ${f})
    endif()
  endforeach()
  koi_add_library(${name} SOURCES ${_lib_srcs} DEPS ${ARG_DEPS})
  if(_test_srcs)
    koi_add_test(koi_${name}_test SOURCES ${_test_srcs} DEPS koi_${name} ${ARG_TEST_DEPS} LABEL unit)
  endif()
endfunction()
