// bang_emu emulation of torch_mlu's framework/core/mlu_guard.h: torch_mlu::mlu::MLUGuard.
#pragma once
#include "torch_mlu_emu/guard.h"
