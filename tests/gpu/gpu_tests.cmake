# The GPU backend's tests: every op against the CPU backend, a whole model, training steps. Built against
# the emulator (label unit: runs everywhere, CI included) and, where the CUDA backend is built, against it
# (label gpu: skipped, never passed, where no GPU is present).
set(ZAYA_GPU_TEST_SOURCES
  gpu/attention_test.cpp
  gpu/cca_test.cpp
  gpu/elementwise_test.cpp
  gpu/gpu_test_util.cpp
  gpu/model_test.cpp
  gpu/op_check_test.cpp
  gpu/optimizer_test.cpp
  gpu/routing_test.cpp
  unit/reference_data.cpp
  unit/test_util.cpp
  unit/train_reference.cpp
)

# Each executable's tests are named after its backend (emulated.Attention.CausalF32, cuda.Attention...).
# gtest_discover_tests reports GTEST_SKIP as skipped.
function(zaya_gpu_tests name backend prefix labels)
  add_executable(${name} ${ZAYA_GPU_TEST_SOURCES} ${ARGN})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE ZAYA_FIXTURES_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
  target_link_libraries(${name} PRIVATE ${backend} GTest::gtest_main)
  # Under the sanitizers the emulator runs ~15x slower (a fiber switch costs ASan's bookkeeping): the
  # training runs (6 minutes there) are left to the release build; their host code is the CPU's, which the
  # unit tests check under the sanitizers.
  set(filter "")
  if(ZAYA_SANITIZE)
    set(filter "-GpuTraining.*")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_PREFIX ${prefix}. TEST_FILTER "${filter}"
                       PROPERTIES LABELS ${labels})
endfunction()

zaya_gpu_tests(zaya_gpu_emulated_tests zaya_gpu_emulated emulated unit gpu/emulator_test.cpp)
if(TARGET zaya_gpu_emulated64)  # every kernel again with 64-lane wavefronts: AMD CDNA's paths
  zaya_gpu_tests(zaya_gpu_emulated64_tests zaya_gpu_emulated64 emulated64 unit gpu/emulator_test.cpp)
endif()
if(TARGET zaya_gpu_cuda)
  zaya_gpu_tests(zaya_gpu_cuda_tests zaya_gpu_cuda cuda gpu)
endif()
