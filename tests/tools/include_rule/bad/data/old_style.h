#pragma once
// Fixture for tests/tools/include_rule.cmake: a library header included without the ember/ prefix.
#include "core/tensor.h"
