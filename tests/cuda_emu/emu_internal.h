/* Private interface between the pieces of the CUDA emulation (tests/cuda_emu):
 * the fiber scheduler (emu_sched.cc), the runtime's streams and memory
 * (emu_runtime.cc), cuBLASLt/cuBLAS (emu_blas.cc) and NCCL (emu_nccl.cc). */
#ifndef LL_CUDA_EMU_INTERNAL_H
#define LL_CUDA_EMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <functional>

#include "emu_device.h"

#if defined(__SANITIZE_ADDRESS__)
#define LL_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define LL_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LL_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define LL_EMU_TSAN 1
#endif
#endif

namespace ll_emu {

/* Report a defect the emulation found (in a kernel: with kernel, block,
 * thread and source line) and stop the process with status 1. */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_last_error(cudaError_t e);

/* Run one kernel's whole grid now, on the calling thread (emu_sched.cc). */
void run_grid(const launch_desc &d, const std::function<void()> &body);

/* Stream work (emu_runtime.cc): queued, run in order at a synchronisation. */
/* During a stream capture the work is recorded into the graph instead (func: a
 * kernel's function, which a graph update must find unchanged). */
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn, const void *func = nullptr);
/* The device allocation containing [p, p + n), or 0 when p is not device memory;
 * 2 when p is device memory but the range runs past its allocation. */
int device_range(const void *p, size_t n);
int current_device();
/* Environment switches (LL_CUDA_EMU_*), read once. */
const char *env(const char *name);

} // namespace ll_emu

#endif
