# Tests of the CUDA emulation itself and of the defects it was built to show
# (-DLL_CUDA_EMU=ON only; label gpu, so scripts/cuda_emu_test.sh runs them).
# Included from CMakeLists.txt after the GPU tests.
set(LL_EMU_TEST_ENV "${LL_TEST_ENV};LL_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
# A fault injected (LL_CUDA_EMU_FAULT and the other settings in env, ";"-separated) into the
# ops test of one op: the run must die with a message matching regex
function(emu_fault_test name op env regex)
  add_test(NAME ${name} COMMAND gpu_test_ops_cuda --op ${op})
  set_tests_properties(${name} PROPERTIES LABELS gpu ENVIRONMENT "${LL_EMU_TEST_ENV};${env}"
    PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
# LL_CUDA_SYNC_CHECK=1 blames an asynchronous kernel fault on the op that queued it
emu_fault_test(gpu_emu_sync_check layernorm_fwd "LL_CUDA_EMU_FAULT=layernorm_fwd_kernel;LL_CUDA_SYNC_CHECK=1"
  "CUDA error after ll_cuda_layernorm_fwd_dt.*illegal memory access")
# ... a fault inside cuBLASLt is blamed on the product, described (which kernel choice faulted)
emu_fault_test(gpu_emu_sync_check_gemm gemm "LL_CUDA_EMU_FAULT=cublasLtMatmul;LL_CUDA_SYNC_CHECK=1"
  "CUDA error after gemm \\(cuBLASLt: trans [01]/[01], M [0-9]+ N [0-9]+ K [0-9]+, (fp32|bf16) x (fp32|bf16) -> (fp32|bf16), epilogue [0-9], (TF32|exact fp32 accumulation)\\).*illegal memory access")
# ... also in the backend's start-up probe of the ReLU-mask epilogues (src/backend/cuda/cuda_relu_mask.c;
# LL_CUDA_RELU_MASK=1), and without the sync check the probe's own synchronisation stops with a message naming it
emu_fault_test(gpu_emu_sync_check_relu_probe gemm "LL_CUDA_EMU_FAULT=cublasLtMatmul;LL_CUDA_SYNC_CHECK=1;LL_CUDA_RELU_MASK=1"
  "CUDA error after gemm \\(cuBLASLt: trans 0/1, M [0-9]+ N [0-9]+ K [0-9]+, (fp32|bf16) x (fp32|bf16) -> (fp32|bf16), epilogue 4, exact fp32 accumulation; the start-up probe of the ReLU-mask epilogues.*illegal memory access")
emu_fault_test(gpu_emu_fault_relu_probe gemm "LL_CUDA_EMU_FAULT=cublasLtMatmul;LL_CUDA_RELU_MASK=1"
  "CUDA error in the start-up probe of cuBLASLt's ReLU-mask epilogues.*illegal memory access")
# ... without it the fault surfaces at the next synchronisation, in another call
emu_fault_test(gpu_emu_fault_late layernorm_fwd "LL_CUDA_EMU_FAULT=layernorm_fwd_kernel"
  "CUDA error at .*cudaStreamSynchronize.*illegal memory access")
# NCCL's watchdog thread: a reduction queued and never run (the host never
# synchronises) is stopped after dist.timeout_s, though the host is not waiting
if(TARGET gpu_test_dist_nccl)
  add_test(NAME gpu_emu_nccl_watchdog COMMAND gpu_test_dist_nccl --hang)
  set_tests_properties(gpu_emu_nccl_watchdog PROPERTIES LABELS gpu ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_NCCL_HANG=1"
    PASS_REGULAR_EXPRESSION "test hung reduction: NCCL reduction not done after 0 s")
endif()
# cuBLASLt refusing every epilogue / every matmul: the fallbacks give the same results
foreach(mode epilogue all)
  add_test(NAME gpu_emu_lt_refuse_${mode} COMMAND gpu_test_ops_cuda --op gemm)
  set_tests_properties(gpu_emu_lt_refuse_${mode} PROPERTIES LABELS gpu ENVIRONMENT
    "${LL_EMU_TEST_ENV};LL_CUDA_EMU_LT_REFUSE=${mode}")
  add_test(NAME gpu_emu_lt_refuse_${mode}_typed COMMAND gpu_test_typed_cuda)
  set_tests_properties(gpu_emu_lt_refuse_${mode}_typed PROPERTIES LABELS gpu ENVIRONMENT
    "${LL_EMU_TEST_ENV};LL_CUDA_EMU_LT_REFUSE=${mode}")
endforeach()
# LL_CUDA_BGRAD_EPILOGUE=1 (an A/B of bench/gpu/run.sh; the default until session 30): weight
# gradients with cuBLASLt's bias-gradient epilogue give the gemm op's results, fp32 and bf16 (the
# default, plain products and the bias-gradient kernel, runs in every other test)
add_test(NAME gpu_emu_bgrad_epilogue COMMAND gpu_test_ops_cuda --op gemm)
add_test(NAME gpu_emu_bgrad_epilogue_bf16 COMMAND gpu_test_ops_cuda --op gemm)
set_tests_properties(gpu_emu_bgrad_epilogue PROPERTIES LABELS gpu ENVIRONMENT
  "${LL_EMU_TEST_ENV};LL_CUDA_BGRAD_EPILOGUE=1")
set_tests_properties(gpu_emu_bgrad_epilogue_bf16 PROPERTIES LABELS gpu ENVIRONMENT
  "${LL_EMU_TEST_ENV};LL_CUDA_BGRAD_EPILOGUE=1;LL_PARITY_PRECISION=bf16")
# ... and the typed matmuls with it (cuBLASLt refuses BGRAD into an fp32 C with trans_a = 0: the
# fallback must run and be counted)
add_test(NAME gpu_emu_bgrad_epilogue_typed COMMAND gpu_test_typed_cuda)
set_tests_properties(gpu_emu_bgrad_epilogue_typed PROPERTIES LABELS gpu ENVIRONMENT
  "${LL_EMU_TEST_ENV};LL_CUDA_BGRAD_EPILOGUE=1")
# ... and a training step and a decode with every epilogue refused: the fallbacks match the CPU,
# and the tests see them counted (ll_backend_gemm_fallbacks; without the refusals they require none)
add_test(NAME gpu_emu_lt_refuse_epilogue_step COMMAND gpu_test_step_cuda)
add_test(NAME gpu_emu_lt_refuse_epilogue_step_bf16 COMMAND gpu_test_step_cuda)
add_test(NAME gpu_emu_lt_refuse_epilogue_decode COMMAND gpu_test_decode_cuda)
set_tests_properties(gpu_emu_lt_refuse_epilogue_step gpu_emu_lt_refuse_epilogue_decode PROPERTIES LABELS gpu
  ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_LT_REFUSE=epilogue")
set_tests_properties(gpu_emu_lt_refuse_epilogue_step_bf16 PROPERTIES LABELS gpu
  ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_LT_REFUSE=epilogue;LL_PARITY_PRECISION=bf16")
# a cuBLASLt failure other than "not supported" (after the matmul ran) stops the op:
# a second run as the fallback would add the product twice where beta = 1
add_test(NAME gpu_emu_lt_fail_dies COMMAND gpu_test_ops_cuda --op gemm)
set_tests_properties(gpu_emu_lt_fail_dies PROPERTIES LABELS gpu ENVIRONMENT
  "${LL_EMU_TEST_ENV};LL_CUDA_EMU_LT_REFUSE=fail" PASS_REGULAR_EXPRESSION "cuBLASLt matmul failed \\(status 13")
# programmatic dependent launch refused (LL_CUDA_EMU_PDL=refuse, as a driver or sharing mode without
# it would): the backend's start-up probe says so in one line and switches it off; the graph test's
# captures then have default edges, and a training step matches the CPU
add_test(NAME gpu_emu_pdl_refused COMMAND gpu_test_graph_cuda)
add_test(NAME gpu_emu_pdl_refused_step COMMAND gpu_test_step_cuda)
set_tests_properties(gpu_emu_pdl_refused PROPERTIES LABELS gpu ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_PDL=refuse"
  PASS_REGULAR_EXPRESSION "programmatic dependent launch operation not supported: kernels launch without it.*pdl: off \\(ll_cuda_pdl\\(0\\)\\), plain launches: 0 programmatic and 2 default edges.*gpu_test_graph_cuda: all checks passed")
set_tests_properties(gpu_emu_pdl_refused_step PROPERTIES LABELS gpu ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_PDL=refuse"
  PASS_REGULAR_EXPRESSION "programmatic dependent launch operation not supported.*gpu_test_step_cuda: all checks passed")
# flush-to-zero everywhere (as if convert.cu were built with --use_fast_math's -ftz=true):
# the typed test's subnormal conversion must then fail, so its pass means convert keeps subnormals
add_test(NAME gpu_emu_ftz_shows COMMAND gpu_test_typed_cuda)
set_tests_properties(gpu_emu_ftz_shows PROPERTIES LABELS gpu WILL_FAIL TRUE ENVIRONMENT
  "${LL_EMU_TEST_ENV};LL_CUDA_EMU_FTZ=all")
# The shell GPU tests at a size the emulation runs in CI: they train and decode on the
# emulated device (a d 64, 1+1-layer model, 2 updates of 256 tokens, validation loss over 4 batches, 3-5 decoded lines, 2 + 2 resumed updates of
# 512 tokens, TF32 runs of 512 tokens (under the sanitizers: 256 tokens, 1 + 1 resumed updates, 2 TF32 and 1 NCCL update): the
# tools end to end and the CPU comparison, not model quality)
# Under the sanitizers the batches of the tiny-corpus tests are halved: there they check the host's
# threads (stream worker, batch workers, NCCL watchdog, MPI ranks) and memory, which the same code
# paths show at any size (the kernels' own races are the op tests' work).
if(LL_SANITIZE)
  set(LL_EMU_TOKENS 256)
  set(LL_EMU_SAN_UPDATES 1) # NCCL run: one update (one reduction and Adam step per rank)
  set(LL_EMU_TF32_UPDATES 2)
  set(LL_EMU_RESUME_UPDATES 2) # 1 + --resume 1 against 2 straight, validated at every update
  set(LL_EMU_RESUME_VALID 1)
  set(LL_EMU_REFUSED_UPDATES 10) # 2 graphs kept: the first batches' new shapes update them
else()
  set(LL_EMU_TOKENS 512)
  set(LL_EMU_SAN_UPDATES 2)
  set(LL_EMU_TF32_UPDATES 4)
  set(LL_EMU_RESUME_UPDATES 4)
  set(LL_EMU_RESUME_VALID 2)
  set(LL_EMU_REFUSED_UPDATES 30)
endif()
set(LL_EMU_SHELL_ENV "LL_BIBLE_UPDATES=2;LL_BIBLE_MAX_TOKENS=256;LL_BIBLE_DECODE_LINES=3;LL_DECODE_PARITY_LINES=5"
    "LL_RESUME_UPDATES=${LL_EMU_RESUME_UPDATES};LL_RESUME_VALID=${LL_EMU_RESUME_VALID};LL_RESUME_TOKENS=${LL_EMU_TOKENS}"
    "LL_BIBLE_EXTRA=--set model.d_model=64 --set model.ffn_dim=128 --set model.enc_layers=1 --set model.dec_layers=1 --set train.valid_max_batches=4")
if(TEST gpu_test_tf32)
  set_property(TEST gpu_test_tf32 APPEND PROPERTY ENVIRONMENT "LL_TF32_TOKENS=${LL_EMU_TOKENS};LL_TF32_UPDATES=${LL_EMU_TF32_UPDATES}")
endif()
foreach(t gpu_test_bible300 gpu_test_decode_parity gpu_test_resume_cuda gpu_test_gpu_bench)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${LL_EMU_SHELL_ENV})
  endif()
endforeach()
# the (residual +) layer norm forward's lane-strided rows at the ops test's widths (C 1000, 512),
# which take the rows in registers by default (kernels/layernorm_row.cuh): fused against plain,
# bit for bit, and against the CPU
foreach(prec fp32 bf16)
  add_test(NAME gpu_emu_ln_strided_${prec} COMMAND gpu_test_ops_cuda --op residual_ln_fwd)
  set_tests_properties(gpu_emu_ln_strided_${prec} PROPERTIES LABELS gpu
    ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_LN_VEC=0;LL_PARITY_PRECISION=${prec}")
endforeach()
# cudaGraphExecUpdate refused every time (compute-sanitizer's memcheck refused ll's updates on an
# H100, error 910, and lltrain then crashed on the host, 2026-11-28): the kept graph is built anew
# (the graph test counts it) and training runs to the end (the Bible test, under every sanitizer)
if(TARGET gpu_test_graph_cuda)
  add_test(NAME gpu_emu_graph_update_refused COMMAND gpu_test_graph_cuda --kernels)
  set_tests_properties(gpu_emu_graph_update_refused PROPERTIES LABELS gpu
    ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_GRAPH_UPDATE=refuse")
  # a runtime without the driver's entry points: ll asks the runtime, which names no library's kernel
  # (an H200's did not name cuBLASLt's, 2026-11-28): every capture is built anew, none updated
  add_test(NAME gpu_emu_graph_no_driver_entry COMMAND gpu_test_graph_cuda --kernels)
  set_tests_properties(gpu_emu_graph_no_driver_entry PROPERTIES LABELS gpu
    ENVIRONMENT "${LL_EMU_TEST_ENV};LL_CUDA_EMU_NO_DRIVER_ENTRY_POINTS=1")
endif()
if(TEST gpu_test_bible300)
  add_test(NAME gpu_emu_graph_update_refused_train COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/emu_graph_refused.sh)
  set_tests_properties(gpu_emu_graph_update_refused_train PROPERTIES LABELS gpu RESOURCE_LOCK bible_bin
    ENVIRONMENT "${LL_EMU_TEST_ENV};${LL_EMU_SHELL_ENV};LL_GRAPH_REFUSED_UPDATES=${LL_EMU_REFUSED_UPDATES}")
endif()
# decode parity's diagnosis when fp32 training on the GPU fails (an H100's "illegal instruction",
# 2026-11-27): a fault in every optimizer step makes it train again without graphs, then op by op,
# and name the op (plain builds: 15 s)
if(TEST gpu_test_decode_parity AND NOT LL_SANITIZE)
  add_test(NAME gpu_emu_decode_parity_diagnosis COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/test_decode_parity.sh)
  set_tests_properties(gpu_emu_decode_parity_diagnosis PROPERTIES LABELS gpu
    ENVIRONMENT "${LL_EMU_TEST_ENV};LL_BINARY_DIR=${CMAKE_BINARY_DIR};${LL_EMU_SHELL_ENV};LL_CUDA_EMU_FAULT=adam_kernel"
    PASS_REGULAR_EXPRESSION "without CUDA graphs it fails too.*op by op \\(LL_CUDA_SYNC_CHECK=1\\): [^\n]*ll_cuda_adam.*with train.tf32=false it fails too")
endif()
# NCCL over MPI: two ranks, one emulated device each
if(TEST gpu_test_dist_nccl_mpirun)
  set_property(TEST gpu_test_dist_nccl_mpirun APPEND PROPERTY ENVIRONMENT
               "LL_CUDA_EMU_DEVICES=2;LL_DIST_NCCL_UPDATES=${LL_EMU_SAN_UPDATES};LL_DIST_NCCL_TOKENS=${LL_EMU_TOKENS}")
endif()
# (its checkpoint comparison: built with the GPU tests scripts/cuda_emu_test.sh builds)
add_dependencies(gpu_test_dist_nccl ll_ckpt_diff)
# attention over more than 65,535 sentences (gridDim.z slices): 30 s of emulation, minutes under
# the sanitizers, so plain builds only
# ... and the element-wise op tests on 2^16 + 3 elements instead of 2^20 + 3 (LL_GPU_TEST_SMALL: their
# threads are independent, the sizes' grid sweeps are the plain build's check; the bf16 attention's
# long causal case 70 tokens instead of 150: still 2 row blocks and 3 key tiles)
if(LL_SANITIZE)
  set_property(TEST gpu_test_attention_cuda APPEND PROPERTY ENVIRONMENT "LL_GPU_TEST_BIG_BATCH=0;LL_GPU_TEST_SMALL=1")
  foreach(t gpu_test_ops_cuda gpu_test_ops_cuda_bf16 gpu_emu_lt_refuse_epilogue gpu_emu_lt_refuse_all)
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "LL_GPU_TEST_SMALL=1")
    endif()
  endforeach()
endif()
# Every op of the parity test in one process (LL_PARITY_FORK=0, as scripts/gpu_check.sh's sanitizer
# runs start them): each op then meets the random inputs the ops before it left to the generator,
# not the same ones every run (in fp32 and bf16; with the ReLU masks, as the ops tests run).  These
# inputs found the CPU's beam_topk skipping a chunk by a row max a NaN had lowered (AVX-512).
foreach(prec fp32 bf16)
  add_test(NAME gpu_emu_ops_one_process_${prec} COMMAND gpu_test_ops_cuda)
  set_tests_properties(gpu_emu_ops_one_process_${prec} PROPERTIES LABELS gpu
    ENVIRONMENT "${LL_EMU_TEST_ENV};LL_PARITY_FORK=0;LL_CUDA_RELU_MASK=1;LL_PARITY_PRECISION=${prec}")
endforeach()
# Label `variant`: a second run of kernels and host threads another test runs, with other inputs or
# settings (every op in one process; TF32; programmatic launch or graph updates refused; a step, a
# decode and the typed matmuls with cuBLASLt's epilogues refused or its bias-gradient epilogue;
# flush-to-zero).  The plain and ASan modes run them; the TSan mode, whose question is the
# interleavings, runs the tests they vary (gpu_test_ops_cuda, _step_cuda, _decode_cuda, _typed_cuda,
# _resume_cuda, _bible300; the fallbacks' kernels in gpu_emu_lt_refuse_epilogue/_all, on the gemm
# op) and leaves them out: ~450 s of TSan test time, ~4 minutes on CI's 2 cores
# (scripts/cuda_emu_test.sh).
foreach(t gpu_emu_ops_one_process_fp32 gpu_emu_ops_one_process_bf16 gpu_test_tf32 gpu_emu_pdl_refused_step
          gpu_emu_graph_update_refused_train gpu_emu_lt_refuse_epilogue_step gpu_emu_lt_refuse_epilogue_step_bf16
          gpu_emu_lt_refuse_epilogue_decode gpu_emu_lt_refuse_epilogue_typed gpu_emu_lt_refuse_all_typed
          gpu_emu_bgrad_epilogue_typed gpu_emu_ftz_shows)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY LABELS variant)
  endif()
endforeach()
