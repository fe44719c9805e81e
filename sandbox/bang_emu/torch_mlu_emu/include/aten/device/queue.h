// bang_emu emulation of torch_mlu's aten/device/queue.h (CATCH: getCurQueue): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
