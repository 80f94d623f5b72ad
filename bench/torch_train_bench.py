#!/usr/bin/env python3
"""PyTorch CPU training-throughput benchmark (reference for ll_train_bench).

Model: bench/torch_transformer.py (fairseq-style pre-norm Transformer, d=256,
4 heads, FFN 1024, 6+6 layers, shared 8000-word embedding).  One step =
forward, label-smoothed CE (eps 0.1, summed over non-pad tokens / token count),
backward, Adam (0.9, 0.98, eps 1e-8, lr 5e-4 fixed), fp32.

Batch: 128 pairs x 32 source / 32 target tokens (4096 target tokens), random
ids in [4, 8000), EOS=2 last, pad=1 (none present, masks applied anyway).

    python3 bench/torch_train_bench.py [--steps 10] [--warmup 2] [--threads 2]

Last line:  RESULT torch tokens_per_s=... step_s=... gflops=...
"""

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import torch_transformer as tt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--src-len", type=int, default=32)
    ap.add_argument("--tgt-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--foreach", choices=["default", "on", "off"], default="default",
                    help="torch.optim.Adam foreach= (default: PyTorch's own choice)")
    ap.add_argument("--peak-gflops", type=float, default=0.0,
                    help="sgemm peak to report the achieved fraction against (optional)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    cfg = tt.Config(vocab=args.vocab)
    model = tt.Transformer(cfg)
    model.train()
    foreach = {"default": None, "on": True, "off": False}[args.foreach]
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0,
                           foreach=foreach)
    src, prev, tgt = tt.synthetic_batch(args.batch, args.src_len, args.tgt_len, cfg.vocab)
    ntokens = int(tgt.ne(cfg.pad).sum())
    tgt_tokens = args.batch * args.tgt_len

    nparams = tt.param_count(model)
    flops = tt.train_flops_per_step(cfg, args.batch, args.src_len, args.tgt_len)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')})")
    print(f"model: d={cfg.d_model} heads={cfg.heads} ffn={cfg.ffn} layers={cfg.enc_layers}+{cfg.dec_layers} "
          f"vocab={cfg.vocab} shared embeddings, pre-norm, dropout={cfg.dropout}")
    print(f"parameters: {nparams} ({nparams / 1e6:.3f} M)")
    print(f"batch: {args.batch} x src {args.src_len} / tgt {args.tgt_len} = {tgt_tokens} target tokens")
    print("analytic training FLOPs per step: "
          + ", ".join(f"{k} {v / 1e9:.2f} G" for k, v in flops.items()))

    def step(timing=None):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(src, prev)
        loss, nll = tt.label_smoothed_loss(logits, tgt, 0.1, cfg.pad)
        loss = loss / ntokens
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if timing is not None:
            timing[0] += t1 - t0
            timing[1] += t2 - t1
            timing[2] += t3 - t2
        return float(loss), float(nll) / ntokens

    for i in range(args.warmup):
        t0 = time.perf_counter()
        loss, nll = step()
        print(f"warmup {i + 1}: loss {loss:.4f} nll {nll:.4f}  {time.perf_counter() - t0:.3f} s")

    timing = [0.0, 0.0, 0.0]
    per_step = []
    t_start = time.perf_counter()
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss, nll = step(timing)
        per_step.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - t_start

    step_s = elapsed / args.steps
    tok_s = tgt_tokens * args.steps / elapsed
    gflops = flops["total"] / step_s / 1e9
    print(f"last loss {loss:.4f} nll {nll:.4f}")
    print("step times (s): " + " ".join(f"{t:.3f}" for t in per_step)
          + f"  (min {min(per_step):.3f}, max {max(per_step):.3f})")
    print(f"per step: forward+loss {timing[0] / args.steps:.3f} s, backward {timing[1] / args.steps:.3f} s, "
          f"adam {timing[2] / args.steps:.3f} s")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    extra = ""
    if args.peak_gflops > 0:
        extra = f" ({100.0 * gflops / args.peak_gflops:.1f}% of sgemm peak {args.peak_gflops:.1f})"
    print(f"{args.steps} steps in {elapsed:.3f} s: {tok_s:.1f} target tokens/s, {step_s:.4f} s/step, "
          f"{gflops:.1f} GFLOP/s{extra}")
    med = sorted(per_step)[len(per_step) // 2] if len(per_step) % 2 else \
        0.5 * (sorted(per_step)[len(per_step) // 2 - 1] + sorted(per_step)[len(per_step) // 2])
    print(f"median step {med:.4f} s -> {tgt_tokens / med:.1f} tokens/s; "
          f"fastest step {min(per_step):.4f} s -> {tgt_tokens / min(per_step):.1f} tokens/s "
          f"(robust to other load on the machine)")
    print(f"RESULT torch tokens_per_s={tok_s:.1f} step_s={step_s:.4f} gflops={gflops:.2f} "
          f"median_step_s={med:.4f} min_step_s={min(per_step):.4f}")


if __name__ == "__main__":
    main()
