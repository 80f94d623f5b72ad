/* The configuration schema: one row per key.  Defaults, the YAML loader,
 * --set, dump, --help-config and docs/config.md are all driven by this table,
 * so adding a key (or a whole section such as latent:) means adding a field to
 * ll_config and rows here; a new section also gets a line in ll_cfg_sections. */
#define _GNU_SOURCE
#include "schema.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"

/* Compile-time check that a row's type matches the field's C type (a negative
 * array size otherwise), so an INT row can never point at a float. */
#define LL_CT(f, T) (0 * sizeof(char[_Generic(((ll_config *)0)->f, T : 1, default : -1)]))
#define ROW(n, ty, f, T, d, lo, hi, ch, fl, h) \
    {n, ty, offsetof(ll_config, f) + LL_CT(f, T), sizeof(((ll_config *)0)->f), 0, d, lo, hi, ch, fl, h}
#define INT(n, f, d, lo, hi, h) ROW(n, LL_CFG_INT, f, int, d, lo, hi, NULL, 0, h)
#define FLT(n, f, d, lo, hi, fl, h) ROW(n, LL_CFG_FLOAT, f, float, d, lo, hi, NULL, fl, h)
#define BOOL(n, f, d, h) ROW(n, LL_CFG_BOOL, f, int, d, 0, 1, NULL, 0, h)
#define STR(n, f, d, fl, h) ROW(n, LL_CFG_STRING, f, char *, d, 0, 0, NULL, fl, h)
#define ENUM(n, f, d, ch, h) ROW(n, LL_CFG_ENUM, f, char *, d, 0, 0, ch, 0, h)
#define CORPORA(n, f, cnt, h)                                                                       \
    {n, LL_CFG_CORPORA, offsetof(ll_config, f) + LL_CT(f, ll_corpus_cfg *), sizeof(((ll_config *)0)->f), \
     offsetof(ll_config, cnt) + LL_CT(cnt, int), "[]", 0, 0, NULL, LL_CFG_INPUT_PATH, h}

#define INF HUGE_VAL
#define OPEN_MIN LL_CFG_MIN_OPEN
#define OPEN_MAX LL_CFG_MAX_OPEN

const ll_cfg_section ll_cfg_sections[] = {
    {"model", "Transformer shape and regularisation."},
    {"data", "Corpora, sentencepiece vocabulary and batching."},
    {"train", "Optimisation, schedule, logging and device."},
    {"checkpoint", "Where and how often checkpoints are written."},
    {"decode", "Beam search defaults for lldecode and validation BLEU."},
    {"latent", "Latent depth (Li et al. 2020): Gumbel-gated layers, priors, KL, target depth, llprune."},
    {"dlcl", "Dynamic linear combination of layers (Wang et al. 2019)."},
    {"deep", "Deep decoder (Li et al. 2022): cross-attention drop (CAD) and the DDR/ALD losses (CRT)."},
    {"dist", "Multi-process data parallelism: mpirun -np N lltrain ... (docs/distributed.md)."},
};
const int ll_cfg_nsections = (int)(sizeof ll_cfg_sections / sizeof ll_cfg_sections[0]);

const ll_cfg_key ll_cfg_keys[] = {
    /* model */
    INT("model.d_model", d_model, "512", 2, 65536, "Width of embeddings and of the residual stream."),
    INT("model.ffn_dim", ffn_dim, "2048", 1, 1 << 20, "Inner width of the feed-forward blocks."),
    INT("model.heads", heads, "8", 1, 1024, "Attention heads; must divide model.d_model."),
    INT("model.enc_layers", enc_layers, "6", 0, 4096, "Encoder layers (0 is allowed: embeddings and output only; llprune refuses to empty a latent stack)."),
    INT("model.dec_layers", dec_layers, "6", 0, 4096, "Decoder layers (0 is allowed, as for the encoder)."),
    INT("model.max_positions", max_positions, "1024", 1, 1 << 20,
        "Longest sequence the sinusoidal positions cover; data.max_len must not exceed it."),
    ENUM("model.norm", norm, "pre", "pre|post|rezero",
         "LayerNorm placement: pre (before each sublayer; needed for deep models), post, or rezero (no layer "
         "norms; each residual branch scaled by a learnable alpha_l initialised to 0, Bachlechner et al. 2020)."),
    FLT("model.enc_layerdrop", enc_layerdrop, "0", 0, 1, OPEN_MAX,
        "LayerDrop rate of encoder layers in training (skip with this probability; llprune "
        "--enc-layers-to-keep prunes at inference)."),
    FLT("model.dec_layerdrop", dec_layerdrop, "0", 0, 1, OPEN_MAX, "LayerDrop rate of decoder layers in training."),
    BOOL("model.share_all_embeddings", share_all_embeddings, "true",
         "One embedding matrix for encoder input, decoder input and output (joint vocabulary)."),
    BOOL("model.tie_output", tie_output, "true", "Output projection = decoder input embedding."),
    FLT("model.dropout", dropout, "0.1", 0, 1, OPEN_MAX, "Dropout on embeddings and sublayer outputs."),
    FLT("model.attn_dropout", attn_dropout, "0", 0, 1, OPEN_MAX, "Dropout on attention weights."),
    FLT("model.act_dropout", act_dropout, "0", 0, 1, OPEN_MAX, "Dropout after the feed-forward activation."),

    /* data */
    STR("data.dir", data_dir, "data-bin", 0,
        "Binarised data and the sentencepiece model (written by llprep); relative to the working directory."),
    STR("data.spm_model", spm_model, "", LL_CFG_INPUT_PATH,
        "Existing sentencepiece model to use (relative to the config file); empty = train one into data.dir."),
    INT("data.vocab_size", vocab_size, "8000", 8, 1 << 22, "Size of the joint sentencepiece vocabulary to train."),
    CORPORA("data.train", train, n_train,
            "Training corpora: a list of {src, tgt, src_lang, tgt_lang}; paths relative to the config file. An "
            "optional src_tag: \"<BT>\" puts that piece before every source sentence of the corpus (tagged "
            "back-translation, Caswell et al. 2019; or a domain tag): llprep adds it to the vocabulary it trains "
            "(a given data.spm_model must have it), and a line that starts with it at decoding time is translated "
            "as that corpus's sentences were. An optional weight: w in (0, 1000] (default 1) scales its share of "
            "the training batches: an epoch holds sum(w x batches) batches; with data.sampling size the corpus's "
            "batches come w times per epoch (fairseq's --upsample-primary; a fraction takes a random part each "
            "epoch), with temperature or uniform its probability is multiplied by w (uniform + weights = fixed "
            "mixing ratios, as OpenNMT-py's corpus weights). Not with every_pair sampling (latent depth)."),
    CORPORA("data.valid", valid, n_valid,
            "Validation corpora, same form as data.train. With several (a multilingual model's pairs, or several "
            "test sets), each one's loss, and BLEU/chrF with train.valid_bleu, is also logged (valid | update N | "
            "de-en (file) | ...) and written to metrics.jsonl's \"corpora\" list, in this order; train.best_metric "
            "follows them all together."),
    INT("data.max_tokens", max_tokens, "4096", 1, INT_MAX,
        "Tokens per batch (per device): max(B * max(S, T)) with padding."),
    INT("data.pad_to_multiple", pad_to_multiple, "1", 1, 1024,
        "Training batches' source and target lengths padded up to a multiple of this (PAD tokens, counted in "
        "data.max_tokens): 8 gives tensor-core-friendly shapes, and fewer distinct shapes, so that a kept CUDA "
        "graph is replayed more often (train.cuda_graphs). 1 = no padding. Padding changes no loss, only which "
        "dropout draws each element gets."),
    INT("data.max_len", max_len, "256", 1, 1 << 20, "Longest sentence in tokens per side, EOS included."),
    FLT("data.max_len_ratio", max_len_ratio, "0", 0, 1000, 0,
        "Training pairs whose longer side has more than this many times the pieces of the shorter (EOS and tags "
        "not counted) are skipped and counted, as Moses' clean-corpus-n.perl -ratio does (9 there, 1.5 in "
        "fairseq's WMT preparation, on words): misaligned or truncated pairs. 0 = off; else at least 1. "
        "Validation corpora are never filtered."),
    ENUM("data.long_lines", long_lines, "skip", "skip|error",
         "Sentence pairs longer than data.max_len: skip them (counted) or stop with an error."),
    ENUM("data.lang_tags", lang_tags, "auto", "auto|on|off",
         "Start the decoder with a target-language tag <2xx>; auto = on when there are several target languages."),
    INT("data.spm_samples", spm_samples, "0", 0, 64,
        "Subword regularization (Kudo 2018; Marian's --sentencepiece-alphas): llprep also writes this many "
        "segmentations of the training corpora sampled from the sentencepiece model, and epoch e trains on "
        "sample ((e - 1) mod N) + 1, so every epoch sees other pieces of the same sentences. Validation, "
        "decoding and llshortlist keep the standard segmentation. A sampled sentence longer than data.max_len "
        "keeps its standard one. 0 = off."),
    FLT("data.spm_alpha", spm_alpha, "0.2", 0, 1, OPEN_MIN,
        "With data.spm_samples: a unigram model (the one llprep trains) draws segmentation x with probability ~ "
        "P(x)^alpha (smaller = more varied and longer: on the Bible corpus with 8,000 pieces 0.1 gives 1.87x the standard tokens, 0.2 1.30x, 0.5 1.03x); a BPE data.spm_model drops each merge with "
        "probability alpha (BPE-dropout, Provilkov et al. 2020; 0.1 is usual)."),
    ENUM("data.spm_sample_sides", spm_sample_sides, "both", "both|source|target",
         "With data.spm_samples: which sides of the training pairs are sampled (OpenNMT's src_/tgt_subword_alpha, "
         "Marian's per-vocabulary alphas); the other keeps its standard segmentation in every epoch."),
    ENUM("data.sampling", sampling, "auto", "auto|temperature|size|uniform|every_pair",
         "How training batches are drawn across language pairs: every_pair = each update holds one batch of "
         "every pair (x train.update_freq; latent depth's Algorithm 2, and the way to give a static baseline the "
         "same data per update); auto = every_pair with latent layers, else temperature. Latent depth with "
         "several pairs accepts only auto/every_pair."),
    FLT("data.sampling_temperature", sampling_temperature, "5", 0, 1000, OPEN_MIN,
        "T for temperature sampling: pair i drawn with probability ~ size_i^(1/T)."),

    /* train */
    INT("train.seed", seed, "1", 0, INT_MAX, "Seed for initialisation, shuffling and dropout."),
    INT("train.threads", threads, "0", 0, 4096, "CPU threads; 0 = OMP_NUM_THREADS if set, else all cores."),
    INT("train.batch_workers", batch_workers, "0", 0, 4096,
        "CPU data parallelism: each batch is cut into this many slices of sentences, trained at once by "
        "single-threaded workers whose gradients are summed (same result up to summation order). 0 = one per "
        "thread; 1 = one slice with every op threaded. Not with latent depth or ALD (they use 1)."),
    ENUM("train.optimizer", optimizer, "adam", "adam", "Optimiser (Adam with decoupled weight decay)."),
    FLT("train.lr", lr, "5e-4", 0, 10, OPEN_MIN, "Peak learning rate, reached at the end of warmup."),
    FLT("train.warmup_init_lr", warmup_init_lr, "1e-7", 0, 10, 0, "Learning rate at update 0 of the linear warmup."),
    FLT("train.end_lr", end_lr, "0", 0, 10, 0, "Final learning rate of the polynomial and cosine schedulers."),
    FLT("train.power", power, "1", 0, 100, 0, "Exponent of the polynomial decay (1 = linear)."),
    INT("train.warmup_updates", warmup_updates, "4000", 0, INT_MAX, "Updates of linear warmup."),
    FLT("train.lr_shrink", lr_shrink, "1", 0, 1, OPEN_MIN,
        "Reduce on plateau (fairseq's reduce_lr_on_plateau --lr-shrink, Marian's --lr-decay-strategy stalled): "
        "when train.lr_patience + 1 validations in a row bring no new best of train.best_metric, every later lr "
        "of the schedule is multiplied by this once more. 1 = off. Needs validation (data.valid, "
        "train.valid_interval)."),
    INT("train.lr_patience", lr_patience, "0", 0, INT_MAX,
        "Validations without a new best that train.lr_shrink lets pass before it shrinks the lr (fairseq's "
        "--lr-patience)."),
    FLT("train.stop_min_lr", stop_min_lr, "0", 0, 10, 0,
        "Stop training once the learning rate past warmup falls below this (fairseq's --stop-min-lr): the end of "
        "train.lr_shrink's plateaus, or of a decaying schedule. 0 = never."),
    ENUM("train.scheduler", scheduler, "inverse_sqrt", "inverse_sqrt|polynomial|cosine",
         "After warmup: lr * sqrt(warmup/step) (fairseq's inverse_sqrt); polynomial decay to train.end_lr at "
         "train.max_updates (polynomial_decay); or half a cosine from train.lr to train.end_lr over the updates "
         "from warmup to train.max_updates (fairseq's cosine without restarts)."),
    FLT("train.adam_beta1", adam_beta1, "0.9", 0, 1, OPEN_MAX, "Adam beta1."),
    FLT("train.adam_beta2", adam_beta2, "0.98", 0, 1, OPEN_MAX, "Adam beta2."),
    FLT("train.adam_eps", adam_eps, "1e-8", 0, 1, OPEN_MIN, "Adam epsilon."),
    FLT("train.weight_decay", weight_decay, "0", 0, 10, 0, "Decoupled weight decay."),
    FLT("train.clip_norm", clip_norm, "0", 0, INF, 0, "Clip the global gradient norm to this; 0 = off."),
    INT("train.update_freq", update_freq, "1", 1, 1 << 20, "Batches accumulated per update."),
    FLT("train.label_smoothing", label_smoothing, "0.1", 0, 1, OPEN_MAX, "Label smoothing epsilon."),
    INT("train.max_updates", max_updates, "0", 0, INT_MAX, "Stop after this many updates; 0 = no limit."),
    INT("train.max_epochs", max_epochs, "0", 0, INT_MAX, "Stop after this many epochs; 0 = no limit."),
    FLT("train.max_minutes", max_minutes, "0", 0, 1e7, 0,
        "Stop after this many minutes of training (wall time of this run's update loop, validations included; "
        "the final validation comes after); 0 = no limit. --resume continues with a fresh budget. For "
        "fixed-budget runs (configs/bible_gpu.cfg)."),
    INT("train.valid_interval", valid_interval, "1000", 0, INT_MAX,
        "Validate every this many updates (and at the end); 0 = only at the end of each epoch."),
    INT("train.valid_max_batches", valid_max_batches, "0", 0, INT_MAX,
        "Validation loss over the first this many batches of the validation set only (fairseq's "
        "--max-valid-steps); 0 = all. For quick checks; validation BLEU still decodes every line."),
    INT("train.log_interval", log_interval, "100", 1, INT_MAX, "Log training metrics every this many updates."),
    STR("train.metrics_log", metrics_log, "", 0,
        "JSON-lines metrics file; empty = <checkpoint.save_dir>/metrics.jsonl.  Relative to the working directory.  "
        "Locked while a run writes it: each run needs its own."),
    STR("train.init_from", init_from, "", LL_CFG_INPUT_PATH,
        "A model file (checkpoint, llavg or llprune output) whose parameters start this run instead of random ones "
        "(fairseq's --finetune-from-model): fine-tuning, or training a pruned model on.  The optimizer, learning-rate "
        "schedule, update count and data position start fresh.  It must have this config's architecture (model.*, "
        "dlcl.*, latent layers) and vocabulary; relative to the config file.  Not read by --resume."),
    STR("train.freeze", freeze, "", 0,
        "Tensors that do not train: comma-separated glob patterns of parameter names (fnmatch), e.g. "
        "\"enc.embed,dec.embed\" or \"enc.*\" (names: enc.embed, dec.embed, dec.output_projection, "
        "enc.layers.<l>.ffn.fc1.weight, dec.layers.<l>.cross_attn.q.bias, enc.final_ln.weight, ...; a tied "
        "embedding is enc.embed). They take no Adam step and no weight decay and leave the gradient norm; their "
        "gradients are still computed. For fine-tuning with train.init_from. A pattern matching nothing is an "
        "error."),
    ENUM("train.device", device, "cpu", "auto|cpu|cuda",
         "Where to train: cpu; cuda (GPU 0; an error when there is none); auto (GPU 0 when there is one and the "
         "CUDA backend has every op, else the CPU; the log says which)."),
    ENUM("train.precision", precision, "fp32", "fp32|bf16",
         "Activation dtype: bf16 stores activations, their gradients and the weight copy matmuls read in bf16 "
         "(master weights, gradients, Adam moments, statistics and losses stay fp32). On the CPU bf16 is slower "
         "(it exists to test mixed precision without a GPU); train.device=cuda runs both, and the default stays fp32 "
         "on every device until bf16 GPU training is validated against it."),
    BOOL("train.tf32", tf32, "true",
         "With train.device cuda and train.precision fp32: matrix products run on TF32 tensor cores (inputs rounded "
         "to 10 mantissa bits, fp32 accumulation), as PyTorch's allow_tf32 and most GPU trainers do; false keeps exact "
         "fp32 SIMT products (8x slower on an H100). No effect on the CPU, in bf16 or when decoding."),
    BOOL("train.cuda_graphs", cuda_graphs, "true",
         "With train.device cuda and one process: each batch's forward and backward is captured as one CUDA graph "
         "and launched at once (an executable graph kept per batch shape and layer structure, updated with each "
         "step's pointers and random streams), instead of ~4,500 kernel launches one by one; the results are the "
         "same bits. Off with several ranks (their NCCL reductions start inside the backward) and under --op-stats."),

    BOOL("train.checkpoint_activations", checkpoint_activations, "false",
         "Activation checkpointing (fairseq's --checkpoint-activations, Marian's --gradient-checkpointing): the "
         "forward keeps each layer's input only, and the backward runs each layer's forward again just before its "
         "backward (the same dropout bits, so the same gradients). Activation memory falls from every layer's "
         "temporaries to one stored tensor per layer (lltrain --dry-run shows both), for about a third more compute: "
         "larger batches or deeper models on a smaller device."),

    /* checkpoint */
    STR("checkpoint.save_dir", save_dir, "checkpoints", 0,
        "Directory for checkpoints; relative to the working directory."),
    INT("checkpoint.save_interval", save_interval, "0", 0, INT_MAX,
        "Updates between numbered checkpoints; 0 = only checkpoint_last and checkpoint_best."),
    INT("checkpoint.keep_last", keep_last, "5", 0, INT_MAX, "Numbered checkpoints to keep; 0 = all."),
    INT("checkpoint.keep_best", keep_best, "0", 0, 1000,
        "Also keep the N best checkpoints by train.best_metric, as checkpoint_best_<metric>_<value>_<update>.llm "
        "(fairseq's --keep-best-checkpoints), e.g. to average them with llavg; 0 = checkpoint_best.llm only. "
        "Ties go to the earlier update. --resume removes those of updates after the one it resumes (the replay "
        "writes them again)."),

    /* decode */
    INT("decode.beam", beam, "5", 1, 1024, "Beam size."),
    FLT("decode.lenpen", lenpen, "1", 0, 100, 0, "Length penalty: hypotheses scored by logprob / length^lenpen."),
    BOOL("train.valid_bleu", valid_bleu, "false", "Also decode the validation set and report BLEU at every validation."),
    BOOL("train.valid_translations", valid_translations, "false",
         "With train.valid_bleu: write each validation corpus's translations, one line per source line, to "
         "<save_dir>/valid_hyp.<k>.<tgt_lang> at every validation (k: its place in data.valid), and link them as "
         "valid_hyp_best.<k>.<tgt_lang> when the validation is a new best (Marian's --valid-translation-output): "
         "for other metrics (lleval -m ter, COMET) or a look."),
    INT("train.valid_beam", valid_beam, "1", 1, 1024, "Beam size for validation BLEU (1 = greedy, fast)."),
    ENUM("train.valid_tokenize", valid_tokenize, "13a", "13a|none|zh|char|intl",
         "Validation BLEU's tokenizer, as sacreBLEU's -tok: 13a (WMT's), zh for a Chinese target, char for "
         "other text without spaces between words (Japanese, Thai), intl for Unicode punctuation and symbols "
         "(mteval-v14's international tokenization), none for pre-tokenised references."),
    ENUM("train.best_metric", best_metric, "loss", "loss|bleu|chrf",
         "What checkpoint_best and early stopping follow (bleu and chrf need train.valid_bleu)."),
    INT("train.patience", patience, "0", 0, INT_MAX,
        "Stop after this many validations without improvement of train.best_metric; 0 = never."),
    FLT("train.ema_decay", ema_decay, "0", 0, 1, OPEN_MAX,
        "Keep an exponential moving average of the weights (fairseq's --ema-decay, Marian's "
        "--exponential-smoothing): after each update e = decay * e + (1 - decay) * w, in fp32 on the training "
        "device. Validation and checkpoint_best are scored on it, and every checkpoint's model (what lldecode, "
        "llavg, llprune and train.init_from read) is the average; the raw weights are kept beside it for --resume. "
        "0 = off; 0.999 to 0.9999 are usual (the average spans ~1/(1 - decay) updates)."),
    INT("train.ema_start_update", ema_start_update, "0", 0, INT_MAX,
        "With train.ema_decay: the average follows the weights exactly until this update, then starts averaging "
        "(fairseq's --ema-start-update), so the random initialisation does not linger in it."),
    INT("train.max_bad_updates", max_bad_updates, "10", 1, INT_MAX,
        "An update whose loss or gradient norm is NaN/Inf is skipped (parameters and Adam state unchanged); "
        "this many in a row stop the run with an error, leaving the last checkpoint as it was."),
    FLT("train.spike_zscore_loss", spike_zscore_loss, "0", 0, 1000, 0,
        "Skip an update whose per-token training loss is a spike: more than this many standard deviations above "
        "the mean of the previous train.spike_window updates' losses (llm.c's -sl; 5 is usual). Decided on the "
        "training device with no host read, on the loss summed over update_freq and every rank, so every rank "
        "skips the same updates; the parameters, Adam moments and step counts stay as they were, the update "
        "count and data position move on, and the log names the update and its z-score. Skipped losses still "
        "join the window, which so follows a lasting change. 0 = off."),
    FLT("train.spike_zscore_gnorm", spike_zscore_gnorm, "0", 0, 1000, 0,
        "The same for the gradient norm (before clipping; llm.c's -sg). 0 = off."),
    INT("train.spike_window", spike_window, "128", 8, 100000,
        "Updates the spike z-scores are taken against (llm.c's 128); none is skipped before the window is full. "
        "--resume restores the window; resumed with another size, the window starts empty."),

    /* latent depth */
    BOOL("latent.encoder", latent_enc, "false", "Latent layers in the encoder (LL-E; both = LL-Both)."),
    BOOL("latent.decoder", latent_dec, "false", "Latent layers in the decoder (LL-D)."),
    ENUM("latent.posterior", latent_posterior, "auto", "auto|per_pair|per_language|shared",
         "Rows of layer logits (one posterior each): per_pair = one per training pair for both stacks (the paper's "
         "q^(n), n a language pair); per_language = one per distinct language (encoder: source, decoder: target; "
         "the code's); shared = one row. auto (default) = per_pair when per_language would give two training pairs "
         "one row of a latent stack (many-to-one with latent decoder layers, one-to-many with latent encoder "
         "layers, where the aggregated prior would be KL(q||q) = 0), else per_language (identical rows then)."),
    FLT("latent.tau", latent_tau, "5", 0, 1000, OPEN_MIN, "Gumbel-Softmax temperature (the code's --sampling-tau, fixed there)."),
    FLT("latent.tau_final", latent_tau_final, "0", 0, 1000, 0,
        "Optional temperature schedule: tau decays geometrically to this value over latent.tau_anneal_updates; 0 = fixed tau."),
    INT("latent.tau_anneal_updates", latent_tau_anneal_updates, "0", 0, INT_MAX, "Length of the temperature schedule."),
    INT("latent.soft_update", latent_soft_update, "500", 0, INT_MAX,
        "The KL weight ramps from this update on (0 before); with latent.soft_select false also the last update "
        "with soft samples, later ones hard straight-through (the code's schedule)."),
    BOOL("latent.soft_select", latent_soft_select, "true",
         "Soft Gumbel-sigmoid samples throughout training (the paper, Eq. 5); false = the reference code's default, "
         "hard straight-through samples after latent.soft_update."),
    ENUM("latent.prior", latent_prior, "beta", "beta|agged_posterior",
         "Prior: Beta(a,b) as Bernoulli(a/(a+b)) (paper), or the aggregated posterior over languages (Eq. 7)."),
    FLT("latent.prior_a", latent_prior_a, "1", 0, 1e6, OPEN_MIN, "Beta prior a (a>b favours using layers)."),
    FLT("latent.prior_b", latent_prior_b, "1", 0, 1e6, OPEN_MIN, "Beta prior b."),
    ENUM("latent.kl", latent_kl, "bernoulli", "bernoulli|reference",
         "bernoulli: the full two-sided Bernoulli KL of q=sigmoid(a) per layer (paper); reference: the code's "
         "one-sided KL on the samples (always the mean over layers)."),
    ENUM("latent.kl_reduce", latent_kl_reduce, "mean", "mean|sum",
         "How the bernoulli KL combines the L layers of a stack: mean (default; the reference code's /L, the scale "
         "of the beta values the papers report) or sum (Eq. 4/8 as written: the same beta is L times stronger)."),
    ENUM("latent.agg_norm", latent_agg_norm, "per_layer", "per_layer|across_layers",
         "Aggregated posterior: averaged over languages per layer (paper) or normalised across layers (code)."),
    FLT("latent.beta", latent_beta, "1", 0, 1e6, 0,
        "KL weight beta = the code's --sparsity-weight: the loss adds beta * ntokens * KL, with the KL the mean over "
        "the stack's L layers (latent.kl_reduce mean), so beta 1 here is --sparsity-weight 1 and the paper's beta "
        "values apply as stated. With kl_reduce sum use beta/L for the same strength."),
    INT("latent.anneal_updates", latent_anneal_updates, "5000", 0, INT_MAX,
        "KL weight ramps linearly 0 -> beta over this many updates, starting at latent.soft_update (never negative)."),
    INT("latent.target_layers_enc", latent_target_enc, "-1", -1, 4096, "Target depth K of the encoder; -1 = off."),
    INT("latent.target_layers_dec", latent_target_dec, "-1", -1, 4096, "Target depth K of the decoder; -1 = off."),
    FLT("latent.lambda", latent_lambda, "0.1", 0, 1e6, 0, "Weight lambda of the target-depth loss L_K."),
    ENUM("latent.lk_form", latent_lk_form, "abs", "abs|squared",
         "L_K = |sum_l u_l - K| (paper) or its square (code)."),
    INT("latent.lk_anneal_updates", latent_lk_anneal_updates, "5000", 0, INT_MAX,
        "L_K weight ramps 0 -> lambda over this many updates after soft_update + anneal_updates."),
    INT("latent.inner_steps", latent_inner_steps, "1", 1, 1000,
        "I of Algorithm 2: Theta updated every step, the layer logits every I steps from the last step's "
        "gradient (1 = the code's joint step)."),
    FLT("latent.logits_lr", latent_logits_lr, "0", 0, 10, 0, "Peak learning rate of the layer logits; 0 = train.lr."),
    ENUM("latent.inference", latent_inference, "hard", "hard|soft|sample",
         "Inference: hard (layer used iff q >= threshold, others not computed), soft (z = q), or sample (the "
         "code's stochastic draw, one per batch, keyed by train.seed and the batch)."),
    FLT("latent.threshold", latent_threshold, "0.5", 0, 1, 0, "Selection threshold on q(z=1) for hard inference and llprune."),
    STR("latent.pruned_for", latent_pruned_for, "", 0,
        "Written by llprune --lang L into the pruned model: it holds L's layers only, so lldecode translates "
        "only pairs with L (other languages' layers are gone); empty: any language."),

    /* DLCL */
    BOOL("dlcl.encoder", dlcl_enc, "false", "DLCL in the encoder: each layer's input combines all earlier outputs."),
    BOOL("dlcl.decoder", dlcl_dec, "false", "DLCL in the decoder."),
    ENUM("dlcl.init", dlcl_init, "avg", "avg|one",
         "Initial weights: avg = 1/(r+1) over the r+1 earlier outputs (the code's default), one = all 1."),
    BOOL("dlcl.learnable", dlcl_learnable, "true",
         "Learn the weights; false keeps them fixed at dlcl.init (the paper's fixed all-one / 1/(l+1) ablations)."),
    BOOL("dlcl.layer_norm", dlcl_ln, "true",
         "Layer norm of each stored output (pre-norm) or of each combination (post-norm); false = the ablation without it."),
    BOOL("dlcl.normalize_embed", dlcl_norm_embed, "true",
         "LN_0, the layer norm of row/entry 0 (the paper's Eq. 8/9): pre-norm layer-normalises the embedding entry "
         "y_0, post-norm the first row (the first layer's input LN(W00 y_0)). false = the code (its flag never "
         "takes effect: y_0 and the first row stay un-normalised)."),

    /* deep decoder */
    FLT("deep.p_net", cad_p_net, "0", 0, 1, 0,
        "Cross-attention drop rate of decoder layers 1..deep.drop_depth in training (0 = off)."),
    INT("deep.drop_depth", cad_drop_depth, "0", 0, 4096, "Drop depth L_dr: the bottom layers that use deep.p_net."),
    FLT("deep.p_net_above", cad_p_net_above, "0", 0, 1, 0,
        "Drop rate above the drop depth. 0 by default, a reasoned exception: the paper's text says 1.0 (no "
        "cross-attention above L_dr in training), but its own results (a peak drop depth, harm from "
        "'insufficient cross-attention') contradict that; set 1 for the literal text (docs/methods.md)."),
    FLT("deep.ddr_alpha", ddr_alpha, "0", 0, 1e6, 0,
        "DDR weight: the decoder runs twice with independent dropout and drop-net draws; alpha * symmetric KL."),
    FLT("deep.ald_weight", ald_weight, "0", 0, 1e6, 0,
        "ALD weight: contrastive loss of the clean source vs. light (gamma) and heavy (1-gamma) UNK corruption."),
    FLT("deep.ald_p", ald_p, "0.3", 0, 0.5, OPEN_MIN | OPEN_MAX, "gamma ~ U[0, p_ALD), p_ALD < 0.5."),
    FLT("deep.ald_tau", ald_tau, "0.1", 0, 100, OPEN_MIN, "Temperature of the ALD cosine similarities."),
    /* multi-process training */
    ENUM("dist.backend", dist_backend, "auto", "auto|single|mpi|nccl",
         "auto: MPI ranks when started by mpirun with more than one rank (NCCL between GPUs when built with it), "
         "else one process; single: ignore mpirun; mpi: always MPI (even with one rank); nccl: NCCL on the GPU "
         "even with one rank (train.device=cuda)."),
    FLT("dist.bucket_mb", dist_bucket_mb, "25", 0, 65536, OPEN_MIN,
        "Gradient bucket size (MiB of fp32): each bucket is all-reduced as soon as the backward that writes it "
        "last has run."),
    INT("dist.zero", dist_zero, "0", 0, 1,
        "1: ZeRO-1, Adam moments sharded across ranks (reduce-scatter gradients, each rank updates its shard, "
        "all-gather the weights)."),
    FLT("dist.timeout_s", dist_timeout_s, "300", 0, 1e7, 0,
        "A collective waiting longer than this for another rank stops the whole job with a message naming "
        "the rank (0 = wait forever)."),
};
const int ll_cfg_nkeys = (int)(sizeof ll_cfg_keys / sizeof ll_cfg_keys[0]);

/* ---- lookup and suggestions ---------------------------------------------- */

int ll_cfg_find(const char *name) {
    for (int i = 0; i < ll_cfg_nkeys; i++)
        if (!strcmp(ll_cfg_keys[i].name, name)) return i;
    return -1;
}

int ll_cfg_find_section(const char *name, size_t len) {
    for (int i = 0; i < ll_cfg_nsections; i++)
        if (strlen(ll_cfg_sections[i].name) == len && !memcmp(ll_cfg_sections[i].name, name, len)) return i;
    return -1;
}

size_t ll_cfg_edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return (size_t)-1; /* names are short; don't bother */
    size_t row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* A suggestion is only useful when it is close and the typo is not most of the word. */
static int close_enough(size_t d, const char *typed) { return d <= 3 && d < strlen(typed); }

int ll_cfg_suggest_key(const char *section, const char *key) {
    int best = -1;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < ll_cfg_nkeys; i++) {
        const char *full = ll_cfg_keys[i].name, *dot = strchr(full, '.');
        size_t d = ll_cfg_edit_distance(key, dot + 1);
        if (d == (size_t)-1) continue;
        /* a right key in the wrong section costs one edit */
        int same = section && strlen(section) == (size_t)(dot - full) && !memcmp(section, full, dot - full);
        if (!same) d++;
        if (d < best_d) best_d = d, best = i;
    }
    return best >= 0 && close_enough(best_d, key) ? best : -1;
}

const char *ll_cfg_suggest_section(const char *name) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < ll_cfg_nsections; i++) {
        size_t d = ll_cfg_edit_distance(name, ll_cfg_sections[i].name);
        if (d < best_d) best_d = d, best = ll_cfg_sections[i].name;
    }
    return best && close_enough(best_d, name) ? best : NULL;
}

/* ---- values -------------------------------------------------------------- */

const char *ll_cfg_type_name(ll_cfg_type t) {
    switch (t) {
    case LL_CFG_INT: return "int";
    case LL_CFG_FLOAT: return "float";
    case LL_CFG_BOOL: return "bool";
    case LL_CFG_STRING: return "string";
    case LL_CFG_ENUM: return "enum";
    case LL_CFG_CORPORA: return "corpora";
    }
    return "?";
}

static void fmt_bound(char *buf, size_t n, const ll_cfg_key *k, double v) {
    if (k->type == LL_CFG_INT)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
}

void ll_cfg_range_text(const ll_cfg_key *k, char *buf, size_t n) {
    buf[0] = 0;
    if (k->type == LL_CFG_ENUM) {
        size_t j = 0;
        for (const char *p = k->choices; *p && j + 4 < n; p++) {
            if (*p == '|') {
                memcpy(buf + j, ", ", 2);
                j += 2;
            } else {
                buf[j++] = *p;
            }
        }
        buf[j] = 0;
        return;
    }
    if (k->type == LL_CFG_BOOL) {
        snprintf(buf, n, "true, false");
        return;
    }
    if (k->type == LL_CFG_STRING) {
        snprintf(buf, n, "at most %zu bytes", k->size - 1);
        return;
    }
    if (k->type == LL_CFG_CORPORA) {
        snprintf(buf, n, "at most %zu entries", k->size / sizeof(ll_corpus_cfg));
        return;
    }
    char lo[32], hi[32];
    fmt_bound(lo, sizeof lo, k, k->min);
    fmt_bound(hi, sizeof hi, k, k->max);
    int int_unbounded = k->type == LL_CFG_INT && k->max >= INT_MAX;
    if (k->max == INF || int_unbounded)
        snprintf(buf, n, "%s %s", k->flags & LL_CFG_MIN_OPEN ? ">" : ">=", lo);
    else
        snprintf(buf, n, "%c%s, %s%c", k->flags & LL_CFG_MIN_OPEN ? '(' : '[', lo, hi,
                 k->flags & LL_CFG_MAX_OPEN ? ')' : ']');
}

int ll_cfg_copy_str(char *dst, size_t n, const char *s) {
    size_t len = strlen(s);
    if (len >= n) return -1;
    memset(dst, 0, n); /* zero padding keeps equal configs byte-identical */
    memcpy(dst, s, len);
    return 0;
}

static int in_range(const ll_cfg_key *k, double v) {
    if (k->flags & LL_CFG_MIN_OPEN ? !(v > k->min) : !(v >= k->min)) return 0;
    if (k->flags & LL_CFG_MAX_OPEN ? !(v < k->max) : !(v <= k->max)) return 0;
    return 1;
}

static int range_error(const ll_cfg_key *k, const char *text, char *err, size_t errn) {
    char r[96];
    ll_cfg_range_text(k, r, sizeof r);
    if (k->type == LL_CFG_INT && r[0] == '>') /* "> 0" hides the int's own limit: give the whole range */
        snprintf(err, errn, "%s must be an integer in %c%.0f, %d], got %s", k->name,
                 k->flags & LL_CFG_MIN_OPEN ? '(' : '[', k->min, INT_MAX, text);
    else if (r[0] == '>')
        snprintf(err, errn, "%s must be %s, got %s", k->name, r, text);
    else
        snprintf(err, errn, "%s must be in %s, got %s", k->name, r, text);
    return -1;
}

static int parse_bool(const char *t, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(t, yes[i])) return *out = 1, 0;
        if (!strcasecmp(t, no[i])) return *out = 0, 0;
    }
    return -1;
}

int ll_cfg_parse_value(const ll_cfg_key *k, const char *t, ll_config *c, char *err, size_t errn) {
    void *field = ll_cfg_field(c, k);
    switch (k->type) {
    case LL_CFG_INT: {
        long v = 0;
        const int rc = ll_num_long(t, &v);
        if (rc == LL_NUM_SYNTAX) {
            snprintf(err, errn, "%s expects an int, got '%s' (allowed: %c%.0f, %.0f])", k->name, t,
                     k->flags & LL_CFG_MIN_OPEN ? '(' : '[', k->min, k->max < INT_MAX ? k->max : (double)INT_MAX);
            return -1;
        }
        if (rc || v < INT_MIN || v > INT_MAX || !in_range(k, (double)v)) return range_error(k, t, err, errn);
        *(int *)field = (int)v;
        return 0;
    }
    case LL_CFG_FLOAT: {
        double v = 0;
        const int rc = ll_num_double(t, &v, 1);
        if (rc == LL_NUM_SYNTAX || (rc == LL_NUM_RANGE && !isfinite(strtod(t, NULL)))) {
            snprintf(err, errn, "%s expects a float, got '%s'", k->name, t);
            return -1;
        }
        if (rc == LL_NUM_UNDERFLOW) { /* 1e-320 would pass (0, 10] and train at 0 */
            char r[96];
            ll_cfg_range_text(k, r, sizeof r);
            snprintf(err, errn, "%s: %s underflows a float (its smallest normal value is 1.2e-38; 0 if meant); allowed: %s", k->name, t, r);
            return -1;
        }
        if (rc || !in_range(k, v) || !in_range(k, (float)v)) return range_error(k, t, err, errn);
        *(float *)field = (float)v;
        return 0;
    }
    case LL_CFG_BOOL:
        if (parse_bool(t, (int *)field) == 0) return 0;
        snprintf(err, errn, "%s expects a bool (true or false), got '%s'", k->name, t);
        return -1;
    case LL_CFG_STRING:
        if (ll_cfg_copy_str(field, k->size, t) == 0) return 0;
        snprintf(err, errn, "%s is too long (at most %zu bytes)", k->name, k->size - 1);
        return -1;
    case LL_CFG_ENUM: {
        size_t len = strlen(t);
        for (const char *p = k->choices; *p;) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            if (n == len && !memcmp(p, t, n) && ll_cfg_copy_str(field, k->size, t) == 0) return 0;
            p += n + (bar != NULL);
        }
        char r[256];
        ll_cfg_range_text(k, r, sizeof r);
        snprintf(err, errn, "%s must be one of: %s (got '%s')", k->name, r, t);
        return -1;
    }
    case LL_CFG_CORPORA:
        snprintf(err, errn, "%s is a corpus list; write it in the config file as a YAML sequence", k->name);
        return -1;
    }
    return -1;
}

/* ---- formatting ------------------------------------------------------------ */

void ll_sb_printf(ll_sbuf *b, const char *fmt, ...) {
    for (;;) {
        size_t room = b->cap - b->n;
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->p && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        b->cap = (b->cap ? b->cap : 256) * 2 + (size_t)w;
        b->p = ll_realloc(b->p, b->cap);
    }
}

void ll_sb_quote(ll_sbuf *b, const char *s) {
    ll_sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            ll_sb_printf(b, "\\%c", *p);
        else if (*p == '\n')
            ll_sb_printf(b, "\\n");
        else if (*p == '\t')
            ll_sb_printf(b, "\\t");
        else if (*p < 0x20 || *p == 0x7f)
            ll_sb_printf(b, "\\x%02x", *p);
        else
            ll_sb_printf(b, "%c", *p); /* UTF-8 passes through */
    }
    ll_sb_printf(b, "\"");
}

void ll_cfg_format_float(char *buf, size_t n, float f) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) return;
    }
}

void ll_cfg_format_corpus(ll_sbuf *b, const ll_corpus_cfg *cc) {
    ll_sb_printf(b, "{src: ");
    ll_sb_quote(b, cc->src);
    ll_sb_printf(b, ", tgt: ");
    ll_sb_quote(b, cc->tgt);
    ll_sb_printf(b, ", src_lang: %s, tgt_lang: %s", cc->src_lang, cc->tgt_lang);
    if (cc->src_tag[0]) ll_sb_printf(b, ", src_tag: \"%s\"", cc->src_tag);
    if (ll_corpus_weight(cc) != 1.0f) {
        char w[32];
        ll_cfg_format_float(w, sizeof w, cc->weight);
        ll_sb_printf(b, ", weight: %s", w);
    }
    ll_sb_printf(b, "}");
}

void ll_cfg_format_value(ll_sbuf *b, const ll_cfg_key *k, const ll_config *c) {
    const void *field = ll_cfg_cfield(c, k);
    char num[48];
    switch (k->type) {
    case LL_CFG_INT: ll_sb_printf(b, "%d", *(const int *)field); break;
    case LL_CFG_FLOAT:
        ll_cfg_format_float(num, sizeof num, *(const float *)field);
        ll_sb_printf(b, "%s", num);
        break;
    case LL_CFG_BOOL: ll_sb_printf(b, "%s", *(const int *)field ? "true" : "false"); break;
    case LL_CFG_STRING: ll_sb_quote(b, field); break;
    case LL_CFG_ENUM: ll_sb_printf(b, "%s", (const char *)field); break;
    case LL_CFG_CORPORA: {
        const ll_corpus_cfg *cc = field;
        int n = *(const int *)((const char *)c + k->count_offset);
        ll_sb_printf(b, "[");
        for (int i = 0; i < n; i++) {
            ll_sb_printf(b, "%s", i ? ", " : "");
            ll_cfg_format_corpus(b, &cc[i]);
        }
        ll_sb_printf(b, "]");
        break;
    }
    }
}
