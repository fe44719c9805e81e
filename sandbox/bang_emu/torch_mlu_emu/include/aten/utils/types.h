// bang_emu emulation of torch_mlu's aten/utils/types.h (torch_mlu 2.x: getCnnlType, cnnlType2CnrtType): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
