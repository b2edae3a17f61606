// DistributedDataParallel (see ddp.h).
#include <ember/parallel/ddp.h>

#include <map>
#include <sstream>

#include <ember/autograd/grad_mode.h>
#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/join.h>
#include <ember/parallel/object_collectives.h>

namespace ember::parallel {

namespace {

struct Entry {
  std::string name, dtype, shape;
  std::string str() const { return "'" + name + "' " + dtype + " " + shape; }
};

std::vector<Entry> parse_entries(const std::string& text) {
  std::vector<Entry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    out.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return out;
}

/// The shape, and the memory layout when it is not row-major: DDP's buckets lay each gradient out
/// as its parameter, so the replicas must agree on it.
std::string shape_and_layout(const Tensor& t) {
  if (t.is_contiguous()) return t.shape_str();
  return t.shape_str() + (t.is_contiguous(MemoryFormat::channels_last) ? " channels-last" : " strided");
}

}  // namespace

void check_same_across_ranks(ProcessGroup& group, const std::vector<std::pair<std::string, Tensor>>& named,
                             const std::string& what) {
  std::string text;
  for (const auto& [name, t] : named) text += name + "\t" + dtype_name(t.dtype()) + "\t" + shape_and_layout(t) + "\n";
  const std::vector<std::string> all = all_gather_strings(group, text);
  const std::vector<Entry> ref = parse_entries(all[0]);
  // Every rank runs the same comparison on the same data, so all of them raise the same error.
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<Entry> other = parse_entries(all[r]);
    const std::string rk = "rank " + std::to_string(r);
    for (size_t i = 0; i < std::max(ref.size(), other.size()); ++i) {
      if (i < ref.size() && i < other.size() && ref[i].str() == other[i].str()) continue;
      const std::string a = i < ref.size() ? ref[i].str() : "no " + what + " there";
      const std::string b = i < other.size() ? other[i].str() : "no " + what + " there";
      throw Error("DistributedDataParallel: the ranks hold different models: " + what + " " + std::to_string(i) +
                  " is " + a + " on rank 0 but " + b + " on " + rk + " (rank 0 has " + std::to_string(ref.size()) +
                  " " + what + "s, " + rk + " " + std::to_string(other.size()) +
                  "); build the same model with the same settings on every rank");
    }
  }
}

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  NoGradGuard no_grad;
  std::map<std::pair<int, std::string>, std::vector<Tensor>> groups;  // by (dtype, device)
  for (const Tensor& t : tensors)
    if (t.numel() > 0) groups[{static_cast<int>(t.dtype()), t.device().str()}].push_back(t.detach());
  for (auto& [key, list] : groups) {
    int64_t n = 0;
    for (const Tensor& t : list) n += t.numel();
    Tensor flat = empty({n}, {.dtype = list[0].dtype(), .device = list[0].device()});
    int64_t off = 0;
    for (Tensor& t : list) {
      flat.narrow(0, off, t.numel()).view(t.shape()).copy_(t);
      off += t.numel();
    }
    group.broadcast(flat, root)->wait();
    if (group.rank() == root) continue;
    off = 0;
    for (Tensor& t : list) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.shape()));
      off += t.numel();
    }
  }
}

DistributedDataParallel::DistributedDataParallel(layers::ModulePtr module, std::shared_ptr<ProcessGroup> group,
                                                 Options opts)
    : module_(std::move(module)), group_(std::move(group)), opts_(opts) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  EMBER_CHECK(group_ != nullptr, "DistributedDataParallel: no process group (call parallel::init_process_group())");
  register_module("module", module_);
  const auto params = module_->named_parameters();
  const auto buffers = module_->named_buffers();
  check_same_across_ranks(*group_, params, "parameter");
  check_same_across_ranks(*group_, buffers, "buffer");
  std::vector<Tensor> state;
  for (const auto& [n, p] : params) state.push_back(p);
  for (const auto& [n, b] : buffers) state.push_back(b);
  if (group_->world_size() > 1) broadcast_coalesced(*group_, state, 0);
  reducer_ = std::make_unique<Reducer>(params, group_,
                                       ReducerOptions{.bucket_cap_mb = opts_.bucket_cap_mb,
                                                      .first_bucket_cap_mb = 1,
                                                      .find_unused_parameters = opts_.find_unused_parameters,
                                                      .comm_hook = opts_.comm_hook});
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  reducer_->set_comm_hook(hook);
  opts_.comm_hook = std::move(hook);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  // Uneven inputs: under a Join, buffers come from a rank still training.
  const int buffer_root = join_ != nullptr && GradMode::is_enabled() ? join_->before_forward(sync_) : 0;
  if (opts_.broadcast_buffers && group_->world_size() > 1) sync_buffers(buffer_root);
  if (GradMode::is_enabled()) reducer_->prepare_for_backward(sync_);
  return module_->forward(input);
}

void DistributedDataParallel::sync_buffers(int root) {
  std::vector<Tensor> buffers;
  for (const auto& [n, b] : module_->named_buffers()) buffers.push_back(b);
  if (!buffers.empty()) broadcast_coalesced(*group_, buffers, root);
}

std::string DistributedDataParallel::extra_repr() const {
  std::ostringstream os;
  os << "world_size=" << group_->world_size() << ", backend=" << group_->backend()
     << ", buckets=" << reducer_->buckets().size() << ", bucket_cap_mb=" << opts_.bucket_cap_mb;
  if (opts_.find_unused_parameters) os << ", find_unused_parameters=True";
  return os.str();
}

}  // namespace ember::parallel
