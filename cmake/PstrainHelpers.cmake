# Helpers that every folder's CMakeLists.txt uses, so targets look alike.

# Compiler warnings for project code (not for generated protobuf sources).
function(pstrain_set_warnings)
  set(_flags -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter)
  if(PSTRAIN_WERROR)
    list(APPEND _flags -Werror)
  endif()
  if(PSTRAIN_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 with -fsanitize=address at -O1 warns that std::regex's
    # std::function members "may be used uninitialized" inside libstdc++'s
    # own headers (launcher_test.cc); its flow analysis, not our code.
    list(APPEND _flags -Wno-maybe-uninitialized)
  endif()
  set(PSTRAIN_WARNING_FLAGS ${_flags} PARENT_SCOPE)
  if(PSTRAIN_NATIVE)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  pstrain_set_sanitizers()
endfunction()

# The linker of every C and C++ link (PSTRAIN_LINKER): by default lld where
# the compiler can use it (Debian's lld package), which linked an ASan test
# binary in 0.30 s against GNU ld's 1.51 s and a Release one in 0.09 s
# against 0.31 s (2026-11-30, 2 vCPUs): the three CI builds link about 270
# binaries. Without lld, the compiler's default. nvcc's links (the CUDA
# plugin's device code) keep theirs.
include(CheckLinkerFlag)
function(pstrain_set_linker)
  set(_linker "${PSTRAIN_LINKER}")
  if(_linker STREQUAL "default")
    return()
  endif()
  set(_auto OFF)
  if(_linker STREQUAL "auto")
    set(_linker lld)
    set(_auto ON)
  endif()
  check_linker_flag(CXX "-fuse-ld=${_linker}" PSTRAIN_LINKER_WORKS_${_linker})
  if(NOT PSTRAIN_LINKER_WORKS_${_linker})
    if(_auto)
      message(STATUS "pstrain: linker: the compiler's default (lld not found)")
      return()
    endif()
    message(FATAL_ERROR "PSTRAIN_LINKER=${_linker}: the compiler cannot link with -fuse-ld=${_linker}")
  endif()
  message(STATUS "pstrain: linker: ${_linker}")
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=${_linker}>")
endfunction()

# Sanitizers for every target of the project (libraries, binaries, tests,
# generated protobuf code): compile options for C and C++ and link options,
# set before any subdirectory is added. An undefined-behaviour report aborts
# the process (-fno-sanitize-recover) instead of printing and going on, so a
# test cannot pass with one. PSTRAIN_FUZZ adds address and undefined and
# needs clang; libFuzzer's coverage instrumentation goes only to the
# libraries the fuzzers exercise and to the fuzzers (fuzz/CMakeLists.txt).
function(pstrain_set_sanitizers)
  set(_sans "")
  if(PSTRAIN_SANITIZE)
    string(REPLACE "," ";" _sans "${PSTRAIN_SANITIZE}")
  endif()
  if(PSTRAIN_FUZZ)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "PSTRAIN_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
              "configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang "
              "(Debian: apt-get install clang libclang-rt-dev)")
    endif()
    if("thread" IN_LIST _sans)
      message(FATAL_ERROR "PSTRAIN_FUZZ=ON builds with address,undefined; it cannot take PSTRAIN_SANITIZE=thread")
    endif()
    list(APPEND _sans address undefined)
  endif()
  list(REMOVE_DUPLICATES _sans)
  foreach(_s IN LISTS _sans)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_s}>)
    add_link_options(-fsanitize=${_s})
  endforeach()
  if("undefined" IN_LIST _sans)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
    add_link_options(-fno-sanitize-recover=undefined)
  endif()
  if(_sans)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  endif()
  if("thread" IN_LIST _sans)
    # Debian's protobuf, absl and libzmq are not built with TSan. Keep
    # protobuf's ABI, tell TSan about absl::Mutex, and ignore what libzmq's
    # uninstrumented threads do; each file says why. Every target links
    # these objects, so child processes carry them too.
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include ${CMAKE_SOURCE_DIR}/common/tsan_protobuf_abi.h>")
    add_library(pstrain_tsan_support OBJECT ${CMAKE_SOURCE_DIR}/common/tsan_absl_mutex.cc
                ${CMAKE_SOURCE_DIR}/common/tsan_suppressions.cc)
    target_link_libraries(pstrain_tsan_support PUBLIC absl::synchronization ${CMAKE_DL_LIBS})
    link_libraries(pstrain_tsan_support)
  endif()
endfunction()

# pstrain_without_tsan(TARGET): in a ThreadSanitizer build, compiles TARGET
# without TSan's instrumentation (its accesses become invisible to TSan).
# Only for code that never shares memory between threads; say why at the
# call.
function(pstrain_without_tsan target)
  if(PSTRAIN_SANITIZE MATCHES "thread")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=thread>)
  endif()
endfunction()

# pstrain_without_sanitizers(TARGET): in a sanitizer build, compiles TARGET
# without instrumentation. Only for code generated from a third party's
# schema (ONNX's): instrumenting it checks protobuf's generator, not
# pstrain, and makes the CI's sanitizer builds minutes longer.
function(pstrain_without_sanitizers target)
  if(PSTRAIN_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=all>)
  endif()
endfunction()

# pstrain_library(NAME SRCS a.cc b.cc DEPS x y [PUBLIC_DEPS ...])
# One library per folder; includes are from the repository root.
function(pstrain_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PSTRAIN_WARNING_FLAGS}>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(PSTRAIN_UNITY_BUILD)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON)
  endif()
  set_property(GLOBAL APPEND PROPERTY PSTRAIN_LIBRARIES ${name})
endfunction()

# pstrain_library_pch(): called once every pstrain_library exists, with
# its options. Gives them one precompiled header (common/pch.h says what it
# holds and why), made with and without -fPIC (a compiler refuses a PCH
# whose -fPIC differs from the file's; three libraries go into the CUDA
# plugin and are PIC), each only where a library uses it. A PCH made for
# each library instead cost as much as it saved: 12-14 s apiece to make (a
# 178 MB .gch) against about 2 s saved per file. GCC builds only (the
# normal one: 459 -> 368 s to build from scratch, 2026-11-26, 2 vCPUs):
# clang's TSan build of the libraries took as long with it as without (308
# and 301 s of CPU), and GCC's TSan build force-includes
# common/tsan_protobuf_abi.h first, after which GCC silently ignores a
# PCH. The PCH targets take only the top-level directory's options and
# pstrain_library's warnings: a file with options of its own goes without
# (SKIP_PRECOMPILE_HEADERS, ps_server/), since a PCH made with other options
# is refused (an error under -Werror) or its inline code compiled with
# options not the file's; so must a library or subdirectory given options
# of its own, or definitions that these headers read.
function(pstrain_library_pch)
  if(NOT PSTRAIN_LIBRARY_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
     OR PSTRAIN_SANITIZE MATCHES "thread")
    return()
  endif()
  add_library(pstrain_library_pch_deps INTERFACE)
  target_link_libraries(pstrain_library_pch_deps INTERFACE absl::status absl::statusor absl::strings
                        absl::str_format absl::span absl::time glog::glog protobuf::libprotobuf
                        Eigen3::Eigen)
  foreach(_pic OFF ON)
    set(_pch pstrain_library_pch_pic_${_pic})
    # Built only when a library reuses it (REUSE_FROM adds the dependency).
    add_library(${_pch} OBJECT EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/common/pch.cc)
    target_compile_options(${_pch} PRIVATE ${PSTRAIN_WARNING_FLAGS})
    target_link_libraries(${_pch} PRIVATE pstrain_library_pch_deps)
    set_target_properties(${_pch} PROPERTIES POSITION_INDEPENDENT_CODE ${_pic})
    target_precompile_headers(${_pch} PRIVATE ${CMAKE_SOURCE_DIR}/common/pch.h)
  endforeach()
  get_property(_libs GLOBAL PROPERTY PSTRAIN_LIBRARIES)
  foreach(_lib IN LISTS _libs)
    get_target_property(_pic ${_lib} POSITION_INDEPENDENT_CODE)
    if(_pic)
      set(_pic ON)
    else()
      set(_pic OFF)
    endif()
    target_link_libraries(${_lib} PRIVATE pstrain_library_pch_deps)
    target_precompile_headers(${_lib} REUSE_FROM pstrain_library_pch_pic_${_pic})
  endforeach()
endfunction()

# pstrain_binary(NAME SRCS main.cc DEPS lib...)
function(pstrain_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${PSTRAIN_WARNING_FLAGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# The compile options of all test code (the tests, their helper library and
# the precompiled header they share, which must match them exactly): the
# warnings, where the binaries and the source tree are, and the test code's
# own optimisation (PSTRAIN_TEST_OPTIMIZE, default -O0: GCC compiled the
# Release build's test sources in a fifth less time than at -O1, 2026-11-30
# on 2 vCPUs, and at -O1 in half the time of -O2; test bodies are not
# where a test spends its time, the code under test and the processes it
# starts are). The optimisation comes after the build type's flags, so it
# wins; Debug builds keep -O0.
function(pstrain_test_compile_options target)
  target_compile_options(${target} PRIVATE ${PSTRAIN_WARNING_FLAGS})
  # Tests find the built binaries and the source tree (cluster specs, data/)
  # through these, never through fixed paths or the environment.
  target_compile_definitions(${target} PRIVATE
      PSTRAIN_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
      PSTRAIN_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  if(PSTRAIN_TEST_OPTIMIZE AND CMAKE_BUILD_TYPE AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PSTRAIN_TEST_OPTIMIZE}>)
  endif()
endfunction()

# pstrain_test(NAME SRCS x_test.cc DEPS lib... [LABELS ...] [TIMEOUT s])
# Every TEST is discovered by ctest, so none silently drops out.
function(pstrain_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  pstrain_test_compile_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(_props TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    list(APPEND _props LABELS "${ARG_LABELS}")
  endif()
  # The lists behind tests/CMakeLists.txt's `unit_tests` target and
  # integration_test_binaries.txt (the CI's ASan stage).
  if("integration" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY PSTRAIN_INTEGRATION_TESTS ${name})
    # Started first when ctest has no times of its own yet (a clean clone,
    # as in CI): the whole-job tests take 5-35 s, and one started last
    # would run on alone after the rest.
    list(APPEND _props COST 10)
  else()
    set_property(GLOBAL APPEND PROPERTY PSTRAIN_UNIT_TESTS ${name})
  endif()
  if(TARGET pstrain_test_pch)
    target_precompile_headers(${name} REUSE_FROM pstrain_test_pch)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${_props})
endfunction()

# pstrain_fuzzer(NAME SRCS x.cc DEPS lib...)
# A libFuzzer binary (PSTRAIN_FUZZ=ON): the harness defines
# LLVMFuzzerTestOneInput; libFuzzer supplies main.
function(pstrain_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${PSTRAIN_WARNING_FLAGS} -fsanitize=fuzzer-no-link)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
endfunction()

# pstrain_benchmark(NAME SRCS x_bench.cc DEPS lib...)
function(pstrain_benchmark name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${PSTRAIN_WARNING_FLAGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
