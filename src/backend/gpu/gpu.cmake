# The GPU backend: one source (backend/gpu/*.cu) built as
#   zaya_gpu_emulated  the kernels as C++ on the CPU (backend/gpu/emulator.h), always: CI tests them there;
#                      zaya_gpu_emulated64 the same with 64-lane wavefronts (AMD CDNA's), for the tests too;
#   zaya_gpu_cuda      CUDA for sm_80 and sm_90, with cuBLASLt, where nvcc is found (ZAYA_GPU=auto|cuda);
#   zaya_gpu_hip       HIP for gfx90a and gfx940 (and gfx942 where the ROCm found has it), where hipcc is
#                      found (ZAYA_GPU=auto|hip): compiled only, until a ROCm with hipBLASLt (>= 6) is here.
set(ZAYA_GPU_SOURCES attention.cu blas.cu cca.cu collectives.cu device.cu elementwise.cu embedding.cu gpu_ops.cu
                     loss.cu norms.cu optimizer.cu products.cu routing.cu)

# A host compiler does not read .cu files as C++: each gets a one-line .cpp that includes it.
set(emulated_sources ${CMAKE_CURRENT_SOURCE_DIR}/backend/gpu/emulator.cpp)
foreach(source ${ZAYA_GPU_SOURCES})
  get_filename_component(stem ${source} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/gpu_emulated/${stem}.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "#include \"backend/gpu/${source}\"\n")
  list(APPEND emulated_sources ${wrapper})
endforeach()
add_library(zaya_gpu_emulated STATIC ${emulated_sources})
target_link_libraries(zaya_gpu_emulated PUBLIC zaya_lib)
if(NOT ZAYA_SANITIZE)  # the sanitizer build tests the 32-lane emulator alone: its run is the long one
  add_library(zaya_gpu_emulated64 STATIC ${emulated_sources})
  target_compile_definitions(zaya_gpu_emulated64 PUBLIC ZAYA_EMULATED_WAVE64=1)
  target_link_libraries(zaya_gpu_emulated64 PUBLIC zaya_lib)
endif()

set(ZAYA_GPU "auto" CACHE STRING "GPU backends: auto (every toolkit found), cuda, hip, or off")
set_property(CACHE ZAYA_GPU PROPERTY STRINGS auto cuda hip off)
set(ZAYA_HAVE_CUDA OFF)
if(ZAYA_SANITIZE)
  message(STATUS "zaya: the sanitizer build tests the GPU kernels in the emulator only")
elseif(ZAYA_GPU STREQUAL "auto" OR ZAYA_GPU STREQUAL "cuda")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(ZAYA_HAVE_CUDA ON)
  elseif(ZAYA_GPU STREQUAL "cuda")
    message(FATAL_ERROR "ZAYA_GPU=cuda, but no CUDA toolkit (nvcc) was found")
  else()
    message(STATUS "zaya: no CUDA toolkit (nvcc) found; building without the CUDA backend")
  endif()
endif()

if(ZAYA_HAVE_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(cuda_sources)
  foreach(source ${ZAYA_GPU_SOURCES})
    list(APPEND cuda_sources ${CMAKE_CURRENT_SOURCE_DIR}/backend/gpu/${source})
  endforeach()
  add_library(zaya_gpu_cuda STATIC ${cuda_sources})
  set_target_properties(zaya_gpu_cuda PROPERTIES CUDA_ARCHITECTURES "80;90" CUDA_STANDARD 17
                                                 CUDA_STANDARD_REQUIRED ON)
  target_compile_options(zaya_gpu_cuda PRIVATE -Xcompiler=-Wall,-Wextra -Werror=all-warnings)
  # The CUDA runtime is linked statically; cuBLASLt is loaded when a GPU backend is made (blas.cu).
  target_compile_definitions(zaya_gpu_cuda PRIVATE ZAYA_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_link_libraries(zaya_gpu_cuda PUBLIC zaya_lib CUDA::cudart_static ${CMAKE_DL_LIBS})
  message(STATUS "zaya: building the CUDA backend with nvcc ${CMAKE_CUDA_COMPILER_VERSION} (sm_80, sm_90)")
endif()

# HIP through hipcc itself: CMake's HIP language does not find Debian's ROCm layout.
if(NOT ZAYA_SANITIZE AND (ZAYA_GPU STREQUAL "auto" OR ZAYA_GPU STREQUAL "hip"))
  find_program(ZAYA_HIPCC hipcc)
  if(NOT ZAYA_HIPCC AND ZAYA_GPU STREQUAL "hip")
    message(FATAL_ERROR "ZAYA_GPU=hip, but no HIP compiler (hipcc) was found")
  elseif(NOT ZAYA_HIPCC)
    message(STATUS "zaya: no HIP compiler (hipcc) found; building without the HIP kernels")
  else()
    set(hip_architectures --offload-arch=gfx90a --offload-arch=gfx940)
    set(probe ${CMAKE_CURRENT_BINARY_DIR}/gpu_hip/gfx942_probe.hip)
    file(CONFIGURE OUTPUT ${probe} CONTENT "__global__ void probe() {}\n")
    execute_process(COMMAND ${ZAYA_HIPCC} --offload-arch=gfx942 -c ${probe} -o ${probe}.o
                    RESULT_VARIABLE gfx942_result OUTPUT_QUIET ERROR_QUIET)
    if(gfx942_result EQUAL 0)
      list(APPEND hip_architectures --offload-arch=gfx942)
    endif()
    set(hip_objects)
    foreach(source ${ZAYA_GPU_SOURCES})
      get_filename_component(stem ${source} NAME_WE)
      set(object ${CMAKE_CURRENT_BINARY_DIR}/gpu_hip/${stem}.o)
      add_custom_command(
        OUTPUT ${object}
        COMMAND ${ZAYA_HIPCC} -std=c++17 -O3 -Wall -Wextra -Werror ${hip_architectures}
                -I${CMAKE_CURRENT_SOURCE_DIR} -x hip -c ${CMAKE_CURRENT_SOURCE_DIR}/backend/gpu/${source}
                -o ${object} -MD -MF ${object}.d
        DEPFILE ${object}.d
        DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/backend/gpu/${source}
        COMMENT "hipcc ${source}")
      list(APPEND hip_objects ${object})
    endforeach()
    add_custom_target(zaya_gpu_hip ALL DEPENDS ${hip_objects})
    string(REPLACE "--offload-arch=" "" hip_targets "${hip_architectures}")
    string(REPLACE ";" ", " hip_targets "${hip_targets}")
    message(STATUS "zaya: compiling the HIP kernels with ${ZAYA_HIPCC} (${hip_targets}); not linked: no hipBLASLt")
  endif()
endif()
