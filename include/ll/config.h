/* Typed configuration.  One schema table (src/config/schema.c) lists every key
 * with its type, default, range and help; the YAML .cfg file (parsed with
 * libyaml) and `--set section.key=value` overrides are validated against it.
 * Errors name file:line:column.  Reference: docs/config.md. */
#ifndef LL_CONFIG_H
#define LL_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LL_PATH_MAX 1024
#define LL_MAX_CORPORA 32
#define LL_LANG_MAX 16
#define LL_TAG_MAX 32

/* One parallel corpus (one language pair).  Raw text paths; llprep binarises them. */
typedef struct {
    char src[LL_PATH_MAX];
    char tgt[LL_PATH_MAX];
    char src_lang[LL_LANG_MAX];
    char tgt_lang[LL_LANG_MAX];
    char src_tag[LL_TAG_MAX]; /* optional: a piece such as "<BT>" put before every source sentence; "" = none */
    float weight;             /* optional: its share of the training batches x weight (0 = unset = 1) */
} ll_corpus_cfg;

/* A corpus's weight: 1 when unset.  data.sampling size reads its batches weight times per epoch
 * (a fraction: a random part), temperature and uniform multiply its probability by it. */
float ll_corpus_weight(const ll_corpus_cfg *cc);
#define LL_CORPUS_WEIGHT_MAX 1000.0f

#define LL_CFG_MAX_KEYS 192 /* >= the schema's keys (checked when a config is loaded) */

typedef struct {
    /* model */
    int d_model, ffn_dim, heads;
    int enc_layers, dec_layers;
    int max_positions;
    char norm[8];              /* "pre" | "post" */
    int share_all_embeddings;  /* one embedding for encoder, decoder and output */
    int tie_output;            /* decoder input embedding == output projection */
    float dropout, attn_dropout, act_dropout;

    /* data */
    char data_dir[LL_PATH_MAX];  /* binarised data + spm model live here */
    char spm_model[LL_PATH_MAX]; /* existing sentencepiece model; empty = train one */
    int vocab_size;              /* for training the joint sentencepiece model */
    ll_corpus_cfg train[LL_MAX_CORPORA];
    int n_train;
    ll_corpus_cfg valid[LL_MAX_CORPORA];
    int n_valid;
    int max_tokens;        /* per batch: max(B * max(S, T)), padded */
    int pad_to_multiple;   /* training batches' S and T rounded up to a multiple of it */
    int max_len;           /* max tokens per side (incl. EOS); <= max_positions */
    float max_len_ratio;   /* training pairs whose longer side has more than this x the shorter's pieces are skipped; 0 = off */
    char long_lines[8];    /* "skip" | "error" */
    char lang_tags[8];     /* "auto" | "on" | "off": target-language tag as decoder BOS */
    int spm_samples;       /* subword regularization: sampled segmentations of the training data, one per epoch; 0 = off */
    float spm_alpha;       /* their smoothing (unigram) or BPE-dropout rate */
    char spm_sample_sides[8]; /* "both" | "source" | "target": which sides are sampled */
    char sampling[16];     /* "temperature" | "size" | "uniform" */
    float sampling_temperature;

    /* train */
    int seed;
    int threads;
    int batch_workers;
    char optimizer[8];   /* "adam" */
    float lr, warmup_init_lr, end_lr, power;
    int warmup_updates;
    float lr_shrink;   /* reduce on plateau: the lr x this after lr_patience + 1 validations without a best (1 = off) */
    int lr_patience;
    float stop_min_lr; /* past warmup, stop when the lr falls below it (0 = never) */
    char scheduler[16];  /* "inverse_sqrt" | "polynomial" */
    float adam_beta1, adam_beta2, adam_eps, weight_decay;
    float clip_norm;
    int update_freq;
    float label_smoothing;
    int max_updates, max_epochs;
    float max_minutes;   /* training wall-time budget (0 = none) */
    int valid_interval, valid_max_batches, log_interval;
    char metrics_log[LL_PATH_MAX];
    char init_from[LL_PATH_MAX]; /* a model file whose parameters start the run ("": none) */
    char freeze[512];            /* comma-separated glob patterns of tensors Adam leaves alone ("": none) */
    char device[16];     /* "auto" | "cpu" | "cuda" */
    char precision[8];   /* "fp32" | "bf16": the activation dtype */
    int tf32;            /* fp32 matmuls on a GPU use TF32 tensor cores */
    int cuda_graphs;     /* a training step as one CUDA graph (one process) */
    int checkpoint_activations; /* keep each layer's input only; backward recomputes the layer */
    float spike_zscore_loss, spike_zscore_gnorm; /* skip an update whose z-score exceeds these (0 = off) */
    int spike_window;    /* the updates the z-scores are taken against */

    /* checkpoint */
    char save_dir[LL_PATH_MAX];
    int save_interval;   /* updates between numbered checkpoints (0 = only last/best) */
    int keep_last;       /* numbered checkpoints to keep (0 = all) */
    int keep_best;       /* also keep the N best by train.best_metric (checkpoint_best_<metric>_<value>_<update>.llm) */

    /* decode (defaults for lldecode and validation) */
    int beam;
    float lenpen;

    /* validation BLEU and early stopping */
    int valid_bleu;        /* decode the validation set at every validation */
    int valid_translations; /* and write those translations into save_dir (valid_hyp.<k>.<tgt_lang>) */
    int valid_beam;
    char best_metric[8];   /* "loss" | "bleu" | "chrf" */
    char valid_tokenize[8]; /* validation BLEU's tokenizer: "13a" | "none" | "zh" | "char" | "intl" */
    int patience;          /* stop after this many validations without improvement; 0 = never */
    int max_bad_updates;   /* stop after this many consecutive skipped (non-finite) updates */
    float ema_decay;       /* the weights' moving average (0: none): validation and saved models use it */
    int ema_start_update;  /* until this update the average is the weights themselves */

    /* latent depth (Li et al. 2020; reference-spec §0.1, §1) */
    int latent_enc, latent_dec;
    char latent_posterior[16];  /* "auto" | "per_pair" | "per_language" | "shared" (ll_config_latent_per_pair) */
    float latent_tau;
    float latent_tau_final;     /* temperature schedule: tau -> tau_final over tau_anneal_updates (0 = fixed) */
    int latent_tau_anneal_updates;
    int latent_soft_update;     /* updates with soft samples before hard straight-through ones */
    int latent_soft_select;     /* soft samples throughout */
    char latent_prior[16];      /* "beta" | "agged_posterior" */
    float latent_prior_a, latent_prior_b;
    char latent_kl[16];         /* "bernoulli" (two-sided, on q) | "reference" (one-sided on samples, / L) */
    char latent_kl_reduce[8];   /* bernoulli KL over layers: "mean" (code's scale of beta) | "sum" */
    char latent_agg_norm[16];   /* aggregated posterior: "per_layer" (paper) | "across_layers" (code) */
    float latent_beta;
    int latent_anneal_updates;
    int latent_target_enc, latent_target_dec; /* K; -1 = off */
    float latent_lambda;
    char latent_lk_form[8];     /* "abs" (paper) | "squared" (code) */
    int latent_lk_anneal_updates;
    int latent_inner_steps;     /* I of Algorithm 2 */
    float latent_logits_lr;     /* 0 = train.lr (same schedule) */
    char latent_inference[8];   /* "hard" | "soft" | "sample" */
    float latent_threshold;
    char latent_pruned_for[LL_LANG_MAX]; /* llprune --lang: the language whose layers were kept ("" = any) */

    /* DLCL (Wang et al. 2019) */
    int dlcl_enc, dlcl_dec;
    char dlcl_init[8];          /* "avg" | "one" */
    int dlcl_learnable, dlcl_ln, dlcl_norm_embed;

    /* deep decoder (Li et al. 2022): cross-attention drop and collapse-reducing training */
    float cad_p_net, cad_p_net_above;
    int cad_drop_depth;
    float ddr_alpha, ald_weight, ald_p, ald_tau;

    /* LayerDrop (Fan et al. 2019) */
    float enc_layerdrop, dec_layerdrop;

    /* multi-process training (docs/distributed.md) */
    char dist_backend[8]; /* "auto" | "single" | "mpi" | "nccl" */
    float dist_bucket_mb, dist_timeout_s;
    int dist_zero;

    /* the original text (stored in checkpoints) and where it came from */
    char *text;
    char source[LL_PATH_MAX];
    /* where in source each value was set, for messages (1-based lines; 0: a default or --set):
     * each key by schema index, each data.train and data.valid entry */
    unsigned key_line[LL_CFG_MAX_KEYS];
    unsigned train_line[LL_MAX_CORPORA], valid_line[LL_MAX_CORPORA];
} ll_config;
/* "source:line" of a key's value (or of entry i of a corpus list key; else i < 0), "source" when
 * it was not set in the file, "" for a config with no source; into buf. */
const char *ll_config_where(const ll_config *c, const char *key, int i, char *buf, size_t n);

/* Lifecycle: ll_config_load (or _load_text), then any ll_config_set overrides,
 * then ll_config_validate.  Loading starts from the defaults, so the result
 * depends only on the text; on error *c is left untouched.  `c` need not be
 * initialised before a load, so a previous c->text is not freed: call
 * ll_config_free before reusing a loaded config.
 *
 * Paths: corpus paths (data.train/valid src, tgt) and data.spm_model are inputs
 * and, when relative, are resolved against the directory of the config file
 * (made absolute), so a config works from any working directory.  Outputs
 * (data.dir, checkpoint.save_dir, train.metrics_log) stay relative to the
 * current working directory, like fairseq.  --set values are never rebased. */
void ll_config_defaults(ll_config *c);
/* Parse a .cfg file over the defaults.  -1 + ll_errbuf() "file:line:col: message". */
int ll_config_load(ll_config *c, const char *path);
/* Parse config text (e.g. stored in a checkpoint); `name` is used in messages.
 * Relative input paths are kept as they are (relative to the cwd). */
int ll_config_load_text(ll_config *c, const char *text, const char *name);
/* As ll_config_load_text, resolving relative input paths against base_dir
 * (NULL = keep them as they are). */
int ll_config_load_text_in(ll_config *c, const char *text, const char *name, const char *base_dir);
/* Apply "section.key=value".  -1 + errbuf "--set section.key=value: message".
 * Any scalar key; corpus lists (data.train, data.valid) are rejected. */
int ll_config_set(ll_config *c, const char *assignment);
/* Cross-field checks (max_len <= max_positions, d_model % heads, ...).
 * -1 + errbuf naming the keys involved. */
int ll_config_validate(const ll_config *c);
/* The effective config as YAML text (all keys), malloc'd.  Re-loadable with
 * ll_config_load_text to an identical struct (string fields are zero-padded,
 * so even memcmp over the fields before `text` agrees). */
char *ll_config_dump(const ll_config *c);
/* The keys whose values differ between a and b (*n_diff of them), as
 * "key old -> new; ..." or (json) {"key":["old","new"],...}; malloc'd.  Keys
 * in skip (NULL-terminated; NULL: none) are left out. */
char *ll_config_diff(const ll_config *a, const ll_config *b, int json, const char *const *skip, int *n_diff);
/* One key's value as config text ("512", "0.0005", "true", a double-quoted string, a flow list
 * for corpora), malloc'd; NULL + errbuf for an unknown key. */
char *ll_config_get(const ll_config *c, const char *key);
/* Distinct languages in order of first appearance over data.train then
 * data.valid (src, tgt per corpus) -- the order llprep numbers them in.
 * Returns the count; langs may be NULL. */
int ll_config_langs(const ll_config *c, char langs[][LL_LANG_MAX]);
int ll_config_lang_index(const ll_config *c, const char *lang); /* -1 if absent */
/* 1 when s can be a corpus's src_tag: "<...>" without white space, not a language tag "<2xx>" nor
 * <s>, </s>, <pad> or <unk>. */
int ll_config_src_tag_ok(const char *s);
/* latent.posterior resolved: 1 = per_pair, 0 = per_language or shared.  auto
 * is per_pair iff per_language would give two training pairs one row of a
 * latent stack (same target with latent decoder layers, same source with
 * latent encoder layers). */
int ll_config_latent_per_pair(const ll_config *c);
/* Print the schema: key, type, default, range, help. */
void ll_config_print_help(FILE *out);
/* The same information as Markdown tables (the generated part of docs/config.md). */
void ll_config_print_markdown(FILE *out);
void ll_config_free(ll_config *c);

#ifdef __cplusplus
}
#endif
#endif
