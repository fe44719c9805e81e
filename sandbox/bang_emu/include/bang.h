/* bang.h as cncc provides it: the BANG C device API plus CNRT (emulated by bang_emu). */
#ifndef BANG_EMU_BANG_H_
#define BANG_EMU_BANG_H_
#include "cnrt.h"
#include "bang_emu/device.h"
#endif
