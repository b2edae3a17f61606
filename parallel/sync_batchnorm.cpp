// SyncBatchNorm (see sync_batchnorm.h): the gather BatchNorm2d's synced statistics go through.
#include <ember/parallel/sync_batchnorm.h>

#include <functional>
#include <string>
#include <utility>

#include <ember/autograd/function.h>
#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>
#include <ember/kernels/copy.h>
#include <ember/kernels/factory.h>

namespace ember::parallel {

namespace {

// Row r, elements [offset, offset + length) of a (rows, width) contiguous tensor, as a new
// contiguous tensor without autograd.
Tensor block(const Tensor& flat, int64_t row, int64_t width, int64_t offset, int64_t length) {
  Tensor out = empty({length}, {.dtype = flat.dtype(), .device = flat.device()});
  kernels::copy(out, as_strided_raw(flat, {length}, {1}, flat.offset() + row * width + offset));
  return out;
}

}  // namespace

GroupStatsExchange::GroupStatsExchange(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {
  EMBER_CHECK(group_ != nullptr, "SyncBatchNorm: expected a process group, got none");
}

std::vector<Tensor> GroupStatsExchange::gather(const std::vector<Tensor>& local) {
  EMBER_CHECK(!local.empty(), "SyncBatchNorm: nothing to gather");
  const int world = group_->world_size(), rank = group_->rank();
  const DType dtype = local[0].dtype();
  const Device device = local[0].device();
  std::vector<int64_t> offsets, lengths;
  int64_t width = 0;
  for (const Tensor& t : local) {
    EMBER_CHECK(t.dim() == 1 && t.dtype() == dtype && t.device() == device,
                "SyncBatchNorm: expected 1-D tensors of one dtype on one device, got ", t.shape_str(), " ",
                dtype_name(t.dtype()), " on ", t.device().str());
    offsets.push_back(width);
    lengths.push_back(t.numel());
    width += t.numel();
  }
  // One all_gather of the packed values: (world, width), rank r's row at r * width.
  Tensor mine = empty({width}, {.dtype = dtype, .device = device});
  for (size_t i = 0; i < local.size(); ++i)
    kernels::copy(as_strided_raw(mine, {local[i].numel()}, {1}, offsets[i]), local[i].contiguous());
  Tensor all = empty({world, width}, {.dtype = dtype, .device = device});
  group_->all_gather(all, mine)->wait();
  std::vector<Tensor> outs;
  for (size_t i = 0; i < local.size(); ++i) {
    Tensor o = empty({world, local[i].numel()}, {.dtype = dtype, .device = device});
    kernels::copy(o, as_strided_raw(all, {world, local[i].numel()}, {width, 1}, offsets[i]));
    outs.push_back(o);
  }
  if (!autograd::needs_grad_list(local)) return outs;
  // Backward: every replica's loss saw every row, so a row's gradient is the sum over replicas of
  // the gradients its copies received: pack, all_reduce, and keep this rank's row.
  autograd::record_multi(
      outs, "SyncBatchNormGatherBackward",
      [group = group_, offsets, lengths, width, world, rank, dtype, device](const autograd::TensorList& grads) {
        Tensor flat = zeros({world, width}, {.dtype = dtype, .device = device});
        for (size_t i = 0; i < grads.size(); ++i) {
          if (!grads[i].defined()) continue;
          kernels::copy(as_strided_raw(flat, {world, lengths[i]}, {width, 1}, offsets[i]), grads[i].contiguous());
        }
        group->all_reduce(flat, ReduceOp::sum)->wait();
        autograd::TensorList out;
        for (size_t i = 0; i < lengths.size(); ++i) out.push_back(block(flat, rank, width, offsets[i], lengths[i]));
        return out;
      },
      local);
  return outs;
}

namespace {

void for_each_batchnorm(layers::Module& m, const std::function<void(layers::BatchNorm2d&)>& fn) {
  if (auto* bn = dynamic_cast<layers::BatchNorm2d*>(&m)) fn(*bn);
  for (auto& [name, child] : m.named_children()) for_each_batchnorm(*child, fn);
}

}  // namespace

std::shared_ptr<layers::Module> convert_sync_batchnorm(std::shared_ptr<layers::Module> module,
                                                       std::shared_ptr<ProcessGroup> group) {
  EMBER_CHECK(module != nullptr, "convert_sync_batchnorm: expected a module, got none");
  auto exchange = std::make_shared<GroupStatsExchange>(std::move(group));
  for_each_batchnorm(*module, [&](layers::BatchNorm2d& bn) { bn.set_stats_exchange(exchange); });
  return module;
}

int64_t count_sync_batchnorm(const layers::Module& module) {
  const auto* bn = dynamic_cast<const layers::BatchNorm2d*>(&module);
  int64_t n = bn != nullptr && bn->stats_exchange() != nullptr ? 1 : 0;
  for (const auto& [name, child] : module.named_children()) n += count_sync_batchnorm(*child);
  return n;
}

SyncBatchNorm2d::SyncBatchNorm2d(int64_t num_features, std::shared_ptr<ProcessGroup> group,
                                 const layers::BatchNorm2dOptions& options)
    : BatchNorm2d(num_features, options) {
  set_stats_exchange(std::make_shared<GroupStatsExchange>(std::move(group)));
}

}  // namespace ember::parallel
