// bang_emu emulation of torch_mlu's aten/util/cnlog.h (CATCH): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
