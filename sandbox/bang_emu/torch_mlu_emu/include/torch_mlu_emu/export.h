// bang_emu: torch_mlu's export macro. Everything in the emulation headers is inline, so it is empty.
#pragma once
#ifndef TORCH_MLU_API
#define TORCH_MLU_API
#endif
