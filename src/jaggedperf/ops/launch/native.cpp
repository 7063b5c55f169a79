// The native launch path of an eager jagged sum/mean, and of their backward (expand), on CUDA tensors: one
// C++ call that checks the inputs, finds the plan the Python path registered for their key, allocates the
// output (and the two-pass kernels' workspace) and launches Triton's compiled kernels through the CUDA driver,
// with no Python in between. A reduction's plan is one whole-segments launch, or the merge path's two (reduce, then
// combine; or the balanced chunks' two); a backward's, one launch (whole segments, the merge path or chunks).
//
// Why: at the seed shapes the Python planning, torch.empty and Triton's launcher take more host time
// before the kernel starts than the kernel takes on the device (docs/performance.md, the model's point 4).
//
// What it trusts: nothing it has not been shown. A plan is registered by native.py only after the
// Python path has planned the call and launched the same compiled kernel through a verified tier; the
// kernel's parameter list comes from that compiled kernel's own signature (Triton's launcher passes
// every non-constexpr argument, then two scratch pointers, as cuLaunchKernelEx parameters); and
// native.py checks a plan's first launch bitwise against the Python path's output before using it.
// Any input it does not recognise (another key, a grad to record, a dispatch mode, another current
// device, no current CUDA context) returns None, and the caller takes the Python path.
//
// Built without CUDA headers (the driver functions are looked up in libcuda at the first launch), so
// the same source builds on a CPU-only torch, where CI tests the key and the parameter packing.
//
// The Source, Kind and GridKind enums come from jaggedperf_layout.h, which native.py writes from
// layout.py at build time (one source for Python and C++); the Plan's fields are registered by name
// from launch/plan.py's NativePlan.

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/utils/pybind.h>

#include <dlfcn.h>

#include "jaggedperf_layout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

struct Kernel {
  uintptr_t function = 0;  // CUfunction of a compiled kernel, loaded in the plan's device's primary context
  unsigned threads = 0;    // 32 × num_warps
  unsigned shared = 0;     // dynamic shared memory bytes (Triton has raised the function's limit already)
  int grid = SEGMENTS;     // SEGMENTS: axis 0 from group / programs; CHUNKS: axis 0 = the chunk count
  std::vector<std::pair<int, int>> params;  // (Source, Kind), in the kernel's parameter order
};

struct Plan {
  int device = 0;
  int op = REDUCE;              // from the key: REDUCE writes (B, M); EXPAND writes (N, M), N given by the call
  bool workspace = false;       // a kernel reads the chunks' workspace (the call allocates it)
  int64_t grid_z = 1;           // grid axis 2 of every kernel, a constant of the plan (the backward's tiles)
  int64_t block_m = 1;          // grid axis 1 = cdiv(M, block_m)
  int64_t group = 0;            // segments: > 0: axis 0 = cdiv(B, group); 0: `programs` looping programs
  int64_t programs = 0;
  int64_t chunk_programs = 0;   // chunks (> 0): the programs aimed at (SM count × programs per SM), ...
  int64_t block_l = 1;          // ... rows per tile (a chunk is a whole number of tiles) ...
  int64_t min_chunk_rows = 1;   // ... and the fewest rows in a chunk (launch/plan.py's chunking, the same arithmetic)
  int64_t units = 0;            // 1: the chunking counts rows + segments, the merge path's units (reduce/plan.py)
  std::vector<Kernel> kernels;  // launched in order on the current stream
};

// Everything a plan depends on: mean, empty_zero, dtypes, row width, max_seqlen (-1: none), B (-1 when max_seqlen
// is none: the merge path then serves every B), device, the 16-byte alignment the JIT specialises
// pointers on, whether the varying integers fit int32, the device type, and the Op (the last field).
using Key = std::array<int64_t, 12>;
constexpr size_t OP_FIELD = 11;

std::map<Key, Plan>& plans() {
  static std::map<Key, Plan> table;
  return table;
}
constexpr size_t MAX_PLANS = 4096;  // a new (B, max_seqlen) each call must not grow the table forever
uint64_t served = 0;                // calls launched by reduce()
uint64_t served_expand = 0;         // calls launched by expand()

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// None when the inputs are not a plain eager call this path can serve. expand_rows < 0: a reduction of values;
// else the backward (EXPAND) of a reduction of expand_rows rows, `values` then being the (B, M) gradient.
std::optional<Key> key_of(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean,
                          bool empty_zero, int64_t expand_rows) {
  if (!values.defined() || !offsets.defined() || values.dim() != 2 || offsets.dim() != 1 || offsets.numel() < 1 ||
      values.device() != offsets.device() || !values.is_contiguous() || !offsets.is_contiguous() ||
      max_seqlen < -1) {
    return std::nullopt;
  }
  const bool expand = expand_rows >= 0;
  const int64_t n_cols = values.size(1), n_segments = offsets.size(0) - 1;
  if (expand && (values.size(0) != n_segments || empty_zero)) return std::nullopt;
  // the JIT's int32/int64 choice for the varying integers, as tiers.eager_key makes it
  const int64_t rows = expand ? std::max(values.size(0), expand_rows) : values.size(0);
  const bool fits = std::max(rows, n_segments + 1) < INT32_MAX;
  // the batch field: B itself when max_seqlen is given (the whole-segments grid depends on it); without it the merge
  // path serves any B (-1)
  const int64_t batch = max_seqlen != -1 ? n_segments : -1;
  return Key{mean, empty_zero, static_cast<int64_t>(values.scalar_type()), static_cast<int64_t>(offsets.scalar_type()),
             n_cols, max_seqlen, batch, values.device().index(),
             static_cast<int64_t>(reinterpret_cast<uintptr_t>(values.data_ptr()) % 16 == 0) |
                 (static_cast<int64_t>(reinterpret_cast<uintptr_t>(offsets.data_ptr()) % 16 == 0) << 1),
             fits, static_cast<int64_t>(values.device().type()), expand ? EXPAND : REDUCE};
}

// One call's sizes: the chunking (chunked plans) and each kernel's grid.
struct Geometry {
  int64_t rows_per_chunk = 0, n_chunks = 0;
  std::vector<std::array<unsigned, 3>> grids;
};

Geometry geometry_of(const Plan& plan, int64_t n_rows, int64_t n_cols, int64_t n_segments) {
  Geometry g;
  const int64_t col_blocks = cdiv(n_cols, plan.block_m);
  if (plan.chunk_programs > 0) {
    const int64_t counted = plan.units ? n_rows + n_segments : n_rows;
    const int64_t target = std::max<int64_t>(1, cdiv(plan.chunk_programs, std::max<int64_t>(col_blocks, 1)));
    const int64_t per = cdiv(cdiv(counted, target), plan.block_l) * plan.block_l;
    g.rows_per_chunk = std::max(per, plan.min_chunk_rows);
    g.n_chunks = std::max<int64_t>(cdiv(counted, g.rows_per_chunk), 1);
  }
  for (const Kernel& k : plan.kernels) {
    const int64_t x = k.grid == CHUNKS ? g.n_chunks
                      : plan.group > 0 ? std::max<int64_t>(cdiv(n_segments, plan.group), 1) : plan.programs;
    g.grids.push_back({static_cast<unsigned>(x), static_cast<unsigned>(col_blocks), static_cast<unsigned>(plan.grid_z)});
  }
  return g;
}

// What one launch's parameters are filled from.
struct Call {
  const at::Tensor& values;
  const at::Tensor& offsets;
  const at::Tensor& out;
  const at::Tensor* workspace;
  int64_t n_rows;  // N: values' rows for a reduction, the output's for a backward
  int64_t rows_per_chunk, n_chunks, grid_z;
};

// The parameter block cuLaunchKernel reads: one 8-byte slot per parameter (an int32 uses the first 4).
struct Params {
  std::vector<uint64_t> slots;
  std::vector<void*> pointers;
};

intptr_t address(const at::Tensor* t) { return t == nullptr ? 0 : reinterpret_cast<intptr_t>(t->data_ptr()); }

Params pack(const std::vector<std::pair<int, int>>& params, const Call& call) {
  Params p;
  p.slots.resize(params.size());
  p.pointers.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto [source, kind] = params[i];
    int64_t value = 0;
    switch (source) {
      case VALUES: value = address(&call.values); break;
      case OFFSETS: value = address(&call.offsets); break;
      case OUT: value = address(&call.out); break;
      case WORKSPACE: value = address(call.workspace); break;
      case N_ROWS: value = call.n_rows; break;
      case N_COLS: value = call.values.size(1); break;
      case N_SEGMENTS: value = call.offsets.size(0) - 1; break;
      case ROWS_PER_CHUNK: value = call.rows_per_chunk; break;
      case N_CHUNKS: value = call.n_chunks; break;
      case GRID_Z: value = call.grid_z; break;
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

// A contiguous tensor from the CUDA caching allocator on the current device (plan_for has checked it is the
// inputs' device) and stream, as at::empty makes it but without the dispatcher.
at::Tensor empty_cuda(c10::IntArrayRef sizes, c10::ScalarType dtype, const at::Tensor& like) {
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  if (allocator == nullptr) return at::empty(sizes, like.options().dtype(dtype));
  return at::detail::empty_generic(sizes, allocator, c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, std::nullopt);
}

void launch_plan(const Plan& plan, const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& out) {
  const int64_t n_cols = values.size(1);
  const int64_t n_rows = plan.op == EXPAND ? out.size(0) : values.size(0);
  const Geometry g = geometry_of(plan, n_rows, n_cols, offsets.size(0) - 1);
  if (n_cols == 0) return;  // nothing to write, as Triton's launcher skips an empty grid
  const Driver& d = driver();
  if (d.launch == nullptr) throw std::runtime_error("jaggedperf native: cuLaunchKernel not found in libcuda.so.1");
  // the workspace: (2·C, M) fp32 pieces, then C int32 crossing slots (reduce/plan.py's plan_chunks) and, for the
  // merge path, C int32 first-segment slots (plan_merge): 2·C slots whatever the plan
  at::Tensor workspace;
  if (plan.workspace) {
    const int64_t ws_size[1] = {2 * g.n_chunks * n_cols + 2 * g.n_chunks};
    workspace = empty_cuda(ws_size, c10::ScalarType::Float, values);
  }
  const Call call{values, offsets, out, workspace.defined() ? &workspace : nullptr, n_rows, g.rows_per_chunk,
                  g.n_chunks, plan.grid_z};
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(plan.device));
  void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& k = plan.kernels[i];
    const auto& grid = g.grids[i];
    Params p = pack(k.params, call);
    const int rc = d.launch(reinterpret_cast<void*>(k.function), grid[0], grid[1], grid[2], k.threads, 1, 1, k.shared,
                            stream, p.pointers.data(), nullptr);
    if (rc != 0) throw std::runtime_error("jaggedperf native: cuLaunchKernel returned CUresult " + std::to_string(rc));
  }
}

// The plan for a call on the current device with a current CUDA context, or nullptr.
const Plan* plan_for(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean,
                     bool empty_zero, int64_t expand_rows) {
  if (!values.is_cuda() || (values.requires_grad() && c10::GradMode::is_enabled()) ||
      c10::impl::TorchDispatchModeTLS::stack_len() > 0) {
    return nullptr;
  }
  const auto key = key_of(values, offsets, max_seqlen, mean, empty_zero, expand_rows);
  if (!key) return nullptr;
  const auto found = plans().find(*key);
  if (found == plans().end()) return nullptr;
  if (c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index() != found->second.device) return nullptr;
  void* context = nullptr;
  const Driver& d = driver();
  if (d.current == nullptr || d.current(&context) != 0 || context == nullptr) return nullptr;
  return &found->second;
}

py::object reduce(const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean, bool empty_zero) {
  const Plan* plan = plan_for(values, offsets, max_seqlen, mean, empty_zero, -1);
  if (plan == nullptr) return py::none();
  const int64_t sizes[2] = {offsets.size(0) - 1, values.size(1)};
  at::Tensor out = empty_cuda(sizes, values.scalar_type(), values);
  launch_plan(*plan, values, offsets, out);
  ++served;
  return py::cast(out);
}

// The backward of a sum/mean of n_rows rows: (n_rows, M), row r = grad[its segment] (/ its length for mean).
// Autograd's gradient may be a broadcast (out.sum()'s is stride 0): made contiguous here, as the Python path does.
py::object expand(const at::Tensor& grad, const at::Tensor& offsets, int64_t n_rows, int64_t max_seqlen, bool mean) {
  if (n_rows < 0 || !grad.defined() || !grad.is_cuda()) return py::none();
  const at::Tensor g = grad.is_contiguous() ? grad : grad.contiguous();
  const Plan* plan = plan_for(g, offsets, max_seqlen, mean, false, n_rows);
  if (plan == nullptr) return py::none();
  const int64_t sizes[2] = {n_rows, g.size(1)};
  at::Tensor out = empty_cuda(sizes, g.scalar_type(), g);
  launch_plan(*plan, g, offsets, out);
  ++served_expand;
  return py::cast(out);
}

// kernels: (function, num_warps, shared bytes, grid kind, [(source, kind), ...]) each
using KernelSpec = std::tuple<uintptr_t, unsigned, unsigned, int, std::vector<std::pair<int, int>>>;

Plan make_plan(int device, int op, int64_t block_m, int64_t group, int64_t programs, int64_t chunk_programs,
               int64_t block_l, int64_t min_chunk_rows, int64_t grid_z, int64_t units,
               const std::vector<KernelSpec>& kernels) {
  bool chunked = false, segmented = false;
  Plan plan;
  plan.device = device;
  plan.op = op;
  plan.grid_z = grid_z;
  plan.block_m = block_m;
  plan.group = group;
  plan.programs = programs;
  plan.chunk_programs = chunk_programs;
  plan.block_l = block_l;
  plan.min_chunk_rows = min_chunk_rows;
  plan.units = units;
  for (const auto& [function, num_warps, shared, grid, params] : kernels) {
    if (num_warps < 1 || (grid != SEGMENTS && grid != CHUNKS)) {
      throw std::invalid_argument("jaggedperf native: a kernel needs num_warps >= 1 and a grid kind");
    }
    for (const auto& [source, kind] : params) {
      if (source < 0 || source >= SOURCE_COUNT || kind < 0 || kind >= KIND_COUNT) {
        throw std::invalid_argument("jaggedperf native: parameter (source, kind) out of range");
      }
      plan.workspace = plan.workspace || source == WORKSPACE;
    }
    (grid == CHUNKS ? chunked : segmented) = true;
    plan.kernels.push_back(Kernel{function, 32 * num_warps, shared, grid, params});
  }
  if (kernels.empty() || block_m < 1 || (segmented && group < 0) || (segmented && group == 0 && programs < 1) ||
      (chunked && (chunk_programs < 1 || block_l < 1 || min_chunk_rows < 1)) || (!chunked && chunk_programs != 0) ||
      (units != 0 && (units != 1 || !chunked)) || grid_z < 1 || op < 0 || op >= OP_COUNT) {
    throw std::invalid_argument(
        "jaggedperf native: a plan needs kernels, block_m >= 1, a group or programs for a segments kernel, "
        "chunk_programs, block_l, min_chunk_rows >= 1 exactly when it has a chunks kernel, units 0 or 1 (1 only with "
        "a chunks kernel), grid_z >= 1 and an Op");
  }
  return plan;
}

Key to_key(const std::vector<int64_t>& key) {
  Key k;
  if (key.size() != k.size()) throw std::invalid_argument("jaggedperf native: bad key length");
  std::copy(key.begin(), key.end(), k.begin());
  return k;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "jaggedperf's native launch path for eager jagged sum/mean and their backward (see native.py)";
  m.def("reduce", &reduce, "the output of a registered plan, launched; None when the call has no plan",
        py::arg("values"), py::arg("offsets"), py::arg("max_seqlen"), py::arg("mean"), py::arg("empty_zero"));
  m.def("expand", &expand, "the backward's output (n_rows, M) of a registered plan, launched; None without one",
        py::arg("grad"), py::arg("offsets"), py::arg("n_rows"), py::arg("max_seqlen"), py::arg("mean"));
  m.def(
      "key",
      [](const at::Tensor& values, const at::Tensor& offsets, int64_t max_seqlen, bool mean, bool empty_zero,
         int64_t n_rows) -> py::object {
        const auto key = key_of(values, offsets, max_seqlen, mean, empty_zero, n_rows);
        return key ? py::cast(std::vector<int64_t>(key->begin(), key->end())) : py::none();
      },
      "the plan key of a call (a list), or None when the inputs are not eligible; n_rows >= 0: the backward's",
      py::arg("values"), py::arg("offsets"), py::arg("max_seqlen"), py::arg("mean"), py::arg("empty_zero"),
      py::arg("n_rows") = -1);
  m.def(
      "register",
      [](const std::vector<int64_t>& key, int device, int64_t block_m, int64_t group, int64_t programs,
         int64_t chunk_programs, int64_t block_l, int64_t min_chunk_rows, int64_t grid_z, int64_t units,
         const std::vector<KernelSpec>& kernels) {
        const Key k = to_key(key);
        Plan plan = make_plan(device, static_cast<int>(k[OP_FIELD]), block_m, group, programs, chunk_programs, block_l,
                              min_chunk_rows, grid_z, units, kernels);
        if (plans().size() >= MAX_PLANS) plans().clear();
        plans()[k] = std::move(plan);
      },
      "register (or replace) the plan for a key", py::arg("key"), py::arg("device"), py::arg("block_m"),
      py::arg("group"), py::arg("programs"), py::arg("chunk_programs"), py::arg("block_l"), py::arg("min_chunk_rows"),
      py::arg("grid_z"), py::arg("units"), py::arg("kernels"));
  m.def(
      "launch",
      [](const std::vector<int64_t>& key, const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& out) {
        const auto found = plans().find(to_key(key));
        if (found == plans().end()) throw std::invalid_argument("jaggedperf native: no plan for this key");
        launch_plan(found->second, values, offsets, out);
      },
      "launch a registered plan into a given output (verification)");
  m.def(
      "geometry",
      [](int64_t block_m, int64_t group, int64_t programs, int64_t chunk_programs, int64_t block_l,
         int64_t min_chunk_rows, const std::vector<int>& grid_kinds, int64_t n_rows, int64_t n_cols,
         int64_t n_segments, int64_t grid_z, int64_t units) {
        std::vector<KernelSpec> kernels;
        for (int kind : grid_kinds) kernels.emplace_back(0, 1, 0, kind, std::vector<std::pair<int, int>>{});
        const Plan plan = make_plan(0, REDUCE, block_m, group, programs, chunk_programs, block_l, min_chunk_rows,
                                    grid_z, units, kernels);
        const Geometry g = geometry_of(plan, n_rows, n_cols, n_segments);
        py::list grids;
        for (const auto& grid : g.grids) grids.append(py::make_tuple(grid[0], grid[1], grid[2]));
        return py::make_tuple(g.rows_per_chunk, g.n_chunks, grids);
      },
      "(rows_per_chunk, n_chunks, grids) a plan would launch with (tests)", py::arg("block_m"), py::arg("group"),
      py::arg("programs"), py::arg("chunk_programs"), py::arg("block_l"), py::arg("min_chunk_rows"),
      py::arg("grid_kinds"), py::arg("n_rows"), py::arg("n_cols"), py::arg("n_segments"), py::arg("grid_z") = 1,
      py::arg("units") = 0);
  m.def(
      "pack",
      [](const std::vector<std::pair<int, int>>& params, const at::Tensor& values, const at::Tensor& offsets,
         const at::Tensor& out, const std::optional<at::Tensor>& workspace, int64_t rows_per_chunk, int64_t n_chunks,
         int64_t n_rows, int64_t grid_z) {
        const Call call{values, offsets, out, workspace ? &*workspace : nullptr, n_rows < 0 ? values.size(0) : n_rows,
                        rows_per_chunk, n_chunks, grid_z};
        const Params p = pack(params, call);
        return py::bytes(reinterpret_cast<const char*>(p.slots.data()), p.slots.size() * 8);
      },
      "the parameter block (8 bytes a parameter) a launch would read (tests); n_rows < 0: values' rows",
      py::arg("params"), py::arg("values"), py::arg("offsets"), py::arg("out"), py::arg("workspace"),
      py::arg("rows_per_chunk"), py::arg("n_chunks"), py::arg("n_rows") = -1, py::arg("grid_z") = 1);
  m.def(
      "has", [](const std::vector<int64_t>& key) { return plans().count(to_key(key)) > 0; },
      "whether a plan is registered for a key");
  m.def("forget", [] { plans().clear(); }, "drop every registered plan");
  m.def("size", [] { return plans().size(); }, "registered plans");
  m.def("served", [] { return served; }, "calls reduce() has launched");
  m.def("served_expand", [] { return served_expand; }, "calls expand() has launched");
}
