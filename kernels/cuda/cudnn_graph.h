#pragma once
// cuDNN's graph (backend) API, the part ember's convolutions use: descriptors as RAII owners, and
// the steps from an operation to an execution plan.
//
// Why the graph API: cuDNN 9 implements the legacy convolution calls on top of it and builds and
// finalizes an execution plan inside every call. On an H200 that cost 60-190 us of host time per
// call (a host-time probe, 2026-11-27: docs/benchmarks.md), which made a ResNet-18 training step host-bound;
// a plan built once and executed with a fresh variant pack costs 5-27 us. The plan is specific to
// the operands' shapes, strides, alignment, data type and alpha/beta; only the data pointers and the
// workspace change between calls (the variant pack).
#include <cudnn.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/dtype.h>

namespace ember::kernels::cuda::graph {

/// Owner of one cudnnBackendDescriptor_t (movable; the destructor logs a failed destroy).
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set(cudnnBackendAttributeName_t name, const Descriptor& value);
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// A finalized tensor descriptor: `dims` and `strides` in elements, `alignment` in bytes (the
/// largest power of two the data pointers are promised to be a multiple of).
Descriptor tensor(int64_t uid, DType dt, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                  int64_t alignment);

/// A finalized 2-D cross-correlation descriptor accumulating in `compute`.
Descriptor convolution(cudnnDataType_t compute, const int64_t pad[2], const int64_t stride[2],
                       const int64_t dilation[2]);

/// One operation in a finalized graph on `handle`, kept with the descriptors it refers to.
struct Graph {
  std::vector<Descriptor> parts;  // tensors, convolution, operation
  Descriptor graph;
};
Graph single_operation_graph(cudnnHandle_t handle, Descriptor op, std::vector<Descriptor> parts);

/// The engine configurations cuDNN's heuristics suggest for `graph` in `mode`, best first.
std::vector<Descriptor> heuristic_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode);

/// The numerical notes of a configuration's engine; nullopt when they cannot be read (the caller
/// then cannot tell a nondeterministic or tensor-core engine: it skips the configuration).
std::optional<std::vector<cudnnBackendNumericalNote_t>> numerical_notes(const Descriptor& config);

/// A finalized execution plan of `config`, or an empty descriptor when cuDNN declines it (its
/// status in `status`).
Descriptor plan(cudnnHandle_t handle, const Descriptor& config, cudnnStatus_t& status);
int64_t plan_workspace(const Descriptor& plan);

/// Runs `plan` with the tensors `uids` bound to `ptrs`; returns cuDNN's status (the caller checks).
cudnnStatus_t execute(cudnnHandle_t handle, const Descriptor& plan, std::span<const int64_t> uids,
                      std::span<void* const> ptrs, void* workspace);

}  // namespace ember::kernels::cuda::graph
