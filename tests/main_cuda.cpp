// Entry point of the [cuda] tests: without a usable GPU the whole program reports itself skipped
// (exit 77, which CTest shows as "Skipped"), never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include <ember/core/device.h>

int main(int argc, char** argv) {
  if (ember::cuda_device_count() == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s); the [cuda] tests did not run\n",
                ember::cuda_compiled() ? "CUDA build, but no GPU found" : "this build has no CUDA support");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
