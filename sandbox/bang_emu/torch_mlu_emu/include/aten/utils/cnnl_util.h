// bang_emu emulation of torch_mlu's aten/utils/cnnl_util.h: cnnl_contiguous().
#pragma once
#include <ATen/ATen.h>
#include "torch_mlu_emu/tensor.h"
