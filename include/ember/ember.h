#pragma once
// ember: one include for the public API.
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/factory.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
