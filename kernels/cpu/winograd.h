#pragma once
// Winograd F(4x4, 3x3) convolution on the CPU (kernels/cpu/winograd.cpp): the 3x3, stride-1,
// dilation-1, one-group f32 convolutions of both layouts, all three directions. The im2col + GEMM
// kernels (conv.cpp, conv_nhwc.cpp) stay the path of every other shape and the reference the tests
// compare with.
#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/kernels/conv.h>
#include <ember/kernels/cpu/conv_common.h>

namespace ember::kernels::cpu::conv_detail {

/// Which direction of a convolution a Winograd call computes.
enum class WinogradPass { forward, backward_input, backward_weight };

/// The rule (docs/benchmarks.md, bench_cpu_resnet, gives the measurements behind it): f32; a 3x3
/// kernel with stride 1, dilation 1, one group and padding 1 (the "same" 3x3 of ResNets and VGGs),
/// or padding 0 for the forward and the weight gradient (mnist_cnn's second convolution; not its
/// input gradient, see below);
/// at least kWinogradMinChannels input and output channels; an output plane of at least 4x4 (one
/// whole tile: smaller planes waste most of a tile's products); at least kWinogradMinTiles 4x4
/// tiles over the batch (N * ceil(Ho / 4) * ceil(Wo / 4)): the filter's transform, 36 * C * O values
/// written and read back per call, is only paid back by enough tiles (on a quiet 2-vCPU AVX-512
/// VM, 128-512 channels on 4x4 and 8x8 planes, per direction: Winograd 0.4-0.6x im2col's speed at
/// 4 tiles, 0.9-1.8x at 16, 1.0-2.6x at 24, 1.5-2.4x at 32; docs/benchmarks.md); and for the
/// weight gradient at least kWinogradMinTerms = N * Ho * Wo products per element (implied by 24
/// tiles, which cover at least 150 outputs; kept for what it says about accuracy). F(4x4, 3x3)'s
/// rounding error is a fixed multiple of u times the magnitudes of a whole tile, where direct
/// summation's bound (tests/kernels/test_conv.cpp) grows with the number of terms K of each
/// element's sum and shrinks with that element's own magnitude. With K >= 144 and padding 1 (an
/// edge element keeps at least 4 of its 9 taps) the Winograd results stay inside the direct bound,
/// and with padding 0 in the forward and weight gradient (every sum keeps its 9 taps, resp. all
/// N * Ho * Wo terms); with 16 terms (one 4x4 plane of one image), padding 2, or the input gradient
/// of padding 0 (an element left with one tap) they did not. g is the forward convolution's geometry for every pass.
constexpr int64_t kWinogradMinChannels = 16;
constexpr int64_t kWinogradMinTiles = 24;
constexpr int64_t kWinogradMinTerms = 144;
bool winograd_applies(const Geometry& g, DType dt, WinogradPass pass);

/// The Winograd kernels themselves, for any 3x3, stride-1, dilation-1, one-group f32 convolution
/// with padding 0 to 2, whatever the channel counts and plane (outside the rule they are correct
/// but less accurate, see above): the
/// dispatchers in conv.cpp call them where winograd_applies() says so, the tests call them
/// directly. Operands dense in f (row-major or channels-last), same contracts as the im2col kernels:
///   forward:         x (N, C, H, W), w (O, C, 3, 3), bias (O) or undefined -> out (N, O, Ho, Wo)
///   backward input:  gout (N, O, Ho, Wo), w -> gx (N, C, H, W) (overwritten)
///   backward weight: gout, x -> gw (O, C, 3, 3) (overwritten)
void winograd_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                      MemoryFormat f);
void winograd_backward_input(const Tensor& gout, const Tensor& w, const Conv2dParams& p, const Tensor& gx,
                             MemoryFormat f);
void winograd_backward_weight(const Tensor& gout, const Tensor& x, const Conv2dParams& p, const Tensor& gw,
                              MemoryFormat f);

/// Turns the rule off (false: every convolution takes im2col + GEMM) or back on; for benchmarks
/// that time both paths in one run (bench_cpu_resnet --convs). Not thread-safe.
void set_winograd_enabled(bool on);

/// Images per chunk: n > 0 fixes it (tests cross chunk boundaries with small shapes), 0 restores
/// the automatic choice (a chunk's transformed tiles near 8 MiB). Not thread-safe: tests only.
void set_winograd_chunk_images(int64_t n);

/// How many times a Winograd kernel has run in this process, per pass (the tests check that the
/// rule's shapes take the path).
int64_t winograd_calls(WinogradPass pass);

}  // namespace ember::kernels::cpu::conv_detail
