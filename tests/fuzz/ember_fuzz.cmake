# Included by the top-level CMakeLists.txt before the library is defined: -DEMBER_FUZZ=ON makes
# this a libFuzzer tree (docs/fuzzing.md). It needs clang and the CUDA backend off:
#
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF \
#     -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF
#   cmake --build build-fuzz --target ember_fuzzers && tests/fuzz/run_fuzzers.sh build-fuzz 60
#
# Every target (libember included) is compiled with libFuzzer's coverage instrumentation and
# ASan+UBSan (-fsanitize=fuzzer-no-link,address,undefined, the first UBSan finding fatal); the
# harnesses (tests/fuzz/fuzz_<name>.cpp) also link libFuzzer (-fsanitize=fuzzer).
option(EMBER_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang; a tree of its own, CUDA off)" OFF)
set(EMBER_FUZZ_FLAGS "")
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
  if(NOT "${EMBER_SANITIZE}" STREQUAL "")
    message(FATAL_ERROR "EMBER_FUZZ=ON already builds under ASan+UBSan; leave EMBER_SANITIZE empty in this tree")
  endif()
  # -gline-tables-only: file:line in every report, at a fraction of -g's compile time.
  set(EMBER_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
                       -gline-tables-only)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${EMBER_FUZZ_FLAGS}>")
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "ember: libFuzzer tree: ${EMBER_FUZZ_FLAGS}")
endif()
