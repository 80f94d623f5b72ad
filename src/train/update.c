/* The pieces of one update (the training loop is src/train/trainer.c): the
 * jobs' forward/backward with their random structure, the log's sums, the
 * latent part of a train record, and --op-stats' tally. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_impl.h"

void trn_tally_update(trainer *t) {
    const ll_op_counts *c = ll_backend_counts(t->counted), *b = &t->tally.before;
    op_tally *y = &t->tally;
    const uint64_t calls = c->calls - b->calls, reads = c->downloads - b->downloads;
    const uint64_t ups = c->uploads - b->uploads;
    y->min_calls = y->updates == 0 || calls < y->min_calls ? calls : y->min_calls;
    y->max_calls = calls > y->max_calls ? calls : y->max_calls;
    y->max_reads = reads > y->max_reads ? reads : y->max_reads;
    y->max_uploads = ups > y->max_uploads ? ups : y->max_uploads;
    y->calls += calls;
    y->launches += c->launches - b->launches;
    for (size_t i = 0; i < sizeof y->per_op / sizeof y->per_op[0]; i++) y->per_op[i] += c->per_op[i] - b->per_op[i];
    y->updates++;
}

/* One line a parser can read, then the ops by count. */
void trn_print_op_stats(const trainer *t) {
    const op_tally *y = &t->tally;
    const double n = y->updates ? (double)y->updates : 1;
    fprintf(stderr,
            "op-stats | updates %ld | host reads per update max %llu | uploads per update max %llu | "
            "ops per update mean %.1f min %llu max %llu | CUDA launches per update mean %.1f | arena growths %zu | "
            "activation peak %.1f MiB\n",
            y->updates, (unsigned long long)y->max_reads, (unsigned long long)y->max_uploads, y->calls / n,
            (unsigned long long)y->min_calls, (unsigned long long)y->max_calls, y->launches / n, t->m->arena.grown,
            t->m->arena.peak / 1048576.0);
    fprintf(stderr, "op-stats | per update:");
    uint64_t left[sizeof y->per_op / sizeof y->per_op[0]];
    memcpy(left, y->per_op, sizeof left);
    for (int k = 0; k < 12; k++) { /* the 12 most frequent, descending */
        size_t best = 0;
        for (size_t i = 1; i < sizeof left / sizeof left[0]; i++)
            if (left[i] > left[best]) best = i;
        if (!left[best]) break;
        fprintf(stderr, " %s %.1f", ll_backend_op_name(best), left[best] / n);
        left[best] = 0;
    }
    fputc('\n', stderr);
}

/* Next batch of stream i, rolling over epochs.  -1 + errbuf if it is empty. */
static int next_batch(trainer *t, int i, ll_batch *b) {
    if (ll_batcher_next(t->its[i], b)) return 0;
    if (ll_batcher_next(t->its[i], b)) return 0; /* the epoch ended: the next call starts the next one */
    return ll_fail("training data yields no batches");
}

/* What the log shows, summed over updates from the stats buffer reads. */
void trn_add_stats(update_stats *u, const double *st) {
    u->loss += st[LL_ST_LOSS];
    u->nll += st[LL_ST_NLL];
    u->kl += st[LL_ST_KL];
    u->lk += st[LL_ST_LK];
    u->ddr += st[LL_ST_DDR] + st[LL_ST_CE2];
    u->ald += st[LL_ST_ALD];
}

/* Per-forward random structure: LayerDrop, cross-attention drop, and the
 * second DDR pass's own draws (reference-spec §3.2: drawn per pass). */
static void draw_structure(trainer *t, uint64_t step) {
    const ll_config *cfg = t->cfg;
    ll_model *m = t->m;
    for (int l = 0; m->drop_conds && l < m->hp.Le; l++) m->enc_ctl[l].may_skip = cfg->enc_layerdrop > 0;
    for (int l = 0; m->drop_conds && l < m->hp.Ld; l++) { /* which draws vary: the graph's conditionals */
        m->dec_ctl[l].may_skip = cfg->dec_layerdrop > 0;
        m->dec_ctl[l].may_skip_cross = (l < cfg->cad_drop_depth ? cfg->cad_p_net : cfg->cad_p_net_above) > 0;
    }
    if (cfg->enc_layerdrop > 0) ll_layerdrop_sample(m->enc_ctl, m->hp.Le, cfg->enc_layerdrop, cfg->seed, step, 0, 0);
    if (cfg->dec_layerdrop > 0) ll_layerdrop_sample(m->dec_ctl, m->hp.Ld, cfg->dec_layerdrop, cfg->seed, step, 1, 0);
    if (cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0)
        ll_cad_sample(m->dec_ctl, m->hp.Ld, cfg->cad_p_net, cfg->cad_drop_depth, cfg->cad_p_net_above, cfg->seed, step, 0);
    if (m->obj.ddr_dec_ctl) {
        memcpy(m->obj.ddr_dec_ctl, m->dec_ctl, sizeof(ll_layer_ctl) * m->hp.Ld); /* same latent gates */
        if (cfg->dec_layerdrop > 0)
            ll_layerdrop_sample(m->obj.ddr_dec_ctl, m->hp.Ld, cfg->dec_layerdrop, cfg->seed, step, 1, 1);
        if (cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0)
            ll_cad_sample(m->obj.ddr_dec_ctl, m->hp.Ld, cfg->cad_p_net, cfg->cad_drop_depth, cfg->cad_p_net_above,
                          cfg->seed, step, 1);
    }
}

/* Forward/backward of everything in one update; gradients and losses
 * accumulate on the backend (nothing is read here); *ntok gets the update's
 * target tokens (known on the host from the batches), *own those this rank
 * trained.  With several ranks, job j (a micro-step's batch, or one pair's)
 * is trained by rank j % world; every rank reads every job's batch and
 * replays its latent draws (ll/dist_train.h). */
int trn_accumulate(trainer *t, long upd, ll_batch *b, long *ntok, long *own) {
    const ll_config *cfg = t->cfg;
    const int per = t->every_pair ? t->n_streams : 1;
    const int hard = t->latent && ll_latent_hard_samples(cfg, upd);
    double tau = cfg->latent_tau; /* optional geometric schedule tau -> tau_final */
    if (cfg->latent_tau_final > 0 && cfg->latent_tau_anneal_updates > 0) {
        double f = upd >= cfg->latent_tau_anneal_updates ? 1.0 : (double)upd / cfg->latent_tau_anneal_updates;
        tau = cfg->latent_tau * pow(cfg->latent_tau_final / cfg->latent_tau, f);
    }
    const long jobs = (long)t->uf * per;
    long last_mine = -1;
    for (long j = 0; j < jobs; j++)
        if (ll_dist_train_owns(t->dt, j)) last_mine = j;
    for (long j = 0; j < jobs; j++) {
        const int k = (int)(j / per), p = (int)(j % per);
        if (next_batch(t, t->every_pair ? p : 0, b)) return -1;
        uint64_t step = ((uint64_t)upd * t->uf + k) * per + p; /* keys dropout and Gumbel noise */
        int rows[2] = {ll_latent_pair_row(&t->m->hp, cfg, 0, b->src_lang, b->tgt_lang),
                       ll_latent_pair_row(&t->m->hp, cfg, 1, b->src_lang, b->tgt_lang)};
        for (int s = 0; s < 2; s++)
            if (ll_latent_on(t->m, s)) ll_latent_sample(t->m, s, rows[s], cfg->seed, step, (real)tau, hard);
        *ntok += b->n_tgt_tokens;
        if (!ll_dist_train_owns(t->dt, j)) { /* another rank's job: its draws are replayed, nothing else */
            for (int s = 0; s < 2; s++)
                if (ll_latent_on(t->m, s)) t->lat.sampled[s][rows[s]] = 1;
            continue;
        }
        draw_structure(t, step);
        /* the last job starts the gradient buckets from inside its backward (not
         * with a thread team: its workers' gradients are summed after the backward) */
        if (j == last_mine && !t->team) ll_dist_train_arm(t->dt, 1);
        /* the gates' gradients (the DDR pass shares the accumulators) go to the logits */
        ll_model_step_team(t->m, t->team, b, (uint64_t)cfg->seed, step, NULL);
        ll_dist_train_arm(t->dt, 0);
        if (j == last_mine) ll_dist_train_ready(t->dt, LL_GRAD_DEC | LL_GRAD_ENC);
        for (int s = 0; s < 2; s++)
            if (ll_latent_on(t->m, s)) {
                ll_latent_backward(t->m, s, rows[s]);
                ll_latent_kl(t->m, &t->lat, s, rows[s], upd, b->n_tgt_tokens);
            }
        *own += b->n_tgt_tokens;
    }
    /* L_K once per global update, from the samples every rank holds: rank 0 adds it */
    for (int s = 0; s < 2 && t->latent && t->rank == 0; s++) ll_latent_lk(t->m, &t->lat, s, upd, *ntok);
    return 0;
}

/* Per-language q(z_l = 1) and last-sample utilisation, for scripts/plot,
 * from the snapshot read with the update's statistics. */
void trn_log_latent_json(trainer *t, const real *snap, const double *st) {
    static const char *names[2] = {"enc", "dec"};
    fprintf(t->metrics, ",\"latent\":{");
    int first_stack = 1;
    for (int s = 0; s < 2; s++) {
        if (!ll_latent_on(t->m, s)) continue;
        const int L = s ? t->m->hp.Ld : t->m->hp.Le, R = t->m->hp.latent_rows;
        const real *a = snap, *z = snap + (size_t)R * L;
        snap += 2 * (size_t)R * L;
        fprintf(t->metrics, "%s\"%s\":{\"q\":{", first_stack ? "" : ",", names[s]);
        first_stack = 0;
        int first = 1;
        for (int r = 0; r < R; r++) {
            if (!t->lat.prior[s].active[r]) continue;
            char name[2 * LL_LANG_MAX + 8];
            fprintf(t->metrics, "%s\"%s\":[", first ? "" : ",", ll_latent_row_name(&t->m->hp, t->cfg, r, name, sizeof name));
            first = 0;
            for (int l = 0; l < L; l++) fprintf(t->metrics, "%s%.4f", l ? "," : "", ll_latent_q(a[(size_t)r * L + l]));
            fputc(']', t->metrics);
        }
        double u[4096];
        ll_latent_utilisation(&t->lat, s, z, u);
        fprintf(t->metrics, "},\"u\":[");
        for (int l = 0; l < L; l++) fprintf(t->metrics, "%s%.4f", l ? "," : "", u[l]);
        fprintf(t->metrics, "],\"expected_depth\":%.4f}", st[s ? LL_ST_DEPTH_DEC : LL_ST_DEPTH_ENC]);
    }
    fputc('}', t->metrics);
}
