#pragma once
// While alive, counts the copies that change a 4-D tensor's layout on one device type: source and
// destination of one shape with different strides, C and H * W above 1 (where row-major and
// channels-last differ). A spy in the copy kernel's dispatch table (support/table_override.h); a
// channels-last model whose ops convert nothing makes none. One spy at a time.
#include <atomic>

#include <ember/kernels/copy.h>
#include "support/table_override.h"

namespace ember::testing {

class LayoutCopySpy {
 public:
  explicit LayoutCopySpy(DeviceType type) : override_((prepare(type), kernels::copy_table), type, &counting_copy) {}
  LayoutCopySpy(const LayoutCopySpy&) = delete;
  LayoutCopySpy& operator=(const LayoutCopySpy&) = delete;
  /// Layout-changing copies since construction or the last reset().
  int count() const { return count_ref().load(); }
  void reset() { count_ref() = 0; }

 private:
  /// Before the override is installed: the entry it forwards to, and a zero count.
  static void prepare(DeviceType type) {
    real_ref() = kernels::copy_table.get(type);
    count_ref() = 0;
  }
  static kernels::CopyFn*& real_ref() {
    static kernels::CopyFn* f = nullptr;
    return f;
  }
  static std::atomic<int>& count_ref() {  // copies may run on other threads (DataParallel replicas)
    static std::atomic<int> n{0};
    return n;
  }
  static void counting_copy(const Tensor& src, const Tensor& dst) {
    if (src.dim() == 4 && src.sizes() == dst.sizes() && src.size(1) > 1 && src.size(2) * src.size(3) > 1 &&
        src.strides() != dst.strides())
      ++count_ref();
    real_ref()(src, dst);
  }

  TableOverride<kernels::CopyFn> override_;
};

}  // namespace ember::testing
