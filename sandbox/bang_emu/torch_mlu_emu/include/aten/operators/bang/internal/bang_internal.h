// bang_emu emulation of torch_mlu's aten/operators/bang/internal/bang_internal.h: CATCH-era kernel-side declarations (cnrt types, launch check).
#pragma once
#include "cnrt.h"
#include "torch_mlu_emu/checks.h"
#include "torch_mlu_emu/stream.h"
