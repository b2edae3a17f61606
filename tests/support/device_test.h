#pragma once
// Test cases written once for both devices. A file under tests/device/ is compiled into the CPU
// program (ember_tests, EMBER_TEST_ON_CUDA=0) and into the CUDA program (ember_cuda_tests,
// EMBER_TEST_ON_CUDA=1, which reports itself skipped without a usable GPU, never passed).
// DEVICE_TEST_CASE("reduce: ...", "[reduce]") is a case named "reduce: ..." tagged [cpu] in the
// first, "cuda reduce: ..." tagged [cuda] in the second; inside, test_device() is the device under
// test. Cases that only one device has (a CUDA kernel's launch paths, the CPU's threading) stay in
// tests/cuda/ and the CPU folders.
#include <catch2/catch.hpp>

#include <ember/core/device.h>

#ifndef EMBER_TEST_ON_CUDA
#error "EMBER_TEST_ON_CUDA must be 0 or 1 (set by tests/CMakeLists.txt per program)"
#endif

#if EMBER_TEST_ON_CUDA
#define EMBER_DEVICE_TEST_PREFIX "cuda "
#define EMBER_DEVICE_TEST_TAG "[cuda]"
#else
#define EMBER_DEVICE_TEST_PREFIX ""
#define EMBER_DEVICE_TEST_TAG "[cpu]"
#endif

#define DEVICE_TEST_CASE(name, tags) TEST_CASE(EMBER_DEVICE_TEST_PREFIX name, EMBER_DEVICE_TEST_TAG tags)

namespace ember::testing {

/// The device the program tests: cuda:0 in the CUDA program, the CPU in the other.
inline Device test_device() { return EMBER_TEST_ON_CUDA ? Device::cuda(0) : Device::cpu(); }

}  // namespace ember::testing
