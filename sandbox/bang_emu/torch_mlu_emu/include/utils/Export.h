// bang_emu emulation of torch_mlu's utils/Export.h: TORCH_MLU_API.
#pragma once
#include "torch_mlu_emu/export.h"
