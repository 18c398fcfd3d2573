// fleetsim_microbench: measures the kernels fleetsim's GPU profiles are fitted to, and writes
// them as the CSVs `fleetsim calibrate --kernels DIR --gpu PROFILE` reads
// (calibration/microbench.hpp):
//
//   fleetsim_microbench gemm    OUT.csv   BF16 cuBLASLt GEMMs: the layer shapes of the model zoo
//                                          (Llama 3 8B and 70B at 2k..16k tokens) and a grid
//   fleetsim_microbench gemm_fp8 OUT.csv  the same shapes in FP8 (E4M3, fast accumulation, as
//                                          Transformer Engine's forward GEMMs; its backward ones
//                                          accumulate in two steps, not measured here), on GPUs
//                                          with FP8 tensor cores (compute capability 8.9 and up)
//   fleetsim_microbench memory  OUT.csv   a device copy kernel from 256 MiB to 4 GiB
//   fleetsim_microbench overlap OUT.csv   GEMMs alone and while an NCCL all-reduce runs on the
//                                          same GPU (the slowdown communication kernels cause)
//
// Data are random (zeros run faster and inflate results). Each row is the median of five timed
// batches after a warm-up; times come from CUDA events around the batch. The first lines of
// each file say what machine measured it.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(status));
  }
}

void check(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) {
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(status));
  }
}

// Fills with values in [-1, 1) from a hash of the index: random enough to keep the tensor cores
// and the memory system honest, and the same on every run.
template <typename Element>
__global__ void fill_random(Element* data, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    data[i] = Element(static_cast<float>(x & 0xffff) / 32768.0f - 1.0f);
  }
}

__global__ void copy_kernel(const int4* __restrict__ in, int4* __restrict__ out,
                            std::size_t count) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

void random_bf16(DeviceBuffer& buffer, std::size_t count, std::uint32_t seed) {
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(buffer.ptr), count, seed);
  check(cudaGetLastError(), "fill_random");
}

void random_fp8(DeviceBuffer& buffer, std::size_t count, std::uint32_t seed) {
  fill_random<<<1024, 256>>>(static_cast<__nv_fp8_e4m3*>(buffer.ptr), count, seed);
  check(cudaGetLastError(), "fill_random");
}

// The inputs' number format: BF16, or FP8 E4M3 as Transformer Engine's forward GEMMs take it.
enum class Precision { bf16, fp8 };

const char* precision_name(Precision precision) {
  return precision == Precision::fp8 ? "fp8" : "bf16";
}

// Median time in microseconds of one call of `run`, over five batches of `iterations` calls,
// after `iterations` calls of warm-up.
template <typename Run>
double median_us(cudaStream_t stream, int iterations, Run run) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < iterations; ++i) run();
  std::vector<double> batches;
  for (int batch = 0; batch < 5; ++batch) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) run();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    batches.push_back(1e3 * ms / iterations);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

// A GEMM C[m,n] = A[m,k] B[k,n] through cuBLASLt with FP32 accumulation and a BF16 output, the
// algorithm its heuristic ranks first: what frameworks call for a linear layer. FP8 inputs come
// with per-tensor scales (of 1 here), as Transformer Engine's delayed scaling passes them, and
// fast accumulation, its forward GEMMs' setting.
class Gemm {
 public:
  Gemm(cublasLtHandle_t handle, Precision precision, int m, int n, int k, DeviceBuffer& workspace,
       std::size_t workspace_bytes)
      : handle_(handle),
        m_(m),
        n_(n),
        k_(k),
        workspace_(&workspace),
        workspace_bytes_(workspace_bytes),
        a_(input_bytes(precision) * m * k),
        b_(input_bytes(precision) * k * n),
        c_(sizeof(__nv_bfloat16) * m * n),
        scales_(2 * sizeof(float)) {
    const bool fp8 = precision == Precision::fp8;
    const cudaDataType_t input = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    if (fp8) {
      random_fp8(a_, static_cast<std::size_t>(m) * k, 1);
      random_fp8(b_, static_cast<std::size_t>(k) * n, 2);
    } else {
      random_bf16(a_, static_cast<std::size_t>(m) * k, 1);
      random_bf16(b_, static_cast<std::size_t>(k) * n, 2);
    }
    check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    if (fp8) {
      const float ones[2] = {1.0f, 1.0f};
      check(cudaMemcpy(scales_.ptr, ones, sizeof ones, cudaMemcpyHostToDevice), "scales");
      const float* a_scale = static_cast<const float*>(scales_.ptr);
      const float* b_scale = a_scale + 1;
      const std::int8_t fast_accumulation = 1;
      check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                           sizeof a_scale),
            "a scale");
      check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                           sizeof b_scale),
            "b scale");
      check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                           sizeof fast_accumulation),
            "fast accumulation");
    }
    // Column-major, as cuBLAS is: C[m,n] = op(A)[m,k] B[k,n] with A stored as k x m (the
    // activations [m,k] row-major) read transposed, and B stored as k x n (the weight as
    // [n,k] row-major): the TN layout.
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                         sizeof transpose),
          "transa");
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none),
          "transb");
    check(cublasLtMatrixLayoutCreate(&layout_a_, input, k, m, k), "layout a");
    check(cublasLtMatrixLayoutCreate(&layout_b_, input, k, n, k), "layout b");
    check(cublasLtMatrixLayoutCreate(&layout_c_, CUDA_R_16BF, m, n, m), "layout c");
    cublasLtMatmulPreference_t preference;
    check(cublasLtMatmulPreferenceCreate(&preference), "preference");
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes_, sizeof workspace_bytes_),
          "workspace preference");
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, op_, layout_a_, layout_b_, layout_c_, layout_c_,
                                         preference, 1, &heuristic_, &found),
          "heuristic");
    cublasLtMatmulPreferenceDestroy(preference);
    if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for this GEMM");
  }
  ~Gemm() {
    cublasLtMatrixLayoutDestroy(layout_a_);
    cublasLtMatrixLayoutDestroy(layout_b_);
    cublasLtMatrixLayoutDestroy(layout_c_);
    cublasLtMatmulDescDestroy(op_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(cudaStream_t stream) {
    const float alpha = 1, beta = 0;
    check(cublasLtMatmul(handle_, op_, &alpha, a_.ptr, layout_a_, b_.ptr, layout_b_, &beta, c_.ptr,
                         layout_c_, c_.ptr, layout_c_, &heuristic_.algo, workspace_->ptr,
                         workspace_bytes_, stream),
          "cublasLtMatmul");
  }
  double flops() const { return 2.0 * m_ * n_ * k_; }

 private:
  static std::size_t input_bytes(Precision precision) {
    return precision == Precision::fp8 ? 1 : sizeof(__nv_bfloat16);
  }

  cublasLtHandle_t handle_;
  int m_, n_, k_;
  DeviceBuffer* workspace_;
  std::size_t workspace_bytes_;
  DeviceBuffer a_, b_, c_, scales_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t layout_a_ = nullptr, layout_b_ = nullptr, layout_c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

struct Shape {
  int m, n, k;
};

// The linear layers of Llama 3 8B and 70B (QKV, output, gate+up, down, logits) at 2k to 16k
// tokens per GPU, forward (tokens x out x in); then a grid around them for the fit's K term and
// wave quantisation.
std::vector<Shape> gemm_shapes() {
  std::vector<Shape> shapes;
  struct Model {
    int hidden, qkv, ffn, vocab;
  };
  for (const Model& model : {Model{4096, 6144, 14336, 128256}, Model{8192, 10240, 28672, 128256}}) {
    for (const int tokens : {2048, 4096, 8192, 16384}) {
      shapes.push_back({tokens, model.qkv, model.hidden});
      shapes.push_back({tokens, model.hidden, model.hidden});
      shapes.push_back({tokens, 2 * model.ffn, model.hidden});
      shapes.push_back({tokens, model.hidden, model.ffn});
      shapes.push_back({tokens, model.vocab, model.hidden});
    }
  }
  for (const int m : {256, 1024, 4096}) {
    for (const int n : {512, 2048, 8192}) {
      for (const int k : {256, 1024, 4096, 16384}) shapes.push_back({m, n, k});
    }
  }
  return shapes;
}

std::string gpu_header(const char* what) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const std::string name = prop.name;
  return "# provenance: measured\n# source: tools/microbench (fleetsim_microbench " +
         std::string(what) + "), " + name + ", " + std::to_string(prop.multiProcessorCount) +
         " SMs, CUDA runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver) +
         ", " + date + "\n# gpu: " + name + "\n";
}

// A CSV written as PATH.partial and renamed to PATH once complete: a benchmark that fails or is
// stopped halfway leaves no file that `fleetsim calibrate` would take for a whole one.
class OutputFile {
 public:
  explicit OutputFile(const char* path)
      : path_(path), partial_(path_ + ".partial"), file_(std::fopen(partial_.c_str(), "w")) {
    if (!file_) throw std::runtime_error("cannot write " + partial_);
  }
  ~OutputFile() {
    if (!file_) return;
    std::fclose(file_);
    std::remove(partial_.c_str());
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  FILE* get() const { return file_; }
  void commit() {
    bool written = std::fflush(file_) == 0 && std::ferror(file_) == 0;
    written = std::fclose(file_) == 0 && written;
    file_ = nullptr;
    if (!written || std::rename(partial_.c_str(), path_.c_str()) != 0) {
      std::remove(partial_.c_str());
      throw std::runtime_error("cannot write " + path_);
    }
  }

 private:
  std::string path_, partial_;
  FILE* file_;
};

// What timing GEMMs needs on the current device: a cuBLASLt handle, a stream, a workspace.
struct GemmBench {
  static constexpr std::size_t kWorkspaceBytes = 64u << 20;
  cublasLtHandle_t handle{};
  cudaStream_t stream{};
  DeviceBuffer workspace{kWorkspaceBytes};
  GemmBench() {
    check(cublasLtCreate(&handle), "cublasLtCreate");
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
  }
  ~GemmBench() {
    cudaStreamDestroy(stream);
    cublasLtDestroy(handle);
  }
  GemmBench(const GemmBench&) = delete;
  GemmBench& operator=(const GemmBench&) = delete;
};

// Whether the current GPU has FP8 tensor cores: Ada (8.9), Hopper (9.0) and newer.
bool has_fp8_tensor_cores() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.major * 10 + prop.minor >= 89;
}

// One file per precision, so that a failure of one keeps the other's rows.
void measure_gemms(Precision precision, const char* path) {
  GemmBench bench;
  OutputFile output(path);
  FILE* out = output.get();
  const std::string what = precision == Precision::fp8 ? "gemm_fp8" : "gemm";
  std::fprintf(out, "%sdtype,m,n,k,time_us,tflops\n", gpu_header(what.c_str()).c_str());
  for (const Shape& s : gemm_shapes()) {
    Gemm gemm(bench.handle, precision, s.m, s.n, s.k, bench.workspace, GemmBench::kWorkspaceBytes);
    const int iterations = gemm.flops() > 1e12 ? 5 : 20;
    const double us = median_us(bench.stream, iterations, [&] { gemm.run(bench.stream); });
    std::fprintf(out, "%s,%d,%d,%d,%.3f,%.2f\n", precision_name(precision), s.m, s.n, s.k, us,
                 gemm.flops() / (us * 1e-6) / 1e12);
    std::fflush(out);
  }
  output.commit();
}

void measure_memory(const char* path) {
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  OutputFile output(path);
  FILE* out = output.get();
  std::fprintf(out, "%sop,bytes,time_us,gb_per_s\n", gpu_header("memory").c_str());
  // From 256 MiB up: smaller copies stay in L2 (50 MB on H100, more on newer parts) across
  // iterations and would measure the cache, not HBM.
  for (std::size_t size = std::size_t{256} << 20; size <= (std::size_t{4} << 30); size *= 2) {
    DeviceBuffer in(size), copy(size);
    random_bf16(in, size / sizeof(__nv_bfloat16), 3);
    const std::size_t vectors = size / sizeof(int4);
    const double us = median_us(stream, 20, [&] {
      copy_kernel<<<2048, 256, 0, stream>>>(static_cast<const int4*>(in.ptr),
                                            static_cast<int4*>(copy.ptr), vectors);
    });
    check(cudaGetLastError(), "copy_kernel");
    const double moved = 2.0 * static_cast<double>(size);  // read and written
    std::fprintf(out, "copy,%.0f,%.3f,%.1f\n", moved, us, moved / (us * 1e-6) / 1e9);
    std::fflush(out);
  }
  output.commit();
  cudaStreamDestroy(stream);
}

// GEMMs alone, then with 1 GiB NCCL all-reduces queued on a second stream of every visible GPU
// (one communicator over all of them). A one-rank all-reduce moves nothing, so it needs two
// GPUs or more; and the collectives must still be running when the GEMMs' timing ends, or the
// row would measure GEMMs alone. The columns are the overlap file's: the GEMM, its time alone
// and beside the collective.
void measure_overlap(const char* path) {
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  std::vector<ncclComm_t> comms(devices);
  std::vector<int> ids(devices);
  for (int d = 0; d < devices; ++d) ids[d] = d;
  check(ncclCommInitAll(comms.data(), devices, ids.data()), "ncclCommInitAll");
  const std::size_t bytes = std::size_t{1} << 30;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<cudaStream_t> comm_streams(devices);
  for (int d = 0; d < devices; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
    check(cudaStreamCreate(&comm_streams[d]), "cudaStreamCreate");
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  GemmBench bench;
  OutputFile output(path);
  FILE* out = output.get();
  std::fprintf(out, "%sdtype,m,n,k,alone_us,with_comm_us,comm_op,comm_bytes,gpus\n",
               gpu_header("overlap").c_str());
  for (const Shape& s : {Shape{8192, 4096, 4096}, Shape{8192, 28672, 8192},
                         Shape{4096, 14336, 4096}, Shape{16384, 8192, 8192}}) {
    Gemm gemm(bench.handle, Precision::bf16, s.m, s.n, s.k, bench.workspace,
              GemmBench::kWorkspaceBytes);
    const double alone = median_us(bench.stream, 10, [&] { gemm.run(bench.stream); });
    // Keep the all-reduces busy for the whole timed stretch (60 GEMMs): queue enough for three
    // times as long at an assumed 100 GB/s of bus bandwidth, at least 20.
    const double stretch_us = 60 * alone;
    const int repeats =
        std::max(20, static_cast<int>(3 * stretch_us * 1e-6 * 100e9 / static_cast<double>(bytes)));
    check(ncclGroupStart(), "ncclGroupStart");
    for (int repeat = 0; repeat < repeats; ++repeat) {
      for (int d = 0; d < devices; ++d) {
        check(ncclAllReduce(buffers[d]->ptr, buffers[d]->ptr, bytes / 2, ncclBfloat16, ncclSum,
                            comms[d], comm_streams[d]),
              "ncclAllReduce");
      }
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
    const double with_comm = median_us(bench.stream, 10, [&] { gemm.run(bench.stream); });
    check(cudaSetDevice(0), "cudaSetDevice");
    if (cudaStreamQuery(comm_streams[0]) != cudaErrorNotReady) {
      throw std::runtime_error("the all-reduces ended before the GEMMs' timing did");
    }
    for (int d = 0; d < devices; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamSynchronize(comm_streams[d]), "cudaStreamSynchronize");
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    std::fprintf(out, "bf16,%d,%d,%d,%.3f,%.3f,all_reduce,%zu,%d\n", s.m, s.n, s.k, alone,
                 with_comm, bytes, devices);
    std::fflush(out);
  }
  output.commit();
  for (int d = 0; d < devices; ++d) {
    cudaSetDevice(d);
    buffers[d].reset();
    cudaStreamDestroy(comm_streams[d]);
    ncclCommDestroy(comms[d]);
  }
  cudaSetDevice(0);
}

}  // namespace

// The exit status of a benchmark this machine cannot run (not a failure).
constexpr int kSkipped = 3;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: fleetsim_microbench gemm|gemm_fp8|memory|overlap OUT.csv\n"
                 "  writes the CSV that `fleetsim calibrate --kernels` reads\n");
    return 2;
  }
  const std::string what = argv[1];
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "fleetsim_microbench: no CUDA GPU here; run it on a GPU machine\n");
    return 1;
  }
  try {
    if (what == "gemm") {
      measure_gemms(Precision::bf16, argv[2]);
    } else if (what == "gemm_fp8") {
      if (!has_fp8_tensor_cores()) {
        std::fprintf(stderr,
                     "fleetsim_microbench: gemm_fp8 skipped: this GPU has no FP8 tensor cores "
                     "(compute capability 8.9 and up); no %s written\n",
                     argv[2]);
        return kSkipped;
      }
      measure_gemms(Precision::fp8, argv[2]);
    } else if (what == "memory") {
      measure_memory(argv[2]);
    } else if (what == "overlap") {
      // A one-rank all-reduce moves nothing and NCCL refuses two ranks on one GPU: nothing to
      // measure on a one-GPU machine. Said apart from a failure, so that run.sh goes on.
      if (devices < 2) {
        std::fprintf(stderr,
                     "fleetsim_microbench: overlap skipped: it needs two GPUs or more (this "
                     "machine has one); no %s written\n",
                     argv[2]);
        return kSkipped;
      }
      measure_overlap(argv[2]);
    } else {
      std::fprintf(stderr, "fleetsim_microbench: unknown benchmark '%s'\n", what.c_str());
      return 2;
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fleetsim_microbench: %s\n", error.what());
    return 1;
  }
  return 0;
}
