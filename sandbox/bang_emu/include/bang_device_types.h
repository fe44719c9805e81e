/* bang_device_types.h: one of the headers cncc ships and lab code includes directly. In the emulator every BANG declaration
 * lives in bang.h (bang_emu/device.h + cnrt.h), so this header only includes it. */
#include "bang.h"
