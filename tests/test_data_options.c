/* llprep's optional data settings on the fixture's generated corpora: sampled segmentations
 * (data.spm_samples: decoded text, max_len fallback, thread-count independence, one per epoch),
 * source tags (src_tag: ids, hash, the decode-time encoding), the length-ratio filter
 * (data.max_len_ratio: counts, manifest, validation untouched). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/decode.h"
#include "util/data_fixture.h"
#include "util/testutil.h"

/* data.spm_samples: sampled segmentations of the train corpora, one per epoch in turn */
static int same_sentence(const ll_tokfile *a, int i, const ll_tokfile *b, int j) {
    int n = ll_tokfile_len(a, i);
    return n == ll_tokfile_len(b, j) && !memcmp(a->tokens + a->offsets[i], b->tokens + b->offsets[j], sizeof(int32_t) * (size_t)n);
}

static void test_prepare_samples(const char *tmp) {
    char *dd = path_in(tmp, "samples"), *dd1 = path_in(tmp, "samples1");
    ll_config c;
    base_config(&c, dd);
    add_corpus(&c, 0, tmp, "c.en", "c.es", "en", "es");
    add_corpus(&c, 1, tmp, "v.en", "v.es", "en", "es");
    c.spm_samples = 3;
    c.spm_alpha = 0.1f; /* fragments more than the standard: the max_len fallback is taken */
    c.max_len = 14;
    CHECK_MSG(ll_prepare_data(&c) == 0, "%s", ll_errbuf());
    CHECK(entries(dd) == 12); /* manifest, spm.model, train and valid {src,tgt}, 3 samples x {src,tgt} */
    ll_data_info info;
    CHECK(ll_data_info_read(&info, dd) == 0 && info.spm_samples == 3 && info.spm_alpha == 0.1f);
    CHECK(ll_data_is_prepared(&c) == 1);
    /* the same bytes from one thread as from two (each file's draws are keyed by corpus, sample and side) */
    ll_config c1 = c;
    snprintf(c1.data_dir, sizeof c1.data_dir, "%s", dd1);
    c1.threads = 1;
    CHECK_MSG(ll_prepare_data(&c1) == 0, "%s", ll_errbuf());
    const char *names[] = {"train.0.en-es.s1.src.bin", "train.0.en-es.s2.tgt.bin", "train.0.en-es.s3.src.bin"};
    for (int i = 0; i < 3; i++) {
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/%s", dd, names[i]);
        snprintf(b, sizeof b, "%s/%s", dd1, names[i]);
        size_t na = 0, nb = 0;
        char *ba = slurp(a, &na), *bb = slurp(b, &nb);
        CHECK_MSG(na > 64 && na == nb && !memcmp(ba, bb, na), "%s differs between 2 and 1 threads", names[i]);
        free(ba);
        free(bb);
    }

    ll_dataset d;
    CHECK(ll_dataset_open(&d, &c, "train") == 0);
    CHECK(d.n_pairs == 1 && d.pairs[0].n_samples == 3);
    char spm_path[700];
    snprintf(spm_path, sizeof spm_path, "%s/spm.model", dd);
    ll_spm *sp = ll_spm_load(spm_path);
    CHECK(sp != NULL);
    const ll_pair_data *pd = &d.pairs[0];
    /* each sample: the standard file's sentences, the same text in other pieces, within max_len */
    int changed[3] = {0}, bad_text = 0, bad_len = 0, longer = 0;
    for (int k = 0; sp && k < 6; k++) {
        const ll_tokfile *f = &pd->samples[k], *std = k % 2 ? &pd->tgt : &pd->src;
        CHECK(f->n_sents == std->n_sents && !memcmp(f->lines, std->lines, sizeof(uint64_t) * (size_t)f->n_sents));
        for (int i = 0; i < f->n_sents; i++) {
            int n = ll_tokfile_len(f, i);
            bad_len += n > c.max_len || f->tokens[f->offsets[i] + (uint64_t)n - 1] != LL_EOS;
            changed[k / 2] += !same_sentence(f, i, std, i);
            longer += n > ll_tokfile_len(std, i);
            char *x = ll_spm_decode(sp, f->tokens + f->offsets[i], n);
            char *y = ll_spm_decode(sp, std->tokens + std->offsets[i], ll_tokfile_len(std, i));
            bad_text += strcmp(x, y) != 0;
            free(x);
            free(y);
        }
    }
    CHECK_MSG(bad_text == 0 && bad_len == 0, "%d sentences decode to other text, %d too long or without EOS",
              bad_text, bad_len);
    CHECK_MSG(changed[0] >= 10 && changed[1] >= 10 && changed[2] >= 10 && longer >= 30,
              "sentences segmented otherwise than the standard: %d %d %d; longer %d", changed[0], changed[1],
              changed[2], longer);
    int differ = 0;
    for (int i = 0; i < pd->src.n_sents; i++) differ += !same_sentence(&pd->samples[0], i, &pd->samples[2], i);
    CHECK_MSG(differ >= 10, "samples 1 and 2 differ in %d sentences", differ);

    /* epoch e reads sample ((e - 1) mod 3) + 1; a seek replays it */
    ll_batcher *it = ll_batcher_new(&d, 100, 7, 1);
    CHECK(ll_batcher_segmentations(it) == 3);
    ll_batch b = {0};
    int wrong = 0, batches[5] = {0}, shapes = 0;
    int32_t e2_src[8] = {0};
    for (int e = 1; e <= 4; e++) {
        CHECK(ll_batcher_n_batches(it) == ll_batcher_epoch_batches(it, e));
        for (; ll_batcher_next(it, &b); batches[e]++) {
            const ll_tokfile *fs = &pd->samples[2 * ((e - 1) % 3)], *ft = &pd->samples[2 * ((e - 1) % 3) + 1];
            for (int i = 0; i < b.B; i++) {
                int id = b.ids[i];
                wrong += b.src_len[i] != ll_tokfile_len(fs, id) || b.tgt_len[i] != ll_tokfile_len(ft, id) ||
                         memcmp(b.src + (size_t)i * b.S, fs->tokens + fs->offsets[id], sizeof(int32_t) * (size_t)b.src_len[i]) ||
                         memcmp(b.tgt_out + (size_t)i * b.T, ft->tokens + ft->offsets[id], sizeof(int32_t) * (size_t)b.tgt_len[i]);
            }
            if (e == 2 && batches[e] == 3) memcpy(e2_src, b.src, sizeof(int32_t) * (size_t)(b.B * b.S < 8 ? b.B * b.S : 8));
        }
        CHECK(batches[e] == ll_batcher_epoch_batches(it, e));
    }
    CHECK_MSG(wrong == 0, "%d sentences not from their epoch's sample", wrong);
    CHECK(batches[1] == batches[4]);
    shapes = ll_batcher_shapes(it);
    CHECK(shapes >= 1 && shapes <= batches[1] + batches[2] + batches[3]);
    ll_batcher_free(it);
    it = ll_batcher_new(&d, 100, 7, 1);
    ll_batcher_seek(it, 2, 3);
    CHECK(ll_batcher_next(it, &b) == 1 && !memcmp(b.src, e2_src, sizeof(int32_t) * (size_t)(b.B * b.S < 8 ? b.B * b.S : 8)));
    ll_batcher_free(it);
    ll_batch_free(&b);
    ll_dataset_close(&d);
    if (sp) ll_spm_free(sp);
    /* validation keeps the standard segmentation */
    CHECK(ll_dataset_open(&d, &c, "valid") == 0 && d.pairs[0].n_samples == 0);
    ll_dataset_close(&d);

    /* a sample file that is not the standard file's sentences is refused by name */
    char victim[700], other[700];
    snprintf(victim, sizeof victim, "%s/train.0.en-es.s2.src.bin", dd1);
    snprintf(other, sizeof other, "%s/valid.0.en-es.src.bin", dd1);
    CHECK(rename(other, victim) == 0);
    CHECK(ll_dataset_open(&d, &c1, "train") == -1);
    CHECK_CONTAINS(ll_errbuf(), "train.0.en-es.s2.src.bin: not the sentences of");

    /* data.spm_sample_sides target: only the target side is sampled; the source stays standard */
    char *dd3 = path_in(tmp, "samples_tgt");
    ll_config c3 = c;
    snprintf(c3.data_dir, sizeof c3.data_dir, "%s", dd3);
    c3.spm_samples = 2;
    snprintf(c3.spm_sample_sides, sizeof c3.spm_sample_sides, "target");
    CHECK_MSG(ll_prepare_data(&c3) == 0, "%s", ll_errbuf());
    CHECK(entries(dd3) == 8); /* manifest, spm.model, train and valid {src,tgt}, 2 samples x tgt */
    CHECK(ll_data_info_read(&info, dd3) == 0 && info.spm_sides == 2);
    CHECK(ll_dataset_open(&d, &c3, "train") == 0 && d.pairs[0].n_samples == 2 && d.pairs[0].sample_sides == 2);
    it = ll_batcher_new(&d, 100, 7, 1);
    wrong = 0;
    for (int e = 1; e <= 2; e++)
        while (ll_batcher_next(it, &b)) {
            const ll_tokfile *fs = &d.pairs[0].src, *ft = &d.pairs[0].samples[2 * (e - 1) + 1];
            for (int i = 0; i < b.B; i++) {
                int id = b.ids[i];
                wrong += b.src_len[i] != ll_tokfile_len(fs, id) || b.tgt_len[i] != ll_tokfile_len(ft, id) ||
                         memcmp(b.src + (size_t)i * b.S, fs->tokens + fs->offsets[id], sizeof(int32_t) * (size_t)b.src_len[i]) ||
                         memcmp(b.tgt_out + (size_t)i * b.T, ft->tokens + ft->offsets[id], sizeof(int32_t) * (size_t)b.tgt_len[i]);
            }
        }
    CHECK_MSG(wrong == 0, "target-only sampling: %d sentences not the standard source and the epoch's target", wrong);
    ll_batcher_free(it);
    ll_batch_free(&b);
    ll_dataset_close(&d);
    ll_config c4 = c3;
    snprintf(c4.spm_sample_sides, sizeof c4.spm_sample_sides, "both");
    CHECK(ll_data_is_prepared(&c3) == 1 && ll_data_is_prepared(&c4) == 0);
    free(dd3);

    /* another alpha or sample count is other data; preparing without samples removes theirs */
    ll_config c2 = c;
    c2.spm_alpha = 0.2f;
    CHECK(ll_data_is_prepared(&c2) == 0);
    c2.spm_samples = 0;
    CHECK(ll_data_is_prepared(&c2) == 0);
    CHECK_MSG(ll_prepare_data(&c2) == 0, "%s", ll_errbuf());
    CHECK(entries(dd) == 6 && ll_data_is_prepared(&c2) == 1 && ll_data_is_prepared(&c) == 0);
    CHECK(ll_data_info_read(&info, dd) == 0 && info.spm_samples == 0);
    free(dd);
    free(dd1);
}

/* a corpus's src_tag: a piece of the vocabulary, before each of its source sentences (samples too) */
static void test_prepare_src_tag(const char *tmp) {
    char *dd = path_in(tmp, "tagged");
    ll_config c;
    multi_config(&c, dd, tmp);
    snprintf(c.train[0].src_tag, LL_TAG_MAX, "<BT>");
    c.spm_samples = 1;
    CHECK_MSG(ll_prepare_data(&c) == 0, "%s", ll_errbuf());
    char spm_path[700];
    snprintf(spm_path, sizeof spm_path, "%s/spm.model", dd);
    ll_spm *sp = ll_spm_load(spm_path);
    CHECK(sp && ll_spm_piece_id(sp, "<2es>") == 4 && ll_spm_piece_id(sp, "<2de>") == 5 &&
          ll_spm_piece_id(sp, "<BT>") == 6); /* after the language tags: their ids stay */
    ll_dataset d;
    CHECK(ll_dataset_open(&d, &c, "train") == 0 && d.n_pairs == 2);
    int tagged = 0, untagged = 0, elsewhere = 0;
    const ll_tokfile *files[3] = {&d.pairs[0].src, &d.pairs[0].samples[0], &d.pairs[1].src};
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < files[f]->n_sents; i++) {
            const int32_t *x = files[f]->tokens + files[f]->offsets[i];
            if (f < 2) tagged += x[0] == 6 && ll_tokfile_len(files[f], i) > 2;
            else untagged += x[0] != 6;
            for (int j = 1; j < ll_tokfile_len(files[f], i); j++) elsewhere += x[j] == 6;
        }
    CHECK_MSG(tagged == 2 * d.pairs[0].src.n_sents && untagged == d.pairs[1].src.n_sents && elsewhere == 0,
              "tagged %d of %d, untagged %d of %d, the tag elsewhere %d", tagged, 2 * d.pairs[0].src.n_sents, untagged,
              d.pairs[1].src.n_sents, elsewhere);
    /* lldecode's reading of a line "<BT> text" is the corpus's sentence, token for token */
    char raw_path[700];
    snprintf(raw_path, sizeof raw_path, "%s/c.en", tmp);
    char *raw = slurp(raw_path, NULL), *lines[400];
    int nl = 0, differ = 0;
    for (char *save, *l = strtok_r(raw, "\n", &save); l && nl < 400; l = strtok_r(NULL, "\n", &save)) lines[nl++] = l;
    int32_t *ids = NULL;
    int cap = 0, tr = 0;
    const ll_tokfile *f0 = &d.pairs[0].src;
    for (int i = 0; sp && i < f0->n_sents; i++) {
        char line[300];
        snprintf(line, sizeof line, "<BT> %s", lines[f0->lines[i]]);
        int n = ll_encode_line(sp, line, 64, &ids, &cap, &tr);
        differ += n != ll_tokfile_len(f0, i) || memcmp(ids, f0->tokens + f0->offsets[i], sizeof(int32_t) * (size_t)n);
    }
    CHECK_MSG(differ == 0, "%d tagged lines encode otherwise than llprep", differ);
    if (sp) {
        CHECK(ll_encode_line(sp, "<BT> ", 64, &ids, &cap, &tr) == 0); /* a tag alone: empty */
        int n = ll_encode_line(sp, "<zz> a cat", 64, &ids, &cap, &tr);
        CHECK(n > 1 && ids[0] != 6);
        CHECK(n == ll_spm_encode(sp, "<zz> a cat", &ids, &cap) + 1); /* not a piece: plain text */
    }
    free(ids);
    free(raw);
    ll_dataset_close(&d);
    if (sp) ll_spm_free(sp);
    ll_config c2 = c; /* the tag is part of the data */
    c2.train[0].src_tag[0] = 0;
    CHECK(ll_data_is_prepared(&c) == 1 && ll_data_is_prepared(&c2) == 0);
    /* a given model without the piece is refused, naming it */
    ll_config c3;
    base_config(&c3, dd);
    snprintf(c3.data_dir, sizeof c3.data_dir, "%s/notag", tmp);
    add_corpus(&c3, 0, tmp, "c.en", "c.es", "en", "es");
    snprintf(c3.train[0].src_tag, LL_TAG_MAX, "<med>");
    snprintf(c3.spm_model, sizeof c3.spm_model, "%s", spm_path);
    CHECK(ll_prepare_data(&c3) == -1);
    CHECK_CONTAINS(ll_errbuf(), "has no piece <med> for a corpus's src_tag");
    CHECK(entries(c3.data_dir) == -1);
    free(dd);
}

/* data.max_len_ratio: training pairs whose longer side has more than ratio x the shorter's pieces are
 * skipped and counted (the manifest keeps the count); validation pairs are all kept; the ratio is data. */
static void test_prepare_ratio(const char *tmp) {
    char *dd = path_in(tmp, "ratio");
    static const char *en = "the cat\nthe\nthe big red car sees the old man\nred\ncat dog house tree\n";
    static const char *es = "el gato\nel gato come el perro verde en la casa grande\nel coche\nrojo\nel\n";
    char *fe = tu_write(tmp, "r.en", en), *fs = tu_write(tmp, "r.es", es);
    ll_config c;
    base_config(&c, dd);
    add_corpus(&c, 0, tmp, "c.en", "c.es", "en", "es");
    add_corpus(&c, 0, tmp, "r.en", "r.es", "en", "es");
    add_corpus(&c, 1, tmp, "r.en", "r.es", "en", "es");
    c.max_len_ratio = 2.5f;
    CHECK_MSG(ll_prepare_data(&c) == 0, "%s", ll_errbuf());
    ll_data_info info;
    CHECK(ll_data_info_read(&info, dd) == 0 && info.n_corpora == 3);
    /* the expected count from the prepared model's pieces */
    char *m = path_in(dd, "spm.model");
    ll_spm *spm = ll_spm_load(m);
    int32_t *ids = NULL;
    int cap = 0, expect = 0;
    char *sl = ll_strdup(en), *tl = ll_strdup(es), *sp = NULL, *tp = NULL;
    for (char *a = strtok_r(sl, "\n", &sp), *b = strtok_r(tl, "\n", &tp); a && b;
         a = strtok_r(NULL, "\n", &sp), b = strtok_r(NULL, "\n", &tp)) {
        int na = ll_spm_encode(spm, a, &ids, &cap), nb = ll_spm_encode(spm, b, &ids, &cap);
        expect += (na > nb ? na : nb) > 2.5 * (na < nb ? na : nb);
    }
    const ll_corpus_info *tr = &info.corpora[1], *va = &info.corpora[2];
    CHECK_MSG(expect >= 2 && expect <= 3, "the test's pairs: %d beyond 2.5", expect); /* (not vacuous) */
    CHECK_MSG(tr->skipped_ratio == expect && tr->n_sents == 5 - expect, "skipped %lld, kept %lld, expected %d",
              (long long)tr->skipped_ratio, (long long)tr->n_sents, expect);
    const ll_corpus_info *c0 = &info.corpora[0]; /* (with 64 pieces a few of its pairs are lopsided too) */
    CHECK(va->skipped_ratio == 0 && va->n_sents == 5 && c0->n_sents + c0->skipped_ratio + c0->skipped_long == 300);
    char *man = path_in(dd, "manifest.txt");
    size_t n;
    char *text = slurp(man, &n);
    CHECK(strstr(text, " ratio=") != NULL);
    free(text);
    /* another ratio is other data; none at all, the manifest of before the setting */
    CHECK(ll_data_is_prepared(&c) == 1);
    c.max_len_ratio = 9;
    CHECK(ll_data_is_prepared(&c) == 0);
    c.max_len_ratio = 0;
    CHECK(ll_data_is_prepared(&c) == 0);
    CHECK_MSG(ll_prepare_data(&c) == 0, "%s", ll_errbuf());
    text = slurp(man, &n);
    CHECK(strstr(text, " ratio=") == NULL);
    CHECK(ll_data_info_read(&info, dd) == 0 && info.corpora[1].n_sents == 5 && info.corpora[1].skipped_ratio == 0);
    free(text);
    free(ids);
    ll_spm_free(spm);
    free(sl);
    free(tl);
    free(m);
    free(man);
    free(fe);
    free(fs);
    free(dd);
}

int main(void) {
    const double t0 = ll_now();
    const char *tmp = fixture_corpora();
    test_prepare_samples(tmp);
    test_prepare_src_tag(tmp);
    test_prepare_ratio(tmp);
    fprintf(stderr, "test_data_options: %.1f s\n", ll_now() - t0);
    return tu_finish("test_data_options");
}
