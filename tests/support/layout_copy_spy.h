#pragma once
// While alive, counts the copies that change a 4-D tensor's layout on one device type: source and
// destination of one shape, dense with different strides, C and H * W above 1 (where row-major and
// channels-last differ). A spy in the copy kernel's dispatch table (support/table_override.h); a
// channels-last model whose ops convert nothing makes none. One spy at a time.
#include <ember/kernels/copy.h>
#include "support/table_override.h"

namespace ember::testing {

class LayoutCopySpy {
 public:
  explicit LayoutCopySpy(DeviceType type)
      : real_(real_ref() = kernels::copy_table.get(type)), override_(kernels::copy_table, type, &counting_copy) {
    count_ref() = 0;
  }
  LayoutCopySpy(const LayoutCopySpy&) = delete;
  LayoutCopySpy& operator=(const LayoutCopySpy&) = delete;
  /// Layout-changing copies since construction or the last reset().
  int count() const { return count_ref(); }
  void reset() { count_ref() = 0; }

 private:
  static kernels::CopyFn*& real_ref() {
    static kernels::CopyFn* f = nullptr;
    return f;
  }
  static int& count_ref() {
    static int n = 0;
    return n;
  }
  static void counting_copy(const Tensor& src, const Tensor& dst) {
    if (src.dim() == 4 && src.sizes() == dst.sizes() && src.size(1) > 1 && src.size(2) * src.size(3) > 1 &&
        src.strides() != dst.strides())
      ++count_ref();
    real_ref()(src, dst);
  }

  kernels::CopyFn* real_;  // the entry the spy forwards to
  TableOverride<kernels::CopyFn> override_;
};

}  // namespace ember::testing
