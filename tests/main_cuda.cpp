// Entry point of the [cuda] tests: without a usable GPU the whole program reports itself skipped
// (exit 77, which CTest shows as "Skipped"), never passed, and says why CUDA is unusable (the
// CUDA error, driver and runtime versions: a driver too old for the runtime is not "no GPU").
// Listing tests or tags and --help need no GPU (bench/gpu_check.sh lists the groups).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#include <ember/core/device.h>

namespace {
bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* opt : {"-l", "--list-tests", "-t", "--list-tags", "--list-test-names-only", "-h", "--help", "-?"})
      if (std::strcmp(argv[i], opt) == 0) return true;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  if (!ember::cuda_available() && !only_lists(argc, argv)) {
    std::printf("SKIPPED: no usable CUDA device: %s; the [cuda] tests did not run\n",
                ember::cuda_unavailable_reason().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
