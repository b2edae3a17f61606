#pragma once
// Fixture for tests/tools/include_rule.cmake: core/ reaching up into kernels/ must be reported.
#include <ember/kernels/factory.h>
