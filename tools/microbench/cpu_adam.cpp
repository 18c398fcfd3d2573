// fleetsim_cpu_adam: measures the host CPU's optimizer step of ZeRO-Offload, the figure a node
// preset's cpu_adam_cycles_per_parameter comes from.
//
//   fleetsim_cpu_adam [THREADS]
//
// The loop is DeepSpeed's CPU Adam update (AdamW with bias correction, FP32 master weights and
// moments, an FP32 gradient read, a BF16 copy of the new weight written for the GPU), compiled
// for the machine's widest vector unit. THREADS (default: all) workers, started once and kept
// in step by a barrier, each on its own arrays, first touched by the worker that uses them (so
// that each socket's memory serves its own cores). Two figures:
//   * in cache: each worker over a block that stays in its core's L2, so the cores' arithmetic
//     (a square root and a division per parameter) alone sets the time: time-stamp-counter
//     cycles (which count at the nominal base clock) times THREADS over the parameters updated,
//     the cycles per parameter of one core at the clock all cores sustain together.
//   * streaming: each worker over arrays much larger than the caches, the bytes each parameter
//     moves (30) over the time: the host memory bandwidth the loop reaches.
// Each is the median of seven timed passes after a warm-up.
#include <x86intrin.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct AdamState {
  std::vector<float> weight, grad, m, v;
  std::vector<std::uint16_t> weight_bf16;
  explicit AdamState(std::size_t n)
      : weight(n, 0.01f), grad(n), m(n, 0.0f), v(n, 0.0f), weight_bf16(n) {
    // Gradients of varying magnitude, so that no lane sees a constant.
    std::uint32_t x = 12345;
    for (float& g : grad) {
      x = x * 1664525u + 1013904223u;
      g = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
    }
  }
};

// One AdamW step over n parameters: per parameter, reads weight, grad, m, v (16 bytes) and writes
// weight, m, v and the BF16 copy (14 bytes).
// The arrays as restrict-qualified parameters: no runtime alias check before the vector loop.
void adam_update(float* __restrict w, const float* __restrict g, float* __restrict m,
                 float* __restrict v, std::uint16_t* __restrict out, std::size_t n, int step) {
  constexpr float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, decay = 0.1f;
  const float correction1 = 1.0f - std::pow(beta1, static_cast<float>(step));
  const float step_size = lr / correction1;
  const float correction2 = 1.0f / std::sqrt(1.0f - std::pow(beta2, static_cast<float>(step)));
  for (std::size_t i = 0; i < n; ++i) {
    const float grad = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    const float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    const float denom = std::sqrt(vi) * correction2 + eps;
    const float wi = w[i] * (1.0f - lr * decay) - step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
    std::uint32_t bits;
    std::memcpy(&bits, &wi, sizeof bits);
    out[i] = static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Runs `pass` on every worker, `passes` times in lockstep after one warm-up, each worker on its
// own state of `parameters`; returns each timed pass's wall time in seconds and TSC cycles.
struct Timings {
  std::vector<double> seconds;
  std::vector<double> cycles;
};
Timings run_workers(int threads, std::size_t parameters, int repeats, int passes) {
  Timings timings;
  std::barrier sync(threads + 1);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      AdamState state(parameters);  // first touched here, by the worker that uses it
      (void)t;
      for (int pass = 0; pass <= passes; ++pass) {
        sync.arrive_and_wait();
        for (int i = 0; i < repeats; ++i) {
          adam_update(state.weight.data(), state.grad.data(), state.m.data(), state.v.data(),
                      state.weight_bf16.data(), parameters, pass * repeats + i + 1);
        }
        sync.arrive_and_wait();
      }
    });
  }
  for (int pass = 0; pass <= passes; ++pass) {
    sync.arrive_and_wait();
    const auto begin = std::chrono::steady_clock::now();
    const std::uint64_t begin_cycles = __rdtsc();
    sync.arrive_and_wait();
    const std::uint64_t cycles = __rdtsc() - begin_cycles;
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - begin;
    if (pass == 0) continue;  // the warm-up
    timings.seconds.push_back(seconds.count());
    timings.cycles.push_back(static_cast<double>(cycles));
  }
  for (std::thread& worker : workers) worker.join();
  return timings;
}

}  // namespace

int main(int argc, char** argv) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = argc > 1 ? std::atoi(argv[1]) : hardware;
  if (argc > 2 || threads < 1) {
    std::fprintf(stderr, "usage: fleetsim_cpu_adam [THREADS]   (THREADS >= 1, default %d)\n",
                 hardware);
    return 2;
  }
  // In cache: 16 Ki parameters a worker, 288 KiB of state (18 bytes each).
  constexpr std::size_t kBlock = 16 * 1024;
  constexpr int kRepeats = 2000;
  const Timings cached = run_workers(threads, kBlock, kRepeats, 7);
  std::vector<double> cycles_per_parameter;
  for (const double cycles : cached.cycles) {
    // Each worker updated kBlock x kRepeats parameters on its own core in `cycles`.
    cycles_per_parameter.push_back(cycles / (static_cast<double>(kBlock) * kRepeats));
  }
  // Streaming: 32 Mi parameters a worker (576 MiB of state), far beyond any cache.
  constexpr std::size_t kStream = std::size_t{32} * 1024 * 1024;
  constexpr double kBytesPerParameter = 30;
  const Timings streamed = run_workers(threads, kStream, 1, 7);
  std::vector<double> bytes_per_s;
  for (const double seconds : streamed.seconds) {
    bytes_per_s.push_back(kBytesPerParameter * static_cast<double>(kStream) * threads / seconds);
  }
  std::printf("threads: %d\n", threads);
  std::printf("cpu_adam_cycles_per_parameter (in cache, TSC cycles per parameter per core): %.2f\n",
              median(cycles_per_parameter));
  std::printf("streaming host memory traffic (30 bytes per parameter): %.1f GB/s\n",
              median(bytes_per_s) / 1e9);
  return 0;
}
