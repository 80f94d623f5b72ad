#!/usr/bin/env python3
"""PyTorch GPU peer for ll's GPU benchmarks (issue 15): the strongest plain
PyTorch a user would write for the same models, on the same GPU, in the same run.

Models (pre-norm, tied embeddings, joint vocabulary 32,000, label smoothing 0.1):
  ll64    64+64 layers, d 512, FFN 1024, 4 heads, dropout 0.3, attention dropout 0.1,
          latent-depth gates on every layer (soft Gumbel-sigmoid samples from learned
          logits, KL to Bernoulli(0.5)) -- configs/wmt16_ende_ll64.cfg
  base    Transformer-base 6+6, d 512, FFN 2048, 8 heads, dropout 0.1
  deep30  30+6, d 512, FFN 2048, 8 heads, dropout 0.1 (the DLCL paper's shape, no DLCL)

Training step: bf16 autocast with fp32 master weights, F.scaled_dot_product_attention
(flash / memory-efficient kernels), label-smoothed cross-entropy, backward, gradient
clipping at 1.0, fused Adam.  --compile compiles each layer with torch.compile
(whole-model compile of ll64 takes too long to be practical).  Random batches of
256 sentences x 32 source + 32 target tokens by default (8192 target tokens).

Decoding (--decode): the base model, 128 sentences x 32 source tokens, 32 output
tokens (EOS banned so every hypothesis runs the full length), incremental
decoding with a preallocated self-attention K/V cache, cross-attention K/V
computed once, beam search with cache reordering (index_select) as fairseq does;
beam 1 = greedy.  Weights in bf16.

The FLOP count is ll's (ll_model_train_flops): 6 * weights * tokens for every
linear map incl. the output projection, plus 12 * C * Tq * Tk per attention per
sentence; MFU = FLOPs / step time / the bf16 matmul peak measured in this run
(--peak-tflops, or measured here with an 8192^3 bf16 matmul).

Runs on the CPU too (tiny sizes, for a smoke test without a GPU: --device cpu;
PyTorch < 2.0 lacks SDPA and fused Adam, so the script falls back to explicit
attention and foreach Adam there and says so).

Output lines:  RESULT torch_gpu_train model=M mode=eager|compile tok_s=... step_s=... tflops=... mfu=... peak_mem_gib=...
               RESULT torch_gpu_decode model=base beam=B sent_s=... tok_s=...
               RESULT torch_gpu_peak bf16_tflops=...
"""

import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, EOS = 1, 2
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")

MODELS = {
    "ll64": dict(enc=64, dec=64, d=512, ffn=1024, heads=4, dropout=0.3, attn_dropout=0.1, latent=True),
    "base": dict(enc=6, dec=6, d=512, ffn=2048, heads=8, dropout=0.1, attn_dropout=0.0, latent=False),
    "deep30": dict(enc=30, dec=6, d=512, ffn=2048, heads=8, dropout=0.1, attn_dropout=0.0, latent=False),
    # a few-second smoke model for the CPU
    "tiny": dict(enc=2, dec=2, d=64, ffn=128, heads=4, dropout=0.1, attn_dropout=0.1, latent=True),
}


def attend(q, k, v, key_pad, causal, p, training):
    """q [B,H,Tq,Dh], k/v [B,H,Tk,Dh]; key_pad [B,Tk] bool (True = pad) or None."""
    mask = None
    if key_pad is not None:
        mask = ~key_pad[:, None, None, :]  # True = attend
    if HAVE_SDPA:
        if causal and mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p if training else 0.0, is_causal=True)
        if causal:
            Tq, Tk = q.shape[-2], k.shape[-2]
            cm = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
            mask = mask & cm
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p if training else 0.0)
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        Tq, Tk = q.shape[-2], k.shape[-2]
        s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    pr = torch.softmax(s.float(), dim=-1).type_as(q)
    if p > 0 and training:
        pr = F.dropout(pr, p)
    return torch.matmul(pr, v)


def split_heads(x, H):
    B, T, C = x.shape
    return x.view(B, T, H, C // H).transpose(1, 2)


def merge_heads(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


class Layer(nn.Module):
    """One pre-norm layer: self-attention, (decoder) cross-attention, FFN, each
    residual branch scaled by the layer's gate z (1 without latent depth)."""

    def __init__(self, cfg, decoder):
        super().__init__()
        C = cfg["d"]
        self.H, self.p, self.ap, self.decoder = cfg["heads"], cfg["dropout"], cfg["attn_dropout"], decoder
        self.ln1, self.qkv, self.o = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        if decoder:
            self.ln2, self.cq, self.ckv, self.co = nn.LayerNorm(C), nn.Linear(C, C), nn.Linear(C, 2 * C), nn.Linear(C, C)
        self.ln3, self.fc1, self.fc2 = nn.LayerNorm(C), nn.Linear(C, cfg["ffn"]), nn.Linear(cfg["ffn"], C)

    def forward(self, x, z, self_pad, enc=None, enc_pad=None):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        a = attend(split_heads(q, self.H), split_heads(k, self.H), split_heads(v, self.H), self_pad, self.decoder,
                   self.ap, self.training)
        x = x + z * F.dropout(self.o(merge_heads(a)), self.p, self.training)
        if self.decoder:
            q = self.cq(self.ln2(x))
            k, v = self.ckv(enc).chunk(2, dim=-1)
            a = attend(split_heads(q, self.H), split_heads(k, self.H), split_heads(v, self.H), enc_pad, False, self.ap,
                       self.training)
            x = x + z * F.dropout(self.co(merge_heads(a)), self.p, self.training)
        h = F.relu(self.fc1(self.ln3(x)))
        return x + z * F.dropout(self.fc2(h), self.p, self.training)


def sinusoids(n, C):
    half = C // 2
    f = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    a = torch.arange(n, dtype=torch.float32)[:, None] * f[None, :]
    t = torch.cat([torch.sin(a), torch.cos(a)], dim=1)
    t[PAD] = 0
    return t


class Model(nn.Module):
    def __init__(self, cfg, vocab):
        super().__init__()
        C = cfg["d"]
        self.cfg, self.C = cfg, C
        self.emb = nn.Embedding(vocab, C, padding_idx=PAD)
        nn.init.normal_(self.emb.weight, std=C ** -0.5)
        self.register_buffer("pos", sinusoids(1026 + PAD + 1, C), persistent=False)
        self.enc = nn.ModuleList([Layer(cfg, False) for _ in range(cfg["enc"])])
        self.dec = nn.ModuleList([Layer(cfg, True) for _ in range(cfg["dec"])])
        self.enc_ln, self.dec_ln = nn.LayerNorm(C), nn.LayerNorm(C)
        self.latent = cfg["latent"]
        if self.latent:  # latent-depth logits per layer (one language row each side)
            self.a_enc = nn.Parameter(torch.zeros(cfg["enc"]))
            self.a_dec = nn.Parameter(torch.zeros(cfg["dec"]))
        self.tau = 5.0
        # the layers called in forward (torch.compile'd copies when --compile)
        self.enc_run, self.dec_run = list(self.enc), list(self.dec)

    def embed(self, tok, offset=0):
        T = tok.shape[1]
        x = self.emb(tok) * math.sqrt(self.C) + self.pos[PAD + 1 + offset:PAD + 1 + offset + T]
        return F.dropout(x, self.cfg["dropout"], self.training)

    def gates(self, a):
        """Soft Gumbel-sigmoid samples z and KL(q || Bernoulli(0.5))."""
        u = torch.rand(2, a.shape[0], device=a.device).clamp_(1e-6, 1 - 1e-6)
        g = -torch.log(-torch.log(u))
        z = torch.sigmoid((a + g[0] - g[1]) / self.tau)
        q = torch.sigmoid(a)
        kl = (q * torch.log(2 * q + 1e-9) + (1 - q) * torch.log(2 * (1 - q) + 1e-9)).sum()
        return z, kl

    def forward(self, src, prev):
        src_pad = src.eq(PAD) if (src == PAD).any() else None
        ze = zd = None
        kl = 0.0
        if self.latent:
            ze, kle = self.gates(self.a_enc)
            zd, kld = self.gates(self.a_dec)
            kl = kle + kld
        x = self.embed(src)
        for i, layer in enumerate(self.enc_run):
            x = layer(x, ze[i] if ze is not None else 1.0, src_pad)
        enc = self.enc_ln(x)
        y = self.embed(prev)
        for i, layer in enumerate(self.dec_run):
            y = layer(y, zd[i] if zd is not None else 1.0, None, enc, src_pad)
        return F.linear(self.dec_ln(y), self.emb.weight), kl


def train_flops(cfg, vocab, B, S, T):
    """ll_model_train_flops (src/model/model.c) for this architecture."""
    C, Fd = cfg["d"], cfg["ffn"]
    enc_w = cfg["enc"] * (4 * C * C + 2 * C * Fd)
    dec_w_tgt = cfg["dec"] * (6 * C * C + 2 * C * Fd)
    dec_w_src = cfg["dec"] * 2 * C * C
    lin = 6 * (enc_w * B * S + dec_w_tgt * B * T + dec_w_src * B * S + C * vocab * B * T)
    att = 12 * C * B * (cfg["enc"] * S * S + cfg["dec"] * (T * T + T * S))
    return lin + att


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def measure_peak(dev, n=8192, reps=20):
    """bf16 matmul TFLOP/s on an n^3 product (the MFU denominator)."""
    if dev.type != "cuda":
        n, reps = 512, 3
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(dev)
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def random_batch(B, S, T, vocab, dev, gen):
    src = torch.randint(4, vocab, (B, S), generator=gen)
    tgt = torch.randint(4, vocab, (B, T), generator=gen)
    src[:, -1] = EOS
    tgt[:, -1] = EOS
    prev = torch.cat([torch.full((B, 1), EOS, dtype=tgt.dtype), tgt[:, :-1]], dim=1)
    return src.to(dev), prev.to(dev), tgt.to(dev)


def bench_train(args, dev, peak):
    cfg = MODELS[args.model]
    torch.manual_seed(1)
    model = Model(cfg, args.vocab).to(dev)
    if args.compile:
        model.enc_run = [torch.compile(layer) for layer in model.enc]
        model.dec_run = [torch.compile(layer) for layer in model.dec]
    fused = dev.type == "cuda" and "fused" in torch.optim.Adam.__init__.__code__.co_varnames
    kw = {"fused": True} if fused else {}
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, **kw)
    amp = dev.type == "cuda" or args.cpu_bf16
    gen = torch.Generator().manual_seed(7)
    batches = [random_batch(args.batch, args.src_len, args.tgt_len, args.vocab, dev, gen) for _ in range(4)]
    ntok = args.batch * args.tgt_len

    def step(i):
        src, prev, tgt = batches[i % len(batches)]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            logits, kl = model(src, prev)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), tgt.reshape(-1), ignore_index=PAD,
                                   label_smoothing=0.1, reduction="sum") / ntok + kl
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for i in range(args.warmup):
        step(i)
    sync(dev)
    warm_s = time.perf_counter() - t0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    sync(dev)
    dt = (time.perf_counter() - t0) / args.steps
    flops = train_flops(cfg, args.vocab, args.batch, args.src_len, args.tgt_len)
    mem = torch.cuda.max_memory_allocated() / 2 ** 30 if dev.type == "cuda" else float("nan")
    nparam = sum(p.numel() for p in model.parameters())
    mode = "compile" if args.compile else "eager"
    print(f"torch {torch.__version__} {dev} model {args.model} ({nparam / 1e6:.1f}M params) {mode}: "
          f"warm-up {warm_s:.1f} s, step {dt * 1e3:.1f} ms, loss {float(loss):.3f}, "
          f"{flops / 1e12:.2f} TFLOP/step; sdpa={HAVE_SDPA} fused_adam={fused}")
    tflops = flops / dt / 1e12
    print(f"RESULT torch_gpu_train model={args.model} mode={mode} tok_s={ntok / dt:.0f} step_s={dt:.4f} "
          f"tflops={tflops:.1f} mfu={tflops / peak:.4f} peak_mem_gib={mem:.2f}")


@torch.no_grad()
def bench_decode(args, dev, beam):
    cfg = MODELS[args.model]
    torch.manual_seed(1)
    model = Model(cfg, args.vocab).to(dev).eval()
    if dev.type == "cuda":
        model = model.to(torch.bfloat16)
    gen = torch.Generator().manual_seed(3)
    B, S, Tmax, V, H, C = args.dec_batch, args.src_len, args.dec_len, args.vocab, cfg["heads"], cfg["d"]
    src = torch.randint(4, V, (B, S), generator=gen)
    src[:, -1] = EOS
    src = src.to(dev)

    def run():
        N = B * beam
        x = model.embed(src)
        for layer in model.enc:
            x = layer(x, 1.0, None)
        enc = model.enc_ln(x)
        ck, cv = [], []
        for layer in model.dec:  # cross K/V once, expanded to the beam rows
            k, v = layer.ckv(enc).chunk(2, dim=-1)
            ck.append(split_heads(k, H).repeat_interleave(beam, 0))
            cv.append(split_heads(v, H).repeat_interleave(beam, 0))
        dt = enc.dtype
        kc = [torch.zeros(N, H, Tmax, C // H, device=dev, dtype=dt) for _ in model.dec]
        vc = [torch.zeros(N, H, Tmax, C // H, device=dev, dtype=dt) for _ in model.dec]
        tok = torch.full((N, 1), EOS, dtype=torch.long, device=dev)
        scores = torch.zeros(B, beam, device=dev)
        scores[:, 1:] = -1e9  # all beams start identical: keep one
        out = torch.zeros(N, Tmax, dtype=torch.long, device=dev)
        for t in range(Tmax):
            y = model.embed(tok, offset=t)
            for li, layer in enumerate(model.dec):
                q, k, v = layer.qkv(layer.ln1(y)).chunk(3, dim=-1)
                kc[li][:, :, t:t + 1] = split_heads(k, H)
                vc[li][:, :, t:t + 1] = split_heads(v, H)
                a = attend(split_heads(q, H), kc[li][:, :, :t + 1], vc[li][:, :, :t + 1], None, False, 0, False)
                y = y + layer.o(merge_heads(a))
                q = layer.cq(layer.ln2(y))
                a = attend(split_heads(q, H), ck[li], cv[li], None, False, 0, False)
                y = y + layer.co(merge_heads(a))
                y = y + layer.fc2(F.relu(layer.fc1(layer.ln3(y))))
            lp = torch.log_softmax(F.linear(model.dec_ln(y[:, -1]), model.emb.weight).float(), dim=-1)
            lp[:, EOS] = -float("inf")
            lp[:, PAD] = -float("inf")
            if args.sampling >= 0:  # every row draws its own (ll_decode_bench --sampling K: beam = draws)
                if args.sampling > 0:
                    kth = lp.topk(args.sampling, dim=-1).values[:, -1:]
                    lp = lp.masked_fill(lp < kth, -float("inf"))
                nxt = torch.multinomial(lp.exp(), 1)[:, 0]
                out[:, t] = nxt
                tok = nxt[:, None]
                continue
            if beam == 1:
                nxt = lp.argmax(-1)
                out[:, t] = nxt
                tok = nxt[:, None]
                continue
            cand = (scores.reshape(N, 1) + lp).view(B, beam * V)
            top, idx = cand.topk(2 * beam, dim=-1)  # fairseq's candidate count
            top, idx = top[:, :beam], idx[:, :beam]
            scores = top.contiguous()
            src_row = (idx // V) + torch.arange(B, device=dev)[:, None] * beam
            src_row = src_row.view(N)
            for li in range(len(model.dec)):
                kc[li] = kc[li].index_select(0, src_row)
                vc[li] = vc[li].index_select(0, src_row)
            out = out.index_select(0, src_row)
            out[:, t] = (idx % V).view(N)
            tok = out[:, t:t + 1]
        return out

    run()
    sync(dev)
    reps = args.dec_repeats
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    sync(dev)
    dt = (time.perf_counter() - t0) / reps
    what = f" sampling_topk={args.sampling}" if args.sampling >= 0 else ""
    print(f"RESULT torch_gpu_decode model={args.model} beam={beam}{what} sent_s={B / dt:.1f} tok_s={B * Tmax / dt:.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="base")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile each layer")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--src-len", type=int, default=32)
    ap.add_argument("--tgt-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=0, help="bf16 peak; 0 = measure it here")
    ap.add_argument("--decode", default="", help="comma-separated beams to benchmark decoding (e.g. 1,5); no training")
    ap.add_argument("--dec-batch", type=int, default=128)
    ap.add_argument("--dec-len", type=int, default=32)
    ap.add_argument("--dec-repeats", type=int, default=3)
    ap.add_argument("--sampling", type=int, default=-1,
                    help="with --decode: draw instead of searching, among the K most probable tokens (0: all); "
                    "the --decode values are the draws per sentence")
    ap.add_argument("--cpu-bf16", action="store_true", help="bf16 autocast on the CPU too")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpu_peer: no CUDA device (use --device cpu --model tiny for a smoke test)")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        print(f"device: {torch.cuda.get_device_name(0)}")
    if args.decode:
        for beam in [int(b) for b in args.decode.split(",")]:
            bench_decode(args, dev, beam)
        return
    peak = args.peak_tflops or measure_peak(dev)
    print(f"RESULT torch_gpu_peak bf16_tflops={peak:.3f}")
    bench_train(args, dev, peak)


if __name__ == "__main__":
    main()
