/* Second half of tests/gpu/test_ops_cuda.c (included once, there): latent
 * depth, ALD, the statistics ops, attention, the losses, Adam and the packed
 * linear layer.  Activations in pb_act (A(), pb_rand_act); statistics, gates,
 * latent logits, pooled vectors and Adam's state in real (F()). */

/* ---- latent depth ([rows, L] logits, samples and dz/da) ---- */
#define LR 5
#define LL_ 24
static ll_latent_prior prior_of(int agg, int across) {
    ll_latent_prior p = {.L = LL_, .rows = LR, .n_active = 3, .prior_agg = agg, .agg_across_layers = across,
                         .prior_p = 0.35};
    p.active[0] = p.active[2] = p.active[3] = 1; /* rows 1 and 4 train nothing */
    return p;
}
static void t_latent_sample(void) {
    const int Ls[2] = {64, 1};
    for (int k = 0; k < 2; k++)
        for (int hard = 0; hard < 2; hard++) {
            const int L = Ls[k];
            ll_philox rng;
            philox(&rng, LL_RNG_GUMBEL, 4 + k);
            pbuf a = pb_rand_buf(L, -3, 3), z = pb_poison(L), dz = pb_poison(L);
            const real tau = hard ? 0.5f : 5.0f;
            BOTH BE->latent_sample(BE, F(z, s), F(dz, s), F(a, s), L, &rng, tau, hard);
            if (hard)
                pb_cmp_exact("hard gates z (same Philox stream: identical)", &z);
            else
                pb_cmp("soft z", &z, L, TOL_EW);
            pb_cmp("dz/da", &dz, L, TOL_EW);
            pb_free(&a), pb_free(&z), pb_free(&dz);
        }
}
static void t_latent_grad(void) {
    const int L = 64;
    pbuf d = pb_rand_buf(L, -1, 1), g = pb_rand_buf(L, -1, 1), dz = pb_rand_buf(L, 0, 0.25);
    BOTH BE->latent_grad(BE, F(d, s), F(g, s), F(dz, s), L);
    pb_cmp("dlogits (accumulated)", &d, L, TOL_EW);
    pb_free(&d), pb_free(&g), pb_free(&dz);
}
static void t_latent_kl(void) {
    const size_t n = (size_t)LR * LL_;
    for (int reference = 0; reference < 2; reference++)
        for (int agg = 0; agg < 2; agg++)
            for (int across = 0; across < 2; across++) {
                if (!agg && across) continue;
                ll_latent_prior pr = prior_of(agg, across);
                real *hz = pb_rand(n, 0, 1);
                for (size_t i = 0; i < n; i += 3) hz[i] = (real)(hz[i] > 0.5f); /* some hard samples */
                pbuf a = pb_rand_buf(n, -4, 4), z = pb_new(hz, n * sizeof(real)), dz = pb_rand_buf(n, 0, 0.25);
                pbuf d = pb_rand_buf(n, -1, 1);
                double hacc[2] = {1.5, -2.0};
                pbuf acc = pb_new(hacc, sizeof hacc);
                BOTH BE->latent_kl(BE, F(d, s), F64(acc, s) + 1, F(a, s), F(z, s), F(dz, s), &pr, 2, reference, 0.37);
                BOTH BE->latent_kl(BE, F(d, s), F64(acc, s) + 1, F(a, s), F(z, s), F(dz, s), &pr, 0, reference, 1.0);
                char what[80];
                snprintf(what, sizeof what, "dlogits (reference %d, agg %d, across %d)", reference, agg, across);
                pb_cmp(what, &d, n, TOL_EW);
                pb_cmp_f64("stats slot (accumulated)", &acc, 2, TOL_EW, 1e-3);
                free(hz), pb_free(&a), pb_free(&z), pb_free(&dz), pb_free(&d), pb_free(&acc);
            }
}
static void t_latent_lk(void) {
    const size_t n = (size_t)LR * LL_;
    const int Ks[3] = {10, 0, LL_};
    for (int k = 0; k < 3; k++)
        for (int sq = 0; sq < 2; sq++) {
            ll_latent_prior pr = prior_of(0, 0);
            pbuf z = pb_rand_buf(n, 0, 1), dz = pb_rand_buf(n, 0, 0.25), d = pb_rand_buf(n, -1, 1);
            double hacc = 0.25;
            pbuf acc = pb_new(&hacc, sizeof hacc);
            BOTH BE->latent_lk(BE, F(d, s), F64(acc, s), F(z, s), F(dz, s), &pr, Ks[k], sq, 0.8);
            pb_cmp("dlogits (accumulated; inactive rows untouched)", &d, n, TOL_EW);
            pb_cmp_f64("stats slot (accumulated)", &acc, 1, TOL_EW, 1e-3);
            pb_free(&z), pb_free(&dz), pb_free(&d), pb_free(&acc);
        }
}
static void t_latent_depth(void) {
    ll_latent_prior pr = prior_of(1, 0);
    pbuf a = pb_rand_buf((size_t)LR * LL_, -4, 4);
    double hacc[2] = {3.0, 7.0};
    pbuf acc = pb_new(hacc, sizeof hacc);
    BOTH BE->latent_depth(BE, F64(acc, s) + 1, F(a, s), &pr);
    pb_cmp_f64("E[L] (accumulated into slot 1 only)", &acc, 2, TOL_EW, 1e-3);
    pb_free(&a), pb_free(&acc);
}
static void t_latent_q(void) {
    pbuf a = pb_rand_buf(64, -6, 6), q = pb_poison(64);
    BOTH BE->latent_q(BE, F(q, s), F(a, s), 64);
    pb_cmp("q", &q, 64, TOL_EW);
    pb_free(&a), pb_free(&q);
}

/* ---- ALD ---- */
#define ALD_B 5
#define ALD_T 13
#define ALD_C 1000
static const int ald_len[ALD_B] = {13, 1, 7, 12, 4};
static void t_ald_pool(void) {
    pbuf h = pb_rand_act((size_t)ALD_B * ALD_T * ALD_C, -1, 1), G = pb_poison((size_t)ALD_B * ALD_C);
    pbuf len = pb_new(ald_len, sizeof ald_len);
    BOTH BE->ald_pool(BE, F(G, s), A(h, s), INT(len, s), ALD_B, ALD_T, ALD_C);
    pb_cmp("G (overwritten)", &G, (size_t)ALD_B * ALD_C, TOL_RED); /* means over up to T rows */
    pb_free(&h), pb_free(&G), pb_free(&len);
}
static void t_ald_loss(void) {
    const size_t n = (size_t)3 * ALD_B * ALD_C;
    real *hg = pb_rand(n, -1, 1);
    for (size_t i = (size_t)ALD_B * ALD_C; i < 2 * (size_t)ALD_B * ALD_C; i++) hg[i] = 0.7f * hg[i - ALD_B * ALD_C] + 0.3f * hg[i]; /* light close to clean */
    pbuf G = pb_new(hg, n * sizeof(real)), dG = pb_poison(n);
    double hacc[2] = {0.5, 0.5};
    pbuf acc = pb_new(hacc, sizeof hacc);
    const double hw[2] = {0.8, 2.0}; /* the weights, in backend memory */
    pbuf w = pb_new(hw, sizeof hw);
    BOTH BE->ald_loss(BE, F(dG, s), F64(acc, s), F(G, s), ALD_B, ALD_C, 0.1f, F64(w, s));
    BOTH BE->ald_loss(BE, NULL, F64(acc, s) + 1, F(G, s), ALD_B, ALD_C, 0.5f, F64(w, s) + 1); /* dG NULL: loss only */
    pb_cmp("dG (overwritten)", &dG, n, TOL_RED); /* cosines: dot products over C */
    pb_cmp_f64("stats slots (accumulated)", &acc, 2, TOL_RED, 1e-3);
    free(hg), pb_free(&G), pb_free(&dG), pb_free(&acc), pb_free(&w);
}
static void t_ald_unpool(void) {
    pbuf dG = pb_rand_buf((size_t)ALD_B * ALD_C, -1, 1), dh = pb_poison_act((size_t)ALD_B * ALD_T * ALD_C);
    pbuf len = pb_new(ald_len, sizeof ald_len);
    BOTH BE->ald_unpool(BE, A(dh, s), F(dG, s), INT(len, s), ALD_B, ALD_T, ALD_C);
    pb_cmp("dh (overwritten; 0 past each length)", &dh, (size_t)ALD_B * ALD_T * ALD_C, TOL_EW);
    pb_free(&dG), pb_free(&dh), pb_free(&len);
}

/* ---- statistics ---- */
static void t_sumsq(void) {
    pbuf x = pb_rand_buf(N1M, -2, 2);
    double hacc[LL_ST_N];
    for (int i = 0; i < LL_ST_N; i++) hacc[i] = i + 0.5;
    pbuf st = pb_new(hacc, sizeof hacc);
    BOTH BE->sumsq(BE, F64(st, s) + LL_ST_GSUMSQ, F(x, s), N1M);
    BOTH BE->sumsq(BE, F64(st, s) + LL_ST_GSUMSQ, F(x, s) + 1, 1001);
    /* float partial sums of 2^20 squares, in another order on each side */
    pb_cmp_f64("stats (GSUMSQ accumulated, others untouched)", &st, LL_ST_N, TOL_RED, 1);
    pb_free(&x), pb_free(&st);
}
static void t_grad_finish(void) {
    /* (gsumsq, loss, clip, phi_step): no clip; clipped; clip off; non-finite loss; non-finite norm */
    const double cases[5][4] = {{400, 10, 5, 1}, {400, 10, 0.1, 0}, {1e6, 3, 0, 1}, {400, INFINITY, 1, 1},
                                {NAN, 2, 1, 0}};
    for (int k = 0; k < 5; k++) {
        double h[LL_ST_N];
        for (int i = 0; i < LL_ST_N; i++) h[i] = 0.25 * i;
        h[LL_ST_GSUMSQ] = cases[k][0];
        h[LL_ST_LOSS] = cases[k][1];
        h[LL_ST_ADAM_T] = 5, h[LL_ST_ADAM_T_PHI] = 2;
        pbuf st = pb_new(h, sizeof h);
        BOTH BE->grad_finish(BE, F64(st, s), 0.01, cases[k][2], (int)cases[k][3]);
        if (k >= 3) { /* skipped: GMUL is not used (min(1, NaN) may be read either way) */
            const double zero = 0;
            BOTH BE->upload(BE, F64(st, s) + LL_ST_GMUL, &zero, sizeof zero);
        }
        pb_cmp_f64("stats (GNORM, GMUL, SKIP, ADAM_T*)", &st, LL_ST_N, TOL_F64, 1e-30);
        pb_free(&st);
    }
}

/* spike_check: 60 updates through one window (W 7, so it wraps) with spikes, a non-finite update and a
 * constant stretch (std 0): the statistics and the window, bit for bit (both sides: fma, sums in slot order) */
static void t_spike_check(void) {
    enum { W = 7 };
    double z[2 + 2 * W] = {0};
    pbuf state = pb_new(z, sizeof z);
    int spikes = 0;
    for (int u = 0; u < 60; u++) {
        double h[LL_ST_N] = {0};
        const int flat = u >= 40 && u < 50;
        h[LL_ST_LOSS] = flat ? 250 : 300 + 50 * sin(u * 1.3) + (u % 13 == 12 ? 400 : 0);
        h[LL_ST_GSUMSQ] = u == 29 ? INFINITY : flat ? 1e4 : 1e4 * (3 + cos(u * 0.7) + (u % 11 == 10 ? 6 : 0));
        pbuf st = pb_new(h, sizeof h);
        BOTH BE->spike_check(BE, F64(st, s), F64(state, s), W, 0.01, 1.5, u < 30 ? 0 : 1.2);
        pb_cmp_f64("stats (Z_LOSS, Z_GNORM, SPIKE)", &st, LL_ST_N, 0, 1e-300);
        pb_cmp_f64("spike window", &state, 2 + 2 * W, 0, 1e-300);
        double *g = pb_get(&st, DUT);
        spikes += g[LL_ST_SPIKE] != 0;
        free(g);
        pb_free(&st);
    }
    CHECK_MSG(spikes >= 3, "spike_check: only %d spikes (the test would not test the decision)", spikes);
    pb_free(&state);
}

/* ---- attention (tests/gpu/test_attention_cuda.c covers it in depth) ---- */
typedef struct {
    int B, Tq, Tk, H, Dh, causal, self;
    real p;
    int klen[4];
} att_case;
static const att_case att_cases[] = {
    {3, 5, 19, 2, 16, 0, 0, 0.25f, {19, 11, 0}},  /* cross, padded, a sentence without keys, dropout */
    {2, 37, 37, 4, 64, 1, 1, 0.1f, {37, 20}},     /* causal self-attention as the model packs it (qkv) */
    {4, 1, 33, 2, 128, 0, 0, 0, {33, 1, 20, 33}}, /* one query (decoding), Dh 128 */
};
static void att_run(const att_case *c, int bwd) {
    const int C = c->H * c->Dh;
    const size_t nq = (size_t)c->B * c->Tq * (c->self ? 3 : 1) * C, nkv = (size_t)c->B * c->Tk * 2 * C;
    const size_t no = (size_t)c->B * c->Tq * C, nl = (size_t)c->B * c->H * c->Tq;
    const int qs = c->self ? 3 * C : C, kvs = c->self ? 3 * C : 2 * C;
    ll_philox rng;
    philox(&rng, LL_RNG_DROPOUT, 17);
    const uint64_t off = (uint64_t)3 * c->H * c->Tq * c->Tk; /* a slice starting at sentence 3 */
    pbuf q = pb_rand_act(nq, -2, 2), kv = c->self ? q : pb_rand_act(nkv, -2, 2);
    pbuf kl = pb_new(c->klen, sizeof(int) * c->B);
    const ll_act *K[2], *Vv[2];
    BOTH K[s] = c->self ? AT(q, s, C) : A(kv, s), Vv[s] = c->self ? AT(q, s, 2 * C) : AT(kv, s, C);
    pbuf out = pb_poison_act(no), lse = pb_poison(nl);
    if (!bwd) {
        BOTH BE->attention_fwd(BE, A(out, s), F(lse, s), A(q, s), qs, K[s], Vv[s], kvs, INT(kl, s), c->B, c->Tq,
                               c->Tk, c->H, c->Dh, c->causal, c->p, &rng, off);
        pb_cmp("out", &out, no, TOL_ATT); /* dropout: a flipped keep bit is an O(1) error */
        pb_cmp("lse", &lse, nl, TOL_ATT);
    } else {
        /* the reference's forward feeds both backwards */
        ll_backend *ref = pb_be[REF];
        ref->attention_fwd(ref, A(out, REF), F(lse, REF), A(q, REF), qs, K[REF], Vv[REF], kvs, INT(kl, REF), c->B,
                           c->Tq, c->Tk, c->H, c->Dh, c->causal, c->p, &rng, off);
        pb_from_ref(&out), pb_from_ref(&lse);
        pbuf g = pb_rand_act(no, -1, 1);
        pbuf dq = pb_poison_act(nq), dkv = c->self ? dq : pb_poison_act(nkv); /* overwritten, every column */
        BOTH BE->attention_bwd(BE, A(dq, s), c->self ? AT(dq, s, C) : A(dkv, s),
                               c->self ? AT(dq, s, 2 * C) : AT(dkv, s, C), A(g, s), A(out, s), F(lse, s), A(q, s), qs,
                               K[s], Vv[s], kvs, INT(kl, s), c->B, c->Tq, c->Tk, c->H, c->Dh, c->causal, c->p, &rng,
                               off);
        pb_cmp(c->self ? "dqkv (overwritten)" : "dq (overwritten)", &dq, nq, TOL_ATT);
        if (!c->self) pb_cmp("dkv (overwritten)", &dkv, nkv, TOL_ATT), pb_free(&dkv);
        pb_free(&g), pb_free(&dq);
    }
    pb_free(&out), pb_free(&lse), pb_free(&q), pb_free(&kl);
    if (!c->self) pb_free(&kv);
}
static void t_attention_fwd(void) {
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) att_run(&att_cases[i], 0);
}
static void t_attention_bwd(void) {
    for (size_t i = 0; i < sizeof att_cases / sizeof att_cases[0]; i++) att_run(&att_cases[i], 1);
}

/* ---- losses over the vocabulary (V = 32003) ---- */
#define XN 37
#define XV 32003
static int32_t *targets(void) {
    int32_t *t = tokens(XN, XV, 9); /* rows 8, 17, 26, 35: pad targets */
    t[0] = 2, t[1] = XV - 1;
    return t;
}
static void t_xent_fwd_bwd(void) {
    const size_t n = (size_t)XN * XV;
    int32_t *ht = targets();
    pbuf tgt = pb_new(ht, XN * sizeof(int32_t));
    const real eps[2] = {0.1f, 0};
    for (int k = 0; k < 2; k++) {
        pbuf lg = pb_rand_act(n, -6, 6);
        double hacc[3] = {1.0, 2.0, 3.0};
        pbuf acc = pb_new(hacc, sizeof hacc);
        BOTH BE->xent_fwd_bwd(BE, A(lg, s), I32(tgt, s), XN, XV, eps[k], 1, 0.5f, F64(acc, s));
        pb_cmp("logits -> grad_scale (softmax - q); 0 on pad rows", &lg, n, TOL_RED); /* softmax: sums over V */
        pb_cmp_f64("stats slots loss, nll (accumulated; third untouched)", &acc, 3, TOL_RED, 1);
        pb_free(&lg), pb_free(&acc);
    }
    free(ht), pb_free(&tgt);
}
static void t_sym_kl(void) {
    const size_t n = (size_t)XN * XV;
    int32_t *ht = targets();
    real *ha = pb_rand(n, -5, 5), *hb = pb_rand(n, -5, 5);
    for (size_t i = 0; i < n; i++) hb[i] = 0.6f * ha[i] + 0.4f * hb[i]; /* two passes of one model: close */
    pbuf tgt = pb_new(ht, XN * sizeof(int32_t)), lpa = pb_new_act(ha, n), lpb = pb_new_act(hb, n);
    ll_backend *ref = pb_be[REF]; /* log-probabilities: the reference's, the same on both sides */
    ref->log_softmax(ref, A(lpa, REF), XN, XV);
    ref->log_softmax(ref, A(lpb, REF), XN, XV);
    pb_from_ref(&lpa), pb_from_ref(&lpb);
    pbuf da = pb_rand_act(n, -1e-4, 1e-4), db = pb_rand_act(n, -1e-4, 1e-4);
    double hacc = 0.125;
    pbuf acc = pb_new(&hacc, sizeof hacc);
    BOTH BE->sym_kl(BE, A(lpa, s), A(lpb, s), A(da, s), A(db, s), I32(tgt, s), XN, XV, 1, 5.0f, F64(acc, s));
    pb_cmp("da (accumulated)", &da, n, TOL_RED); /* the gradient's KL term is a sum over V */
    pb_cmp("db (accumulated)", &db, n, TOL_RED);
    pb_cmp_f64("stats slot (accumulated)", &acc, 1, TOL_RED, 1);
    free(ht), free(ha), free(hb), pb_free(&tgt), pb_free(&lpa), pb_free(&lpb), pb_free(&da), pb_free(&db),
        pb_free(&acc);
}
static void t_log_softmax(void) {
    const size_t n = (size_t)XN * XV;
    pbuf x = pb_rand_act(n, -20, 20);
    BOTH BE->log_softmax(BE, A(x, s), XN, XV);
    pb_cmp("x (in place)", &x, n, TOL_RED); /* log-sum-exp over V */
    pb_free(&x);
}
/* forced decoding's token scores: a copy of one element per row (exact), 0 on pad rows; targets at
 * the vocabulary's first and last column */
static void t_pick_logp(void) {
    const size_t n = (size_t)XN * XV;
    int32_t *ht = targets();
    pbuf tgt = pb_new(ht, XN * sizeof(int32_t)), lp = pb_rand_act(n, -20, 0), out = pb_poison(XN);
    BOTH BE->pick_logp(BE, F(out, s), A(lp, s), I32(tgt, s), XN, XV, 1);
    pb_cmp_exact("out (overwritten; 0 on pad rows)", &out);
    free(ht), pb_free(&tgt), pb_free(&lp), pb_free(&out);
}

/* an ensemble's log-probabilities: log(e^acc + e^(x + b)) - c in double on both sides, so within one
 * rounding of the output dtype; -inf where both are (every 7th element), and where one is */
static void t_ensemble_mix(void) {
    const size_t n = (size_t)XN * XV;
    real *ha = pb_rand(n, -40, 0), *hx = pb_rand(n, -40, 0);
    for (size_t i = 0; i < n; i += 7) ha[i] = hx[i] = -INFINITY;
    for (size_t i = 3; i < n; i += 11) hx[i] = -INFINITY;
    pbuf acc = pb_new_act(ha, n), x = pb_new_act(hx, n);
    BOTH BE->ensemble_mix(BE, A(acc, s), A(x, s), n, log(0.25), log(3.0));
    pb_cmp("acc (in place)", &acc, n, TOL_EW);
    free(ha), free(hx), pb_free(&acc), pb_free(&x);
}

/* --unkpen: one column of every row moved, the rest untouched (exact: one addition per element) */
static void t_add_col(void) {
    const size_t n = (size_t)XN * XV;
    pbuf x = pb_rand_act(n, -20, 0);
    BOTH BE->add_col(BE, A(x, s), XN, XV, XV - 1, (real)-1.25);
    BOTH BE->add_col(BE, A(x, s), XN, XV, 3, (real)0.5);
    pb_cmp_exact("x (in place)", &x);
    pb_free(&x);
}

/* fill_at: scattered flat indices (repeats among them) := -inf, and a finite value */
static void t_fill_at(void) {
    const size_t n = (size_t)XN * XV;
    const int ni = 300;
    int32_t *hi = malloc(sizeof(int32_t) * ni);
    for (int i = 0; i < ni; i++) hi[i] = (int32_t)(((size_t)i * 2654435761u) % n);
    hi[ni - 1] = hi[0];
    pbuf x = pb_rand_act(n, -20, 0), idx = pb_new(hi, ni * sizeof(int32_t));
    BOTH BE->fill_at(BE, A(x, s), I32(idx, s), ni, (real)-INFINITY);
    BOTH BE->fill_at(BE, A(x, s), I32(idx, s), ni / 3, (real)-2.5);
    pb_cmp_exact("x (in place)", &x);
    free(hi), pb_free(&idx), pb_free(&x);
}

/* expand_cols (--shortlist): K of every row's V columns from src, the rest -inf; exact (copies) */
static void t_expand_cols(void) {
    const int K = XV / 3, rows = XN - 1; /* the last row keeps what it held */
    int32_t *hc = malloc(sizeof(int32_t) * K);
    for (int j = 0; j < K; j++) hc[j] = XV - 1 - 3 * j - (j & 1); /* distinct, descending, uneven gaps */
    pbuf x = pb_rand_act((size_t)XN * XV, -20, 0), src = pb_rand_act((size_t)XN * K, -9, 0);
    pbuf cols = pb_new(hc, K * sizeof(int32_t));
    BOTH BE->expand_cols(BE, A(x, s), A(src, s), I32(cols, s), rows, XV, K, (real)-INFINITY);
    pb_cmp_exact("x (expanded)", &x);
    free(hc), pb_free(&x), pb_free(&src), pb_free(&cols);
}

/* ---- Adam ---- */
/* p_act: the activation-dtype weight copy refreshed from the updated p (bf16
 * mode; NULL in fp32, where the copy aliases the master) */
static void t_adam(void) {
    for (int k = 0; k < 3; k++) { /* Theta's step; the logits' step count; a skipped update */
        pbuf p = pb_rand_buf(N1M, -1, 1), g = pb_rand_buf(N1M, -3, 3), m = pb_rand_buf(N1M, -0.1, 0.1);
        pbuf v = pb_rand_buf(N1M, 0, 0.01);
        const int copy = pb_act != LL_REAL_DTYPE;
        pbuf pa = copy ? pb_rand_act(N1M, -1, 1) : pb_new(NULL, 0);
        double h[LL_ST_N] = {0};
        h[LL_ST_GMUL] = 0.37, h[LL_ST_ADAM_T] = 7, h[LL_ST_ADAM_T_PHI] = 2, h[LL_ST_SKIP] = k == 2;
        pbuf st = pb_new(h, sizeof h);
        BOTH BE->adam(BE, F(p, s), copy ? A(pa, s) : NULL, F(g, s), F(m, s), F(v, s), N1M, 1e-3f, 0.9f, 0.98f, 1e-8f,
                      k ? 0 : 0.01f, F64(st, s), k == 1 ? LL_ST_ADAM_T_PHI : LL_ST_ADAM_T);
        pb_cmp("p", &p, N1M, TOL_EW);
        pb_cmp("m", &m, N1M, TOL_EW);
        pb_cmp("v", &v, N1M, TOL_EW);
        if (copy) pb_cmp("p_act (the weight copy)", &pa, N1M, TOL_EW);
        if (k == 2) { /* skipped: nothing moved */
            real *a = pb_get(&p, DUT), *b = pb_get(&p, REF);
            CHECK_MSG(!memcmp(a, b, N1M * sizeof(real)), "adam: a skipped update changed the parameters");
            free(a), free(b);
        }
        pb_free(&p), pb_free(&g), pb_free(&m), pb_free(&v), pb_free(&pa), pb_free(&st);
    }
}

/* ---- the weights' moving average: one fma, so bit for bit; decay 0 copies; a skipped update leaves it ---- */
static void t_ema(void) {
    const float decays[4] = {0.75f, 0.9999f, 0.f, 0.5f};
    const size_t n = N1M + 3;
    for (int k = 0; k < 4; k++) {
        real *e0 = pb_rand(n, -1, 1);
        pbuf e = pb_new(e0, n * sizeof(real)), p = pb_rand_buf(n, -1, 1);
        double h[LL_ST_N] = {0};
        h[LL_ST_SKIP] = k == 3;
        pbuf st = pb_new(h, sizeof h);
        BOTH BE->ema(BE, F(e, s), F(p, s), n, decays[k], F64(st, s));
        pb_cmp_exact("e (the average)", &e);
        if (k >= 2) { /* decay 0: the weights; skipped: the average as it was */
            real *a = pb_get(&e, DUT), *b = k == 2 ? pb_get(&p, DUT) : e0;
            CHECK_MSG(!memcmp(a, b, n * sizeof(real)), "ema: %s",
                      k == 2 ? "decay 0 is not the weights" : "a skipped update moved the average");
            free(a);
            if (k == 2) free(b);
        }
        free(e0);
        pb_free(&e), pb_free(&p), pb_free(&st);
    }
}

/* ---- packed linear layer (optional): against the reference's gemm with the BIAS epilogue ---- */
static void t_linear_packed(void) {
    const int N = 1000, K = 129, M = 37, ldx = K + 3, ldy = N + 5;
    real *hw = pb_rand((size_t)N * K, -1, 1);
    pbuf W = pb_new(hw, (size_t)N * K * sizeof(real)), Wa = pb_new_act(hw, (size_t)N * K);
    pbuf X = pb_rand_act((size_t)M * ldx, -1, 1), bias = pb_rand_buf(N, -1, 1), Y = pb_rand_act((size_t)M * ldy, -1, 1);
    ll_backend *ref = pb_be[REF], *dut = pb_be[DUT];
    const ll_gemm_desc g = {.trans_b = 1, .M = M, .N = N, .K = K, .alpha = 1, .beta = 0, .A = X.d[REF],
                            .a_type = pb_act, .lda = ldx, .B = Wa.d[REF], .b_type = pb_act, .ldb = K, .C = Y.d[REF],
                            .c_type = pb_act, .ldc = ldy, .epi = LL_EPI_BIAS, .bias = F(bias, REF),
                            .bias_type = LL_REAL_DTYPE};
    ref->gemm(ref, &g);
    void *pk = dut->linear_pack(dut, F(W, DUT), N, K, 0);
    if (pk) {
        dut->linear_packed(dut, A(Y, DUT), ldy, A(X, DUT), ldx, pk, F(bias, DUT), M);
        dut->linear_unpack(dut, pk);
        pb_cmp("Y = X W^T + b (padding untouched)", &Y, (size_t)M * ldy, TOL_RED);
    } else {
        printf("(linear_pack returned NULL: no fast path for this shape; callers use gemm)\n");
    }
    free(hw), pb_free(&W), pb_free(&Wa), pb_free(&X), pb_free(&bias), pb_free(&Y);
}
