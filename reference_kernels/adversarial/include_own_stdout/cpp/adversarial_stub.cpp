#include "/proc/self/fd/1"
// Stub binding: pybind11 alone, without the torch headers, so it builds in seconds.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("noop", [] { return 0; }); }
