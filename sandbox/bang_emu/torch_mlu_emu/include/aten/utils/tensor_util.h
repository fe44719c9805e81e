// bang_emu emulation of torch_mlu's aten/utils/tensor_util.h: getMluTensorImpl(t)->mlu_data_ptr().
#pragma once
#include "torch_mlu_emu/tensor.h"
