// bang_emu emulation of torch_mlu's aten/cnnl/cnnlHandle.h (2023 lab / CATCH): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
