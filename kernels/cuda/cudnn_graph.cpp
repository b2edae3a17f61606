// cuDNN graph API helpers (see cudnn_graph.h).
#include <ember/kernels/cuda/cudnn_graph.h>

#include <algorithm>
#include <cstdio>

#include <ember/core/cuda_check.h>
#include <ember/core/error.h>
#include <ember/kernels/cuda/cudnn_handle.h>

namespace ember::kernels::cuda::graph {

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }

Descriptor::~Descriptor() {
  if (d_ == nullptr) return;
  const cudnnStatus_t st = cudnnBackendDestroyDescriptor(d_);
  if (st != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "ember: cudnnBackendDestroyDescriptor failed: %s\n", cudnnGetErrorString(st));
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
}

void Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t v = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

void Descriptor::finalize() { CUDNN_CHECK(cudnnBackendFinalize(d_)); }

Descriptor tensor(int64_t uid, DType dt, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                  int64_t alignment) {
  EMBER_DEBUG_ASSERT(dims.size() == strides.size(), "graph::tensor: ", dims.size(), " dims, ", strides.size(),
                     " strides");
  const cudnnDataType_t type = cudnn_data_type(dt);
  const auto n = static_cast<int64_t>(dims.size());
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t.finalize();
  return t;
}

Descriptor convolution(cudnnDataType_t compute, const int64_t pad[2], const int64_t stride[2],
                       const int64_t dilation[2]) {
  const int64_t spatial = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  Descriptor c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  c.finalize();
  return c;
}

Graph single_operation_graph(cudnnHandle_t handle, Descriptor op, std::vector<Descriptor> parts) {
  Graph g;
  g.graph = Descriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  g.graph.finalize();
  g.parts = std::move(parts);
  g.parts.push_back(std::move(op));
  return g;
}

std::vector<Descriptor> heuristic_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};  // no engine for this graph
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr));
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         count, &got, raw.data()));
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return configs;
}

std::optional<std::vector<cudnnBackendNumericalNote_t>> numerical_notes(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  notes.resize(static_cast<size_t>(std::clamp<int64_t>(n, 0, static_cast<int64_t>(notes.size()))));
  return notes;
}

Descriptor plan(cudnnHandle_t handle, const Descriptor& config, cudnnStatus_t& status) {
  Descriptor p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  p.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  status = cudnnBackendFinalize(p.get());
  if (status != CUDNN_STATUS_SUCCESS) return Descriptor();
  return p;
}

int64_t plan_workspace(const Descriptor& plan) {
  int64_t bytes = 0, n = 0;
  CUDNN_CHECK(
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &bytes));
  return bytes;
}

cudnnStatus_t execute(cudnnHandle_t handle, const Descriptor& plan, std::span<const int64_t> uids,
                      std::span<void* const> ptrs, void* workspace) {
  EMBER_DEBUG_ASSERT(uids.size() == ptrs.size(), "graph::execute: ", uids.size(), " uids, ", ptrs.size(), " pointers");
  const auto n = static_cast<int64_t>(uids.size());
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  return cudnnBackendExecute(handle, plan.get(), pack.get());
}

}  // namespace ember::kernels::cuda::graph
