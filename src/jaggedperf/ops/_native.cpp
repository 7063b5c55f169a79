// The native launch path of an eager jagged sum/mean on CUDA tensors: one C++ call that checks the
// inputs, finds the plan the Python path registered for their key, allocates the output and launches
// Triton's compiled kernel through the CUDA driver, with no Python in between.
//
// Why: the kernel at the seed shapes takes 6-10 µs of device time; the Python planning, torch.empty
// and Triton's launcher cost ~15 µs of host time before it starts (host_probe, run 29).
//
// What it trusts: nothing it has not been shown. A plan is registered by _native.py only after the
// Python path has planned the call and launched the same compiled kernel through a verified tier; the
// kernel's parameter list comes from that compiled kernel's own signature (Triton's launcher passes
// every non-constexpr argument, then two scratch pointers, as cuLaunchKernelEx parameters); and
// _native.py checks a plan's first launch bitwise against the Python path's output before using it.
// Any input it does not recognise (another key, a grad to record, a dispatch mode, another current
// device, no current CUDA context) returns None, and the caller takes the Python path.
//
// Built without CUDA headers (the driver functions are looked up in libcuda at the first launch), so
// the same source builds on a CPU-only torch, where CI tests the key and the parameter packing.

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/utils/pybind.h>

#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// What fills one kernel parameter, and how it is passed (the compiled signature's type).
enum Source : int { VALUES = 0, OFFSETS = 1, OUT = 2, N_ROWS = 3, N_COLS = 4, N_SEGMENTS = 5, NULL_POINTER = 6 };
enum Kind : int { POINTER = 0, I32 = 1, I64 = 2 };

struct Plan {
  uintptr_t function = 0;  // CUfunction of the compiled kernel, loaded in `device`'s primary context
  int device = 0;
  unsigned threads = 0;  // 32 × num_warps
  unsigned shared = 0;   // dynamic shared memory bytes (Triton has raised the function's limit already)
  int64_t group = 0;     // > 0: grid axis 0 = cdiv(B, group); 0: `programs` programs (the looping kernel)
  int64_t programs = 0;
  int64_t block_m = 1;  // grid axis 1 = cdiv(M, block_m)
  std::vector<std::pair<int, int>> params;  // (Source, Kind), in the kernel's parameter order
};

// Everything the plan depends on: the op, dtypes, row width, max_seqlen (-1: none), B, device, the
// 16-byte alignment the JIT specialises pointers on, and whether the varying integers fit int32.
using Key = std::array<int64_t, 11>;

std::map<Key, Plan>& plans() {
  static std::map<Key, Plan> table;
  return table;
}
constexpr size_t MAX_PLANS = 4096;
uint64_t served = 0;  // calls launched by reduce()  // a new (B, max_seqlen) each call must not grow the table forever

// None when the inputs are not a plain eager call this path can serve.
std::optional<Key> key_of(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean,
                          bool empty_zero) {
  if (!values.defined() || !offsets.defined() || values.dim() != 2 || offsets.dim() != 1 || offsets.numel() < 1 ||
      values.device() != offsets.device() || !values.is_contiguous() || !offsets.is_contiguous() ||
      max_seqlen < -1) {
    return std::nullopt;
  }
  const int64_t n_rows = values.size(0), n_cols = values.size(1), n_segments = offsets.size(0) - 1;
  const bool fits = std::max(n_rows, n_segments + 1) < INT32_MAX;
  return Key{mean, empty_zero, static_cast<int64_t>(values.scalar_type()), static_cast<int64_t>(offsets.scalar_type()),
             n_cols, max_seqlen, n_segments, values.device().index(),
             static_cast<int64_t>(reinterpret_cast<uintptr_t>(values.data_ptr()) % 16 == 0) |
                 (static_cast<int64_t>(reinterpret_cast<uintptr_t>(offsets.data_ptr()) % 16 == 0) << 1),
             fits, static_cast<int64_t>(values.device().type())};
}

// The parameter block cuLaunchKernel reads: one 8-byte slot per parameter (an int32 uses the first 4).
struct Params {
  std::vector<uint64_t> slots;
  std::vector<void*> pointers;
};

Params pack(const Plan& plan, const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& out) {
  Params p;
  p.slots.resize(plan.params.size());
  p.pointers.resize(plan.params.size());
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const auto [source, kind] = plan.params[i];
    int64_t value = 0;
    switch (source) {
      case VALUES: value = reinterpret_cast<intptr_t>(values.data_ptr()); break;
      case OFFSETS: value = reinterpret_cast<intptr_t>(offsets.data_ptr()); break;
      case OUT: value = reinterpret_cast<intptr_t>(out.data_ptr()); break;
      case N_ROWS: value = values.size(0); break;
      case N_COLS: value = values.size(1); break;
      case N_SEGMENTS: value = offsets.size(0) - 1; break;
      case NULL_POINTER: value = 0; break;
      default: throw std::invalid_argument("jaggedperf native: unknown parameter source");
    }
    if (kind == I32) {
      const auto narrow = static_cast<int32_t>(value);
      std::memcpy(&p.slots[i], &narrow, sizeof narrow);
    } else {
      std::memcpy(&p.slots[i], &value, sizeof value);
    }
    p.pointers[i] = &p.slots[i];
  }
  return p;
}

std::array<unsigned, 3> grid_of(const Plan& plan, int64_t n_cols, int64_t n_segments) {
  const int64_t x = plan.group > 0 ? std::max<int64_t>((n_segments + plan.group - 1) / plan.group, 1) : plan.programs;
  const int64_t y = (n_cols + plan.block_m - 1) / plan.block_m;
  return {static_cast<unsigned>(x), static_cast<unsigned>(y), 1u};
}

// --- the CUDA driver, looked up once in the libcuda torch has loaded ----------------------------------
using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                             void**);
using CtxGetCurrent = int (*)(void**);

struct Driver {
  LaunchKernel launch = nullptr;
  CtxGetCurrent current = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver found;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib != nullptr) {
      found.launch = reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel"));
      found.current = reinterpret_cast<CtxGetCurrent>(dlsym(lib, "cuCtxGetCurrent"));
    }
    return found;
  }();
  return d;
}

void launch_plan(const Plan& plan, const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& out) {
  const auto grid = grid_of(plan, values.size(1), offsets.size(0) - 1);
  if (grid[0] == 0 || grid[1] == 0) return;  // nothing to write (M = 0), as Triton's launcher skips it
  const Driver& d = driver();
  if (d.launch == nullptr) throw std::runtime_error("jaggedperf native: cuLaunchKernel not found in libcuda.so.1");
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(plan.device));
  void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
  Params p = pack(plan, values, offsets, out);
  const int rc = d.launch(reinterpret_cast<void*>(plan.function), grid[0], grid[1], grid[2], plan.threads, 1, 1,
                          plan.shared, stream, p.pointers.data(), nullptr);
  if (rc != 0) throw std::runtime_error("jaggedperf native: cuLaunchKernel returned CUresult " + std::to_string(rc));
}

// The plan for a call on the current device with a current CUDA context, or nullptr.
const Plan* plan_for(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean,
                     bool empty_zero) {
  if (!values.is_cuda() || (values.requires_grad() && c10::GradMode::is_enabled()) ||
      c10::impl::TorchDispatchModeTLS::stack_len() > 0) {
    return nullptr;
  }
  const auto key = key_of(values, offsets, max_seqlen, mean, empty_zero);
  if (!key) return nullptr;
  const auto found = plans().find(*key);
  if (found == plans().end()) return nullptr;
  if (c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index() != found->second.device) return nullptr;
  void* context = nullptr;
  const Driver& d = driver();
  if (d.current == nullptr || d.current(&context) != 0 || context == nullptr) return nullptr;
  return &found->second;
}

// A contiguous (B, M) tensor like values, from the CUDA caching allocator on the current device (plan_for has
// checked it is values' device) on the current stream, as at::empty makes it but without the dispatcher.
at::Tensor empty_like_rows(const at::Tensor& values, int64_t n_segments) {
  const int64_t sizes[2] = {n_segments, values.size(1)};
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  if (allocator == nullptr) return at::empty(sizes, values.options());
  return at::detail::empty_generic(sizes, allocator, c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                   values.scalar_type(), std::nullopt);
}

py::object reduce(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean, bool empty_zero) {
  const Plan* plan = plan_for(values, offsets, max_seqlen, mean, empty_zero);
  if (plan == nullptr) return py::none();
  at::Tensor out = empty_like_rows(values, offsets.size(0) - 1);
  launch_plan(*plan, values, offsets, out);
  ++served;
  return py::cast(out);
}

Plan make_plan(uintptr_t function, int device, unsigned num_warps, unsigned shared, int64_t group, int64_t programs,
               int64_t block_m, const std::vector<std::pair<int, int>>& params) {
  if (block_m < 1 || group < 0 || (group == 0 && programs < 1) || num_warps < 1) {
    throw std::invalid_argument("jaggedperf native: a plan needs block_m >= 1, num_warps >= 1 and a group or programs");
  }
  for (const auto& [source, kind] : params) {
    if (source < VALUES || source > NULL_POINTER || kind < POINTER || kind > I64) {
      throw std::invalid_argument("jaggedperf native: parameter (source, kind) out of range");
    }
  }
  return Plan{function, device, 32 * num_warps, shared, group, programs, block_m, params};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "jaggedperf's native launch path for eager jagged sum/mean (see _native.py)";
  m.def("reduce", &reduce, "the output of a registered plan, launched; None when the call has no plan",
        py::arg("values"), py::arg("offsets"), py::arg("max_seqlen"), py::arg("mean"), py::arg("empty_zero"));
  m.def(
      "key",
      [](const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean, bool empty_zero) -> py::object {
        const auto key = key_of(values, offsets, max_seqlen, mean, empty_zero);
        return key ? py::cast(std::vector<int64_t>(key->begin(), key->end())) : py::none();
      },
      "the plan key of a call (a list), or None when the inputs are not eligible");
  m.def(
      "register",
      [](const std::vector<int64_t>& key, uintptr_t function, int device, unsigned num_warps, unsigned shared,
         int64_t group, int64_t programs, int64_t block_m, const std::vector<std::pair<int, int>>& params) {
        if (key.size() != std::tuple_size<Key>::value) throw std::invalid_argument("jaggedperf native: bad key length");
        Key k;
        std::copy(key.begin(), key.end(), k.begin());
        if (plans().size() >= MAX_PLANS) plans().clear();
        plans()[k] = make_plan(function, device, num_warps, shared, group, programs, block_m, params);
      },
      "register (or replace) the plan for a key");
  m.def(
      "launch",
      [](const std::vector<int64_t>& key, const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& out) {
        Key k;
        if (key.size() != k.size()) throw std::invalid_argument("jaggedperf native: bad key length");
        std::copy(key.begin(), key.end(), k.begin());
        const auto found = plans().find(k);
        if (found == plans().end()) throw std::invalid_argument("jaggedperf native: no plan for this key");
        launch_plan(found->second, values, offsets, out);
      },
      "launch a registered plan into a given output (verification)");
  m.def(
      "pack",
      [](uintptr_t function, int64_t group, int64_t programs, int64_t block_m,
         const std::vector<std::pair<int, int>>& params, const at::Tensor& values, const at::Tensor& offsets,
         const at::Tensor& out) {
        const Plan plan = make_plan(function, 0, 1, 0, group, programs, block_m, params);
        const Params p = pack(plan, values, offsets, out);
        const auto grid = grid_of(plan, values.size(1), offsets.size(0) - 1);
        return py::make_tuple(py::bytes(reinterpret_cast<const char*>(p.slots.data()), p.slots.size() * 8),
                              py::make_tuple(grid[0], grid[1], grid[2]));
      },
      "the parameter block (8 bytes a parameter) and grid a plan would launch with (tests)");
  m.def(
      "has",
      [](const std::vector<int64_t>& key) {
        Key k;
        if (key.size() != k.size()) return false;
        std::copy(key.begin(), key.end(), k.begin());
        return plans().count(k) > 0;
      },
      "whether a plan is registered for a key");
  m.def("forget", [] { plans().clear(); }, "drop every registered plan");
  m.def("size", [] { return plans().size(); }, "registered plans");
  m.def("served", [] { return served; }, "calls reduce() has launched");
}
