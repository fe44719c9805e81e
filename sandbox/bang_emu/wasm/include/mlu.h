/* wasm flavour of <mlu.h>: the device API is bang.h's */
#include "bang.h"
