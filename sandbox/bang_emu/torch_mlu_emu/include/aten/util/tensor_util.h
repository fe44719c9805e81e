// bang_emu emulation of torch_mlu's aten/util/tensor_util.h: older (CATCH) location of tensor_util.h.
#pragma once
#include "torch_mlu_emu/tensor.h"
