// String collectives (see object_collectives.h): lengths first, then the bytes, padded.
#include <ember/parallel/object_collectives.h>

#include <algorithm>
#include <cstdint>
#include <exception>

#include <ember/core/error.h>
#include <ember/kernels/factory.h>

namespace ember::parallel {

std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& text) {
  const Device dev = group.message_device();
  const int world = group.world_size();
  Tensor len = from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}).to(dev);
  Tensor lens = empty({world}, {.dtype = DType::i64, .device = dev});
  group.all_gather(lens, len)->wait();
  const std::vector<int64_t> sizes = lens.to_vector<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::vector<uint8_t> mine(static_cast<size_t>(longest), 0);
  std::copy(text.begin(), text.end(), mine.begin());
  Tensor all = empty({world * longest}, {.dtype = DType::u8, .device = dev});
  group.all_gather(all, from_vector(mine, {longest}).to(dev))->wait();
  const std::vector<uint8_t> bytes = all.to_vector<uint8_t>();
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    const auto* p = reinterpret_cast<const char*>(bytes.data()) + r * longest;
    out.emplace_back(p, p + sizes[static_cast<size_t>(r)]);
  }
  return out;
}

std::string broadcast_string(ProcessGroup& group, const std::string& text, int root) {
  const Device dev = group.message_device();
  Tensor len = from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1}).to(dev);
  group.broadcast(len, root)->wait();
  const int64_t n = len.item<int64_t>();
  if (n == 0) return "";
  std::vector<uint8_t> mine(static_cast<size_t>(n), 0);
  if (group.rank() == root) std::copy(text.begin(), text.end(), mine.begin());
  Tensor bytes = from_vector(mine, {n}).to(dev);
  group.broadcast(bytes, root)->wait();
  const std::vector<uint8_t> v = bytes.to_vector<uint8_t>();
  return std::string(v.begin(), v.end());
}

std::string run_on_root(ProcessGroup& group, const std::function<std::string()>& fn, int root) {
  std::string message;  // "+" result, or "-" error text
  if (group.rank() == root) {
    try {
      message = "+" + fn();
    } catch (const Error& e) {
      message = "-" + e.message();
    } catch (const std::exception& e) {
      message = "-" + std::string(e.what());
    }
  }
  if (group.world_size() > 1) message = broadcast_string(group, message, root);
  if (message.empty() || message[0] == '-')
    throw Error(message.empty() ? std::string("run_on_root: no result")
                                : message.substr(1) + " (on rank " + std::to_string(root) + ")");
  return message.substr(1);
}

}  // namespace ember::parallel
