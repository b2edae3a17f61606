# Included by the top-level CMakeLists.txt before the library is defined: -DEMBER_FUZZ=ON makes
# this a libFuzzer tree (docs/fuzzing.md). It needs clang and the CUDA backend off:
#
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF \
#     -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF
#   cmake --build build-fuzz --target ember_fuzzers && tests/fuzz/run_fuzzers.sh build-fuzz 60
#
# Two kinds of tree:
#   - a fuzz tree of its own (EMBER_SANITIZE empty): every target, libember included, is compiled
#     with libFuzzer's coverage instrumentation and ASan+UBSan (-fsanitize=fuzzer-no-link,address,
#     undefined, the first UBSan finding fatal);
#   - the ASan+UBSan test tree with the harnesses added (-DEMBER_SANITIZE=address -DEMBER_FUZZ=ON,
#     what CI builds: one library build less). Coverage goes only to the files that read the
#     harnesses' bytes (EMBER_FUZZ_COVERED below): elsewhere -fsanitize-coverage's compare tracing
#     would slow the arithmetic every test runs, and the fuzzers have nothing to learn there.
# Either way the harnesses (tests/fuzz/fuzz_<name>.cpp) also link libFuzzer (-fsanitize=fuzzer).
option(EMBER_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang, CUDA off; alone or in an ASan tree)" OFF)
set(EMBER_FUZZ_FLAGS "")
# The readers of bytes from outside, relative to the source root: config (train/config*),
# IDX and CIFAR files (data/), checkpoints (serialize/), the store's wire protocol
# (parallel/store*). Not core/: its tensor code is what every test's arithmetic goes through.
set(EMBER_FUZZ_COVERED data/mnist.cpp data/cifar.cpp data/io.cpp data/dataset.cpp serialize/*.cpp parallel/store*.cpp
                       train/config*.cpp)
if(EMBER_FUZZ)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  check_cxx_source_compiles(
    "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }"
    EMBER_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  if(NOT EMBER_HAVE_LIBFUZZER)
    message(FATAL_ERROR "EMBER_FUZZ=ON needs a compiler that supports -fsanitize=fuzzer (clang; ${CMAKE_CXX_COMPILER_ID} "
                        "${CMAKE_CXX_COMPILER_VERSION} does not): configure a fresh tree with CC=clang CXX=clang++ "
                        "(Debian: apt-get install clang libclang-rt-dev)")
  endif()
  if(EMBER_WITH_CUDA)
    message(FATAL_ERROR "EMBER_FUZZ=ON needs the CUDA backend off: configure this tree with -DEMBER_CUDA=OFF")
  endif()
  if(EMBER_SANITIZE STREQUAL "address")
    message(STATUS "ember: libFuzzer harnesses in the ASan+UBSan tree, coverage on: ${EMBER_FUZZ_COVERED}")
  elseif(NOT "${EMBER_SANITIZE}" STREQUAL "")
    message(FATAL_ERROR "EMBER_FUZZ=ON goes with EMBER_SANITIZE=address or empty (a fuzz tree of its own, "
                        "under ASan+UBSan), not with EMBER_SANITIZE=${EMBER_SANITIZE}")
  else()
    # -gline-tables-only: file:line in every report, at a fraction of -g's compile time.
    set(EMBER_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                         -fno-omit-frame-pointer -gline-tables-only)
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${EMBER_FUZZ_FLAGS}>")
    add_link_options(-fsanitize=address,undefined)
    message(STATUS "ember: libFuzzer tree: ${EMBER_FUZZ_FLAGS}")
  endif()
endif()

# ember_fuzz_cover(TARGET): in an ASan tree with the harnesses, compiles TARGET's sources that
# match EMBER_FUZZ_COVERED with libFuzzer's coverage (a fuzz tree of its own has it everywhere).
function(ember_fuzz_cover target)
  if(NOT EMBER_FUZZ OR NOT EMBER_SANITIZE STREQUAL "address")
    return()
  endif()
  list(TRANSFORM EMBER_FUZZ_COVERED PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE _globs)
  file(GLOB _covered CONFIGURE_DEPENDS ${_globs})
  get_target_property(_sources ${target} SOURCES)
  foreach(_src IN LISTS _covered)
    if(_src IN_LIST _sources)
      set_property(SOURCE ${_src} TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS -fsanitize=fuzzer-no-link)
    endif()
  endforeach()
endfunction()
