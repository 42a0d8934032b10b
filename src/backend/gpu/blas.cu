// cuBLASLt (CUDA) or loops (the emulator) behind gpu::Blas. cuBLASLt is column-major: a row-major product
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T over the same memory, so B goes first.

#include <tuple>
#include <vector>

#include "backend/gpu/blas.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"
#include "core/lru_cache.h"

#if defined(ZAYA_GPU_CUDA)
#include <cublasLt.h>
#include <dlfcn.h>
#endif

namespace zaya::gpu {
namespace {

#if defined(ZAYA_GPU_CUDA)

// The cuBLASLt functions this backend calls.
#define ZAYA_CUBLASLT_FUNCTIONS(X) \
  X(Create)                        \
  X(Destroy)                       \
  X(GetStatusString)               \
  X(Matmul)                        \
  X(MatmulAlgoGetHeuristic)        \
  X(MatmulDescCreate)              \
  X(MatmulDescDestroy)             \
  X(MatmulDescSetAttribute)        \
  X(MatmulPreferenceCreate)        \
  X(MatmulPreferenceDestroy)       \
  X(MatmulPreferenceSetAttribute)  \
  X(MatrixLayoutCreate)            \
  X(MatrixLayoutDestroy)           \
  X(MatrixLayoutSetAttribute)

// cuBLASLt, loaded when the first CUDA backend is made rather than linked: mapping its 540 MB library cost
// every zaya command, GPU or not, 0.15 s and 200 MB at start.
struct CublasLt {
#define ZAYA_CUBLASLT_POINTER(name) decltype(&::cublasLt##name) name = nullptr;
  ZAYA_CUBLASLT_FUNCTIONS(ZAYA_CUBLASLT_POINTER)
#undef ZAYA_CUBLASLT_POINTER
};

const CublasLt& cublaslt() {
  static const CublasLt loaded = [] {
    // The loader's path first (LD_LIBRARY_PATH, ld.so.conf), then the toolkit zaya was built with.
    const std::string library_name = cat("libcublasLt.so.", CUBLAS_VER_MAJOR);
    void* library = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) library = dlopen(ZAYA_CUDA_LIBRARY_DIR "/libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      throw Error(cat("cannot load ", library_name, " (cuBLASLt, the CUDA backend's matrix products)"));
    }
    CublasLt api;
#define ZAYA_CUBLASLT_LOAD(name)                                                     \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, "cublasLt" #name)); \
  if (api.name == nullptr) throw Error(cat(library_name, " has no cublasLt" #name));
    ZAYA_CUBLASLT_FUNCTIONS(ZAYA_CUBLASLT_LOAD)
#undef ZAYA_CUBLASLT_LOAD
    return api;
  }();
  return loaded;
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(cat("cuBLASLt ", what, ": ", cublaslt().GetStatusString(status), " (", int(status), ")"));
  }
}

// The largest power of two (up to 256) that divides a pointer: cuBLASLt's algorithms need to know.
uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t bytes = 256;
  while (bytes > 1 && address % bytes != 0) bytes /= 2;
  return bytes;
}

class CublasLtBlas final : public Blas {
 public:
  CublasLtBlas() {
    check(cublaslt().Create(&handle_), "create");
    if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) throw std::bad_alloc();
  }
  ~CublasLtBlas() override {
    plans_.clear([](Plan& plan) { plan.destroy(); });
    cudaFree(workspace_);
    cublaslt().Destroy(handle_);
  }

  void product(DType inputs, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
               float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch, void* stream) override {
    const Key key{int(inputs), int(trans_a), int(trans_b), m,           n,        k,
                  lda,         ldb,          ldc,          stride_a,    stride_b, stride_c,
                  batch,       alignment(a), alignment(b), alignment(c)};
    const Plan& plan = plans_.get(
        key, [&] { return make_plan(key); }, [](Plan& old) { old.destroy(); });
    // Column-major: C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m].
    check(cublaslt().Matmul(handle_, plan.operation, &alpha, b, plan.first, a, plan.second, &beta, c,
                            plan.output, c, plan.output, &plan.algorithm, workspace_, kWorkspaceBytes,
                            static_cast<cudaStream_t>(stream)),
          "matmul");
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  // Plans kept: a model's products have a few dozen shapes, but the experts' take their row counts from
  // the routing, a new value at almost every step; the heuristic costs ~0.1 ms, well under a product.
  static constexpr size_t kPlansKept = 512;
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t>;
  // Descriptors and the algorithm for one shape, made once (cuBLASLt's heuristic is not free).
  struct Plan {
    cublasLtMatmulDesc_t operation = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, output = nullptr;
    cublasLtMatmulAlgo_t algorithm{};
    void destroy() {
      cublaslt().MatrixLayoutDestroy(output);
      cublaslt().MatrixLayoutDestroy(second);
      cublaslt().MatrixLayoutDestroy(first);
      cublaslt().MatmulDescDestroy(operation);
    }
  };

  static void batched(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
    if (batch == 1) return;
    const int32_t count = int32_t(batch);
    check(
        cublaslt().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
        "batch count");
    check(cublaslt().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof stride),
          "batch stride");
  }

  Plan make_plan(const Key& key) {
    const auto [inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                align_a, align_b, align_c] = key;
    const cudaDataType_t input_type = DType(inputs) == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const bool transpose_a = Trans(trans_a) == Trans::Yes, transpose_b = Trans(trans_b) == Trans::Yes;
    Plan plan;
    check(cublaslt().MatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F), "operation");
    const cublasOperation_t op_first = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublaslt().MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                            sizeof op_first),
          "transpose");
    check(cublaslt().MatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                            sizeof op_second),
          "transpose");
    // B stored row-major [k, n] (or [n, k] transposed) is column-major [n, k] (or [k, n]); likewise A.
    check(
        cublaslt().MatrixLayoutCreate(&plan.first, input_type, transpose_b ? k : n, transpose_b ? n : k, ldb),
        "layout");
    check(cublaslt().MatrixLayoutCreate(&plan.second, input_type, transpose_a ? m : k, transpose_a ? k : m,
                                        lda),
          "layout");
    check(cublaslt().MatrixLayoutCreate(&plan.output, CUDA_R_32F, n, m, ldc), "layout");
    batched(plan.first, batch, stride_b);
    batched(plan.second, batch, stride_a);
    batched(plan.output, batch, stride_c);

    cublasLtMatmulPreference_t preference = nullptr;
    check(cublaslt().MatmulPreferenceCreate(&preference), "preference");
    const uint64_t workspace = kWorkspaceBytes;
    cublaslt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                            sizeof workspace);
    cublaslt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b,
                                            sizeof align_b);
    cublaslt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a,
                                            sizeof align_a);
    cublaslt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                            sizeof align_c);
    cublaslt().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                            sizeof align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublaslt().MatmulAlgoGetHeuristic(handle_, plan.operation, plan.first, plan.second, plan.output,
                                          plan.output, preference, 1, &result, &found);
    cublaslt().MatmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      plan.destroy();
      throw Error(
          cat("cuBLASLt has no algorithm for a ", m, " x ", n, " x ", k, " product (batch ", batch, ")"));
    }
    plan.algorithm = result.algo;
    return plan;
  }

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  LruCache<Key, Plan> plans_{kPlansKept};
};

#elif defined(ZAYA_GPU_EMULATED)

// The emulator's products: op(A) and op(B) unpacked to f32 (bf16 values read exactly), then rows of C summed
// over k in order.
class LoopBlas final : public Blas {
 public:
  void product(DType inputs, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
               float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch, void*) override {
    const emulator::DeviceAccess access;
    std::vector<float> a_rows(size_t(m * k)), b_rows(size_t(k * n));  // op(A) [m, k], op(B) [k, n]
    for (int64_t item = 0; item < batch; ++item) {
      unpack(inputs, a, item * stride_a, lda, trans_a, m, k, a_rows.data());
      unpack(inputs, b, item * stride_b, ldb, trans_b, k, n, b_rows.data());
      float* c_item = c + item * stride_c;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> sums(size_t(n), 0.0f);
        for (int64_t p = 0; p < k; ++p) {
          const float a_ip = a_rows[size_t(i * k + p)];
          const float* b_row = b_rows.data() + p * n;
          for (int64_t j = 0; j < n; ++j) sums[size_t(j)] += a_ip * b_row[j];
        }
        for (int64_t j = 0; j < n; ++j) {
          float& out = c_item[i * ldc + j];
          out = alpha * sums[size_t(j)] + (beta == 0 ? 0.0f : beta * out);
        }
      }
    }
  }

 private:
  // op(X) [rows, cols] from X stored at `offset` elements with row stride ld (transposed: X is [cols, rows]).
  static void unpack(DType inputs, const void* x, int64_t offset, int64_t ld, Trans trans, int64_t rows,
                     int64_t cols, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t at = offset + (trans == Trans::No ? r * ld + col : col * ld + r);
        out[r * cols + col] = inputs == DType::BF16 ? bf16_value(static_cast<const uint16_t*>(x)[at])
                                                    : static_cast<const float*>(x)[at];
      }
    }
  }
};

#endif

// C_i[m, n] = beta C_i for each i < batch (row stride ldc, item stride stride_c); beta = 0 writes zeros, so
// that NaN in C's old contents does not survive.
ZAYA_KERNEL(kThreads)
void scale_outputs_kernel(float beta, float* c, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                          int64_t batch) {
  const int64_t i = int64_t(block_x()) * block_dim_x() + thread_x();
  if (i >= batch * m * n) return;
  float& out = c[(i / (m * n)) * stride_c + (i / n % m) * ldc + i % n];
  out = beta == 0 ? 0.0f : beta * out;
}

}  // namespace

void Blas::gemm(DType inputs, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch, void* stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k > 0) {
    product(inputs, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
            stride_c, batch, stream);
  } else if (beta != 1) {
    launch("scale_outputs", scale_outputs_kernel, cover(batch * m * n, kThreads), {kThreads}, 0,
           static_cast<Stream>(stream), beta, c, m, n, ldc, stride_c, batch);
  }
}

std::unique_ptr<Blas> make_blas() {
#if defined(ZAYA_GPU_CUDA)
  return std::make_unique<CublasLtBlas>();
#elif defined(ZAYA_GPU_EMULATED)
  return std::make_unique<LoopBlas>();
#else
  throw Error("this HIP build has no matrix products: it needs hipBLASLt (ROCm >= 6)");
#endif
}

}  // namespace zaya::gpu
