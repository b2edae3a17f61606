#pragma once
// Named tensors: what modules, optimizers, schedules and samplers save and restore. Ordered by
// name, so two state dicts of the same object compare and serialize identically.
#include <map>
#include <string>

#include <ember/core/tensor.h>

namespace ember {

using StateDict = std::map<std::string, Tensor>;

}  // namespace ember
