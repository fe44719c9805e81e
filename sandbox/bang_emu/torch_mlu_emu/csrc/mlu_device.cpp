// bang_emu: the emulated `mlu` device for PyTorch (PrivateUse1, renamed to "mlu" from Python).
//
// Tensors on mlu:0 live in the emulator's device memory (bang_emu_device_alloc): host memory that host code
// cannot touch outside launches and documented copies, as on a real MLU. This library gives PyTorch what a
// backend must have: an allocator (device memory, poisoned per BANG_EMU_POISON so unwritten output elements
// show), a device guard, the hooks object, the ATen kernels that must not go through a CPU round trip
// (factories, views, copies, resize) -- every one of them reaches device bytes only through the emulator's
// copy API or a host-access window, which also keeps the per-call provenance marks right -- and a boxed CPU
// fallback for every other operator (it copies through _copy_from). It is also the Python module `_bang_emu_torch_mlu` that
// backs torch.mlu.Event / synchronize with the emulator's notifiers and queue.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <Python.h>
#include <frameobject.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "bang_emu/external.h"
#include "cnrt.h"
#include "torch_mlu_emu/tensor.h"

namespace bang_emu_torch {
namespace {

constexpr c10::DeviceType kMlu = c10::DeviceType::PrivateUse1;
const c10::Device kMluDevice(kMlu, 0);

// ---------------------------------------------------------------------------------------------------
// Allocator

// Byte copy through the emulator (either side may be device memory; D2D keeps the provenance marks).
void copy_bytes(void* dst, const void* src, size_t count) {
  if (count == 0) return;
  const int64_t n = static_cast<int64_t>(count), one = 1;
  TORCH_CHECK(bang_emu_copy_strided(dst, src, 1, 1, &n, &one, &one) == 0, "bang_emu: device copy failed");
}

// The bytes a tensor's elements span, [first, last] element offsets scaled (for host-access windows).
std::pair<const char*, size_t> byte_span(const at::Tensor& t) {
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t span = (t.size(d) - 1) * t.stride(d);
    (span < 0 ? lo : hi) += span;
  }
  const auto* base = static_cast<const char*>(t.data_ptr()) + lo * static_cast<int64_t>(t.element_size());
  return {base, static_cast<size_t>(hi - lo + 1) * t.element_size()};
}

// Host-access window over an mlu tensor's bytes for the duration of a documented host-side operation;
// a write window also clears the bytes' "written by a kernel in this call" marks.
struct HostAccess {
  const char* p = nullptr;
  size_t n = 0;
  int write = 0;
  HostAccess(const at::Tensor& t, bool w) {
    if (!t.defined() || !t.device().is_privateuseone() || t.numel() == 0) return;
    std::tie(p, n) = byte_span(t);
    write = w;
    bang_emu_host_access_begin(p, n, write);
  }
  ~HostAccess() {
    if (p) bang_emu_host_access_end(p, n, write);
  }
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;
};

// The deleter's context: the block, so registrations of views anywhere inside it can be dropped.
struct Block {
  char* data;
  size_t bytes;
};

void free_device_memory(void* context) {
  auto* block = static_cast<Block*>(context);
  if (block == nullptr) return;
  // Before the memory can be reused: kernels must not see this block's extents any more.
  torch_mlu::emu_detail::GdramRegistry::instance().forget_range(block->data, block->data + block->bytes);
  bang_emu_device_free(block->data);
  delete block;
}

struct EmulatedMluAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return {nullptr, nullptr, &free_device_memory, kMluDevice};
    // 64-byte aligned device memory with guard zones, poisoned by the emulator per BANG_EMU_POISON.
    void* data = bang_emu_device_alloc(bytes, "mlu storage");
    TORCH_CHECK(data != nullptr, "bang_emu mlu allocator: out of memory allocating ", bytes, " bytes");
    auto* block = new Block{static_cast<char*>(data), bytes};
    return {data, block, &free_device_memory, kMluDevice};
  }

  // No raw deleter: the context (Block) differs from the data pointer.

  void copy_data(void* dest, const void* src, std::size_t count) const override { copy_bytes(dest, src, count); }
};

EmulatedMluAllocator g_allocator;

// ---------------------------------------------------------------------------------------------------
// Device guard: one device, one stream (the emulator's default queue).

struct EmulatedMluGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kMlu; }

  c10::Device exchangeDevice(c10::Device device) const override {
    check(device);
    return kMluDevice;
  }
  c10::Device getDevice() const override { return kMluDevice; }
  void setDevice(c10::Device device) const override { check(device); }
  void uncheckedSetDevice(c10::Device /*device*/) const noexcept override {}

  c10::Stream getStream(c10::Device /*device*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, kMluDevice);
  }
  c10::Stream getDefaultStream(c10::Device device) const override { return getStream(device); }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override { return getStream(device); }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*isHighPriority*/) const override {
    return getStream(device);
  }
  c10::Stream exchangeStream(c10::Stream /*stream*/) const override { return getStream(kMluDevice); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return cnrtQueueQuery(bang_emu_default_queue()) == cnrtSuccess;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override { sync_default_queue(); }
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override { sync_default_queue(); }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/, const c10::Stream& /*stream*/) const override {}

  static void check(c10::Device device) {
    TORCH_CHECK(device.type() == kMlu && device.index() <= 0,
                "bang_emu: the emulated mlu backend has one device (mlu:0), got ", device);
  }
  static void sync_default_queue() {
    const cnrtRet_t status = cnrtQueueSync(bang_emu_default_queue());
    TORCH_CHECK(status == cnrtSuccess, "mlu synchronize failed: ", cnrtGetErrorStr(status),
                " (bang_emu: see the 'bang-emu: error:' lines on stderr)");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmulatedMluGuardImpl);

// resize_bytes_cpu's job for device storage: the old bytes move through the emulator, not a host memcpy.
void resize_bytes_mlu(c10::StorageImpl* storage, size_t size_bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  at::DataPtr new_data;
  if (size_bytes != 0) new_data = storage->allocator()->allocate(size_bytes);
  const at::DataPtr& old_data = storage->data_ptr();
  const size_t copy_capacity = std::min(size_bytes, storage->nbytes());
  if (old_data != nullptr && copy_capacity > 0) copy_bytes(new_data.get(), old_data.get(), copy_capacity);
  storage->set_data_ptr_noswap(std::move(new_data));
  storage->set_nbytes(size_bytes);
}

// Pinned host memory (`pin_memory=True`, `.pin_memory()`): host memory from the CPU allocator whose ranges are
// remembered, so `is_pinned()` is true for it and only for it, as on a card (the emulator's copies never need it).
struct PinnedHostAllocator final : public c10::Allocator {
  static std::mutex mutex;
  static std::map<const char*, size_t> ranges;  // start -> bytes, of live pinned blocks

  static void release(void* data) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ranges.erase(static_cast<const char*>(data));
    }
    c10::GetCPUAllocator()->raw_deallocate(data);
  }

  c10::DataPtr allocate(size_t bytes) override {
    void* data = c10::GetCPUAllocator()->raw_allocate(bytes == 0 ? 1 : bytes);
    std::lock_guard<std::mutex> lock(mutex);
    ranges[static_cast<const char*>(data)] = bytes;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { copy_bytes(dest, src, count); }

  static bool contains(const void* pointer) {
    const char* p = static_cast<const char*>(pointer);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = ranges.upper_bound(p);
    if (it == ranges.begin()) return false;
    --it;
    return p < it->first + std::max<size_t>(it->second, 1);
  }
};
std::mutex PinnedHostAllocator::mutex;
std::map<const char*, size_t> PinnedHostAllocator::ranges;
PinnedHostAllocator g_pinned_allocator;

// ---------------------------------------------------------------------------------------------------
// Hooks: what PyTorch asks of any PrivateUse1 backend (autograd engine, generators, pin_memory).

struct EmulatedMluHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  // Random ops run on CPU through the fallback, so mlu shares the CPU generator.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*device_index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex /*device_index*/) const override {
    return at::detail::createCPUGenerator();
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override { return kMluDevice; }
  bool isPinnedPtr(const void* data) const override { return PinnedHostAllocator::contains(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_bytes_mlu(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

// ---------------------------------------------------------------------------------------------------
// ATen kernels that must stay on the device (no CPU round trip).

// ---------------------------------------------------------------------------------------------------
// Device work journaled as operators (DESIGN.md "Threat model", issue 36): a torch operator on mlu tensors is
// device work, as torch_mlu runs it as a CNNL kernel. The device journal records it by name with its operands
// (bang_emu_journal_op_begin/end), not as the bytes the CPU fallback writes back, and the trusted replay runs it
// again on its own data. What is written here is the run's claim: the replay decides what it computes.

// The student's line that called the operator: the innermost Python frame outside torch and the harness.
std::string student_line() {
  if (!Py_IsInitialized()) return "";
  PyGILState_STATE gil = PyGILState_Ensure();
  std::string where;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  for (int depth = 0; frame != nullptr && depth < 64 && where.empty(); ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = code ? PyUnicode_AsUTF8(code->co_filename) : nullptr;
    if (file == nullptr) PyErr_Clear();
    const std::string name = file ? file : "";
    const bool ours = name.empty() || name[0] == '<' || name.find("/torch/") != std::string::npos ||
                      name.find("/bang_harness/") != std::string::npos ||
                      name.find("/bang_emu/") != std::string::npos || name.find("/lib/python3") != std::string::npos;
    if (!ours) {
      const auto at = name.find("/submission/");
      where = (at == std::string::npos ? name : name.substr(at + 12)).substr(0, 160) + ":" +
              std::to_string(PyFrame_GetLineNumber(frame));
    }
    Py_XDECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyGILState_Release(gil);
  return where;
}

void json_number(std::string& o, double v) {
  if (std::isnan(v)) o += "\"nan\"";
  else if (std::isinf(v)) o += v > 0 ? "\"inf\"" : "\"-inf\"";
  else {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    o += buf;
  }
}

void json_int_list(std::string& o, c10::IntArrayRef values) {
  o += '[';
  for (size_t i = 0; i < values.size(); ++i) o += (i ? "," : "") + std::to_string(values[i]);
  o += ']';
}

// A tensor operand: an mlu tensor by address, dtype, sizes and strides; a 0-dim CPU tensor (a wrapped number)
// by value. false: an operand the replay cannot have (a CPU tensor with elements: host data).
bool json_tensor(std::string& o, const at::Tensor& t) {
  if (!t.defined()) {
    o += "null";
    return true;
  }
  if (t.device().is_privateuseone()) {
    if (t.is_conj() || t.is_neg() || t.layout() != c10::kStrided) return false;
    o += "{\"t\":[" + std::to_string(reinterpret_cast<uintptr_t>(t.numel() ? t.data_ptr() : nullptr)) + ",\"" +
         std::string(c10::toString(t.scalar_type())) + "\",";
    json_int_list(o, t.sizes());
    o += ',';
    json_int_list(o, t.strides());
    o += "]}";
    return true;
  }
  if (!t.is_cpu() || t.dim() != 0 || t.is_complex()) return false;
  o += "{\"c\":";
  if (t.is_floating_point()) json_number(o, t.item<double>());
  else o += t.scalar_type() == at::kBool ? (t.item<bool>() ? "1" : "0") : std::to_string(t.item<int64_t>());
  o += ",\"dtype\":\"" + std::string(c10::toString(t.scalar_type())) + "\"}";
  return true;
}

bool json_ivalue(std::string& o, const c10::IValue& v) {
  if (v.isNone()) o += "null";
  else if (v.isTensor()) return json_tensor(o, v.toTensor());
  else if (v.isBool()) o += v.toBool() ? "true" : "false";
  else if (v.isInt()) o += "{\"i\":" + std::to_string(v.toInt()) + "}";
  else if (v.isDouble()) {
    o += "{\"d\":";
    json_number(o, v.toDouble());
    o += '}';
  } else if (v.isString()) {
    const std::string text = v.toStringRef();
    if (text.size() > 256 || text.find_first_of("\"\\") != std::string::npos) return false;
    o += "{\"s\":\"" + text + "\"}";
  } else if (v.isDevice()) {
    o += "{\"dev\":\"" + v.toDevice().str() + "\"}";
  } else if (v.isList()) {
    const auto list = v.toListRef();
    o += "{\"l\":[";
    for (size_t i = 0; i < list.size(); ++i) {
      if (i) o += ',';
      if (!json_ivalue(o, list[i])) return false;
    }
    o += "]}";
  } else {
    return false;  // generators (random operators), complex numbers, objects: not replayable as operators
  }
  return true;
}

// Journals one operator around `run`: begin with its arguments, end with the tensors it wrote. With no journal, or
// inside another operator (which stands for this one), only the depth is kept, and the operands are not described.
// An operator with an operand the replay cannot have is left to the byte journal (its writes are the host's).
template <class Run>
void journaled_op(const std::string& name, const std::vector<c10::IValue>& args, const Run& run,
                  const std::function<std::string()>& outs) {
  const bool wanted = bang_emu_journal_op_wanted() != 0;
  std::string json = "[";
  for (size_t i = 0; wanted && i < args.size(); ++i) {
    if (i) json += ',';
    if (!json_ivalue(json, args[i])) {
      run();
      return;
    }
  }
  json += ']';
  bang_emu_journal_op_begin(name.c_str(), wanted ? student_line().c_str() : "", json.c_str());
  try {
    run();
  } catch (...) {
    bang_emu_journal_op_end("{\"failed\":true}");
    throw;
  }
  bang_emu_journal_op_end(wanted ? outs().c_str() : "");
}

at::Tensor as_host_view(const at::Tensor& t) {
  at::Tensor view = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  view._set_conj(t.is_conj());  // a lazily conjugated / negated view stays one: the CPU copy resolves it
  view._set_neg(t.is_neg());
  return view;
}

at::Tensor mlu_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                     std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                     std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "mlu (bang_emu): only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "mlu (bang_emu): pin_memory is a CPU-only option");
  EmulatedMluGuardImpl::check(c10::device_or_default(device));
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor mlu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                             std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "mlu (bang_emu): only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "mlu (bang_emu): pin_memory is a CPU-only option");
  EmulatedMluGuardImpl::check(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor mlu_as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                          std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor mlu_view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor mlu_reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& mlu_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  // Grow the storage here (device copy) so the CPU resize below never memcpy's device memory itself.
  int64_t numel = 1;
  for (const int64_t s : size) numel *= s;
  if (numel > 0 && self.storage()) {
    const size_t needed = static_cast<size_t>(self.storage_offset() + numel) * self.element_size();
    if (needed > self.storage().nbytes()) resize_bytes_mlu(self.storage().unsafeGetStorageImpl(), needed);
  }
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& mlu_set_storage_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                             c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& mlu_set_source_storage_(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& mlu_set_source_tensor_(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

// Both memories are host memory, but device memory is closed to host code: a same-dtype copy is done by the
// emulator (element for element, carrying provenance D2D and clearing it H2D); a converting copy runs on
// host views inside host-access windows (the destination then counts as host-written).
at::Tensor mlu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.defined() && dst.defined(), "mlu (bang_emu) copy: undefined tensor");
  TORCH_CHECK(self.is_cpu() || self.device().is_privateuseone(), "mlu (bang_emu) copy: unsupported source ",
              self.device());
  TORCH_CHECK(dst.is_cpu() || dst.device().is_privateuseone(), "mlu (bang_emu) copy: unsupported destination ",
              dst.device());
  if (self.numel() == 0 || dst.numel() == 0) return dst;
  if (self.is_cpu() && dst.device().is_privateuseone() && bang_emu_journal_op_wanted()) {
    // an upload from host code: the journal keeps its bytes; the line is named if they reach an output the
    // replay cannot stand for (the host's computation does not follow the twin's inputs)
    const std::string where = student_line();
    if (!where.empty()) bang_emu_journal_mark(4, 0, dst.data_ptr(), dst.numel() * dst.element_size(),
                                              (where + ": a host-to-device copy").c_str());
  }
  if (self.scalar_type() == dst.scalar_type() && !self.is_conj() && !self.is_neg() && !dst.is_conj() &&
      !dst.is_neg() && dst.dim() <= 16) {
    const at::Tensor src = self.expand(dst.sizes());  // copy_ broadcasts the source
    const int status = bang_emu_copy_strided(dst.data_ptr(), src.data_ptr(), dst.element_size(),
                                             static_cast<int>(dst.dim()), dst.sizes().data(),
                                             dst.strides().data(), src.strides().data());
    TORCH_CHECK(status == 0, "mlu (bang_emu) copy failed");
    return dst;
  }
  auto convert = [&] {
    HostAccess read(self, false), write(dst, true);
    const at::Tensor src_host = self.is_cpu() ? self : as_host_view(self);
    at::Tensor dst_host = dst.is_cpu() ? dst : as_host_view(dst);
    dst_host.copy_(src_host);
  };
  if (self.device().is_privateuseone() && dst.device().is_privateuseone()) {
    // a cast on the device (x.float(), .half(), .to(dtype)): an operator, replayed on the replay's own data
    journaled_op("aten::copy_", {c10::IValue(dst), c10::IValue(self)}, convert, [&] {
      std::string o = "{\"outs\":[{\"arg\":0,\"t\":";
      json_tensor(o, dst);
      return o + "}]}";
    });
  } else {
    convert();
  }
  return dst;
}

at::Tensor mlu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.device().is_privateuseone()) {
    mlu_resize_(dst, self.sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return mlu_copy_from(self, dst, false);
}

at::Scalar mlu_local_scalar_dense(const at::Tensor& self) {
  HostAccess read(self, false);
  return as_host_view(self).item();
}

// PrivateUse1 convolutions dispatch to the *_overrideable ops, which the boxed fallback cannot reach (aten's
// composite convolution picks them for any device it does not know): computed on CPU copies.
at::Tensor mlu_convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                           at::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value() && bias->defined()) cpu_bias = bias->cpu();
  return at::convolution(input.cpu(), weight.cpu(), cpu_bias, stride, padding, dilation, transposed, output_padding,
                         groups).to(input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mlu_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  const int64_t channels = weight.size(transposed ? 1 : 0) * (transposed ? groups : 1);
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      grad_output.cpu(), input.cpu(), weight.cpu(), std::vector<int64_t>{channels}, stride, padding, dilation,
      transposed, output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
  return {back(grad_input), back(grad_weight), back(grad_bias)};
}

// `x_mlu.data = y_cpu` is allowed between mlu and CPU dense tensors, as in torch_mlu (c10 lists only its own dense
// backends; a PrivateUse1 backend answers for itself, see OpenRegMinimal.cpp).
bool mlu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_here = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return dense_here(self) && dense_here(from);
}

// A kernel on the card refuses an mlu tensor beside a CPU one (a 0-dim CPU tensor is a scalar, allowed), as
// torch_mlu's and CUDA's do; the CPU fallback would otherwise compute it (torch_mlu's test_device checks this).
// Tensor lists (index's indices) are not checked: those may live on the CPU.
void check_same_device(const c10::OperatorHandle& op, const torch::jit::Stack* stack) {
  const auto count = op.schema().arguments().size();
  bool mlu = false, cpu = false;
  for (auto it = stack->end() - count; it != stack->end(); ++it) {
    if (!it->isTensor() || !it->toTensor().defined()) continue;
    const at::Tensor& t = it->toTensor();
    mlu = mlu || t.device().type() == c10::DeviceType::PrivateUse1;
    cpu = cpu || (t.device().is_cpu() && t.dim() > 0);
  }
  TORCH_CHECK(!(mlu && cpu), "Expected all tensors to be on the same device, but found at least two devices, "
              "mlu:0 and cpu! (", op.schema().name(), ")");
}

void mlu_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_same_device(op, stack);
  const auto& schema = op.schema();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  if (name == "aten::fill_.Scalar" || name == "aten::zero_") {
    // a constant, whatever the device holds: its bytes journal exactly (as a memset when they repeat, e.g. the
    // NaN poison every torch.empty gets), and the replay needs no torch for it
    at::native::cpu_fallback(op, stack);
    return;
  }
  const size_t count = schema.arguments().size();
  const std::vector<c10::IValue> args(stack->end() - count, stack->end());
  std::vector<bool> written(count, false);
  for (size_t i = 0; i < count; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    written[i] = alias != nullptr && alias->isWrite();
  }
  journaled_op(name, args, [&] { at::native::cpu_fallback(op, stack); }, [&] {
    // the tensors it wrote: its mutable arguments (in-place, out=), then the returns that alias none of them
    std::string o = "{\"outs\":[";
    bool first = true;
    auto add = [&](const char* kind, size_t index, const c10::IValue& v) {
      if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().device().is_privateuseone()) return;
      std::string t;
      if (!json_tensor(t, v.toTensor())) return;
      o += std::string(first ? "" : ",") + "{\"" + kind + "\":" + std::to_string(index) + ",\"t\":" + t + "}";
      first = false;
    };
    for (size_t i = 0; i < count; ++i)
      if (written[i]) add("arg", i, args[i]);
    const size_t returns = schema.returns().size();
    for (size_t j = 0; j < returns && stack->size() >= returns; ++j)
      if (schema.returns()[j].alias_info() == nullptr) add("ret", j, (*stack)[stack->size() - returns + j]);
    return o + "]}";
  });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(mlu_empty));
  m.impl("empty_strided", TORCH_FN(mlu_empty_strided));
  m.impl("as_strided", TORCH_FN(mlu_as_strided));
  m.impl("view", TORCH_FN(mlu_view));
  m.impl("_reshape_alias", TORCH_FN(mlu_reshape_alias));
  m.impl("resize_", TORCH_FN(mlu_resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(mlu_set_storage_));
  m.impl("set_.source_Storage", TORCH_FN(mlu_set_source_storage_));
  m.impl("set_.source_Tensor", TORCH_FN(mlu_set_source_tensor_));
  m.impl("_copy_from", TORCH_FN(mlu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(mlu_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(mlu_local_scalar_dense));
  m.impl("convolution_overrideable", TORCH_FN(mlu_convolution));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(mlu_has_compatible_shallow_copy_type));
  m.impl("convolution_backward_overrideable", TORCH_FN(mlu_convolution_backward));
}

// _copy_from resolves conjugate and negative views itself (as_host_view keeps the bits): the math fallbacks would
// materialise them with clone(), whose copy_ calls _copy_from again with the same view, without end (a crash on
// `torch.conj(x_mlu).cpu()`, found by torch_mlu's test_clone).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&mlu_cpu_fallback>());
}

// ---------------------------------------------------------------------------------------------------
// Python bindings: notifiers on the emulator's queue for torch.mlu.Event, and queue synchronisation.

void check_cnrt(cnrtRet_t status, const char* what) {
  TORCH_CHECK(status == cnrtSuccess, what, " failed: ", cnrtGetErrorStr(status),
              " (bang_emu: see the 'bang-emu: error:' lines on stderr)");
}

cnrtNotifier_t as_notifier(uintptr_t handle) { return reinterpret_cast<cnrtNotifier_t>(handle); }

uintptr_t notifier_create() {
  cnrtNotifier_t notifier = nullptr;
  check_cnrt(cnrtNotifierCreate(&notifier), "cnrtNotifierCreate");
  return reinterpret_cast<uintptr_t>(notifier);
}

void notifier_destroy(uintptr_t handle) { cnrtNotifierDestroy(as_notifier(handle)); }

void notifier_place(uintptr_t handle) {
  check_cnrt(cnrtPlaceNotifier(as_notifier(handle), bang_emu_default_queue()), "cnrtPlaceNotifier");
}

void notifier_wait(uintptr_t handle) { check_cnrt(cnrtWaitNotifier(as_notifier(handle)), "cnrtWaitNotifier"); }

bool notifier_query(uintptr_t handle) { return cnrtQueryNotifier(as_notifier(handle)) == cnrtSuccess; }

float notifier_elapsed_ms(uintptr_t start, uintptr_t end) {
  float ms = 0.0f;
  check_cnrt(cnrtNotifierElapsedTime(as_notifier(start), as_notifier(end), &ms), "cnrtNotifierElapsedTime");
  return ms;
}

float notifier_duration_us(uintptr_t start, uintptr_t end) {
  float us = 0.0f;
  check_cnrt(cnrtNotifierDuration(as_notifier(start), as_notifier(end), &us), "cnrtNotifierDuration");
  return us;
}

void queue_sync() { EmulatedMluGuardImpl::sync_default_queue(); }

bool queue_query() { return cnrtQueueQuery(bang_emu_default_queue()) == cnrtSuccess; }

uintptr_t default_queue() { return reinterpret_cast<uintptr_t>(bang_emu_default_queue()); }

int last_error() { return static_cast<int>(cnrtGetLastError()); }

std::string error_string(int status) { return cnrtGetErrorStr(static_cast<cnrtRet_t>(status)); }

// The emulated device profile (BANG_EMU_DEVICE) as the emulator's CNRT reports it.
pybind11::dict device_properties() {
  cnrtDeviceProp_t prop{};
  check_cnrt(cnrtGetDeviceProperties(&prop, 0), "cnrtGetDeviceProperties");
  pybind11::dict result;
  result["name"] = std::string(prop.name);
  result["major"] = prop.major;
  result["minor"] = prop.minor;
  result["cluster_count"] = prop.clusterCount;
  result["core_num_per_cluster"] = prop.McorePerCluster;
  result["total_memory"] = prop.totalMem;
  return result;
}

}  // namespace

void install() {
  // Registered on import of the Python module, i.e. when activate() loads this library.
  c10::SetAllocator(kMlu, &g_allocator);
  static EmulatedMluHooks hooks;
  if (!at::isPrivateUse1HooksRegistered()) at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace bang_emu_torch

PYBIND11_MODULE(_bang_emu_torch_mlu, m) {
  using namespace bang_emu_torch;
  install();
  m.doc() = "bang_emu: emulated mlu device for PyTorch (PrivateUse1), notifier bindings";
  m.def("notifier_create", &notifier_create);
  m.def("notifier_destroy", &notifier_destroy);
  m.def("notifier_place", &notifier_place);
  m.def("notifier_wait", &notifier_wait);
  m.def("notifier_query", &notifier_query);
  m.def("notifier_elapsed_ms", &notifier_elapsed_ms);
  m.def("notifier_duration_us", &notifier_duration_us);
  m.def("queue_sync", &queue_sync);
  m.def("queue_query", &queue_query);
  m.def("default_queue", &default_queue);
  m.def("last_error", &last_error);
  m.def("error_string", &error_string);
  m.def("device_properties", &device_properties);
}
