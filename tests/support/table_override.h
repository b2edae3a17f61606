#pragma once
// Replaces one device type's entry of a kernel dispatch table for a scope (a spy in a test) and
// restores it when the scope ends, by an exception too.
#include <ember/kernels/dispatch.h>

namespace ember::testing {

template <typename Fn> class TableOverride {
 public:
  TableOverride(kernels::DispatchTable<Fn>& table, DeviceType type, Fn* fn)
      : table_(table), type_(type), original_(table.get(type)) {
    table.set(type, fn);
  }
  ~TableOverride() { table_.set(type_, original_); }
  TableOverride(const TableOverride&) = delete;
  TableOverride& operator=(const TableOverride&) = delete;
  /// The entry the override replaced (what a spy forwards to).
  Fn* original() const { return original_; }

 private:
  kernels::DispatchTable<Fn>& table_;
  DeviceType type_;
  Fn* original_;
};

}  // namespace ember::testing
