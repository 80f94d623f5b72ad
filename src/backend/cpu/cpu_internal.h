/* Private declarations shared by the CPU backend's files. */
#ifndef LL_CPU_INTERNAL_H
#define LL_CPU_INTERNAL_H

#include "ll/backend.h"

void cpu_layernorm_fwd(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x, const real *w,
                       const real *b, int N, int C);
void cpu_layernorm_bwd(ll_backend *be, ll_act *dx, real *dw, real *db, const ll_act *dout, const ll_act *x,
                       const real *w, const real *mean, const real *rstd, int N, int C);
void cpu_attention_fwd(ll_backend *be, ll_act *out, real *lse, const ll_act *q, int q_stride, const ll_act *k,
                       const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                       int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset);
void cpu_attention_bwd(ll_backend *be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout, const ll_act *out,
                       const real *lse, const ll_act *q, int q_stride, const ll_act *k, const ll_act *v,
                       int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                       real attn_dropout, const ll_philox *rng, uint64_t rng_offset);
void cpu_xent_fwd_bwd(ll_backend *be, ll_act *logits, const int32_t *target, int N, int V, real eps, int pad,
                      real grad_scale, double *acc);
void cpu_sym_kl(ll_backend *be, const ll_act *lpa, const ll_act *lpb, ll_act *da, ll_act *db, const int32_t *target,
                int N, int V, int pad, real alpha, double *acc);
void cpu_log_softmax(ll_backend *be, ll_act *x, int N, int V);
void cpu_pick_logp(ll_backend *be, real *out, const ll_act *logp, const int32_t *target, int N, int V, int pad);
void cpu_add_col(ll_backend *be, ll_act *x, int rows, int V, int col, real val);
void cpu_add_col_bf16(ll_backend *be, ll_act *x, int rows, int V, int col, real val); /* bf16 storage */
void cpu_fill_at(ll_backend *be, ll_act *x, const int32_t *idx, int n, real val);
void cpu_fill_at_bf16(ll_backend *be, ll_act *x, const int32_t *idx, int n, real val); /* bf16 storage */
void cpu_expand_cols(ll_backend *be, ll_act *dst, const ll_act *src, const int32_t *cols, int rows, int V, int K,
                     real fill);
void cpu_expand_cols_bf16(ll_backend *be, ll_act *dst, const ll_act *src, const int32_t *cols, int rows, int V,
                          int K, real fill); /* bf16 storage */
void cpu_ensemble_mix(ll_backend *be, ll_act *acc, const ll_act *x, size_t n, double b, double c);
void cpu_ensemble_mix_bf16(ll_backend *be, ll_act *acc, const ll_act *x, size_t n, double b, double c); /* bf16 storage */

/* cpu_backend.c: the real-dtype gemm (epilogues included) and conversions */
void cpu_gemm_real(const ll_gemm_desc *g, const real *A, const real *B, const real *bias, real *C);
void cpu_convert(ll_backend *be, void *dst, ll_dtype dt, const void *src, ll_dtype st, size_t n);

/* cpu_step.c: gated residual scalars, reductions into stats, gradient norm, Adam */
void cpu_add_gated(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, const real *g1, const real *g2,
                   size_t n);
void cpu_scale_gated(ll_backend *be, ll_act *x, const real *g1, const real *g2, size_t n);
void cpu_dot_acc(ll_backend *be, real *dst, const ll_act *a, const ll_act *b, size_t n, const real *mul);
void cpu_sumsq(ll_backend *be, double *acc, const real *x, size_t n);
void cpu_weighted_sum(ll_backend *be, ll_act *y, const ll_act *const *xs, const real *w, int k, size_t n);
void cpu_weighted_scatter(ll_backend *be, ll_act *const *ys, const real *w, const ll_act *x, int k, size_t n);
void cpu_dots_acc(ll_backend *be, real *dst, const ll_act *x, const ll_act *const *ys, int k, size_t n);
void cpu_grad_finish(ll_backend *be, double *stats, double grad_scale, double clip_norm, int phi_step);
void cpu_ema(ll_backend *be, real *e, const real *p, size_t n, real decay, const double *stats);
void cpu_spike_check(ll_backend *be, double *stats, double *state, int window, double grad_scale, double z_loss,
                     double z_gnorm);
void cpu_adam(ll_backend *be, real *p, ll_act *p_act, const real *g, real *m, real *v, size_t n, real lr, real b1,
              real b2, real eps, real wd, const double *stats, int t_slot);

/* cpu_residual.c: the fused residual branch.  The _real forms take `real`
 * arrays; bf16 = 1 rounds what the unfused bf16 ops stored between steps
 * (dropped s, gated ds) to bf16, so the bf16 backend stays bit-identical to
 * its unfused sequence. */
void cpu_residual_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                      size_t n, real p, const ll_philox *rng, uint64_t offset);
void cpu_residual_bwd(ll_backend *be, ll_act *ds, ll_act *dx, int dx_mode, const ll_act *s, real *dg1, real *dg2,
                      const real *g1, const real *g2, size_t n, real p, const ll_philox *rng, uint64_t offset);
void cpu_residual_ln_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2, real p,
                         const ll_philox *rng, uint64_t offset, ll_act *u, real *mean, real *rstd, const real *w,
                         const real *b, int N, int C);
void cpu_residual_fwd_real(real *y, real *s, const real *x, const real *g1, const real *g2, size_t n, real p,
                           const ll_philox *rng, uint64_t offset, int bf16);
void cpu_residual_bwd_real(real *ds, real *dx, int dx_mode, const real *s, real *dg1, real *dg2, const real *g1,
                           const real *g2, size_t n, real p, const ll_philox *rng, uint64_t offset, int bf16);

/* cpu_latent.c */
void cpu_latent_sample(ll_backend *be, real *z, real *dzda, const real *a, int L, const ll_philox *rng, real tau,
                       int hard);
void cpu_latent_grad(ll_backend *be, real *dlogits, const real *dgate, const real *dzda, int L);
void cpu_latent_kl(ll_backend *be, real *dlogits, double *acc, const real *logits, const real *z, const real *dzda,
                   const ll_latent_prior *pr, int row, int reference, double w);
void cpu_latent_lk(ll_backend *be, real *dlogits, double *acc, const real *z, const real *dzda,
                   const ll_latent_prior *pr, int K, int squared, double w);
void cpu_latent_depth(ll_backend *be, double *acc, const real *logits, const ll_latent_prior *pr);
void cpu_latent_q(ll_backend *be, real *q, const real *logits, int L);

/* cpu_ald.c */
void cpu_ald_pool(ll_backend *be, real *G, const ll_act *h, const int *len, int B, int T, int C);
void cpu_ald_loss(ll_backend *be, real *dG, double *acc, const real *G, int B, int C, real tau, const double *w);
void cpu_ald_unpool(ll_backend *be, ll_act *dh, const real *dG, const int *len, int B, int T, int C);

/* cpu_decode.c */
void cpu_copy_rows(ll_backend *be, ll_act *dst, size_t dst_stride, const ll_act *src, size_t src_stride, int rows,
                   size_t n, const int *at, size_t at_stride);
void cpu_reorder_rows(ll_backend *be, ll_act *buf, ll_act *scratch, const int *from, int rows, size_t n,
                      size_t stride);
void cpu_attention_cached(ll_backend *be, ll_act *out, const ll_act *q, int q_stride, const ll_act *kv, int kv_stride,
                          size_t row_stride, const int *anc, int anc_stride, int n_keys, const int *n_at, int rows,
                          int H, int Dh);
void cpu_beam_ancestry(ll_backend *be, int *anc, int *scratch, const int *from, int rows, int t, const int *t_at,
                       int stride, int group);
void cpu_attn_align(ll_backend *be, int32_t *idx, const ll_act *q, int q_stride, const ll_act *kv, int kv_stride,
                    const int *key_len, int sents, int per_sent, int S, int H, int Dh);
void cpu_attn_probs(ll_backend *be, real *acc, int overwrite, real w, const ll_act *q, int q_stride,
                    const ll_act *kv, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                    int Dh);
void cpu_align_argmax(ll_backend *be, int32_t *idx, const real *acc, const int *key_len, int sents, int per_sent,
                      int S); /* (reads reals: every activation dtype) */
void cpu_beam_topk(ll_backend *be, double *score, real *lp, int32_t *flat, const ll_act *logp, const double *cum,
                   const uint8_t *mode, int groups, int beam, int V, int k, int div_groups, double div_strength,
                   int pad, int bos, int eos);
void cpu_sample_draw(ll_backend *be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row,
                     const int32_t *ban, int rows, int V, const ll_sample_params *p);

void *cpu_linear_pack(ll_backend *be, const real *W, int N, int K, int int8);
/* Packed weights' first member: which kind (cpu_linear_packed dispatches on it). */
enum { LL_PACK_FP32 = 0x70663332, LL_PACK_INT8 = 0x696e7438 };
/* cpu_linear_int8.c: the int8 kind (fp32 builds only) */
void *cpu_linear_pack_int8(const float *W, int N, int K);
void cpu_linear_packed_int8(const void *packed, float *Y, int ldy, const float *X, int ldx, const float *bias, int M);
void cpu_linear_unpack_int8(void *packed);
void cpu_linear_packed(ll_backend *be, ll_act *Y, int ldy, const ll_act *X, int ldx, const void *packed,
                       const real *bias, int M);
void cpu_linear_unpack(ll_backend *be, void *packed);

/* Fill mask[0..n) with the keep decisions of dropout_fwd for elements
 * offset..offset+n (the half-word rule of cpu_backend.c).  Single-threaded:
 * attention calls it per tile inside its own parallel loop. */
void cpu_dropout_mask(uint8_t *mask, size_t n, real p, const ll_philox *rng, uint64_t offset);

#endif
