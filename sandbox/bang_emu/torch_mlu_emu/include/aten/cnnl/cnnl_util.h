// bang_emu emulation of torch_mlu's aten/cnnl/cnnl_util.h: older (CATCH) location of cnnl_util.h.
#pragma once
#include "torch_mlu_emu/tensor.h"
