/* The manifest (data_dir/manifest.txt): what llprep produced and from what.
 * Also opening a prepared split and the up-to-date check lltrain uses. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "ll/core.h"

int ll_lang_ok(const char *lang) {
    size_t n = strlen(lang);
    if (n == 0 || n >= LL_LANG_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = lang[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

void ll_corpus_file_name(char *out, size_t n, const char *split, int index, const char *src, const char *tgt,
                         const char *side) {
    snprintf(out, n, "%s.%d.%s-%s.%s.bin", split, index, src, tgt, side);
}

int ll_spm_sides_mask(const char *sides) {
    return !strcmp(sides, "both") ? 3 : !strcmp(sides, "source") ? 1 : !strcmp(sides, "target") ? 2 : 0;
}

int ll_corpus_files(const ll_data_info *info, int i, char (*names)[64], int *kinds) {
    const ll_corpus_info *c = &info->corpora[i];
    snprintf(names[0], 64, "%s", c->src_file);
    snprintf(names[1], 64, "%s", c->tgt_file);
    int n = 2;
    if (kinds) kinds[0] = kinds[1] = -1;
    if (strcmp(c->split, "train")) return n;
    for (int k = 1; k <= info->spm_samples && n + 2 <= LL_CORPUS_FILES; k++)
        for (int t = 0; t < 2; t++) {
            if (!(info->spm_sides >> t & 1)) continue;
            char side[16];
            snprintf(side, sizeof side, "s%d.%s", k, t ? "tgt" : "src");
            if (kinds) kinds[n] = 2 * (k - 1) + t;
            ll_corpus_file_name(names[n++], 64, c->split, c->index, info->langs[c->src_lang],
                                info->langs[c->tgt_lang], side);
        }
    return n;
}

int ll_stat_stamp(const char *path, int64_t *size, int64_t *mtime_ns) {
    struct stat st;
    if (stat(path, &st) != 0) return ll_fail("%s: cannot stat: %s", path, strerror(errno));
    *size = (int64_t)st.st_size;
    *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

static uint64_t hash_str(const char *s, uint64_t h) { return ll_fnv1a64(s, strlen(s) + 1, h); }
static uint64_t hash_u64(uint64_t v, uint64_t h) { return ll_fnv1a64(&v, sizeof v, h); }

uint64_t ll_data_hash(const ll_config *cfg, const uint64_t *corpus_hashes, uint64_t spm_hash) {
    /* Only what changes the prepared files: not paths (moving data is fine), not train.seed. */
    uint64_t h = hash_str("ll-data-1", LL_FNV_INIT);
    h = hash_u64((uint64_t)cfg->vocab_size, h);
    h = hash_u64((uint64_t)cfg->max_len, h);
    h = hash_str(cfg->long_lines, h);
    h = hash_str(cfg->lang_tags, h);
    h = hash_u64(spm_hash, h);
    if (cfg->spm_samples > 0) { /* (off, the hash stays what it was before the setting existed) */
        h = hash_str("spm_samples", h);
        h = hash_u64((uint64_t)cfg->spm_samples, h);
        uint32_t alpha_bits;
        memcpy(&alpha_bits, &cfg->spm_alpha, sizeof alpha_bits);
        h = hash_u64(alpha_bits, h);
        h = hash_str(cfg->spm_sample_sides, h);
    }
    if (cfg->max_len_ratio > 0) { /* (likewise) */
        uint32_t ratio_bits;
        memcpy(&ratio_bits, &cfg->max_len_ratio, sizeof ratio_bits);
        h = hash_str("max_len_ratio", h);
        h = hash_u64(ratio_bits, h);
    }
    int k = 0;
    for (int s = 0; s < 2; s++) {
        const ll_corpus_cfg *cc = s ? cfg->valid : cfg->train;
        int n = s ? cfg->n_valid : cfg->n_train;
        h = hash_u64((uint64_t)n, h);
        for (int i = 0; i < n; i++) {
            h = hash_str(cc[i].src_lang, h);
            h = hash_str(cc[i].tgt_lang, h);
            h = hash_u64(corpus_hashes[k++], h);
            h = hash_u64(corpus_hashes[k++], h);
            if (cc[i].src_tag[0]) h = hash_str(cc[i].src_tag, h); /* (none: the hash of before src_tag) */
        }
    }
    return h;
}

int ll_manifest_write(const char *path, const ll_data_info *info, const ll_input_stamp *in, int n_in) {
    ll_atomic_file af;
    if (ll_atomic_open(&af, path) != 0) return -1;
    FILE *f = af.f;
    fprintf(f, "# ll prepared data, written by llprep (see docs/data.md); do not edit\n");
    fprintf(f, "format %d\nhash %016" PRIx64 "\nvocab_size %d\nlang_tags %d\nspm %s\nlangs", LL_MANIFEST_FORMAT,
            info->hash, info->vocab_size, info->lang_tags, info->spm_file);
    for (int i = 0; i < info->n_langs; i++) fprintf(f, " %s", info->langs[i]);
    fputc('\n', f);
    if (info->spm_samples > 0)
        fprintf(f, "spm_samples %d %.9g %s\n", info->spm_samples, (double)info->spm_alpha,
                info->spm_sides == 3 ? "both" : info->spm_sides == 1 ? "source" : "target");
    for (int i = 0; i < info->n_corpora; i++) {
        const ll_corpus_info *c = &info->corpora[i];
        char ratio[40] = ""; /* (only when pairs were: a manifest without the filter reads as before it existed) */
        if (c->skipped_ratio > 0) snprintf(ratio, sizeof ratio, " ratio=%" PRId64, c->skipped_ratio);
        fprintf(f,
                "corpus %s %d %s %s tag=%d lines=%" PRId64 " sents=%" PRId64 " src_tokens=%" PRId64
                " tgt_tokens=%" PRId64 " empty=%" PRId64 " long=%" PRId64 "%s src=%s tgt=%s\n",
                c->split, c->index, info->langs[c->src_lang], info->langs[c->tgt_lang], c->tgt_tag, c->raw_lines,
                c->n_sents, c->src_tokens, c->tgt_tokens, c->skipped_empty, c->skipped_long, ratio, c->src_file,
                c->tgt_file);
    }
    /* Inputs last: the path is the rest of the line, so it may contain spaces. */
    for (int i = 0; i < n_in; i++)
        fprintf(f, "input %" PRId64 " %" PRId64 " %016" PRIx64 " %s\n", in[i].size, in[i].mtime_ns, in[i].hash,
                in[i].path);
    return ll_atomic_commit(&af);
}

static int lang_index(const ll_data_info *info, const char *lang) {
    for (int i = 0; i < info->n_langs; i++)
        if (strcmp(info->langs[i], lang) == 0) return i;
    return -1;
}

static int parse_corpus(ll_data_info *info, const char *s) {
    ll_corpus_info *c = &info->corpora[info->n_corpora];
    char src[LL_LANG_MAX + 1], tgt[LL_LANG_MAX + 1];
    memset(c, 0, sizeof *c);
#define HEAD /* the fields before the optional ratio= */                                                        \
    "%7s %d %16s %16s tag=%d lines=%" SCNd64 " sents=%" SCNd64 " src_tokens=%" SCNd64 " tgt_tokens=%" SCNd64        \
    " empty=%" SCNd64 " long=%" SCNd64
#define HEAD_ARGS                                                                                                   \
    c->split, &c->index, src, tgt, &c->tgt_tag, &c->raw_lines, &c->n_sents, &c->src_tokens, &c->tgt_tokens,        \
        &c->skipped_empty, &c->skipped_long
    int n = sscanf(s, HEAD " ratio=%" SCNd64 " src=%63s tgt=%63s", HEAD_ARGS, &c->skipped_ratio, c->src_file,
                   c->tgt_file);
    if (n != 14) { /* without ratio= (none skipped for it) */
        c->skipped_ratio = 0;
        if (sscanf(s, HEAD " src=%63s tgt=%63s", HEAD_ARGS, c->src_file, c->tgt_file) != 13) return -1;
    } else if (c->skipped_ratio <= 0) {
        return -1; /* (written only when some were) */
    }
#undef HEAD
#undef HEAD_ARGS
    c->src_lang = lang_index(info, src);
    c->tgt_lang = lang_index(info, tgt);
    if (c->src_lang < 0 || c->tgt_lang < 0) return -1;
    info->n_corpora++;
    return 0;
}

int ll_manifest_read(const char *data_dir, ll_data_info *info, ll_input_stamp **in, int *n_in) {
    memset(info, 0, sizeof *info);
    *in = NULL;
    *n_in = 0;
    char path[LL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", data_dir, LL_MANIFEST_FILE);
    FILE *f = fopen(path, "r");
    if (!f) return ll_fail("%s: cannot open: %s (run llprep first)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, format = 0, cap_in = 0, bad = 0;
    while (!bad && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
        if (line[0] == '#' || line[0] == 0) continue;
        char *sp = strchr(line, ' ');
        if (!sp) {
            bad = 1;
            break;
        }
        *sp = 0;
        const char *key = line, *val = sp + 1;
        if (!strcmp(key, "format"))
            format = atoi(val);
        else if (!strcmp(key, "hash"))
            bad = sscanf(val, "%" SCNx64, &info->hash) != 1;
        else if (!strcmp(key, "vocab_size"))
            info->vocab_size = atoi(val);
        else if (!strcmp(key, "lang_tags"))
            info->lang_tags = atoi(val);
        else if (!strcmp(key, "spm"))
            bad = sscanf(val, "%63s", info->spm_file) != 1;
        else if (!strcmp(key, "spm_samples")) {
            char sides[8];
            bad = sscanf(val, "%d %f %7s", &info->spm_samples, &info->spm_alpha, sides) != 3 ||
                  info->spm_samples < 0 || info->spm_samples > 64 || !(info->spm_sides = ll_spm_sides_mask(sides));
        }
        else if (!strcmp(key, "langs")) {
            char tmp[LL_LANG_MAX + 1];
            int used;
            while (info->n_langs < LL_MAX_CORPORA * 2 && sscanf(val, "%16s%n", tmp, &used) == 1) {
                if (!ll_lang_ok(tmp)) { /* also bounds its length */
                    bad = 1;
                    break;
                }
                memcpy(info->langs[info->n_langs++], tmp, strlen(tmp) + 1);
                val += used;
            }
        } else if (!strcmp(key, "corpus"))
            bad = info->n_corpora >= LL_MAX_CORPORA * 2 || parse_corpus(info, val) != 0;
        else if (!strcmp(key, "input")) {
            if (*n_in == cap_in) *in = ll_realloc(*in, sizeof **in * (size_t)(cap_in = cap_in ? 2 * cap_in : 8));
            ll_input_stamp *s = &(*in)[*n_in];
            int used = 0;
            bad = sscanf(val, "%" SCNd64 " %" SCNd64 " %" SCNx64 " %n", &s->size, &s->mtime_ns, &s->hash, &used) < 3 ||
                  !used || strlen(val + used) >= sizeof s->path;
            if (!bad) {
                memcpy(s->path, val + used, strlen(val + used) + 1);
                (*n_in)++;
            }
        }
    }
    free(line);
    fclose(f);
    if (!bad && format == LL_MANIFEST_FORMAT && info->spm_file[0] && info->vocab_size > 0) return 0;
    free(*in); /* callers free *in only on success (ll_data_is_prepared) */
    *in = NULL;
    *n_in = 0;
    if (!bad && format != LL_MANIFEST_FORMAT)
        return ll_fail("%s: unsupported manifest format %d (run llprep again)", path, format);
    return ll_fail("%s:%d: corrupt manifest (run llprep again)", path, lineno);
}

int ll_data_info_read(ll_data_info *info, const char *data_dir) {
    ll_input_stamp *in;
    int n_in;
    int rc = ll_manifest_read(data_dir, info, &in, &n_in);
    free(in);
    return rc;
}

/* Hash of a raw input: the recorded one when size and mtime are unchanged. */
static int input_hash(const char *path, int text, const ll_input_stamp *in, int n_in, uint64_t *h) {
    int64_t size = 0, mtime = 0;
    if (ll_stat_stamp(path, &size, &mtime) != 0) return -1;
    for (int i = 0; i < n_in; i++)
        if (in[i].size == size && in[i].mtime_ns == mtime && !strcmp(in[i].path, path)) {
            *h = in[i].hash;
            return 0;
        }
    int64_t lines;
    return text ? ll_scan_text(path, &lines, h) : ll_hash_file(path, h);
}

int ll_data_is_prepared(const ll_config *cfg) {
    ll_data_info info;
    ll_input_stamp *in;
    int n_in, ok = 0;
    struct stat is;
    for (int k = 0; k < 2 * (cfg->n_train + cfg->n_valid); k++) { /* a FIFO is never read here: prepare refuses it */
        const ll_corpus_cfg *cc = k / 2 < cfg->n_train ? &cfg->train[k / 2] : &cfg->valid[k / 2 - cfg->n_train];
        if (stat(k % 2 ? cc->tgt : cc->src, &is) != 0 || !S_ISREG(is.st_mode)) return 0;
    }
    if (ll_manifest_read(cfg->data_dir, &info, &in, &n_in) != 0) return 0;
    uint64_t *hashes = ll_malloc(sizeof(uint64_t) * 2 * (size_t)(cfg->n_train + cfg->n_valid));
    uint64_t spm_hash = 0;
    int k = 0, failed = 0;
    for (int s = 0; s < 2 && !failed; s++) {
        const ll_corpus_cfg *cc = s ? cfg->valid : cfg->train;
        int n = s ? cfg->n_valid : cfg->n_train;
        for (int i = 0; i < n && !failed; i++) {
            failed |= input_hash(cc[i].src, 1, in, n_in, &hashes[k++]) != 0;
            failed |= input_hash(cc[i].tgt, 1, in, n_in, &hashes[k++]) != 0;
        }
    }
    if (!failed && cfg->spm_model[0]) failed = input_hash(cfg->spm_model, 0, in, n_in, &spm_hash) != 0;
    if (!failed && ll_data_hash(cfg, hashes, spm_hash) == info.hash) {
        /* and the outputs are all there */
        char path[LL_PATH_MAX + 96];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", cfg->data_dir, info.spm_file);
        ok = stat(path, &st) == 0;
        char(*names)[64] = ll_malloc(sizeof *names * LL_CORPUS_FILES);
        for (int i = 0; ok && i < info.n_corpora; i++) {
            int nf = ll_corpus_files(&info, i, names, NULL);
            for (int j = 0; ok && j < nf; j++) {
                snprintf(path, sizeof path, "%s/%s", cfg->data_dir, names[j]);
                ok = stat(path, &st) == 0;
            }
        }
        free(names);
    }
    free(hashes);
    free(in);
    return ok;
}

/* The sampled segmentations of train corpus i: the same sentences (count and raw lines) as its
 * standard files, each checked in full as they are. */
static int open_samples(ll_pair_data *p, const ll_data_info *info, int i, const char *data_dir) {
    char(*names)[64] = ll_malloc(sizeof *names * LL_CORPUS_FILES);
    int kinds[LL_CORPUS_FILES];
    int nf = ll_corpus_files(info, i, names, kinds), rc = 0;
    if (nf > 2) { /* (close skips the unopened ones) */
        p->n_samples = info->spm_samples;
        p->sample_sides = info->spm_sides;
        p->samples = ll_calloc((size_t)(2 * p->n_samples), sizeof(ll_tokfile));
    }
    char path[LL_PATH_MAX + 96];
    for (int j = 2; j < nf && rc == 0; j++) {
        snprintf(path, sizeof path, "%s/%s", data_dir, names[j]);
        ll_tokfile *f = &p->samples[kinds[j]], *std = kinds[j] % 2 ? &p->tgt : &p->src;
        if (ll_tokfile_open(f, path) != 0) {
            rc = -1;
            break;
        }
        if (f->n_sents != std->n_sents ||
            (f->n_sents && memcmp(f->lines, std->lines, sizeof(uint64_t) * (size_t)f->n_sents)))
            rc = ll_fail("%s: not the sentences of %s/%s (%d against %d)", path, data_dir, names[kinds[j] % 2], f->n_sents,
                         std->n_sents);
        else
            rc = ll_tokfile_verify(f, path, info->vocab_size);
    }
    free(names);
    return rc;
}

int ll_dataset_open_dir(ll_dataset *d, const char *data_dir, const char *split) {
    memset(d, 0, sizeof *d);
    if (strcmp(split, "train") && strcmp(split, "valid")) return ll_fail("unknown split '%s' (train|valid)", split);
    ll_data_info info;
    if (ll_data_info_read(&info, data_dir) != 0) return -1;
    d->n_langs = info.n_langs;
    d->vocab_size = info.vocab_size;
    memcpy(d->langs, info.langs, sizeof d->langs);
    char path[LL_PATH_MAX + 96];
    for (int i = 0; i < info.n_corpora; i++) {
        const ll_corpus_info *c = &info.corpora[i];
        if (strcmp(c->split, split) != 0) continue;
        if (d->n_pairs == LL_MAX_CORPORA) { /* the manifest holds 2x that: a crafted one overflowed pairs[] */
            ll_fail("%s/%s: more than %d %s corpora: corrupt manifest", data_dir, LL_MANIFEST_FILE, LL_MAX_CORPORA,
                    split);
            goto fail;
        }
        ll_pair_data *p = &d->pairs[d->n_pairs];
        snprintf(path, sizeof path, "%s/%s", data_dir, c->src_file);
        if (ll_tokfile_open(&p->src, path) != 0) goto fail;
        snprintf(path, sizeof path, "%s/%s", data_dir, c->tgt_file);
        if (ll_tokfile_open(&p->tgt, path) != 0) {
            ll_tokfile_close(&p->src);
            goto fail;
        }
        d->n_pairs++;
        if (p->src.n_sents != p->tgt.n_sents || p->src.n_sents != c->n_sents) {
            ll_fail("%s: %d sentences, but its source side has %d and the manifest says %" PRId64, path, p->tgt.n_sents,
                    p->src.n_sents, c->n_sents);
            goto fail;
        }
        snprintf(path, sizeof path, "%s/%s", data_dir, c->src_file);
        if (ll_tokfile_verify(&p->src, path, info.vocab_size) != 0) goto fail;
        snprintf(path, sizeof path, "%s/%s", data_dir, c->tgt_file);
        if (ll_tokfile_verify(&p->tgt, path, info.vocab_size) != 0) goto fail;
        if (c->tgt_tag >= info.vocab_size) {
            ll_fail("%s/%s: target-language tag id %d outside the vocabulary (%d)", data_dir, LL_MANIFEST_FILE,
                    c->tgt_tag, info.vocab_size);
            goto fail;
        }
        p->src_lang = c->src_lang;
        p->tgt_lang = c->tgt_lang;
        p->tgt_tag = c->tgt_tag;
        if (open_samples(p, &info, i, data_dir) != 0) goto fail;
    }
    return 0;
fail:
    ll_dataset_close(d);
    return -1;
}

int ll_dataset_open(ll_dataset *d, const ll_config *cfg, const char *split) {
    return ll_dataset_open_dir(d, cfg->data_dir, split);
}

void ll_dataset_close(ll_dataset *d) {
    for (int i = 0; i < d->n_pairs; i++) {
        ll_tokfile_close(&d->pairs[i].src);
        ll_tokfile_close(&d->pairs[i].tgt);
        for (int k = 0; k < 2 * d->pairs[i].n_samples; k++) ll_tokfile_close(&d->pairs[i].samples[k]);
        free(d->pairs[i].samples);
        d->pairs[i].samples = NULL;
        d->pairs[i].n_samples = 0;
    }
    d->n_pairs = 0;
}
