// ember::set_allow_tf32, the public switch that the CUDA GEMMs and convolutions read (their TF32
// paths run on a GPU only: tests/cuda). Here: its default and that a setting is kept.
#include <catch2/catch.hpp>

#include <ember/kernels/precision.h>

TEST_CASE("precision: TF32 is off by default and the switch keeps its setting", "[cpu]") {
  REQUIRE_FALSE(ember::allow_tf32());  // strict f32 unless a program asks
  ember::set_allow_tf32(true);
  CHECK(ember::allow_tf32());
  ember::set_allow_tf32(false);
  CHECK_FALSE(ember::allow_tf32());
}
