/* Private declarations shared by the CPU backend's files. */
#ifndef LL_CPU_INTERNAL_H
#define LL_CPU_INTERNAL_H

#include "ll/backend.h"

void cpu_layernorm_fwd(ll_backend *be, real *out, real *mean, real *rstd, const real *x, const real *w,
                       const real *b, int N, int C);
void cpu_layernorm_bwd(ll_backend *be, real *dx, real *dw, real *db, const real *dout, const real *x,
                       const real *w, const real *mean, const real *rstd, int N, int C);
void cpu_attention_fwd(ll_backend *be, real *out, real *lse, const real *q, int q_stride, const real *k,
                       const real *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                       int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset);
void cpu_attention_bwd(ll_backend *be, real *dq, real *dk, real *dv, const real *dout, const real *out,
                       const real *lse, const real *q, int q_stride, const real *k, const real *v, int kv_stride,
                       const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal, real attn_dropout,
                       const ll_philox *rng, uint64_t rng_offset);
void cpu_xent_fwd_bwd(ll_backend *be, real *logits, const int32_t *target, int N, int V, real eps, int pad,
                      real grad_scale, double *loss_sum, double *nll_sum);
double cpu_sym_kl(ll_backend *be, const real *lpa, const real *lpb, real *da, real *db, const int32_t *target, int N,
                  int V, int pad, real alpha);
void cpu_log_softmax(ll_backend *be, real *x, int N, int V);
void cpu_adam(ll_backend *be, real *p, const real *g, real *m, real *v, size_t n, real lr, real b1, real b2,
              real eps, real wd, long t);

void *cpu_linear_pack(ll_backend *be, const real *W, int N, int K);
void cpu_linear_packed(ll_backend *be, real *Y, int ldy, const real *X, int ldx, const void *packed,
                       const real *bias, int M);
void cpu_linear_unpack(ll_backend *be, void *packed);

/* Fill mask[0..n) with the keep decisions of dropout_fwd for elements
 * offset..offset+n (the half-word rule of cpu_backend.c).  Single-threaded:
 * attention calls it per tile inside its own parallel loop. */
void cpu_dropout_mask(uint8_t *mask, size_t n, real p, const ll_philox *rng, uint64_t offset);

#endif
