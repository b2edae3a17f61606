#pragma once
// DataParallel: one process drives several devices (PyTorch's torch.nn.DataParallel). Each forward
// splits the batch along dim 0 over the devices, runs one replica of the wrapped module per device
// on its own thread, and gathers the outputs on one device:
//
//   auto dp = std::make_shared<parallel::DataParallel>(model, std::vector<Device>{Device::cuda(0), Device::cuda(1)});
//   Tensor loss = layers::cross_entropy(dp->forward(x), y);   // x (N, ...) anywhere; logits on cuda:0
//   loss.backward();                                           // gradients land on model's parameters
//   opt.step();                                                // an optimizer over model->parameters()
//
// The replicas' parameters are the outputs of differentiable Broadcast ops (parallel/comm_ops.h)
// of the wrapped module's parameters, so backward reduce-adds their gradients onto the wrapped
// module's own parameters. Buffers (BatchNorm's running statistics) are copied to every replica
// before each forward and back from replica 0 after it, as in PyTorch. The replica threads run
// with the caller's grad mode and autocast state (amp::Autocast around dp->forward reaches them).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/layers/module.h>

namespace ember::parallel {

class DataParallel : public layers::Module {
 public:
  /// Wraps `module` (registered as child "module": state-dict keys read "module.0.weight").
  /// devices: where the replicas run, one per entry; a device may repeat ({cpu, cpu} runs two CPU
  /// replicas); empty means every visible GPU (an error when there is none). All must be of one
  /// kind and usable here. output_device (default devices[0]) receives the gathered output. The
  /// replicas are built here, so a module without clone_structure() is an error here (every
  /// built-in layer and model has one).
  explicit DataParallel(layers::ModulePtr module, std::vector<Device> devices = {},
                        std::optional<Device> output_device = {});

  /// x (N, ...) with N >= 1 -> the module's output for the whole batch (N, ...) on output_device.
  /// Rows are split as chunk_sizes(N, devices) (a batch smaller than the device count uses fewer
  /// replicas); replica i sees its chunk on devices[i], with the caller's grad mode and this
  /// module's training modes. With one device the module is called directly. An exception in a
  /// replica is rethrown here as an ember::Error naming the replica and its device. An undefined
  /// or 0-d input, or one with no rows, is an error naming its shape and the devices.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "DataParallel"; }
  std::string extra_repr() const override;

  /// The wrapped module (its parameters are the ones to optimise).
  const layers::ModulePtr& module() const { return module_; }
  const std::vector<Device>& devices() const { return devices_; }
  Device output_device() const { return output_device_; }

 private:
  // One replica per device, and the use counts of its parameters' and buffers' TensorImpls when
  // nothing but the replica held them (see in_use()).
  struct Replicas {
    std::vector<layers::ModulePtr> modules;
    std::vector<std::vector<long>> idle_use_counts;
    std::vector<std::pair<const TensorImpl*, DType>> source;  // the wrapped module's tensors they copy
  };
  // The cached replicas, rebuilt when the wrapped module's parameter list changed or when a graph
  // recorded by an earlier forward still holds them.
  Replicas& replicas();
  bool in_use(const Replicas& r) const;
  // Runs replica i on chunk i on its own thread each; returns their outputs in order.
  std::vector<Tensor> run_replicas(const std::vector<Tensor>& chunks);

  layers::ModulePtr module_;
  std::vector<Device> devices_;
  Device output_device_;
  Replicas replicas_;
  std::vector<Stream> streams_;  // replica i's stream (CUDA); the CPU's null stream otherwise
};

}  // namespace ember::parallel
