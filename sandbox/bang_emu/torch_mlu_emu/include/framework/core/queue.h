// bang_emu emulation of torch_mlu's framework/core/queue.h (torch_mlu 2.x): an umbrella of the emulated torch_mlu API.
#pragma once
#include "torch_mlu_emu/all.h"
