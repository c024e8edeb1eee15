// find_oom.cu — the search of fa/cuda/find_oom.cuh.
#include "fa/cuda/find_oom.cuh"

#include <algorithm>
#include <exception>
#include <iostream>
#include <set>
#include <string>

#include "fa/chart.hpp"
#include "fa/cuda/check.cuh"
#include "fa/cuda/device.cuh"
#include "fa/cuda/device_buffer.cuh"
#include "fa/stage.hpp"

namespace fa {
namespace {

// Allocates inputs and outputs for N and runs each forward once, as the harness would. True if
// all fit; fa::OutOfMemory (ours or a library's) means no. Anything else propagates.
bool fits(const Problem& p, const std::vector<DeviceForward>& forwards, std::int64_t limit_bytes,
          std::int64_t& measured) {
  measured = 0;
  try {
    for (const DeviceForward& forward : forwards) {
      MemoryMeter meter(limit_bytes);  // 0: the device's memory is the only limit
      DeviceTensor q(meter, q_shape(p), p.dtype), k(meter, kv_shape(p), p.dtype), v(meter, kv_shape(p), p.dtype),
          o(meter, q_shape(p), p.dtype), lse(meter, lse_shape(p), DType::float32);
      for (auto* t : {&q, &k, &v}) FA_CUDA_CHECK(cudaMemset(t->view().data, 0, t->bytes()));
      DeviceContext ctx(meter);
      forward(p, {q.view(), k.view(), v.view()}, {o.view(), lse.view()}, ctx);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      measured = std::max(measured, meter.peak());
    }
    return true;
  } catch (const OutOfMemory&) {
    return false;
  }
}

}  // namespace

std::vector<std::int64_t> find_oom_sweep(const RunOptions& opt, const std::vector<DeviceForward>& forwards) {
  Problem p = opt.problem;
  const std::int64_t start = std::max<std::int64_t>(1, opt.sizes.front().second);
  constexpr std::int64_t kMaxN = std::int64_t{1} << 22;
  // --mem-limit-gb G makes the search (and the harness after it) treat G GiB as the device's size.
  const auto limit_bytes = static_cast<std::int64_t>(opt.mem_limit_gb * 1024.0 * 1024.0 * 1024.0);
  auto probe = [&](std::int64_t n) {
    p.seq_q = p.seq_k = n;
    std::int64_t bytes = 0;
    const bool ok = fits(p, forwards, limit_bytes, bytes);
    std::cout << "   N = " << n << ": " << (ok ? "fits, measured peak " + format_bytes(static_cast<double>(bytes))
                                              : std::string("out of memory"))
              << "\n";
    return ok;
  };
  std::cout << "== --find-oom: B=" << p.batch << " H=" << p.heads << " D=" << p.dim << ", doubling N from " << start
            << ", then bisecting (device memory " << format_bytes(static_cast<double>(query_device().total_memory))
            << (limit_bytes > 0 ? ", limited to " + format_bytes(static_cast<double>(limit_bytes)) : std::string())
            << ")\n";
  std::vector<std::int64_t> fitting;
  std::int64_t ok_n = 0, bad_n = 0;
  for (std::int64_t n = start; n <= kMaxN; n *= 2) {
    if (probe(n)) {
      fitting.push_back(n);
      ok_n = n;
    } else {
      bad_n = n;
      break;
    }
  }
  if (bad_n == 0) {
    std::cout << "   everything up to N = " << kMaxN << " fits; no wall found\n";
    return fitting;
  }
  // Bisect (ok_n, bad_n) down to steps of 1/64 of ok_n, rounded to 64: a handful of probes.
  const std::int64_t resolution = std::max<std::int64_t>(64, (ok_n / 64) / 64 * 64);
  while (ok_n > 0 && bad_n - ok_n > resolution) {
    const std::int64_t mid = (ok_n + bad_n) / 2 / 64 * 64;
    if (mid <= ok_n || mid >= bad_n) break;
    (probe(mid) ? ok_n : bad_n) = mid;
  }
  std::cout << "== largest N that fits: " << (ok_n > 0 ? std::to_string(ok_n) : std::string("none")) << "; N = " << bad_n
            << " does not (within " << resolution << ")\n";
  std::set<std::int64_t> sweep(fitting.begin(), fitting.end());
  if (ok_n > 0) sweep.insert(ok_n);
  sweep.insert(bad_n);
  return {sweep.begin(), sweep.end()};
}

std::optional<int> apply_find_oom(StageCli& cli, const std::vector<DeviceForward>& forwards) {
  RunOptions& opt = cli.options();
  const CLI::App& app = cli.app();
  if (!opt.load_dir.empty() || app.count("--seq") + app.count("--seq-q") + app.count("--seq-k") > 0) {
    std::cerr << cli.spec().program << ": error: --find-oom searches Nq = Nk from the first --sweep size; drop --load/--seq\n";
    return kExitUsage;
  }
  try {
    const std::vector<std::int64_t> sweep = find_oom_sweep(opt, forwards);
    opt.sizes.clear();
    for (const std::int64_t n : sweep) opt.sizes.emplace_back(n, n);
  } catch (const std::exception& e) {
    std::cerr << cli.spec().program << ": error: --find-oom: " << e.what() << "\n";
    return kExitVerifyFailed;
  }
  return std::nullopt;
}

}  // namespace fa
