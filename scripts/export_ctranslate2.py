#!/usr/bin/env python3
"""Export an ll model (*.llm) to a CTranslate2 model directory.

    scripts/export_ctranslate2.py MODEL.llm OUT_DIR [--quantization int8] [--vmap MAP] [--force]

ll's Transformer is fairseq's (sinusoidal positions from pad + 1, embeddings
scaled by sqrt(d_model), ReLU, layer-norm eps 1e-5, source + </s>, the decoder
starting from </s>), so the model maps onto CTranslate2's TransformerSpec as
its fairseq converter maps a fairseq checkpoint: fused q/k/v and k/v weights
as ll stores them, the sinusoid rows from position 2, the output projection
(the embedding when tied), pre- or post-norm.  The vocabulary is the model's
own sentencepiece pieces in id order ("<pad>" as CTranslate2's "<blank>").

Then, in Python (pip install ctranslate2; pieces from the same sentencepiece
model, e.g. spm_encode --output_format=piece):

    import ctranslate2
    t = ctranslate2.Translator(OUT_DIR, device="cpu", intra_threads=2)
    t.translate_batch([["▁In", "▁the", "▁beginning", ...]], beam_size=5,
                      max_decoding_length=200, min_decoding_length=1)

lldecode's defaults correspond to beam_size 5 (the model's decode.beam),
length_penalty 1 (decode.lenpen), max_decoding_length 200 (--max-len-b; at
most model.max_positions - 1, as lldecode caps it: the position table ends
there) and min_decoding_length 1 (--min-len).  CTranslate2's scores are ll's
times ln 2 (natural logarithms).  A model with language tags (data.lang_tags)
starts its translations with the tag instead of </s>: it is exported with no
fixed start token, and each translation's target_prefix is the tag, [["<2es>"]]
(CTranslate2 does not return a start token).

Models with what CTranslate2's Transformer has no place for are refused with
one line naming it: latent-depth gates (llprune --lang L bakes them in: its
output exports), DLCL, ReZero.
The model's weights are read as stored: a checkpoint of a run with
train.ema_decay exports the moving average, as lldecode decodes it.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llmodel  # noqa: E402


def fail(msg):
    print(f"export_ctranslate2: {msg}", file=sys.stderr)
    sys.exit(1)


def spm_pieces(proto):
    """The pieces of a serialized sentencepiece ModelProto, in id order
    (field 1, repeated SentencePiece; its field 1 is the piece)."""

    def varint(b, i):
        x = s = 0
        while True:
            c = b[i]
            i += 1
            x |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return x, i

    def fields(b):
        i = 0
        while i < len(b):
            key, i = varint(b, i)
            num, wt = key >> 3, key & 7
            if wt == 0:
                v, i = varint(b, i)
            elif wt == 1:
                v, i = b[i:i + 8], i + 8
            elif wt == 2:
                n, i = varint(b, i)
                v, i = b[i:i + n], i + n
            elif wt == 5:
                v, i = b[i:i + 4], i + 4
            else:
                raise ValueError(f"wire type {wt}")
            yield num, v

    pieces = []
    for num, v in fields(proto):
        if num == 1:
            piece = [p for n, p in fields(v) if n == 1]
            pieces.append(piece[0].decode("utf-8") if piece else "")
    return pieces


def sinusoids(rows, dim):
    """ll's (fairseq's) position table: [sin(pos f_i), cos(pos f_i)], f_i = 10000^(-i/(half-1))."""
    import numpy as np

    half = dim // 2
    f = np.exp(-np.arange(half, dtype=np.float64) * np.log(10000.0) / max(half - 1, 1))
    pos = np.arange(rows, dtype=np.float64)[:, None] * f[None, :]
    return np.concatenate([np.sin(pos), np.cos(pos)], axis=1).astype(np.float32)


def read_model(path):
    try:
        m = llmodel.read(path)
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    except llmodel.LLModelError as e:
        fail(str(e))
    import yaml

    cfg = yaml.safe_load(m.config) or {}
    return m, cfg


def check_supported(path, cfg):
    model, latent, dlcl = cfg.get("model", {}), cfg.get("latent", {}), cfg.get("dlcl", {})
    if latent.get("encoder") or latent.get("decoder"):
        fail(f"{path}: latent-depth gates have no CTranslate2 equivalent: bake them in with llprune --threshold Q "
             f"--lang L first")
    if dlcl.get("encoder") or dlcl.get("decoder"):
        fail(f"{path}: DLCL (dlcl.encoder/dlcl.decoder) has no CTranslate2 equivalent")
    if model.get("norm") not in ("pre", "post"):
        fail(f"{path}: model.norm {model.get('norm')} has no CTranslate2 equivalent (pre and post only)")
    if model["d_model"] % 2:
        fail(f"{path}: model.d_model {model['d_model']} is odd")


def language_tags(cfg):
    """Whether the decoder starts with a target-language tag (src/decode/translate.c, ll_decode_bos)."""
    data = cfg.get("data", {})
    langs = []
    for c in data.get("train") or []:
        if c.get("tgt_lang") not in langs:
            langs.append(c.get("tgt_lang"))
    mode = str(data.get("lang_tags", "auto"))
    return mode in ("on", "True", "true") or (mode == "auto" and len(langs) > 1), langs


def build_spec(path, m, cfg):
    import numpy as np
    from ctranslate2.specs import transformer_spec

    model = cfg["model"]
    C, H = int(model["d_model"]), int(model["heads"])
    Le, Ld = int(model["enc_layers"]), int(model["dec_layers"])
    pre = model["norm"] == "pre"
    spec = transformer_spec.TransformerSpec.from_config((Le, Ld), H, pre_norm=pre)

    names = set(m.tensors)

    def t(name):
        if name not in names:
            fail(f"{path}: no tensor '{name}' (not a model ll writes)")
        return np.array(m.array(name), dtype=np.float32)  # a copy: quantization writes in place

    def linear(spec_lin, prefix):
        spec_lin.weight = t(prefix + ".weight")
        spec_lin.bias = t(prefix + ".bias")

    def norm(spec_ln, prefix):
        spec_ln.gamma = t(prefix + ".weight")
        spec_ln.beta = t(prefix + ".bias")

    enc_emb = t("enc.embed")
    dec_emb = t("dec.embed") if "dec.embed" in names else enc_emb
    out = t("dec.output_projection") if "dec.output_projection" in names else dec_emb
    max_pos = int(model["max_positions"])
    pos = sinusoids(max_pos + 2, C)[2:]  # positions start at pad + 1 = 2

    for side, emb in (("enc", enc_emb), ("dec", dec_emb)):
        s = spec.encoder if side == "enc" else spec.decoder
        embeddings = s.embeddings[0] if isinstance(s.embeddings, list) else s.embeddings
        embeddings.weight = emb
        s.scale_embeddings = True  # sqrt(d_model)
        s.position_encodings.encodings = pos
        if pre:
            norm(s.layer_norm, f"{side}.final_ln")
    spec.decoder.projection.weight = out
    spec.decoder.projection.bias = np.zeros(out.shape[0], dtype=np.float32)

    for i, ls in enumerate(spec.encoder.layer):
        p = f"enc.layers.{i}"
        linear(ls.self_attention.linear[0], p + ".self_attn.qkv")  # q, k, v rows: CTranslate2's fused layout
        linear(ls.self_attention.linear[1], p + ".self_attn.out")
        norm(ls.self_attention.layer_norm, p + ".self_attn_ln")
        norm(ls.ffn.layer_norm, p + ".ffn_ln")
        linear(ls.ffn.linear_0, p + ".ffn.fc1")
        linear(ls.ffn.linear_1, p + ".ffn.fc2")
    for i, ls in enumerate(spec.decoder.layer):
        p = f"dec.layers.{i}"
        linear(ls.self_attention.linear[0], p + ".self_attn.qkv")
        linear(ls.self_attention.linear[1], p + ".self_attn.out")
        norm(ls.self_attention.layer_norm, p + ".self_attn_ln")
        linear(ls.attention.linear[0], p + ".cross_attn.q")
        linear(ls.attention.linear[1], p + ".cross_attn.kv")  # k, v rows
        linear(ls.attention.linear[2], p + ".cross_attn.out")
        norm(ls.attention.layer_norm, p + ".cross_attn_ln")
        norm(ls.ffn.layer_norm, p + ".ffn_ln")
        linear(ls.ffn.linear_0, p + ".ffn.fc1")
        linear(ls.ffn.linear_1, p + ".ffn.fc2")

    used = {n for n in names if not n.startswith(("optim.", "state."))}
    expect = {"enc.embed", "dec.embed", "dec.output_projection"} | {
        f"{s}.final_ln.{w}" for s in ("enc", "dec") for w in ("weight", "bias")}
    for side, L, subs in (("enc", Le, ("self_attn.qkv", "self_attn.out", "self_attn_ln", "ffn_ln", "ffn.fc1", "ffn.fc2")),
                          ("dec", Ld, ("self_attn.qkv", "self_attn.out", "self_attn_ln", "cross_attn.q", "cross_attn.kv",
                                       "cross_attn.out", "cross_attn_ln", "ffn_ln", "ffn.fc1", "ffn.fc2"))):
        expect |= {f"{side}.layers.{i}.{s}.{w}" for i in range(L) for s in subs for w in ("weight", "bias")}
    extra = sorted(used - expect)
    if extra:  # a tensor CTranslate2's Transformer would silently lose (a gate, a scale)
        fail(f"{path}: tensor '{extra[0]}' has no place in CTranslate2's Transformer")
    return spec


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ll model or checkpoint (*.llm)")
    ap.add_argument("output_dir", help="the CTranslate2 model directory to write")
    ap.add_argument("--quantization", default=None,
                    help="CTranslate2's weight type: int8, int8_float32, int16, float16, bfloat16, ... "
                         "(default: float32, as stored)")
    ap.add_argument("--vmap", default=None,
                    help="a vocabulary map (llshortlist's, lldecode --shortlist's) saved as the model's vmap.txt, "
                         "for CTranslate2's translate_batch(use_vmap=True)")
    ap.add_argument("--force", action="store_true", help="replace output_dir if it exists")
    a = ap.parse_args(argv)
    try:
        import ctranslate2  # noqa: F401  (only: is it installed)
        from ctranslate2.converters.converter import Converter
    except ImportError:
        fail("the ctranslate2 Python package is missing: pip install ctranslate2")
    if a.vmap is not None and not os.path.isfile(a.vmap):
        fail(f"--vmap {a.vmap}: not a readable file")
    m, cfg = read_model(a.model)
    check_supported(a.model, cfg)
    if not m.vocab:
        fail(f"{a.model}: no sentencepiece vocabulary in the model file")
    pieces = spm_pieces(m.vocab)
    V = m.tensors["enc.embed"].shape[0]
    if len(pieces) != V:
        fail(f"{a.model}: the vocabulary has {len(pieces)} pieces, the embedding {V} rows")
    if pieces[:4] != ["<s>", "<pad>", "</s>", "<unk>"]:
        fail(f"{a.model}: the vocabulary's first pieces are {pieces[:4]}, not ll's <s> <pad> </s> <unk>")
    tags, langs = language_tags(cfg)
    pruned_for = str(cfg.get("latent", {}).get("pruned_for") or "")
    if pruned_for:  # llprune --lang: the model translates into that language only (lldecode refuses others)
        langs = [pruned_for] if pruned_for in langs else langs
    if tags:
        for lang in langs:
            if f"<2{lang}>" not in pieces:
                fail(f"{a.model}: the model has language tags but its vocabulary has no <2{lang}>")

    class LLConverter(Converter):
        def _load(self):
            spec = build_spec(a.model, m, cfg)
            vocab = ["<blank>" if p == "<pad>" else p for p in pieces]
            spec.register_source_vocabulary(vocab)
            spec.register_target_vocabulary(vocab)
            spec.config.add_source_eos = True
            spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = "<s>", "</s>", "<unk>"
            spec.config.decoder_start_token = None if tags else "</s>"  # tags: target_prefix [["<2xx>"]]
            spec.config.layer_norm_epsilon = 1e-5
            return spec

    try:
        out = LLConverter().convert(a.output_dir, vmap=a.vmap, quantization=a.quantization, force=a.force)
    except (RuntimeError, ValueError) as e:
        fail(f"{a.output_dir}: {e}")
    start = f"the target_prefix [[\"<2{langs[0]}>\"]] ({', '.join('<2%s>' % x for x in langs)})" if tags else "</s>"
    print(f"export_ctranslate2: {a.model} -> {out}: {cfg['model']['enc_layers']}+{cfg['model']['dec_layers']} "
          f"layers, d={cfg['model']['d_model']}, {len(pieces)} pieces, {a.quantization or 'float32'}; "
          f"translations start with {start}; max_decoding_length <= {int(cfg['model']['max_positions']) - 1}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
