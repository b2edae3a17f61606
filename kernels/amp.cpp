// Front of the fused unscale pass (kernels/amp.h): checks (errors name the tensor), contiguous
// staging of strided tensors, and dispatch to kernels/cpu/amp.cpp or kernels/cuda/amp.cu.
#include <ember/kernels/amp.h>

#include <utility>

#include <ember/kernels/copy.h>

namespace ember::kernels {

DispatchTable<NonFiniteUnscaleFn> non_finite_unscale_table("non_finite_check_and_unscale");

void non_finite_check_and_unscale_(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale) {
  EMBER_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.dtype() == DType::f32,
              "non_finite_check_and_unscale_: found_inf must be a one-element f32 tensor, got ",
              found_inf.defined() ? found_inf.shape_str() + " " + dtype_name(found_inf.dtype()) : "undefined");
  EMBER_CHECK(found_inf.is_contiguous(), "non_finite_check_and_unscale_: found_inf must be contiguous");
  const Device dev = found_inf.device();
  std::vector<std::pair<Tensor, Tensor>> writeback;  // (strided original, contiguous stand-in)
  std::vector<Tensor> work;
  work.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "non_finite_check_and_unscale_: tensor ", i, " is undefined");
    EMBER_CHECK(is_floating(t.dtype()), "non_finite_check_and_unscale_: tensor ", i, " (shape ", t.shape_str(),
                ") has dtype ", dtype_name(t.dtype()), " (expected f32, f64, f16 or bf16)");
    EMBER_CHECK(t.device() == dev, "non_finite_check_and_unscale_: tensor ", i, " (shape ", t.shape_str(), ") is on ",
                t.device().str(), " but found_inf is on ", dev.str());
    if (t.numel() == 0) continue;
    if (t.is_contiguous(t.suggest_memory_format())) {  // each tensor is one flat pass: any dense layout
      work.push_back(t);
    } else {
      Tensor c = copy_in_layout(t, MemoryFormat::contiguous);
      writeback.emplace_back(t, c);
      work.push_back(c);
    }
  }
  if (!work.empty()) non_finite_unscale_table(dev, work, found_inf, inv_scale);
  for (auto& [dst, src] : writeback) copy(dst, src);
}

}  // namespace ember::kernels
