// bang_emu: everything the emulated torch_mlu headers offer a custom-op binding (tensor access, queue, guard,
// checks, dtype helpers). The umbrella for the many torch_mlu header paths that lab bindings include.
#pragma once
#include <ATen/ATen.h>

#include "cnrt.h"
#include "torch_mlu_emu/checks.h"
#include "torch_mlu_emu/guard.h"
#include "torch_mlu_emu/stream.h"
#include "torch_mlu_emu/tensor.h"
#include "torch_mlu_emu/types.h"
