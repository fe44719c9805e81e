// bang_emu emulation of torch_mlu's aten/util/types.h (2023 lab / CATCH: getCnnlType, cnnlType2CnrtType): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
