// Host entry of the single-task vectorised Sigmoid (stage "vector").
#ifndef SIGMOID_VECTOR_H_
#define SIGMOID_VECTOR_H_

#include <cnrt.h>
#include <stdint.h>

// y[i] = sigmoid(x[i]) for count elements; is_half selects fp16, otherwise fp32. Device pointers.
void sigmoid_vector_entry(cnrtQueue_t queue, const void* x, void* y, int64_t count, bool is_half);

#endif  // SIGMOID_VECTOR_H_
