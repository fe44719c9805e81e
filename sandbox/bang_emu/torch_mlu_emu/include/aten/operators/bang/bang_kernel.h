// bang_emu emulation of torch_mlu's aten/operators/bang/bang_kernel.h: CATCH-era umbrella for BANG custom ops.
#pragma once
#include <ATen/ATen.h>
#include "cnrt.h"
#include "torch_mlu_emu/checks.h"
#include "torch_mlu_emu/guard.h"
#include "torch_mlu_emu/stream.h"
#include "torch_mlu_emu/tensor.h"
#include "torch_mlu_emu/types.h"
