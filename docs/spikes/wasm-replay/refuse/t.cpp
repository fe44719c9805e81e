#include <bang.h>
__mlu_global__ void k(long long a){ ((void(*)())(uintptr_t)a)(); }
