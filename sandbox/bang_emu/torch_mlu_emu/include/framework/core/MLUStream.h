// bang_emu emulation of torch_mlu's framework/core/MLUStream.h: getCurMLUStream(), getCurrentMLUStream().
#pragma once
#include "torch_mlu_emu/stream.h"
