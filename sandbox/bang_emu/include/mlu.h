/* mlu.h: same content as bang.h (Cambricon headers include either). */
#include "bang.h"
