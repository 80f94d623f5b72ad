"""Reference PyTorch model for the ll CPU benchmarks.

A small, explicit fairseq-style pre-norm Transformer encoder-decoder with the
same architecture (and so the same FLOPs) as ll's model:

  * d_model 256, 4 heads, FFN 1024 (ReLU), 6 encoder + 6 decoder layers
  * joint vocabulary, ONE shared embedding matrix used as encoder input,
    decoder input and (transposed) output projection, no output bias
  * token embeddings scaled by sqrt(d_model) plus fairseq sinusoidal positions
    (positions start at padding_idx + 1, pad rows get a zero position vector)
  * dropout 0.1 on the embeddings and on every residual branch; attention
    dropout 0, activation dropout 0
  * pre-norm layers  x = x + Drop(Sub(LN(x))), final LayerNorm on the encoder
    and decoder outputs (LayerNorm eps 1e-5)
  * self-attention: one nn.Linear(C, 3C) for q,k,v (ll fuses them the same
    way) + nn.Linear(C, C) output projection; cross-attention:
    nn.Linear(C, C) q on the decoder state, nn.Linear(C, 2C) k,v on the encoder
    output, nn.Linear(C, C) output projection; all with bias
  * attention written out by hand (matmul / masked_fill / softmax / matmul),
    q scaled by Dh^-0.5 before the score matmul as fairseq does; no fused or
    "fast path" kernels, so the work is exactly the textbook FLOPs
  * key-padding mask on encoder self-attention and on cross-attention, causal
    (+ key-padding) mask on decoder self-attention
  * loss: fairseq label-smoothed cross-entropy (q[y] = 1-eps,
    q[v != y] = eps/(V-1)), summed over non-pad target tokens

Layout is batch-major [B, T, C] like ll.  The decoder input is fairseq's
prev_output_tokens: EOS followed by the target shifted right.

Used by bench/torch_train_bench.py and bench/torch_decode_bench.py; also
importable on its own (no fairseq needed).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 1
EOS = 2
BOS = 0  # unused; fairseq uses EOS as the decoder's start symbol


class Config:
    def __init__(self, vocab=8000, d_model=256, heads=4, ffn=1024, enc_layers=6, dec_layers=6,
                 dropout=0.1, attn_dropout=0.0, act_dropout=0.0, max_positions=1024, pad=PAD):
        self.vocab = vocab
        self.d_model = d_model
        self.heads = heads
        self.ffn = ffn
        self.enc_layers = enc_layers
        self.dec_layers = dec_layers
        self.dropout = dropout
        self.attn_dropout = attn_dropout
        self.act_dropout = act_dropout
        self.max_positions = max_positions
        self.pad = pad
        assert d_model % heads == 0 and d_model % 2 == 0


def sinusoidal_table(num_positions, dim, padding_idx):
    """fairseq SinusoidalPositionalEmbedding.get_embedding: [sin | cos] halves."""
    half = dim // 2
    step = math.log(10000.0) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -step)
    ang = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


def make_positions(tokens, padding_idx):
    """fairseq utils.make_positions: non-pad tokens get padding_idx+1, +2, ...;
    pad tokens get padding_idx (whose table row is zero)."""
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def _linear(i, o, bias=True):
    m = nn.Linear(i, o, bias=bias)
    nn.init.xavier_uniform_(m.weight)
    if bias:
        nn.init.zeros_(m.bias)
    return m


def attention(q, k, v, mask, heads, attn_dropout, training):
    """q: [B, Tq, C] (already scaled), k/v: [B, Tk, C]; mask: bool, True = masked,
    broadcastable to [B, H, Tq, Tk].  Returns [B, Tq, C]."""
    B, Tq, C = q.shape
    Tk = k.shape[1]
    Dh = C // heads
    q = q.view(B, Tq, heads, Dh).transpose(1, 2)           # [B, H, Tq, Dh]
    k = k.view(B, Tk, heads, Dh).transpose(1, 2)           # [B, H, Tk, Dh]
    v = v.view(B, Tk, heads, Dh).transpose(1, 2)           # [B, H, Tk, Dh]
    scores = torch.matmul(q, k.transpose(-1, -2))          # [B, H, Tq, Tk]
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if attn_dropout > 0:
        probs = F.dropout(probs, p=attn_dropout, training=training)
    out = torch.matmul(probs, v)                           # [B, H, Tq, Dh]
    return out.transpose(1, 2).reshape(B, Tq, C)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.d_model
        self.heads = cfg.heads
        self.scaling = (C // cfg.heads) ** -0.5
        self.attn_dropout = cfg.attn_dropout
        self.qkv = _linear(C, 3 * C)
        self.out = _linear(C, C)

    def project_qkv(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return q * self.scaling, k, v

    def forward(self, x, mask):
        q, k, v = self.project_qkv(x)
        return self.out(attention(q, k, v, mask, self.heads, self.attn_dropout, self.training))


class CrossAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.d_model
        self.heads = cfg.heads
        self.scaling = (C // cfg.heads) ** -0.5
        self.attn_dropout = cfg.attn_dropout
        self.q = _linear(C, C)
        self.kv = _linear(C, 2 * C)
        self.out = _linear(C, C)

    def project_kv(self, enc):
        k, v = self.kv(enc).chunk(2, dim=-1)
        return k, v

    def forward(self, x, k, v, mask):
        q = self.q(x) * self.scaling
        return self.out(attention(q, k, v, mask, self.heads, self.attn_dropout, self.training))


class FFN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = _linear(cfg.d_model, cfg.ffn)
        self.fc2 = _linear(cfg.ffn, cfg.d_model)
        self.act_dropout = cfg.act_dropout

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.act_dropout > 0:
            h = F.dropout(h, p=self.act_dropout, training=self.training)
        return self.fc2(h)


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ffn = FFN(cfg)
        self.p = cfg.dropout

    def forward(self, x, mask):
        x = x + F.dropout(self.attn(self.ln1(x), mask), p=self.p, training=self.training)
        x = x + F.dropout(self.ffn(self.ln2(x)), p=self.p, training=self.training)
        return x


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.self_attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.cross_attn = CrossAttention(cfg)
        self.ln3 = nn.LayerNorm(cfg.d_model)
        self.ffn = FFN(cfg)
        self.p = cfg.dropout

    def forward(self, x, self_mask, enc_k, enc_v, cross_mask):
        x = x + F.dropout(self.self_attn(self.ln1(x), self_mask), p=self.p, training=self.training)
        x = x + F.dropout(self.cross_attn(self.ln2(x), enc_k, enc_v, cross_mask), p=self.p,
                          training=self.training)
        x = x + F.dropout(self.ffn(self.ln3(x)), p=self.p, training=self.training)
        return x


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab, C, padding_idx=cfg.pad)
        nn.init.normal_(self.embed.weight, mean=0.0, std=C ** -0.5)
        with torch.no_grad():
            self.embed.weight[cfg.pad].zero_()
        self.embed_scale = math.sqrt(C)
        self.register_buffer("pos_table",
                             sinusoidal_table(cfg.max_positions + cfg.pad + 1, C, cfg.pad),
                             persistent=False)
        self.enc_layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.enc_layers)])
        self.enc_ln = nn.LayerNorm(C)
        self.dec_layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.dec_layers)])
        self.dec_ln = nn.LayerNorm(C)

    # --- pieces -------------------------------------------------------------
    def embed_tokens(self, tokens, positions=None):
        if positions is None:
            positions = make_positions(tokens, self.cfg.pad)
        x = self.embed_scale * self.embed(tokens) + F.embedding(positions, self.pos_table)
        return F.dropout(x, p=self.cfg.dropout, training=self.training)

    def encode(self, src):
        """src [B, S] -> (encoder output [B, S, C], key padding mask [B, S] bool)."""
        pad_mask = src.eq(self.cfg.pad)
        attn_mask = pad_mask[:, None, None, :]             # [B, 1, 1, S]
        x = self.embed_tokens(src)
        if pad_mask.any():                                 # fairseq zeroes padded rows
            x = x * (1 - pad_mask.unsqueeze(-1).type_as(x))
        for layer in self.enc_layers:
            x = layer(x, attn_mask)
        return self.enc_ln(x), pad_mask

    def output_logits(self, h):
        return F.linear(h, self.embed.weight)              # shared embedding, no bias

    def decode_train(self, prev_tokens, enc_out, src_pad_mask):
        B, T = prev_tokens.shape
        causal = torch.ones(T, T, dtype=torch.bool, device=prev_tokens.device).triu(1)
        self_mask = causal[None, None, :, :] | prev_tokens.eq(self.cfg.pad)[:, None, None, :]
        cross_mask = src_pad_mask[:, None, None, :]
        x = self.embed_tokens(prev_tokens)
        for layer in self.dec_layers:
            k, v = layer.cross_attn.project_kv(enc_out)
            x = layer(x, self_mask, k, v, cross_mask)
        return self.output_logits(self.dec_ln(x))

    def forward(self, src, prev_tokens):
        enc_out, src_pad = self.encode(src)
        return self.decode_train(prev_tokens, enc_out, src_pad)


def label_smoothed_loss(logits, target, eps, pad):
    """fairseq label_smoothed_nll_loss, summed over non-pad tokens.
    Returns (loss_sum, nll_sum)."""
    lprobs = torch.log_softmax(logits, dim=-1).view(-1, logits.size(-1))
    target = target.reshape(-1, 1)
    nll = -lprobs.gather(dim=-1, index=target)
    smooth = -lprobs.sum(dim=-1, keepdim=True)
    keep = target.ne(pad)
    nll = nll.masked_fill(~keep, 0.0).sum()
    smooth = smooth.masked_fill(~keep, 0.0).sum()
    eps_i = eps / (lprobs.size(-1) - 1)
    loss = (1.0 - eps - eps_i) * nll + eps_i * smooth
    return loss, nll


# --- bookkeeping shared by the benchmarks ------------------------------------

def param_count(model):
    return sum(p.numel() for p in model.parameters())


def matmul_param_counts(cfg):
    """Weights (no biases) of the linear maps, split by which tokens they see.
    Returns (enc_per_src_token, dec_per_tgt_token, dec_per_src_token, out_proj)."""
    C, F_, V = cfg.d_model, cfg.ffn, cfg.vocab
    enc_layer = 3 * C * C + C * C + 2 * C * F_                   # qkv, out, fc1, fc2
    dec_layer_tgt = 3 * C * C + C * C + C * C + C * C + 2 * C * F_  # self qkv+out, cross q+out, ffn
    dec_layer_src = 2 * C * C                                   # cross k,v on the encoder output
    return (cfg.enc_layers * enc_layer, cfg.dec_layers * dec_layer_tgt,
            cfg.dec_layers * dec_layer_src, C * V)


def train_flops_per_step(cfg, batch, src_len, tgt_len):
    """Analytic training FLOPs of one step (forward + backward), as in bench/README.md:

      linear:    6 * W * N   (2 fwd + 2 grad-input + 2 grad-weight per weight per token)
                 encoder weights on source tokens, decoder weights on target
                 tokens except cross-attention k,v which see source tokens,
                 output projection (C x V) on target tokens
      attention: 3 * 2 * 2 * Tq * Tk * C per attention per sentence
                 (QK^T and PV, fwd + 2x bwd); full Tq*Tk even when causal;
                 enc self (S,S), dec self (T,T), dec cross (T,S)

    Embedding lookups, LayerNorm, softmax, loss and Adam are not counted.
    Returns a dict with the parts and 'total'."""
    Ns, Nt = batch * src_len, batch * tgt_len
    enc_w, dec_w_tgt, dec_w_src, out_w = matmul_param_counts(cfg)
    C = cfg.d_model
    parts = {
        "enc_linear": 6 * enc_w * Ns,
        "dec_linear": 6 * (dec_w_tgt * Nt + dec_w_src * Ns),
        "out_proj": 6 * out_w * Nt,
        "attention": 3 * 2 * 2 * C * batch * (cfg.enc_layers * src_len * src_len
                                               + cfg.dec_layers * (tgt_len * tgt_len + tgt_len * src_len)),
    }
    parts["total"] = sum(parts.values())
    return parts


def synthetic_batch(batch, src_len, tgt_len, vocab, seed=1234):
    """Deterministic fixed-shape batch: random ids in [4, vocab), EOS last, no padding.
    Returns (src [B,S], prev_output_tokens [B,T], target [B,T]) int64."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, src_len), generator=g)
    tgt = torch.randint(4, vocab, (batch, tgt_len), generator=g)
    src[:, -1] = EOS
    tgt[:, -1] = EOS
    prev = torch.cat([torch.full((batch, 1), EOS, dtype=tgt.dtype), tgt[:, :-1]], dim=1)
    return src, prev, tgt
