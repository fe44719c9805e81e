// Host entry of the multi-core, double-buffered Sigmoid (stage "pipeline").
#ifndef SIGMOID_PIPELINE_H_
#define SIGMOID_PIPELINE_H_

#include <cnrt.h>
#include <stdint.h>

// y[i] = sigmoid(x[i]) for count elements; is_half selects fp16, otherwise fp32. Device pointers.
void sigmoid_pipeline_entry(cnrtQueue_t queue, const void* x, void* y, int64_t count, bool is_half);

#endif  // SIGMOID_PIPELINE_H_
