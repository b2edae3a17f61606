// DDP communication hooks (see comm_hooks.h).
#include <ember/parallel/comm_hooks.h>

#include <utility>

#include <ember/core/error.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/elementwise.h>

namespace ember::parallel {

namespace {

// The Work of a compressing hook: the all-reduce of the compressed copy, and the decompression
// into the bucket that the first wait() runs after it (later waits only rethrow the collective's
// error, if any). Keeps the compressed tensor alive while the collective uses it.
class DecompressWork final : public Work {
 public:
  DecompressWork(std::shared_ptr<Work> inner, Tensor compressed, Tensor bucket)
      : inner_(std::move(inner)), compressed_(std::move(compressed)), bucket_(std::move(bucket)) {}

  void wait() override {
    inner_->wait();
    if (!compressed_.defined()) return;
    kernels::copy(bucket_, compressed_);  // exact: every f16 and bf16 value is an f32 (or f64) value
    compressed_ = Tensor();
  }
  bool is_completed() override { return inner_->is_completed(); }
  double busy_seconds() override { return inner_->busy_seconds(); }

 private:
  std::shared_ptr<Work> inner_;
  Tensor compressed_;  // (numel,) f16 or bf16; undefined once copied back
  Tensor bucket_;
};

// PyTorch's order (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py):
// buffer.to(dtype).div_(world_size), all_reduce(sum), then copy back. Dividing before the sum keeps
// every partial sum of the ring at most the largest |gradient|, so world_size values each below the
// dtype's max cannot overflow on the way (summing first would: 2 x 40000 is inf in f16).
std::shared_ptr<Work> compress_hook(GradBucket& bucket, DType dtype) {
  const Tensor& buffer = bucket.buffer();
  EMBER_CHECK(is_floating(buffer.dtype()), "a ", dtype_name(dtype), " compression hook needs a floating bucket, got ",
              dtype_name(buffer.dtype()), " (bucket ", bucket.index(), ")");
  const Tensor compressed = kernels::binary(kernels::BinaryOp::Div, kernels::cast(buffer, dtype),
                                            static_cast<double>(bucket.group().world_size()));
  std::shared_ptr<Work> inner = bucket.all_reduce(compressed, ReduceOp::sum);
  return std::make_shared<DecompressWork>(std::move(inner), compressed, buffer);
}

}  // namespace

std::shared_ptr<Work> GradBucket::all_reduce(const Tensor& t, ReduceOp op) {
  bytes_reduced_ += t.numel() * static_cast<int64_t>(t.element_size());
  return group_->all_reduce(t, op);
}

std::shared_ptr<Work> allreduce_hook(GradBucket& bucket) { return bucket.all_reduce(bucket.buffer(), ReduceOp::avg); }

std::shared_ptr<Work> fp16_compress_hook(GradBucket& bucket) { return compress_hook(bucket, DType::f16); }

std::shared_ptr<Work> bf16_compress_hook(GradBucket& bucket) { return compress_hook(bucket, DType::bf16); }

CommHook comm_hook_named(const std::string& name) {
  if (name == "none") return {};
  if (name == "fp16") return fp16_compress_hook;
  if (name == "bf16") return bf16_compress_hook;
  throw Error("unknown DDP communication hook '" + name + "'; the choices are none, fp16 and bf16");
}

}  // namespace ember::parallel
