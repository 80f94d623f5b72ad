#!/usr/bin/env bash
# Mutation tests of the CUDA emulation (scripts/cuda_emu_test.sh mutants):
# each mutant is a defect a GPU would punish, applied to a COPY of the source
# tree; the GPU test that covers the code must then fail under the emulation,
# or the emulation is not biting.  The copy is built once with ASan+UBSan (as
# scripts/cuda_emu_test.sh asan) into $1/mutants/src/build-mutants; each mutant rebuilds one file.
# LL_EMU_LAUNCHER: the compiler launcher (scripts/cuda_emu_test.sh passes ccache, which then
# serves the unmutated objects from the asan mode's build).
#   barrier    ll_block_sum without the barrier between writing the warps'
#              partials and warp 0 reading them (a race)
#   past_row   layer norm forward writes one element past its row
#   smem_short attention forward with dynamic shared memory one float short
#   no_sync    download without the stream synchronisation (the host reads
#              before the copy ran)
#   bounds     the cross-entropy kernel declared __launch_bounds__(256) but
#              launched with 512 threads (a GPU refuses the launch)
#   shared_short the cross-entropy kernel's static __shared__ partials one
#              element short of its 16 warps (a template kernel: the array
#              must be bounded by ASan)
#   syncwarp   the fused residual + layer norm without the __syncwarp between
#              the lanes' stores of the sum and their loads of other lanes'
#              elements (TSan reports it as a race; here the values show it; the
#              lane-strided rows, LL_CUDA_LN_VEC=0: the rows in registers need none)
#   tc_syncwarp the tensor-core attention forward without the __syncwarp between
#              the WMMA store of S (each lane its share) and the lanes' reads of
#              their rows
#   ln_barrier the 16-byte layer-norm backward without the barrier between the
#              warps' stores of their column sums and the block's sum of them
#   ticket     the residual backward's last block does not put the ticket counter
#              back to 0 (the next launch's blocks never see the last ticket: its
#              gate gradients are never added)
#   relu_note  the gemm op's DRELU reads the ReLU mask also where cuBLASLt did not
#              write it (a refused forward epilogue: the mask is garbage)
#   graph_kernels a kept graph updated in place with a capture of other kernels
#              (cuBLASLt's for another shape: an H100 faulted on its launch)
#   driver_names the kernels of a captured graph named by the runtime alone (which names no
#              library's: on an H200 no graph with a matmul was ever updated in place)
#   bwd1_half  the one-kernel attention backward's second pair of warps takes dP of
#              the first key tile (its keys' V not offset)
#   side_fork  a side-stream gemm does not wait for the work queued before it (its
#              operands): captured, the side stream never joins the capture
#   side_join  be->join does not make the device's stream wait for the side stream:
#              the side's product reads an operand overwritten after the join
#   layer_join the model does not join at the end of a group of layers' backward: the
#              weight gradients read temporaries the next layers reuse (the step test)
#   group_pp   every group of layers writes its last gradient into the same buffer (the
#              next group overwrites what its own side gemms still read; bf16 step test with
#              LL_LAYERS_PER_JOIN=2)
#   group_release each layer's temporaries released at its end though its group joins later
#   side_workspace the side stream's products use the device stream's cuBLASLt workspace
#   side_slot  every layer norm finish on the side stream reads the same slot of partials (the
#              next layer norm's row kernel overwrites them before the finish runs)
#   kv_join    the cross attention reads its keys and values without joining the side stream that
#              computes them (queued beside the self-attention block)
#   share      the residual backward's blocks take equal shares without the remainder (a grid
#              of one wave splits the Philox blocks unevenly: the last ones are never done)
#   pdl_enter  the residual backward without LL_PDL_ENTER() (launched with programmatic dependent
#              launch, it could read the gradient before the kernel that writes it has finished)
#   shared_load the one-kernel attention backward's S = Q K^T reads K's tile from global memory
#              through ll_wmma_load_shared (a .shared load of a global address reads something
#              else on a GPU: the emulation checks every tile that load names is shared memory)
#   sample_barrier the sampling draw without the barrier between the threads' writes of the
#              candidates and their weights and thread 0's sum of them (it reads weights
#              not yet written)
# Exit 0 when every mutant is killed and the unmutated copy passes.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:?usage: mutants.sh BUILD_DIR}/mutants
jobs=${JOBS:-2}
# the build folder inside the copy, one level down as build-emu-asan is in the tree: ccache's
# base_dir then sees the same relative paths in both builds' commands (scripts/cuda_emu_test.sh)
b=$work/src/build-mutants
mkdir -p "$work/src"
rm -rf "$work/build" # the build folder of earlier versions of this script
# a fresh copy, keeping the build folder (a rerun rebuilds only what changed); without the
# build folders, data and runs/ (training output, gigabytes in a working tree)
find "$work/src" -mindepth 1 -maxdepth 1 ! -name build-mutants -exec rm -rf {} +
(cd "$SRC" && tar --exclude='./build*' --exclude=./data --exclude=./runs --exclude=./.git --exclude=./.device -cf - .) | (cd "$work/src" && tar -xf -)
# the files the mutants change, newer than any object an earlier run left in $b (tar keeps
# the sources' times, and that run may have ended with a mutant compiled)
declare -A file=([barrier]=kernels/ll_cuda_common.cuh [past_row]=kernels/layernorm_row.cuh
  [smem_short]=kernels/attention.cu [no_sync]=src/backend/cuda/cuda_backend.c [bounds]=kernels/losses.cu
  [shared_short]=kernels/losses.cu [syncwarp]=kernels/residual.cu [tc_syncwarp]=kernels/attention_tc.cu
  [ln_barrier]=kernels/layernorm.cu [ticket]=kernels/residual.cu [relu_note]=src/backend/cuda/cuda_gemm_lt.c
  [graph_kernels]=src/backend/cuda/cuda_graph.c [driver_names]=src/backend/cuda/cuda_graph.c [bwd1_half]=kernels/attention_tc_bwd1.cu
  [side_fork]=src/backend/cuda/cuda_side.c [side_join]=src/backend/cuda/cuda_side.c
  [side_workspace]=src/backend/cuda/cuda_gemm_lt.c [side_slot]=src/backend/cuda/cuda_side.c
  [layer_join]=src/model/transformer.c [group_pp]=src/model/transformer.c [group_release]=src/model/transformer.c
  [kv_join]=src/model/layers.c [share]=kernels/residual.cu [pdl_enter]=kernels/residual.cu
  [shared_load]=kernels/attention_tc_bwd1.cu [sample_barrier]=kernels/sample.cu)
for m in "${!file[@]}"; do touch "$work/src/${file[$m]}"; done
launcher=${LL_EMU_LAUNCHER:-}
# shellcheck disable=SC2086
cmake -S "$work/src" -B "$b" -DLL_CUDA_EMU=ON -DLL_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" ${LL_EMU_CMAKE_ARGS:-} \
  > "$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=0 LL_SOURCE_DIR=$work/src
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LL_NO_REEXEC=1
# a killed mutant of the step test stops at its first failing method (the unmutated run passes all)
export LL_STEP_TEST_FIRST_FAIL=1

# build [TARGET...]: the test programs (default: every one a covering test runs)
build() {
  local t=("$@")
  [ ${#t[@]} -gt 0 ] || t=(gpu_test_ops_cuda gpu_test_layernorm_cuda gpu_test_graph_cuda gpu_test_step_cuda)
  cmake --build "$b" -j"$jobs" --target "${t[@]}" > "$work/build.log" 2>&1
}

# the covering test of a mutant: a command line (0 = passed); mutants that share one are run
# unmutated once
cover() {
  case $1 in
    barrier) echo '"$b/gpu_test_ops_cuda" --op xent_fwd_bwd && LL_CUDA_EMU_SCHEDULE=random:3 "$b/gpu_test_ops_cuda" --op sumsq' ;;
    past_row | ln_barrier) echo '"$b/gpu_test_layernorm_cuda"' ;;
    smem_short) echo '"$b/gpu_test_ops_cuda" --op attention_fwd' ;;
    no_sync) echo '"$b/gpu_test_ops_cuda" --op sync && "$b/gpu_test_ops_cuda" --op add' ;;
    bounds | shared_short) echo '"$b/gpu_test_ops_cuda" --op xent_fwd_bwd' ;;
    syncwarp) echo 'LL_CUDA_LN_VEC=0 "$b/gpu_test_ops_cuda" --op residual_ln_fwd' ;; # (the lane-strided rows)
    tc_syncwarp) echo 'LL_PARITY_PRECISION=bf16 "$b/gpu_test_ops_cuda" --op attention_fwd' ;;
    ticket | share | pdl_enter) echo '"$b/gpu_test_ops_cuda" --op residual_bwd' ;;
    relu_note) echo 'LL_CUDA_RELU_MASK=1 "$b/gpu_test_ops_cuda" --op gemm' ;;
    graph_kernels | driver_names) echo '"$b/gpu_test_graph_cuda" --kernels' ;;
    bwd1_half | shared_load) echo 'LL_PARITY_PRECISION=bf16 "$b/gpu_test_ops_cuda" --op attention_bwd' ;;
    side_fork | side_join | side_workspace | side_slot) echo '"$b/gpu_test_graph_cuda" --side' ;;
    layer_join | group_release | kv_join) echo '"$b/gpu_test_step_cuda"' ;;
    sample_barrier) echo '"$b/gpu_test_ops_cuda" --op sample_draw' ;;
    group_pp) echo 'LL_PARITY_PRECISION=bf16 LL_LAYERS_PER_JOIN=2 "$b/gpu_test_step_cuda"' ;;
  esac
}
run_test() { eval "$(cover "$1")"; }

# mutate NAME: apply (python: exact text replaced once, else the mutant is stale)
mutate() {
  python3 - "$work/src" "$1" <<'PY'
import sys
src, name = sys.argv[1], sys.argv[2]
M = {
    "barrier": ("kernels/ll_cuda_common.cuh",
                "previous call */\n    if (lane == 0) sh[w] = v;\n    __syncthreads();\n",
                "previous call */\n    if (lane == 0) sh[w] = v;\n"),
    "past_row": ("kernels/layernorm_row.cuh", "for (int c = lane; c < C; c += LL_WARP) ll_st(",
                 "for (int c = lane; c <= C; c += LL_WARP) ll_st("),
    "smem_short": ("kernels/attention.cu",
                   "sizeof(float) * ((size_t)BQ * Dh + WARP * (Dh + 1) + WARP * Dh)",
                   "sizeof(float) * ((size_t)BQ * Dh + WARP * (Dh + 1) + WARP * Dh - 1)"),
    "no_sync": ("src/backend/cuda/cuda_backend.c",
                "cudaMemcpyDeviceToHost, im->stream));\n    CUDA_CHECK(cudaStreamSynchronize(im->stream));",
                "cudaMemcpyDeviceToHost, im->stream));"),
    "bounds": ("kernels/losses.cu", "__launch_bounds__(LOSS_THREADS)\n    xent_kernel",
               "__launch_bounds__(FIN_THREADS)\n    xent_kernel"),
    "shared_short": ("kernels/losses.cu", "double *__restrict__ rowloss) {\n    LL_PDL_ENTER();\n    __shared__ ll_msum shm[LL_WARP];",
                     "double *__restrict__ rowloss) {\n    LL_PDL_ENTER();\n    __shared__ ll_msum shm[LOSS_THREADS / LL_WARP - 1];"),
    "syncwarp": ("kernels/residual.cu", "        __syncwarp();\n        ll_layernorm_row(", "        ll_layernorm_row("),
    "tc_syncwarp": ("kernels/attention_tc.cu",
                    "            __syncwarp(); /* the warp's stores of S before each lane reads its row */\n", ""),
    "ln_barrier": ("kernels/layernorm.cu",
                   "            sb[warp][(lane + WARP * k) * V + i] = ab[k * V + i];\n        }\n    __syncthreads();\n",
                   "            sb[warp][(lane + WARP * k) * V + i] = ab[k * V + i];\n        }\n"),
    "side_slot": ("src/backend/cuda/cuda_side.c", "    return s->slots++;", "    return (s->slots++, 0);"),
    "kv_join": ("src/model/layers.c", "                k->kv_ready = 0;\n                be->join(be);\n",
                "                k->kv_ready = 0;\n"),
    "pdl_enter": ("kernels/residual.cu", "float *dg2, const float *g1, const float *g2, res_args a) {\n    LL_PDL_ENTER();\n",
                  "float *dg2, const float *g1, const float *g2, res_args a) {\n"),
    "shared_load": ("kernels/attention_tc_bwd1.cu",
                    "product_abt(sW, TC_SLD, sQ + (size_t)w0 * ld, sK + (size_t)part * LL_WT * ld, ld, Dh, KTW);",
                    "product_abt(sW, TC_SLD, sQ + (size_t)w0 * ld, kb + (size_t)part * LL_WT * ld, ld, Dh, KTW);"),
    "sample_barrier": ("kernels/sample.cu",
                       "w[at] = exp(q(v) - amx), at++;\n            __syncthreads();\n",
                       "w[at] = exp(q(v) - amx), at++;\n"),
    "share": ("kernels/residual.cu", "hi = lo + share + (b < extra ? 1 : 0);", "hi = lo + share;"),
    "ticket": ("kernels/residual.cu", "    *ticket = 0u; /* for the next launch (ordered after this one on the stream) */\n", ""),
    "relu_note": ("src/backend/cuda/cuda_gemm_lt.c", "drelu_kernel = drelu && !ll_cuda_relu_mask_written(g->aux);",
                  "drelu_kernel = 0;"),
    "graph_kernels": ("src/backend/cuda/cuda_graph.c",
                      "(im->graph.had_cond || !update_on() || !kernels || kernels != im->graph.cache[slot].kernels)",
                      "(im->graph.had_cond || !update_on())"),
    "driver_names": ("src/backend/cuda/cuda_graph.c", "    if (drv_params) {\n", "    if (0) {\n"),
    "bwd1_half": ("kernels/attention_tc_bwd1.cu", "sV + (size_t)part * LL_WT * ld, ld, Dh, KTW); /* dP = dO V^T */",
                  "sV, ld, Dh, KTW); /* dP = dO V^T */"),
    "side_fork": ("src/backend/cuda/cuda_side.c", "    LL_CU(cudaStreamWaitEvent(s->stream, s->fork, 0));\n", ""),
    "side_join": ("src/backend/cuda/cuda_side.c", "    LL_CU(cudaStreamWaitEvent(ll_cuda_enter(be), s->join, 0));\n", ""),
    "layer_join": ("src/model/transformer.c", "                if (be->join) be->join(be);\n", ""),
    "group_pp": ("src/model/transformer.c", "ends ? pp[groups & 1] : ll_buf(m, n);", "ends ? pp[0] : ll_buf(m, n);"),
    "group_release": ("src/model/transformer.c", "            ll_layer_bwd(m, r, l, dy, dx); /* overwrites dx */\n",
                      "            ll_layer_bwd(m, r, l, dy, dx); /* overwrites dx */\n            if (!ends) ll_arena_release(&m->arena, mk);\n"),
    "side_workspace": ("src/backend/cuda/cuda_gemm_lt.c",
                       "return st->side && s == st->side ? st->workspace_side : st->workspace;", "return st->workspace;"),
}
f, old, new = M[name]
p = f"{src}/{f}"
s = open(p).read()
if s.count(old) != 1:
    sys.exit(f"mutant {name}: the text to mutate is not in {f} exactly once (stale mutant)")
open(p, "w").write(s.replace(old, new))
PY
}

mutants=(barrier past_row smem_short no_sync bounds shared_short syncwarp tc_syncwarp ln_barrier ticket relu_note
  graph_kernels bwd1_half side_fork side_join layer_join side_workspace share side_slot group_pp group_release kv_join
  pdl_enter shared_load driver_names sample_barrier)
# LL_EMU_MUTANTS="a b": only those (a rerun after fixing one); CI runs them all
if [ -n "${LL_EMU_MUTANTS:-}" ]; then read -r -a mutants <<< "$LL_EMU_MUTANTS"; fi
status=0
for m in "${mutants[@]}"; do # (each mutant's file is touched above and restored below)
  [ -n "${file[$m]:-}" ] || { echo "mutants: $m has no entry in file=(...)"; exit 1; }
  [ -n "$(cover "$m")" ] || { echo "mutants: $m has no covering test in cover()"; exit 1; }
done
t0=$SECONDS
build || { tail -30 "$work/build.log"; exit 1; }
echo "mutants: the unmutated copy built in $((SECONDS - t0)) s"
t0=$SECONDS
declare -A ran=()
for m in "${mutants[@]}"; do
  c=$(cover "$m")
  [ -n "${ran[$c]:-}" ] && continue
  ran[$c]=$m
  if ! run_test "$m" > "$work/orig-$m.log" 2>&1; then
    echo "mutants: the UNMUTATED test for $m fails ($work/orig-$m.log)"
    status=1
  fi
done
echo "mutants: the ${#ran[@]} covering tests ran unmutated in $((SECONDS - t0)) s"
for m in "${mutants[@]}"; do
  t0=$SECONDS
  mutate "$m" || { status=1; continue; }
  # only the programs its covering test runs (each link of an ASan test program costs a second or two)
  read -r -a progs <<< "$(cover "$m" | grep -o 'gpu_test_[a-z_]*' | sort -u | tr '\n' ' ')"
  build "${progs[@]}" || { echo "mutants: $m does not build"; status=1; continue; }
  t1=$SECONDS
  if run_test "$m" > "$work/$m.log" 2>&1; then
    echo "mutants: $m SURVIVED (the emulated tests did not notice; $work/$m.log)"
    status=1
  else
    echo "mutants: $m killed (build $((t1 - t0)) s, test $((SECONDS - t1)) s): $(grep -m1 -E 'ERROR|FAIL|differ|error' "$work/$m.log" | cut -c1-150)"
  fi
  cp "$SRC/${file[$m]}" "$work/src/${file[$m]}" # the original again, newer than the mutant's objects
done
exit $status
