# The CUDA backend on the CPU emulation of CUDA (-DLL_CUDA_EMU=ON; tests only,
# never a user build; docs/cuda-emulation.md).
#
# kernels/*.cu compile as host C++ with tests/cuda_emu/emu_device.h included
# first; src/backend/cuda/*.c and src/dist/nccl/dist_nccl.c compile as usual
# against the CUDA toolkit's headers (types only) and link the emulated
# runtime, cuBLASLt, cuBLAS, CUB and NCCL in tests/cuda_emu instead of the
# NVIDIA libraries.  Included from CMakeLists.txt in place of the nvcc block.
find_path(LL_CUDA_EMU_INCLUDE cuda_runtime_api.h
          HINTS $ENV{CUDA_HOME}/include /usr/local/cuda/include /usr/include REQUIRED)
set(LL_EMU_DIR ${CMAKE_SOURCE_DIR}/tests/cuda_emu)
message(STATUS "ll: CUDA backend on the CPU EMULATION (tests only; headers from ${LL_CUDA_EMU_INCLUDE})")

file(GLOB LL_EMU_SOURCES CONFIGURE_DEPENDS ${LL_EMU_DIR}/*.cc)
add_library(ll_cuda_emu STATIC ${LL_EMU_SOURCES})
target_include_directories(ll_cuda_emu PUBLIC ${LL_CUDA_EMU_INCLUDE} ${LL_EMU_DIR})
include(${CMAKE_SOURCE_DIR}/cmake/cuda_emu_bounds.cmake) # -> ll_emu_bounds.h
target_include_directories(ll_cuda_emu PRIVATE ${CMAKE_BINARY_DIR})
target_link_libraries(ll_cuda_emu PUBLIC PkgConfig::OPENBLAS Threads::Threads)
if(LL_HAVE_MPI)
  target_compile_definitions(ll_cuda_emu PRIVATE LL_EMU_MPI)
  target_link_libraries(ll_cuda_emu PUBLIC MPI::MPI_C)
endif()

file(GLOB LL_CUDA_KERNELS CONFIGURE_DEPENDS kernels/*.cu)
file(GLOB LL_CUDA_HOST CONFIGURE_DEPENDS src/backend/cuda/*.c)
set_source_files_properties(${LL_CUDA_KERNELS} PROPERTIES LANGUAGE CXX)
# files the real build compiles without flush-to-zero (CMakeLists.txt, LL_CUDA_NO_FTZ)
foreach(f ${LL_CUDA_NO_FTZ})
  set_property(SOURCE ${f} APPEND PROPERTY COMPILE_DEFINITIONS LL_EMU_FTZ=0)
endforeach()
add_library(ll_cuda STATIC ${LL_CUDA_KERNELS} ${LL_CUDA_HOST})
target_compile_definitions(ll_cuda PUBLIC LL_CUDA_EMU)
target_include_directories(ll_cuda PUBLIC ${CMAKE_SOURCE_DIR}/kernels ${LL_CUDA_EMU_INCLUDE})
target_include_directories(ll_cuda PRIVATE ${LL_EMU_DIR}/include)
target_compile_options(ll_cuda PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-include ${LL_EMU_DIR}/emu_device.h -O2 -ffp-contract=fast -Wno-unknown-pragmas -Wno-sign-compare -Wno-unused-parameter>)
target_link_libraries(ll_cuda PUBLIC ll_base ll_cuda_emu)
target_compile_definitions(ll_model PUBLIC LL_WITH_CUDA LL_CUDA_EMU)
target_link_libraries(ll_model PUBLIC ll_cuda)
# NCCL: the stand-in over MPI (one emulated device per rank)
set(LL_HAVE_NCCL OFF)
if(LL_NCCL AND LL_HAVE_MPI)
  set(LL_HAVE_NCCL ON)
  target_sources(ll_cuda PRIVATE src/dist/nccl/dist_nccl.c)
  target_compile_definitions(ll_model PUBLIC LL_WITH_NCCL)
endif()
message(STATUS "ll: NCCL ${LL_HAVE_NCCL} (emulated over MPI)")
# TSan: the scheduler's own bookkeeping (fiber states, warp slots) is handed between fibers
# that TSan would otherwise see as unsynchronised threads; it is left uninstrumented and only
# its annotations (fibers, barrier acquire/release) reach TSan
if(LL_SANITIZE MATCHES "thread")
  # and no auto-vectorisation in the CUDA code: TSan does not see the gathers and scatters a vectoriser
  # makes of strided lane loops (clang 14 turned wmma::store_matrix_sync's loop into a masked scatter,
  # and a race on it went unreported); scalar accesses are all instrumented
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(ll_cuda PRIVATE -fno-vectorize -fno-slp-vectorize)
  else()
    target_compile_options(ll_cuda PRIVATE -fno-tree-vectorize)
  endif()
  set_source_files_properties(${LL_EMU_DIR}/emu_sched.cc PROPERTIES COMPILE_OPTIONS -fno-sanitize=thread
                              COMPILE_DEFINITIONS LL_EMU_TSAN=1)
endif()
