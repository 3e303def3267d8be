# CUDA backend detection. TPTUNE_CUDA=AUTO builds it when nvcc and the toolkit are found; ON requires them.
set(TPTUNE_HAVE_CUDA OFF)
if(NOT TPTUNE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(TPTUNE_HAVE_CUDA ON)
  elseif(TPTUNE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TPTUNE_CUDA=ON but the CUDA toolkit (nvcc, cuBLASLt) was not found")
  endif()
endif()
message(STATUS "tptune CUDA backend: ${TPTUNE_HAVE_CUDA}")

# CUDA language and target architectures for the kernels (kernels/CMakeLists.txt) and the CUDA backend.
# Default: sm_90 (H100/H200) always, sm_80 (A100) and sm_100 (B200) where this nvcc supports them (sm_100 since CUDA
# 12.8). -DCMAKE_CUDA_ARCHITECTURES=90 on the command line overrides the list (faster builds while developing).
if(TPTUNE_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(TPTUNE_CUDA_ARCHITECTURES 80 90)
    if(CUDAToolkit_VERSION VERSION_GREATER_EQUAL 12.8)
      list(APPEND TPTUNE_CUDA_ARCHITECTURES 100)
    endif()
    set(CMAKE_CUDA_ARCHITECTURES ${TPTUNE_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  # CMake 3.25 predates nvcc's C++20 support; tell it the flag, so CUDA sources get the project's C++20.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  # What the CUDA targets (kernels/, runtime/cuda) compile for: the list above or the one asked for, plus sm_90
  # always (the machines the project measures on are H100/H200).
  set(TPTUNE_CUDA_TARGET_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES})
  if(NOT TPTUNE_CUDA_TARGET_ARCHITECTURES MATCHES "(^|;)(90|all|all-major|native)")
    list(APPEND TPTUNE_CUDA_TARGET_ARCHITECTURES 90)
  endif()
  message(STATUS "tptune CUDA architectures: ${TPTUNE_CUDA_TARGET_ARCHITECTURES}")
endif()
