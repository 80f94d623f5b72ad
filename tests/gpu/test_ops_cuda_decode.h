/* Decoding ops of tests/gpu/test_ops_cuda.c (included once, there), in the
 * activation dtype, compared exactly except attention_cached (TOL_ATT):
 * copy_rows, reorder_rows and beam_ancestry move bytes, and beam_topk ranks the same values in double on both sides, so the
 * candidates, their order, scores and log-probs must be identical.
 * tests/gpu/test_decode_cuda.c covers the same ops in fp32 at other shapes
 * (k = 64, many ties) plus a whole beam search CPU == CUDA. */

static void t_copy_rows(void) {
    const int rows = 37;
    const size_t n = 301, ds = 517, ss = 3 * 301 + 2; /* the KV-cache write: k of a packed qkv row */
    pbuf src = pb_rand_act(rows * ss, -1, 1), dst = pb_rand_act(rows * ds, -1, 1);
    BOTH BE->copy_rows(BE, AT(dst, s, 7), ds, AT(src, s, n), ss, rows, n, NULL, 0);
    pb_cmp_exact("dst rows (the rest untouched)", &dst);
    BOTH BE->copy_rows(BE, A(dst, s), ds, A(src, s), ss, 1, ds, NULL, 0); /* one long row */
    pb_cmp_exact("dst (one row)", &dst);
    /* a decoding step's write: the offset read on the device (a kernel on CUDA;
     * 4-byte words in fp32, bytes in bf16, where n * 2 is not a multiple of 4) */
    const int at = 3;
    pbuf a = pb_new(&at, sizeof at);
    BOTH BE->copy_rows(BE, AT(dst, s, 2), ds, AT(src, s, 1), ss, rows, n, INT(a, s), 11);
    pb_cmp_exact("dst rows at a device offset", &dst);
    BOTH BE->copy_rows(BE, A(dst, s), ds, A(src, s), ss, rows, n - 1, INT(a, s), 2); /* even sizes */
    pb_cmp_exact("dst rows at a device offset (even sizes)", &dst);
    pb_free(&src), pb_free(&dst), pb_free(&a);
}

static void t_reorder_rows(void) {
    const int total = 11, rows = 8;
    const size_t n = 300, stride = 517;
    const int from[8] = {3, 3, 0, 10, 4, 1, 2, 3}; /* rows repeat, some vanish; rows past 8 stay */
    pbuf buf = pb_rand_act(total * stride, -1, 1), scratch = pb_new_act(NULL, rows * n);
    pbuf f = pb_new(from, sizeof from);
    BOTH BE->reorder_rows(BE, A(buf, s), A(scratch, s), INT(f, s), rows, n, stride);
    pb_cmp_exact("buf (row r = old row from[r]; columns past n and rows past `rows` untouched)", &buf);
    BOTH BE->reorder_rows(BE, A(buf, s), A(scratch, s), INT(f, s), 1, n, stride);
    pb_cmp_exact("buf (one row)", &buf);
    pb_free(&buf), pb_free(&scratch), pb_free(&f);
    /* more rows than a grid's 65,535 in y: the kernel's blocks take several (a long beam's compaction);
     * a grid sweep, so not under the sanitizers (LL_GPU_TEST_SMALL: 20 s of TSan) */
    if (getenv("LL_GPU_TEST_SMALL")) return;
    enum { MANY = 65535 + 700 };
    int *fm = ll_malloc(sizeof(int) * MANY);
    for (int r = 0; r < MANY; r++) fm[r] = r % 7 ? r : MANY - 1 - r;
    buf = pb_rand_act((size_t)MANY * 3, -1, 1), scratch = pb_new_act(NULL, (size_t)MANY * 2), f = pb_new(fm, sizeof(int) * MANY);
    BOTH BE->reorder_rows(BE, A(buf, s), A(scratch, s), INT(f, s), MANY, 2, 3);
    pb_cmp_exact("buf (65,535 + 700 rows)", &buf);
    free(fm);
    pb_free(&buf), pb_free(&scratch), pb_free(&f);
}

/* groups of `beam` rows over V = 32003: log-probs with ties (bf16 has many),
 * NaN, -inf, dead rows (cum -inf), and the three length modes; D > 1: diverse
 * beam search's subgroups, penalised by `strength` per earlier use of a token */
static void topk_case(int groups, int beam, int V, int k, int D, double strength) {
    const int rows = groups * beam, pad = 1, bos = 0, eos = 2;
    const size_t n = (size_t)rows * V;
    real *hl = pb_rand(n, -12, -0.01);
    for (size_t i = 0; i < n; i += 97) hl[i] = hl[i / 2]; /* exact ties */
    for (size_t i = 5; i < n; i += 1009) hl[i] = NAN;
    for (size_t i = 11; i < n; i += 2003) hl[i] = -INFINITY;
    for (int r = 0; r < rows; r++) hl[(size_t)r * V + eos] = -0.5f; /* eos competitive */
    for (int r = 0; D > 1 && r < rows; r++) /* the subgroups' favourites overlap: penalties decide */
        for (int v = 7; v < 7 + 2 * k && v < V; v++) hl[(size_t)r * V + v] = -0.25f - 0.125f * (float)((v + r) % 5);
    for (int r = 0; strength < 0 && r < rows; r++) /* the best tokens all in one thread's share (1,024 apart) */
        for (int j = 0; j < 40 && 9 + 1024 * j < V; j++) hl[(size_t)r * V + 9 + 1024 * j] = -0.001f * (float)(j + 1);
    double *cum = ll_malloc(sizeof(double) * rows);
    uint8_t *mode = ll_malloc((size_t)groups);
    for (int r = 0; r < rows; r++) cum[r] = r % 5 == 4 ? -INFINITY : -0.25 * (r % beam);
    for (int g = 0; g < groups; g++) mode[g] = (uint8_t)(g % 3); /* 0: no eos; 1: eos allowed; 2: only eos */
    pbuf logp = pb_new_act(hl, n), c = pb_new(cum, sizeof(double) * rows), md = pb_new(mode, (size_t)groups);
    const size_t ns = (size_t)groups * k;
    pbuf score = pb_new(NULL, ns * sizeof(double)), lp = pb_poison(ns), flat = pb_new(NULL, ns * sizeof(int32_t));
    BOTH BE->beam_topk(BE, F64(score, s), F(lp, s), I32(flat, s), A(logp, s), F64(c, s), U8(md, s), groups, beam, V,
                       k, D, strength, pad, bos, eos);
    char what[96];
    snprintf(what, sizeof what, "flat (groups %d, beam %d, k %d, subgroups %d, strength %g)", groups, beam, k, D,
             strength);
    pb_cmp_exact(what, &flat);
    pb_cmp_f64("score", &score, ns, 0, 1);
    pb_cmp("lp", &lp, ns, 0);
    free(hl), free(cum), free(mode);
    pb_free(&logp), pb_free(&c), pb_free(&md), pb_free(&score), pb_free(&lp), pb_free(&flat);
}
static void t_beam_topk(void) {
    topk_case(7, 5, 32003, 10, 1, 0); /* beam 5, 2 * beam candidates */
    topk_case(3, 1, 32003, 64, 1, 0); /* one row per sentence, k 64 */
    topk_case(2, 4, 17, 80, 1, 0);    /* fewer candidates than k: -inf / -1 slots */
    topk_case(7, 6, 32003, 12, 3, 0.5);  /* diverse: 3 subgroups of 2 rows */
    topk_case(5, 1, 32003, 10, 5, 0.25); /* the first step: 5 subgroups rank the one row */
    topk_case(4, 4, 4001, 8, 4, -0.5);   /* a negative strength (favours repeats) */
    topk_case(2, 8, 32003, 64, 4, -0.5); /* and 16 slots a subgroup: threads' lists past their head */
    topk_case(2, 40, 3001, 80, 2, 1.5);  /* k past the list kernel: the rescanning one */
    topk_case(2, 4, 11, 40, 4, 0.5);     /* subgroups with fewer candidates than slots */
}

/* sample_draw: rows of log-probabilities with exact ties, NaN and -inf, a flat row (its nucleus spans
 * several of the kernel's 1,024-rank chunks) and a peaked one; every mode (eos not yet, allowed,
 * only, a finished row), forced tokens, bans (repeated), u at 0 and just below 1.  Tokens exact;
 * lq within 1e-12 on a GPU (CUDA's exp may differ from the host's in the last bit) and exact
 * under the emulation, whose exp is the host's: there a sum in another order shows. */
static void sample_case(int rows, int V, int topk, double topp, double temperature, double unkpen) {
    const size_t n = (size_t)rows * V;
    real *hl = pb_rand(n, -12, -0.01);
    for (size_t i = 0; i < n; i += 89) hl[i] = hl[i / 3]; /* exact ties */
    for (size_t i = 5; i < n; i += 1013) hl[i] = NAN;
    for (size_t i = 11; i < n; i += 401) hl[i] = -INFINITY;
    for (int v = 0; v < V; v++) hl[(size_t)1 * V + v] = -8; /* flat */
    for (int v = 0; v < V; v++) hl[(size_t)2 * V + v] = v == 7 ? -0.001f : -30; /* peaked */
    for (int r = 0; r < rows; r++) hl[(size_t)r * V + 2] = -1.5f; /* eos competitive */
    hl[(size_t)3 * V + 3] = 0; /* unk the best */
    for (int r = 8; r < rows; r += 4) /* flat, eos too (mode 0: not drawable): V - 3 weights of exactly 1 */
        for (int v = 0; v < V; v++) hl[(size_t)r * V + v] = -8;
    ll_sample_row *hr = ll_malloc(sizeof(ll_sample_row) * rows);
    int32_t hb[64];
    int nb = 0;
    ll_philox rng;
    ll_philox_init(&rng, 7, 3, (uint32_t)(topk * 31 + V));
    for (int r = 0; r < rows; r++) {
        hr[r] = (ll_sample_row){ll_philox_uniform(&rng, (uint64_t)r), r % 4 == 3 ? 1 : r % 4, -1, nb, 0};
        if (r == 0) hr[r].u = 0;
        if (r == 4) hr[r].u = 0.99999999999999989; /* (the largest double below 1) */
        if (r == 6) hr[r].mode = 4; /* finished: tok -1, lq 0 */
        if (r == 7) hr[r].forced = 3;
        if (r % 5 == 1 && nb + 6 <= 64) { /* bans, one twice, the row's favourites among them */
            const int32_t b[6] = {7, 4, 3, 4, (int32_t)(V - 1), 9};
            memcpy(hb + nb, b, sizeof b);
            hr[r].n_ban = 6, nb += 6;
        }
    }
    const ll_sample_params p = {topk, topp, temperature, unkpen, 1, 0, 2, 3};
    pbuf logp = pb_new_act(hl, n), row = pb_new(hr, sizeof(ll_sample_row) * rows), ban = pb_new(hb, sizeof hb);
    pbuf tok = pb_new(NULL, sizeof(int32_t) * rows), lq = pb_new(NULL, sizeof(double) * rows);
    BOTH BE->sample_draw(BE, I32(tok, s), F64(lq, s), A(logp, s), (const ll_sample_row *)row.d[s], I32(ban, s), rows,
                         V, &p);
    char what[128];
    snprintf(what, sizeof what, "tok (V %d, topk %d, topp %g, temperature %g, unkpen %g)", V, topk, topp, temperature,
             unkpen);
    pb_cmp_exact(what, &tok);
#ifdef LL_CUDA_EMU
    pb_cmp_f64("lq", &lq, rows, 0, 1);
#else
    pb_cmp_f64("lq", &lq, rows, 1e-12, 1);
#endif
    int32_t *t = pb_get(&tok, REF);
    CHECK_MSG(t[6] == -1 && t[7] == 3, "sample_draw: a finished row drew %d, a forced one %d", t[6], t[7]);
    for (int r = 0; r < rows; r++)
        CHECK_MSG(t[r] == -1 || (t[r] >= 0 && t[r] < V), "sample_draw: row %d drew %d", r, t[r]);
    free(t), free(hl), free(hr);
    pb_free(&logp), pb_free(&row), pb_free(&ban), pb_free(&tok), pb_free(&lq);
}
static void t_sample_draw(void) {
    sample_case(24, 3001, 0, 0, 1, 0);         /* every token */
    sample_case(24, 3001, 10, 0, 1, 0);        /* top-k */
    sample_case(24, 3001, 0, 0.9, 1, 0);       /* nucleus: the flat row's spans three chunks */
    sample_case(24, 3003, 0, 0.5, 1, 0);       /* the flat rows' kept weight reaches half exactly */
    sample_case(24, 3001, 50, 0.5, 0.7, 2);    /* both, tempered, unk penalised */
    sample_case(24, 3001, 2500, 0.95, 1.3, 0); /* a top-k wider than a chunk */
    sample_case(24, 3001, 3006, 1, 1, 0.5);    /* topk >= V, topp 1: neither */
    sample_case(24, 3001, 1, 0, 1, 0);         /* top-1: the arg-max */
    sample_case(9, 32003, 0, 0.999999, 1, 0);  /* a vocabulary of the benchmarks' size */
    sample_case(300, 101, 5, 0.8, 0.9, 1);     /* more rows than the kernel's 256 blocks: blocks take several */
}

/* self-attention through the rows' ancestry: keys of row r at cache rows
 * anc[r][j] (any row of the batch), or the row's own (anc NULL); head sizes
 * 64 (the CPU's vector path) and 40 (its plain loop; not a multiple of 32).
 * aligned: the model's strides (CUDA's 16-byte key loads), else odd ones; more
 * than 32 keys: CUDA's chunks of 32 keys and their online softmax */
static void cached_case_a(int rows, int H, int Dh, int max_T, int n_keys, int with_anc, int keys_at, int aligned) {
    const int C = H * Dh, qs = 3 * C + (aligned ? 0 : 5);
    const size_t row_stride = (size_t)max_T * 2 * C + (aligned ? 0 : 7);
    pbuf q = pb_rand_act((size_t)rows * qs, -1, 1), kv = pb_rand_act((size_t)rows * row_stride, -2, 2);
    int *ha = ll_malloc(sizeof(int) * (size_t)rows * max_T);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < max_T; j++) ha[(size_t)r * max_T + j] = (r * 7 + j * 3 + (r * j) % 5) % rows;
    pbuf anc = pb_new(ha, sizeof(int) * (size_t)rows * max_T), out = pb_poison_act((size_t)rows * C);
    pbuf nat = pb_new(&keys_at, sizeof keys_at); /* keys_at of the n_keys counted on the device */
    BOTH BE->attention_cached(BE, A(out, s), AT(q, s, 2), qs, A(kv, s), 2 * C, row_stride,
                              with_anc ? INT(anc, s) : NULL, max_T, n_keys - keys_at, keys_at ? INT(nat, s) : NULL,
                              rows, H, Dh);
    char what[96];
    snprintf(what, sizeof what, "out (rows %d, H %d, Dh %d, keys %d%s)", rows, H, Dh, n_keys,
             with_anc ? ", ancestry" : ", own rows");
    pb_cmp(what, &out, (size_t)rows * C, TOL_ATT); /* softmax: sums over the keys */
    free(ha);
    pb_free(&q), pb_free(&kv), pb_free(&anc), pb_free(&out), pb_free(&nat);
}
static void cached_case(int rows, int H, int Dh, int max_T, int n_keys, int with_anc, int keys_at) {
    cached_case_a(rows, H, Dh, max_T, n_keys, with_anc, keys_at, 0);
}
static void t_attention_cached(void) {
    cached_case(13, 4, 64, 12, 9, 1, 0);
    cached_case(13, 4, 64, 12, 12, 0, 0);
    cached_case(7, 3, 40, 5, 5, 1, 0);
    cached_case(3, 2, 32, 4, 0, 1, 0); /* no key: out = 0 */
    cached_case(13, 4, 64, 12, 9, 1, 8); /* a decoding step: 1 + the position read on the device */
    cached_case(7, 3, 40, 5, 5, 0, 4);
    cached_case_a(13, 4, 64, 80, 70, 1, 64, 1);  /* three chunks of keys, 16-byte loads */
    cached_case_a(5, 2, 128, 40, 33, 1, 0, 1);  /* Dh 128, a chunk of one key */
    cached_case_a(6, 2, 96, 40, 40, 0, 8, 1);   /* Dh 96: its last 32 dims in the third lane slot */
    cached_case_a(9, 4, 16, 70, 65, 1, 1, 1);   /* Dh 16: half the lanes hold no output dim */
    cached_case(9, 3, 40, 70, 66, 1, 0);        /* scalar loads over three chunks */
}

/* the ancestry tables: a beam reorder (inside groups), a compaction (rows
 * move down across groups, sources past `rows`), no move, and t == stride */
static void t_beam_ancestry(void) {
    const int total = 12, stride = 9, group = 4;
    int *ha = ll_malloc(sizeof(int) * total * stride);
    for (int i = 0; i < total * stride; i++) ha[i] = (i * 5) % total;
    pbuf anc = pb_new(ha, sizeof(int) * total * stride), scratch = pb_new(NULL, sizeof(int) * total * stride);
    const int reorder[8] = {1, 1, 0, 3, 6, 4, 4, 7}, compact[8] = {0, 1, 2, 3, 8, 9, 10, 11};
    pbuf fr = pb_new(reorder, sizeof reorder), fc = pb_new(compact, sizeof compact);
    const int five = 5;
    pbuf t5 = pb_new(&five, sizeof five); /* a decoding step's position, read on the device */
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), INT(fr, s), 8, 6, NULL, stride, group);
    pb_cmp_exact("anc after a reorder (entries < t moved, entry t = r; rows past 8 untouched)", &anc);
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), INT(fc, s), 8, 7, NULL, stride, group);
    pb_cmp_exact("anc after a compaction (shifted by the rows moved)", &anc);
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), NULL, 12, 8, NULL, stride, group);
    pb_cmp_exact("anc, no move (entry t = r only)", &anc);
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), INT(fr, s), 8, stride, NULL, stride, group);
    pb_cmp_exact("anc, t == stride (no entry t)", &anc);
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), INT(fr, s), 8, 2, INT(t5, s), stride, group);
    pb_cmp_exact("anc after a reorder, t = 2 + 5 read on the device", &anc);
    BOTH BE->beam_ancestry(BE, INT(anc, s), INT(scratch, s), NULL, 12, 0, INT(t5, s), stride, group);
    pb_cmp_exact("anc, no move, t = 5 read on the device", &anc);
    free(ha);
    pb_free(&anc), pb_free(&scratch), pb_free(&fr), pb_free(&fc), pb_free(&t5);
}

/* the hard alignment (beam rows as a sentence's queries over its own keys), compared exactly:
 * sentence 0 has one key (-1), 1 all S, the rest fewer; sentence 2's rows share a query whose
 * key 1 is repeated before the EOS key (a tie: the lower), sentence 3's favourite is its EOS
 * key (left out); the other sentences random (no near tie at these seeds) */
static void align_case(int sents, int per, int S, int H, int Dh, int qpad) {
    const int C = H * Dh, qs = C + qpad, kvs = 2 * C, rows = sents * per;
    real *hq = pb_rand((size_t)rows * qs, -1, 1), *hk = pb_rand((size_t)sents * S * kvs, -2, 2);
    int *len = ll_malloc(sizeof(int) * sents);
    for (int b = 0; b < sents; b++) len[b] = b == 0 ? 1 : b == 1 ? S : 4 + (b * 7) % (S - 3);
    for (int b = 2; b < 4 && b < sents; b++) {
        for (int r = b * per + 1; r < (b + 1) * per; r++) memcpy(&hq[(size_t)r * qs], &hq[(size_t)b * per * qs], sizeof(real) * C);
        const int fav = b == 2 ? 1 : len[b] - 1;
        for (int e = 0; e < C; e++) hk[((size_t)b * S + fav) * kvs + e] = 2 * hq[(size_t)b * per * qs + e];
        if (b == 2) memcpy(&hk[((size_t)b * S + len[b] - 2) * kvs], &hk[((size_t)b * S + fav) * kvs], sizeof(real) * C);
    }
    pbuf q = pb_new_act(hq, (size_t)rows * qs), kv = pb_new_act(hk, (size_t)sents * S * kvs);
    pbuf kl = pb_new(len, sizeof(int) * sents), idx = pb_new(NULL, sizeof(int32_t) * rows);
    BOTH BE->attn_align(BE, I32(idx, s), A(q, s), qs, A(kv, s), kvs, INT(kl, s), sents, per, S, H, Dh);
    char what[96];
    snprintf(what, sizeof what, "idx (sentences %d x %d rows, S %d, H %d, Dh %d)", sents, per, S, H, Dh);
    pb_cmp_exact(what, &idx);
    { /* an ensemble's path (attn_probs, align_argmax): the probabilities written (w 0.4), added (w 0.6), their arg-max */
        real *h7 = pb_fill((size_t)rows * S, 7);
        pbuf acc = pb_new(h7, sizeof(real) * (size_t)rows * S), idx2 = pb_new(NULL, sizeof(int32_t) * rows);
        BOTH BE->attn_probs(BE, F(acc, s), 1, (real)0.4, A(q, s), qs, A(kv, s), kvs, INT(kl, s), sents, per, S, H, Dh);
        BOTH BE->attn_probs(BE, F(acc, s), 0, (real)0.6, A(q, s), qs, A(kv, s), kvs, INT(kl, s), sents, per, S, H, Dh);
        pb_cmp("acc (past a sentence's keys: untouched)", &acc, (size_t)rows * S, TOL_ATT);
        pb_from_ref(&acc); /* (the same input for both arg-maxes) */
        BOTH BE->align_argmax(BE, I32(idx2, s), F(acc, s), INT(kl, s), sents, per, S);
        pb_cmp_exact("align_argmax idx", &idx2);
        int32_t *a = pb_get(&idx, REF), *b = pb_get(&idx2, REF);
        for (int r = 0; r < rows; r++) /* (no near ties at these seeds) */
            CHECK_MSG(a[r] == b[r], "attn_probs + align_argmax row %d: %d, attn_align %d", r, b[r], a[r]);
        free(a), free(b), free(h7);
        pb_free(&acc), pb_free(&idx2);
    }
    int32_t *got = pb_get(&idx, DUT);
    for (int r = 0; r < rows && sents > 3; r++) { /* (also the CPU's, when they are equal) */
        const int b = r / per, want = b == 0 ? -1 : b == 2 ? 1 : -2;
        CHECK_MSG(want == -2 || got[r] == want, "attn_align row %d (sentence %d): %d, want %d", r, b, got[r], want);
        CHECK_MSG(b != 3 || got[r] != len[3] - 1, "attn_align row %d chose the EOS key", r);
    }
    free(got), free(hq), free(hk), free(len);
    pb_free(&q), pb_free(&kv), pb_free(&kl), pb_free(&idx);
}
static void t_attn_align(void) {
    align_case(6, 5, 19, 8, 64, 0);  /* beam 5 over 19 keys, the model's strides */
    align_case(5, 1, 70, 4, 40, 3);  /* greedy, more keys than a warp's lanes, odd strides */
    align_case(4, 3, 33, 2, 128, 0); /* Dh 128 */
}
