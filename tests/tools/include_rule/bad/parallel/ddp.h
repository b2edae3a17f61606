#pragma once
// Fixture for tests/tools/include_rule.cmake: parallel/'s training half may include autograd/ and
// the communication half (nothing to report here).
#include <ember/autograd/grad_mode.h>
#include <ember/parallel/store.h>
