// Host entry of the multi-core Sigmoid (stage "multicore").
#ifndef SIGMOID_MULTICORE_H_
#define SIGMOID_MULTICORE_H_

#include <cnrt.h>
#include <stdint.h>

// y[i] = sigmoid(x[i]) for count elements over every MLU core of the card; is_half selects fp16.
void sigmoid_multicore_entry(cnrtQueue_t queue, const void* x, void* y, int64_t count, bool is_half);

#endif  // SIGMOID_MULTICORE_H_
