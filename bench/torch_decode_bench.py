#!/usr/bin/env python3
"""PyTorch CPU incremental-decoding benchmark (reference for ll's decoder).

Same model as bench/torch_transformer.py (random weights: only speed matters).
Batch of 64 source sentences x 30 tokens (random ids in [4, 8000), EOS last),
30 output tokens per sentence.  EOS (and pad) are banned at every step so every
hypothesis runs the full 30 steps and the token count is fixed.

Incremental decoding as fairseq does it:
  * the encoder runs once; each decoder layer's cross-attention K/V are
    projected once (then expanded to batch*beam rows);
  * decoder self-attention keeps a K/V cache (preallocated [N, H, 30, Dh]),
    each step projects q,k,v for the new token only;
  * beam search: cumulative log-prob scores, top-2*beam candidates over
    beam*V (fairseq's candidate count), first `beam` kept, caches reordered
    with index_select every step; the best final hypothesis is returned.
  * greedy = beam 1 (argmax, no reordering).

    python3 bench/torch_decode_bench.py [--beams 1,5] [--repeats 3] [--threads 2] [--int8]

One line per beam:  RESULT torch_decode beam=B sent_per_s=... tok_per_s=...
(tok_per_s counts the output tokens of the returned hypotheses: 64 * 30 per run.)
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import torch_transformer as tt  # noqa: E402


def heads_view(x, heads):
    """[N, T, C] -> [N, H, T, Dh]"""
    N, T, C = x.shape
    return x.view(N, T, heads, C // heads).transpose(1, 2)


class IncrementalDecoder:
    def __init__(self, model, src, beam, max_len):
        self.m = model
        cfg = model.cfg
        self.cfg = cfg
        self.beam = beam
        self.max_len = max_len
        B = src.shape[0]
        self.B = B
        N = B * beam
        H, C = cfg.heads, cfg.d_model
        Dh = C // H

        enc_out, pad_mask = model.encode(src)
        # cross-attention K/V once per layer, [B, H, S, Dh], then expanded to N rows
        self.cross_k, self.cross_v = [], []
        for layer in model.dec_layers:
            k, v = layer.cross_attn.project_kv(enc_out)
            k, v = heads_view(k, H), heads_view(v, H)
            if beam > 1:
                k = k.repeat_interleave(beam, dim=0)
                v = v.repeat_interleave(beam, dim=0)
            self.cross_k.append(k.contiguous())
            self.cross_v.append(v.contiguous())
        mask = pad_mask[:, None, None, :]                  # [B, 1, 1, S]
        if beam > 1:
            mask = mask.repeat_interleave(beam, dim=0)
        self.cross_mask = mask
        L = len(model.dec_layers)
        self.self_k = [torch.zeros(N, H, max_len, Dh) for _ in range(L)]
        self.self_v = [torch.zeros(N, H, max_len, Dh) for _ in range(L)]

    def reorder(self, idx):
        self.self_k = [k.index_select(0, idx) for k in self.self_k]
        self.self_v = [v.index_select(0, idx) for v in self.self_v]

    def step(self, tokens, t):
        """tokens [N] (input at position t) -> log-probs [N, V]."""
        m, cfg = self.m, self.cfg
        H = cfg.heads
        pos = torch.full_like(tokens, cfg.pad + 1 + t)
        x = m.embed_scale * m.embed(tokens) + tt.F.embedding(pos, m.pos_table)   # [N, C]
        x = x.unsqueeze(1)                                                        # [N, 1, C]
        for i, layer in enumerate(m.dec_layers):
            # self-attention with cache
            sa = layer.self_attn
            q, k, v = sa.project_qkv(layer.ln1(x))
            self.self_k[i][:, :, t:t + 1] = heads_view(k, H)
            self.self_v[i][:, :, t:t + 1] = heads_view(v, H)
            K = self.self_k[i][:, :, :t + 1]
            V = self.self_v[i][:, :, :t + 1]
            qh = heads_view(q, H)                                                 # [N, H, 1, Dh]
            p = torch.softmax(torch.matmul(qh, K.transpose(-1, -2)), dim=-1)
            a = torch.matmul(p, V).transpose(1, 2).reshape(x.shape)
            x = x + sa.out(a)
            # cross-attention with precomputed K/V
            ca = layer.cross_attn
            qh = heads_view(ca.q(layer.ln2(x)) * ca.scaling, H)
            s = torch.matmul(qh, self.cross_k[i].transpose(-1, -2)).masked_fill(self.cross_mask, float("-inf"))
            a = torch.matmul(torch.softmax(s, dim=-1), self.cross_v[i]).transpose(1, 2).reshape(x.shape)
            x = x + ca.out(a)
            x = x + layer.ffn(layer.ln3(x))
        logits = m.output_logits(m.dec_ln(x.squeeze(1)))
        lprobs = torch.log_softmax(logits, dim=-1)
        lprobs[:, cfg.pad] = float("-inf")
        lprobs[:, tt.EOS] = float("-inf")        # force full length
        return lprobs


@torch.inference_mode()
def translate(model, src, beam, max_len, sampling=-1):
    dec = IncrementalDecoder(model, src, beam, max_len)
    B, V = src.shape[0], model.cfg.vocab
    N = B * beam
    tokens = torch.full((N,), tt.EOS, dtype=torch.long)      # decoder start symbol
    out = torch.empty(N, max_len, dtype=torch.long)
    if sampling >= 0:  # fairseq's --sampling [--sampling-topk K]: each of a sentence's `beam` rows draws its own
        for t in range(max_len):
            lp = dec.step(tokens, t)
            if sampling > 0:
                top_lp, top_i = lp.topk(sampling, dim=-1)
                tokens = top_i.gather(1, torch.multinomial(top_lp.exp(), 1))[:, 0]
            else:
                tokens = torch.multinomial(lp.exp(), 1)[:, 0]
            out[:, t] = tokens
        return out.view(B, beam, max_len)[:, 0]               # (the time is the same whichever is returned)
    if beam == 1:
        for t in range(max_len):
            lp = dec.step(tokens, t)
            tokens = lp.argmax(dim=-1)
            out[:, t] = tokens
        return out
    scores = torch.zeros(B, beam)
    base = (torch.arange(B) * beam).unsqueeze(1)
    for t in range(max_len):
        lp = dec.step(tokens, t).view(B, beam, V)
        if t == 0:
            lp[:, 1:, :] = float("-inf")                       # all beams start identical
        cand = (scores.unsqueeze(2) + lp).view(B, beam * V)
        top_s, top_i = cand.topk(2 * beam, dim=1)              # fairseq's 2*beam candidates
        top_s, top_i = top_s[:, :beam], top_i[:, :beam]
        src_beam = torch.div(top_i, V, rounding_mode="floor")
        tok = top_i % V
        idx = (base + src_beam).view(-1)
        scores = top_s
        out = out.index_select(0, idx)
        out[:, t] = tok.view(-1)
        tokens = tok.view(-1)
        if t + 1 < max_len:
            dec.reorder(idx)
    best = scores.argmax(dim=1)                                # equal lengths: no length penalty needed
    return out.view(B, beam, max_len)[torch.arange(B), best]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--beams", default="1,5", help="comma-separated beam sizes (default 1,5)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--src-len", type=int, default=30)
    ap.add_argument("--max-len", type=int, default=30, help="output tokens per sentence (forced)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per beam size (default 3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--int8", action="store_true",
                    help="dynamic int8 quantisation (torch.quantization.quantize_dynamic; fbgemm, else oneDNN) of the decoder's "
                    "linear layers and the output projection, as lldecode --precision int8 / ll_decode_bench "
                    "--precision int8 (the encoder stays fp32)")
    ap.add_argument("--sampling", type=int, default=-1,
                    help="draw instead of searching (fairseq --sampling), among the K most probable tokens (0: all); "
                    "the --beams values are the draws per sentence (as ll_decode_bench --sampling K)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = tt.Config(vocab=args.vocab)
    model = tt.Transformer(cfg).eval()
    src, _, _ = tt.synthetic_batch(args.batch, args.src_len, 2, cfg.vocab)
    if args.int8:  # PyTorch's counterpart of CTranslate2's int8: per-row weights, dynamic activations
        engines = torch.backends.quantized.supported_engines  # (Debian's torch: no fbgemm; oneDNN's int8 instead)
        torch.backends.quantized.engine = next(e for e in ("fbgemm", "x86", "onednn", "qnnpack") if e in engines)
        print(f"int8: quantize_dynamic with the {torch.backends.quantized.engine} engine")
        model.dec_layers = torch.quantization.quantize_dynamic(model.dec_layers, {torch.nn.Linear}, dtype=torch.qint8)
        proj = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        proj.weight = model.embed.weight
        qproj = torch.quantization.quantize_dynamic(torch.nn.Sequential(proj), {torch.nn.Linear}, dtype=torch.qint8)
        model.output_logits = qproj
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; "
          f"batch {args.batch} x src {args.src_len}, {args.max_len} output tokens forced; "
          f"parameters {tt.param_count(model)}")

    for beam in [int(b) for b in args.beams.split(",") if b.strip()]:
        out = translate(model, src, beam, args.max_len, args.sampling)  # warm-up
        assert out.shape == (args.batch, args.max_len)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            translate(model, src, beam, args.max_len, args.sampling)
            times.append(time.perf_counter() - t0)
        total = sum(times)
        sent_s = args.batch * args.repeats / total
        tok_s = sent_s * args.max_len
        print(f"beam {beam}: runs " + " ".join(f"{t:.3f}" for t in times)
              + f" s -> {sent_s:.1f} sentences/s, {tok_s:.1f} target tokens/s")
        what = f" sampling_topk={args.sampling}" if args.sampling >= 0 else ""
        what += " int8=1" if args.int8 else ""
        print(f"RESULT torch_decode beam={beam}{what} sent_per_s={sent_s:.2f} tok_per_s={tok_s:.1f}")


if __name__ == "__main__":
    main()
