// ZeroRedundancyOptimizer: the size-balanced partition, the sharded step with its parameter
// exchange, and checkpoints that look like a plain optimizer's over all parameters.
#include <ember/parallel/zero.h>

#include <algorithm>
#include <charconv>
#include <numeric>
#include <set>
#include <sstream>

#include <ember/autograd/grad_mode.h>
#include <ember/kernels/factory.h>
#include <ember/parallel/object_collectives.h>

namespace ember::parallel {

namespace {

constexpr const char* kHyperPrefix = "hyper.";
constexpr const char* kStatePrefix = "state.";
constexpr const char* kParamCount = "param_count";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// Splits "state.<i>.<name>"; false when `key` is not of that form.
bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (!starts_with(key, kStatePrefix)) return false;
  const std::string rest = key.substr(std::char_traits<char>::length(kStatePrefix));
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) return false;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + dot, index);
  if (ec != std::errc() || ptr != rest.data() + dot) return false;
  name = rest.substr(dot + 1);
  return true;
}

std::string state_key(size_t index, const std::string& name) {
  return kStatePrefix + std::to_string(index) + "." + name;
}

Tensor i64_scalar(int64_t v) { return scalar_tensor(static_cast<double>(v), {.dtype = DType::i64}); }

/// Parameter p's elements [offset, offset + numel) of a flat 1-D buffer, shaped as p (row-major;
/// copy_ pairs elements logically, so a channels-last p packs and unpacks correctly).
Tensor slot(const Tensor& flat, int64_t offset, const Tensor& p) {
  return flat.narrow(0, offset, p.numel()).view(p.sizes());
}

}  // namespace

int64_t state_bytes(const optim::Optimizer& opt, size_t i) {
  int64_t bytes = 0;
  for (const auto& [name, t] : opt.state(i)) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

std::vector<int> ZeroRedundancyOptimizer::partition(const std::vector<int64_t>& sizes, int world_size) {
  EMBER_CHECK(world_size >= 1, "ZeroRedundancyOptimizer: world size must be >= 1, got ", world_size);
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(world_size), 0);
  std::vector<int> owners(sizes.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // first minimum: lowest rank
    owners[i] = static_cast<int>(least - load.begin());
    *least += sizes[i];
  }
  return owners;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                                 const OptimizerFactory& make_inner)
    : Optimizer(std::move(params), 0.0), group_(std::move(group)), make_inner_(make_inner) {
  EMBER_CHECK(group_ != nullptr, "ZeroRedundancyOptimizer: no process group");
  EMBER_CHECK(make_inner_ != nullptr, "ZeroRedundancyOptimizer: no factory for the inner optimizer");
  // Sizes in bytes: the state of a parameter is a few copies of it, so bytes balance the state.
  std::vector<int64_t> sizes;
  for (const Tensor& p : params_) sizes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  owners_ = partition(sizes, group_->world_size());
  std::vector<Tensor> mine;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != group_->rank()) continue;
    shard_.push_back(i);
    mine.push_back(params_[i]);
  }
  inner_ = make_inner_(mine);
  EMBER_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer: the factory returned no optimizer on rank ", group_->rank());
  const std::vector<Tensor>& got = inner_->params();
  bool same = got.size() == mine.size();
  for (size_t j = 0; same && j < got.size(); ++j) same = got[j].is_same(mine[j]);
  EMBER_CHECK(same, "ZeroRedundancyOptimizer: the factory's ", inner_->name(), " optimizes ", got.size(),
              " tensors, not the ", mine.size(), " parameters of rank ", group_->rank(),
              "'s shard it was given (build it over exactly its argument)");
  // Mirror the inner's hyperparameters here, so lr(), hyperparameter() and the consolidated
  // state dict see them; step() hands the lr (which schedules set on this object) to the inner.
  for (const auto& [key, t] : inner_->state_dict())
    if (starts_with(key, kHyperPrefix))
      add_hyperparameter(key.substr(std::char_traits<char>::length(kHyperPrefix)), t.item<double>());
}

std::string ZeroRedundancyOptimizer::name() const { return "ZeroRedundancyOptimizer(" + inner_->name() + ")"; }

int ZeroRedundancyOptimizer::owner(size_t i) const {
  EMBER_CHECK(i < owners_.size(), name(), ": parameter index ", i, " out of range (", owners_.size(), " parameters)");
  return owners_[i];
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  int64_t bytes = 0;
  for (size_t j = 0; j < shard_.size(); ++j) bytes += state_bytes(*inner_, j);
  return bytes;
}

void ZeroRedundancyOptimizer::step() {
  inner_->set_lr(lr());
  inner_->step();
  gather_parameters();
}

void ZeroRedundancyOptimizer::gather_parameters() {
  if (group_->world_size() == 1) return;
  NoGradGuard no_grad;
  const int rank = group_->rank();
  // One flat buffer per owner and (dtype, device): a broadcast needs one dtype, and few large
  // messages beat one per parameter. Built in parameter order, so every rank builds the same list.
  struct Pack {
    Pack(int o, DType d, Device dev) : owner(o), dtype(d), device(dev) {}
    int owner;
    DType dtype;
    Device device;
    std::vector<size_t> members;
    int64_t numel = 0;
    Tensor flat;
    std::shared_ptr<Work> work;
  };
  std::vector<Pack> packs;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    auto it = std::find_if(packs.begin(), packs.end(), [&](const Pack& k) {
      return k.owner == owners_[i] && k.dtype == p.dtype() && k.device == p.device();
    });
    if (it == packs.end()) it = packs.emplace(packs.end(), owners_[i], p.dtype(), p.device());
    it->members.push_back(i);
    it->numel += p.numel();
  }
  for (Pack& k : packs) {
    k.flat = empty({k.numel}, {.dtype = k.dtype, .device = k.device});
    if (k.owner == rank) {
      int64_t off = 0;
      for (size_t i : k.members) slot(k.flat, off, params_[i]).copy_(params_[i]), off += params_[i].numel();
    }
    k.work = group_->broadcast(k.flat, k.owner);
  }
  for (Pack& k : packs) {
    k.work->wait();
    if (k.owner == rank) continue;
    int64_t off = 0;
    for (size_t i : k.members) params_[i].copy_(slot(k.flat, off, params_[i])), off += params_[i].numel();
  }
}

// ---- checkpoints ----

StateDict ZeroRedundancyOptimizer::state_dict() const {
  EMBER_FAIL(name(), "::state_dict: rank ", group_->rank(), " holds the optimizer state of only its ", shard_.size(),
             " of ", params_.size(),
             " parameters; call consolidate_state_dict(to) on every rank (collective) and save "
             "the full state dict rank `to` gets");
}

StateDict ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const int rank = group_->rank(), world = group_->world_size();
  EMBER_CHECK(to >= 0 && to < world, name(), "::consolidate_state_dict: rank ", to, " is not in the group of ", world,
              " ranks");
  // Each rank describes its shard's state in the order it sends the tensors: "<i> <name>" per
  // tensor (global index i; shape and dtype are parameter i's), "<i> step <count>" for counters,
  // which travel as text (a CPU i64 that an nccl group could not send).
  std::ostringstream desc;
  std::vector<Tensor> outgoing;
  StateDict result;
  for (const auto& [key, t] : inner_->state_dict()) {
    size_t j = 0;
    std::string sname;
    if (!parse_state_key(key, j, sname)) continue;
    const size_t i = shard_.at(j);
    const Tensor& p = params_[i];
    if (sname == "step") {
      desc << i << " step " << t.item<int64_t>() << "\n";
    } else {
      desc << i << " " << sname << "\n";
      outgoing.push_back(t.to(p.device()).to(p.dtype()).contiguous());
    }
    if (rank == to) result[state_key(i, sname)] = sname == "step" ? i64_scalar(t.item<int64_t>()) : outgoing.back();
  }
  const std::vector<std::string> all = all_gather_strings(*group_, desc.str());
  std::vector<std::shared_ptr<Work>> works;
  if (rank != to) {
    for (const Tensor& t : outgoing) works.push_back(group_->send(t, to));
    for (auto& w : works) w->wait();
    return {};
  }
  for (int r = 0; r < world; ++r) {
    if (r == to) continue;
    std::istringstream lines(all[static_cast<size_t>(r)]);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      size_t i = 0;
      std::string sname;
      fields >> i >> sname;
      EMBER_ASSERT(!fields.fail() && i < params_.size() && owners_[i] == r, "bad state description '", line,
                   "' from rank ", r);
      if (sname == "step") {
        int64_t count = 0;
        fields >> count;
        result[state_key(i, sname)] = i64_scalar(count);
        continue;
      }
      Tensor t = empty(params_[i].sizes(), {.dtype = params_[i].dtype(), .device = params_[i].device()});
      works.push_back(group_->recv(t, r));
      result[state_key(i, sname)] = t;
    }
  }
  for (auto& w : works) w->wait();
  // The base's dict holds this object's hyperparameters and param_count (its own state is empty).
  for (auto& [key, t] : Optimizer::state_dict()) result[key] = t;
  return result;
}

StateDict ZeroRedundancyOptimizer::shard_of(const StateDict& full) const {
  const std::string who = name() + "::load_state_dict";
  const int rank = group_->rank();
  std::vector<size_t> local(params_.size(), params_.size());  // global -> shard index
  for (size_t j = 0; j < shard_.size(); ++j) local[shard_[j]] = j;
  // `probe` gets the entries that do not depend on a parameter's shape, over one scalar
  // parameter: loading it into a one-parameter inner optimizer checks the hyperparameters and
  // the state names against the inner's type on every rank, whichever rank owns what.
  StateDict mine, probe;
  std::map<size_t, std::set<std::string>> names;  // per parameter with state
  std::set<std::string> all_names;
  for (const auto& [key, t] : full) {
    EMBER_CHECK(t.defined(), who, ": entry '", key, "' is an undefined tensor");
    size_t i = 0;
    std::string sname;
    if (key == kParamCount) {
      EMBER_CHECK(t.numel() == 1 && t.item<double>() == static_cast<double>(params_.size()), who, ": entry '", key,
                  "' says the saved optimizer had ", t.numel() == 1 ? t.item<double>() : -1.0,
                  " parameters, this one has ", params_.size(),
                  " (a full state dict: consolidate_state_dict's or a plain optimizer's)");
      mine[key] = i64_scalar(static_cast<int64_t>(shard_.size()));
      probe[key] = i64_scalar(1);
    } else if (starts_with(key, kHyperPrefix)) {
      mine[key] = probe[key] = t;
    } else {
      EMBER_CHECK(parse_state_key(key, i, sname), who, ": unexpected entry '", key,
                  "' (expected hyper.<name>, param_count or state.<i>.<name>)");
      EMBER_CHECK(i < params_.size(), who, ": entry '", key, "' names parameter ", i, " but this optimizer has ",
                  params_.size(), " parameters");
      EMBER_CHECK(sname == "step" || t.sizes() == params_[i].sizes(), who, ": entry '", key, "' has shape ",
                  t.shape_str(), " but parameter ", i, " has shape ", params_[i].shape_str());
      names[i].insert(sname);
      all_names.insert(sname);
      probe[state_key(0, sname)] = sname == "step" ? i64_scalar(0) : zeros({});
      if (owners_[i] == rank) mine[state_key(local[i], sname)] = t;
    }
  }
  try {
    make_inner_({zeros({})})->load_state_dict(probe);
  } catch (const Error& e) {
    EMBER_FAIL(who, ": the state dict does not fit ", inner_->name(),
               " (checked on a one-parameter one, so 'state.0' stands for any parameter's entries): ", e.message());
  }
  // The inner type's names are known good now; each parameter with state must carry all of them.
  for (const auto& [i, n] : names)
    for (const std::string& s : all_names)
      EMBER_CHECK(n.count(s) != 0, who, ": missing entry '", state_key(i, s), "' (parameter ", i,
                  " has other state entries, and other parameters carry '", s, "')");
  return mine;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& full) {
  const StateDict mine = shard_of(full);
  inner_->load_state_dict(mine);  // checks its shard again, then applies
  for (const auto& [key, t] : mine) {
    if (!starts_with(key, kHyperPrefix)) continue;
    const std::string h = key.substr(std::char_traits<char>::length(kHyperPrefix));
    add_hyperparameter(h, inner_->hyperparameter(h));
  }
}

}  // namespace ember::parallel
