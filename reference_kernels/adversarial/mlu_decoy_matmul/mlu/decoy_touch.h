// Host entry of the trivial kernel (adversarial fixture mlu_decoy_matmul).
#ifndef DECOY_TOUCH_H_
#define DECOY_TOUCH_H_

#include <cnrt.h>

void decoy_touch_entry(cnrtQueue_t queue, void* scratch);

#endif  // DECOY_TOUCH_H_
