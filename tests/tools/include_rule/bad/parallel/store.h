#pragma once
// Fixture for tests/tools/include_rule.cmake: parallel/'s communication half reaching up into
// autograd/ must be reported.
#include <ember/autograd/grad_mode.h>
