/* Data pipeline: sentencepiece shim, llprep (ll_prepare_data) on small
 * generated corpora, the manifest / up-to-date check, token files, and every
 * bad-input case (message names file and line; nothing left in data_dir).
 * llprep's optional data settings (sampled segmentations, source tags, the
 * length-ratio filter) are tested in test_data_options.c. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/decode.h"
#include "util/testutil.h"

#include "util/data_fixture.h"

/* ---- sentencepiece ---- */

static void test_spm(const char *tmp) {
    char *files[2] = {path_in(tmp, "c.en"), path_in(tmp, "c.es")};
    const char *tags[2] = {"<2es>", "<2de>"};
    char *p1 = path_in(tmp, "m1"), *p2 = path_in(tmp, "m2");
    CHECK(ll_spm_train((const char *const *)files, 2, p1, 64, tags, 2, 7) == 0);
    CHECK(ll_spm_train((const char *const *)files, 2, p2, 64, tags, 2, 7) == 0);
    char m1[512], m2[512];
    snprintf(m1, sizeof m1, "%s.model", p1);
    snprintf(m2, sizeof m2, "%s.model", p2);
    size_t n1, n2;
    char *b1 = slurp(m1, &n1), *b2 = slurp(m2, &n2);
    CHECK_MSG(n1 > 0 && n1 == n2 && memcmp(b1, b2, n1) == 0, "spm training is not reproducible");
    free(b1);
    free(b2);
    CHECK(access(p1, F_OK) != 0); /* no stray files next to the model */

    ll_spm *s = ll_spm_load(m1);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(ll_spm_vocab_size(s) == 64);
    int bos, pad, eos, unk;
    ll_spm_special_ids(s, &bos, &pad, &eos, &unk);
    CHECK(bos == 0 && pad == 1 && eos == 2 && unk == 3);
    CHECK(ll_spm_piece_id(s, "<s>") == LL_BOS);
    CHECK(ll_spm_piece_id(s, "<pad>") == LL_PAD);
    CHECK(ll_spm_piece_id(s, "</s>") == LL_EOS);
    CHECK(ll_spm_piece_id(s, "<unk>") == LL_UNK);
    CHECK(ll_spm_piece_id(s, "<2es>") == 4);
    CHECK(ll_spm_piece_id(s, "<2de>") == 5);
    CHECK(ll_spm_piece_id(s, "<2fr>") == -1);
    CHECK(strcmp(ll_spm_id_piece(s, 4), "<2es>") == 0);
    CHECK(ll_spm_id_piece(s, 64) == NULL && ll_spm_id_piece(s, -1) == NULL);

    const char *text = "el gato pequeño come rápido";
    int32_t *ids = NULL;
    int cap = 0;
    int n = ll_spm_encode(s, text, &ids, &cap);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) CHECK(ids[i] > 5 && ids[i] < 64);
    char *back = ll_spm_decode(s, ids, n);
    CHECK_MSG(strcmp(back, text) == 0, "round trip gave '%s'", back);
    free(back);
    /* the tag and EOS/PAD are dropped when decoding */
    int32_t *with = malloc(sizeof(int32_t) * (size_t)(n + 4));
    with[0] = 4;
    memcpy(with + 1, ids, sizeof(int32_t) * (size_t)n);
    with[n + 1] = LL_EOS;
    with[n + 2] = LL_PAD;
    with[n + 3] = 12345; /* out of range */
    back = ll_spm_decode(s, with, n + 4);
    CHECK_MSG(strcmp(back, text) == 0, "decode with specials gave '%s'", back);
    free(back);
    free(with);
    CHECK(ll_spm_encode(s, "", &ids, &cap) == 0);

    /* the serialized proto alone is enough (as stored in checkpoints) */
    size_t np;
    const void *proto = ll_spm_proto(s, &np);
    CHECK(np > 1000);
    ll_spm *s2 = ll_spm_load_bytes(proto, np);
    CHECK(s2 != NULL);
    if (s2) {
        int32_t *ids2 = NULL;
        int cap2 = 0;
        CHECK(ll_spm_encode(s2, text, &ids2, &cap2) == n && memcmp(ids, ids2, sizeof(int32_t) * (size_t)n) == 0);
        CHECK(ll_spm_piece_id(s2, "<2de>") == 5);
        free(ids2);
        ll_spm_free(s2);
    }
    free(ids);
    ll_spm_free(s);

    CHECK(ll_spm_load_bytes("garbage", 7) == NULL);
    CHECK(ll_spm_load(files[0]) == NULL);
    CHECK_CONTAINS(ll_errbuf(), "c.en");
    /* vocabulary larger than the corpus allows: spm's advice is passed on, on one line */
    CHECK(ll_spm_train((const char *const *)files, 2, p1, 100000, NULL, 0, 7) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.vocab_size=100000");
    CHECK(strchr(ll_errbuf(), '\n') == NULL);
    free(files[0]);
    free(files[1]);
    free(p1);
    free(p2);
}

/* ---- token files ---- */

static void test_tokfile(const char *tmp) {
    char *path = path_in(tmp, "t.bin");
    ll_tokfile_writer *w = ll_tokfile_create(path);
    CHECK(w != NULL);
    int32_t a[] = {5, 6, 7, LL_EOS}, b[] = {LL_EOS}, c[] = {9, LL_EOS};
    CHECK(ll_tokfile_append(w, a, 4, 0) == 0);
    CHECK(ll_tokfile_append(w, b, 1, 3) == 0);
    CHECK(ll_tokfile_append(w, c, 2, 4) == 0);
    CHECK(ll_tokfile_append(w, a, 3, 5) == -1); /* no EOS */
    CHECK(access(path, F_OK) != 0);             /* not visible before commit */
    CHECK(ll_tokfile_commit(w) == 0);
    ll_tokfile f;
    CHECK(ll_tokfile_open(&f, path) == 0);
    CHECK(f.n_sents == 3 && f.n_tokens == 7);
    CHECK(ll_tokfile_len(&f, 0) == 4 && ll_tokfile_len(&f, 1) == 1 && ll_tokfile_len(&f, 2) == 2);
    CHECK(f.tokens[f.offsets[2]] == 9 && f.lines[1] == 3 && f.lines[2] == 4);
    CHECK(ll_tokfile_verify(&f, path, 10) == 0);
    CHECK(ll_tokfile_verify(&f, path, 8) == -1);
    CHECK_CONTAINS(ll_errbuf(), "outside the vocabulary");
    ll_tokfile_close(&f);

    size_t n;
    char *bytes = slurp(path, &n);
    char *bad = path_in(tmp, "bad.bin");
    FILE *o = fopen(bad, "wb");
    fwrite(bytes, 1, n - 5, o);
    fclose(o);
    CHECK(ll_tokfile_open(&f, bad) == -1);
    CHECK_CONTAINS(ll_errbuf(), "bad.bin: truncated");
    o = fopen(bad, "wb");
    fwrite(bytes, 1, 20, o);
    fclose(o);
    CHECK(ll_tokfile_open(&f, bad) == -1);
    CHECK_CONTAINS(ll_errbuf(), "bad.bin: truncated");
    bytes[0] = 'X';
    o = fopen(bad, "wb");
    fwrite(bytes, 1, n, o);
    fclose(o);
    CHECK(ll_tokfile_open(&f, bad) == -1);
    CHECK_CONTAINS(ll_errbuf(), "bad.bin: not an ll token file");
    bytes[0] = 'L';
    uint64_t off_pos = (64 + 7 * 4 + 7) & ~7u; /* offsets after the tokens */
    uint64_t v = 9;
    memcpy(bytes + off_pos + 8, &v, 8);
    o = fopen(bad, "wb");
    fwrite(bytes, 1, n, o);
    fclose(o);
    CHECK(ll_tokfile_open(&f, bad) == -1);
    CHECK_CONTAINS(ll_errbuf(), "bad.bin: corrupt offsets");
    bytes[70] ^= 1; /* a token: only the checksum notices */
    v = 4;
    memcpy(bytes + off_pos + 8, &v, 8);
    o = fopen(bad, "wb");
    fwrite(bytes, 1, n, o);
    fclose(o);
    CHECK(ll_tokfile_open(&f, bad) == 0);
    CHECK(ll_tokfile_verify(&f, bad, 0) == -1);
    CHECK_CONTAINS(ll_errbuf(), "checksum");
    ll_tokfile_close(&f);
    CHECK(ll_tokfile_open(&f, "/nonexistent/x.bin") == -1);
    CHECK_CONTAINS(ll_errbuf(), "/nonexistent/x.bin: cannot open");
    free(bytes);

    /* abort leaves nothing */
    char *p2 = path_in(tmp, "aborted.bin");
    w = ll_tokfile_create(p2);
    ll_tokfile_append(w, a, 4, 0);
    ll_tokfile_abort(w);
    CHECK(access(p2, F_OK) != 0);
    unlink(path);
    unlink(bad);
    CHECK(entries(tmp) >= 0);
    free(p2);
    free(bad);
    free(path);
}

/* ---- prepare ---- */

static void test_prepare_multi(const char *tmp) {
    char *dd = path_in(tmp, "multi");
    ll_config c;
    multi_config(&c, dd, tmp);
    int rc = ll_prepare_data(&c);
    CHECK_MSG(rc == 0, "%s", ll_errbuf());
    if (rc) return;
    CHECK(entries(dd) == 8); /* manifest, spm.model, 3 x {src,tgt} */
    ll_data_info info;
    CHECK(ll_data_info_read(&info, dd) == 0);
    CHECK(info.vocab_size == 64 && info.lang_tags == 1);
    CHECK(info.n_langs == 3 && !strcmp(info.langs[0], "en") && !strcmp(info.langs[1], "es") &&
          !strcmp(info.langs[2], "de"));
    CHECK(info.n_corpora == 3);
    CHECK(info.corpora[0].n_sents == 300 && info.corpora[1].n_sents == 300 && info.corpora[2].n_sents == 30);
    CHECK(info.corpora[0].tgt_tag == 4 && info.corpora[1].tgt_tag == 5 && info.corpora[2].tgt_tag == 4);
    CHECK(!strcmp(info.corpora[1].src_file, "train.1.en-de.src.bin"));
    CHECK(!strcmp(info.corpora[2].split, "valid"));

    ll_dataset d;
    CHECK(ll_dataset_open(&d, &c, "train") == 0);
    CHECK(d.n_pairs == 2 && d.n_langs == 3);
    CHECK(d.pairs[0].src_lang == 0 && d.pairs[0].tgt_lang == 1 && d.pairs[1].tgt_lang == 2);
    CHECK(d.pairs[0].tgt_tag == 4 && d.pairs[1].tgt_tag == 5);
    char spm_path[600];
    snprintf(spm_path, sizeof spm_path, "%s/spm.model", dd);
    ll_spm *s = ll_spm_load(spm_path);
    CHECK(s != NULL);
    /* every sentence decodes back to its raw line */
    char raw_path[600];
    snprintf(raw_path, sizeof raw_path, "%s/c.de", tmp);
    char *raw = slurp(raw_path, NULL);
    char *lines[400];
    int nl = 0;
    for (char *save, *l = strtok_r(raw, "\n", &save); l && nl < 400; l = strtok_r(NULL, "\n", &save)) lines[nl++] = l;
    CHECK(nl == 300);
    const ll_tokfile *t = &d.pairs[1].tgt;
    int mismatches = 0;
    for (int i = 0; s && i < t->n_sents; i++) {
        CHECK(t->tokens[t->offsets[i + 1] - 1] == LL_EOS);
        char *dec = ll_spm_decode(s, t->tokens + t->offsets[i], ll_tokfile_len(t, i));
        mismatches += strcmp(dec, lines[t->lines[i]]) != 0;
        free(dec);
    }
    CHECK(mismatches == 0);
    CHECK(ll_tokfile_verify(&d.pairs[0].src, "src", 64) == 0 && ll_tokfile_verify(&d.pairs[1].tgt, "tgt", 64) == 0);
    free(raw);
    ll_dataset_close(&d);
    CHECK(ll_dataset_open(&d, &c, "valid") == 0);
    CHECK(d.n_pairs == 1 && d.pairs[0].src.n_sents == 30 && d.pairs[0].tgt_tag == 4 && d.n_langs == 3);
    ll_dataset_close(&d);
    CHECK(ll_dataset_open(&d, &c, "test") == -1);
    if (s) ll_spm_free(s);

    /* up-to-date check */
    CHECK(ll_data_is_prepared(&c) == 1);
    char cde[600];
    snprintf(cde, sizeof cde, "%s/c.de", tmp);
    struct utimbuf ut = {1000000000, 1000000000};
    utime(cde, &ut); /* new mtime, same content: re-hashed, still prepared */
    CHECK(ll_data_is_prepared(&c) == 1);
    ll_config c2 = c;
    c2.vocab_size = 60;
    CHECK(ll_data_is_prepared(&c2) == 0);
    c2 = c;
    snprintf(c2.train[1].tgt_lang, LL_LANG_MAX, "fr");
    CHECK(ll_data_is_prepared(&c2) == 0);
    c2 = c;
    c2.max_tokens = 99; /* batching settings do not matter */
    c2.seed = 42;
    CHECK(ll_data_is_prepared(&c2) == 1);
    FILE *f = fopen(cde, "a");
    fputs("ein Hund\n", f);
    fclose(f);
    CHECK(ll_data_is_prepared(&c) == 0);
    gen_corpus(tmp, "c", 300, 10, 1); /* restore */

    /* re-preparing with fewer corpora removes the stale files */
    c2 = c;
    c2.n_train = 1;
    c2.n_valid = 0;
    CHECK(ll_prepare_data(&c2) == 0);
    CHECK(entries(dd) == 4);
    CHECK(ll_data_is_prepared(&c2) == 1 && ll_data_is_prepared(&c) == 0);
    CHECK(ll_data_info_read(&info, dd) == 0);
    CHECK(info.lang_tags == 0 && info.n_langs == 2 && info.corpora[0].tgt_tag == -1);
    CHECK(ll_dataset_open(&d, &c2, "valid") == 0);
    CHECK(d.n_pairs == 0);
    ll_dataset_close(&d);
    free(dd);
}

static void test_prepare_options(const char *tmp) {
    /* a single target language: tags only when forced on */
    char *dd = path_in(tmp, "single");
    ll_config c;
    base_config(&c, dd);
    add_corpus(&c, 0, tmp, "c.en", "c.es", "en", "es");
    snprintf(c.lang_tags, sizeof c.lang_tags, "on");
    CHECK_MSG(ll_prepare_data(&c) == 0, "%s", ll_errbuf());
    ll_dataset d;
    CHECK(ll_dataset_open(&d, &c, "train") == 0);
    CHECK(d.n_pairs == 1 && d.pairs[0].tgt_tag == 4 && d.n_langs == 2);
    ll_dataset_close(&d);

    /* data.spm_model: copied into data_dir, not retrained */
    char *dd2 = path_in(tmp, "given");
    ll_config c2;
    base_config(&c2, dd2);
    add_corpus(&c2, 0, tmp, "c.en", "c.es", "en", "es");
    snprintf(c2.spm_model, sizeof c2.spm_model, "%s/spm.model", dd);
    c2.vocab_size = 5000; /* ignored with a given model */
    CHECK_MSG(ll_prepare_data(&c2) == 0, "%s", ll_errbuf());
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/spm.model", dd);
    snprintf(b, sizeof b, "%s/spm.model", dd2);
    size_t na, nb;
    char *ba = slurp(a, &na), *bb = slurp(b, &nb);
    CHECK(na == nb && memcmp(ba, bb, na) == 0);
    free(ba);
    free(bb);
    CHECK(ll_data_is_prepared(&c2) == 1);
    /* the given model lacks <2de>: a tag for a second target language is refused */
    add_corpus(&c2, 0, tmp, "c.en", "c.de", "en", "de");
    snprintf(c2.data_dir, sizeof c2.data_dir, "%s/given2", tmp);
    CHECK(ll_prepare_data(&c2) == -1);
    CHECK_CONTAINS(ll_errbuf(), "no piece <2de>");
    CHECK(entries(c2.data_dir) == -1);

    /* empty lines on either side are skipped and counted; line numbers still refer to the raw file */
    char *ne = tu_write(tmp, "e.en", "a cat\n\nthe dog\nred car\n  \ngreen tree\n");
    char *ns = tu_write(tmp, "e.es", "un gato\nel perro\n\ncoche rojo\nverde\nárbol verde\n");
    ll_config c3;
    base_config(&c3, dd);
    c3.train[0] = c.train[0];
    c3.n_train = 1;
    add_corpus(&c3, 1, tmp, "e.en", "e.es", "en", "es");
    snprintf(c3.long_lines, sizeof c3.long_lines, "skip");
    c3.max_len = 6;
    CHECK_MSG(ll_prepare_data(&c3) == 0, "%s", ll_errbuf());
    ll_data_info info;
    CHECK(ll_data_info_read(&info, dd) == 0);
    const ll_corpus_info *ci = &info.corpora[1];
    CHECK_MSG(ci->raw_lines == 6 && ci->skipped_empty == 3 && ci->n_sents + ci->skipped_long == 3,
              "lines %lld empty %lld long %lld kept %lld", (long long)ci->raw_lines, (long long)ci->skipped_empty,
              (long long)ci->skipped_long, (long long)ci->n_sents);
    CHECK(info.corpora[0].skipped_long > 0 && info.corpora[0].n_sents + info.corpora[0].skipped_long == 300);
    CHECK(ll_dataset_open(&d, &c3, "valid") == 0);
    if (d.n_pairs == 1 && d.pairs[0].src.n_sents > 0) CHECK(d.pairs[0].src.lines[0] == 0);
    for (int i = 0; d.n_pairs == 1 && i < d.pairs[0].src.n_sents; i++) {
        uint64_t l = d.pairs[0].src.lines[i];
        CHECK(l == 0 || l == 3 || l == 5);
        CHECK(ll_tokfile_len(&d.pairs[0].src, i) <= 6 && ll_tokfile_len(&d.pairs[0].tgt, i) <= 6);
    }
    ll_dataset_close(&d);
    free(ne);
    free(ns);
    free(dd);
    free(dd2);
}

/* ---- bad input: one-line message naming file (and line); data_dir untouched ---- */

typedef struct {
    const char *name;
    const char *src_text, *tgt_text; /* NULL = the file does not exist */
    const char *long_lines;
    int max_len, as_valid;
    const char *expect1, *expect2;
} bad_case;

static void run_bad_case(const char *tmp, const bad_case *bc, const char *existing_dd) {
    char sn[128], tn[128];
    snprintf(sn, sizeof sn, "%s.src", bc->name);
    snprintf(tn, sizeof tn, "%s.tgt", bc->name);
    if (bc->src_text) free(tu_write(tmp, sn, bc->src_text));
    if (bc->tgt_text) free(tu_write(tmp, tn, bc->tgt_text));
    ll_config c;
    char dd[600];
    /* a fresh nested directory (must not be created), or an already prepared one (must not change) */
    if (existing_dd)
        snprintf(dd, sizeof dd, "%s", existing_dd);
    else
        snprintf(dd, sizeof dd, "%s/bad-%s/sub", tmp, bc->name);
    base_config(&c, dd);
    add_corpus(&c, 0, tmp, "c.en", "c.es", "en", "es");
    if (bc->as_valid)
        add_corpus(&c, 1, tmp, sn, tn, "en", "es");
    else
        add_corpus(&c, 0, tmp, sn, tn, "en", "de");
    snprintf(c.long_lines, sizeof c.long_lines, "%s", bc->long_lines ? bc->long_lines : "skip");
    if (bc->max_len) c.max_len = bc->max_len;
    char man[700];
    snprintf(man, sizeof man, "%s/manifest.txt", dd);
    size_t n0 = 0, n1 = 0;
    char *before = existing_dd ? slurp(man, &n0) : NULL;
    int e0 = entries(dd);
    int rc = ll_prepare_data(&c);
    CHECK_MSG(rc == -1, "case %s: prepare succeeded", bc->name);
    const char *msg = ll_errbuf();
    CHECK_MSG(strstr(msg, bc->expect1) && (!bc->expect2 || strstr(msg, bc->expect2)),
              "case %s: message '%s' lacks '%s' / '%s'", bc->name, msg, bc->expect1, bc->expect2 ? bc->expect2 : "");
    CHECK_MSG(strchr(msg, '\n') == NULL, "case %s: message has several lines", bc->name);
    CHECK_MSG(entries(dd) == e0, "case %s: data_dir has %d entries, had %d", bc->name, entries(dd), e0);
    if (existing_dd) {
        char *after = slurp(man, &n1);
        CHECK_MSG(n0 == n1 && memcmp(before, after, n0) == 0, "case %s: manifest changed", bc->name);
        free(after);
    } else {
        char top[700];
        snprintf(top, sizeof top, "%s/bad-%s", tmp, bc->name);
        CHECK_MSG(entries(top) == -1, "case %s: %s was created", bc->name, top);
    }
    free(before);
}

#define L9 "the big green dog sees a small red car "
#define L54 L9 L9 L9 L9 L9 L9

static void test_bad_inputs(const char *tmp) {
    static const bad_case cases[] = {
        {"mismatch", "a cat\nthe dog\nred car\n", "un gato\nel perro\n", NULL, 0, 0, "mismatch.src has 3 lines but",
         "mismatch.tgt has 2"},
        {"utf8", "a cat\nthe dog\nred car\n", "un gato\nel pe\xffrro\ncoche\n", NULL, 0, 0,
         "utf8.tgt:2: invalid UTF-8 at byte 6", NULL},
        {"overlong", "a cat\nthe\xc0\xaf dog\n", "un gato\nel perro\n", NULL, 0, 0,
         "overlong.src:2: invalid UTF-8 at byte 4", NULL},
        {"cut", "a cat\nthe dog \xe2\x82\n", "un gato\nel perro\n", NULL, 0, 0, "cut.src:2: invalid UTF-8 at byte 9",
         NULL},
        {"empty", "", "", NULL, 0, 0, "empty.src: empty corpus", NULL},
        {"missing", "a cat\n", NULL, NULL, 0, 0, "missing.tgt: cannot open", NULL},
        {"allempty", "\n\n", "a\n\n", NULL, 0, 0, "allempty.src: no usable sentence pairs", "2 empty"},
        {"long", "a cat\n" L54 "\nred car\n", "un gato\nel perro\ncoche rojo\n", "error", 40, 0,
         "long.src:2: sentence has ", "more than data.max_len=40"},
        {"longtgt", "a\nb\nc\n", "un\n" L54 "\nd\n", "error", 40, 0, "longtgt.tgt:2: sentence has ",
         "more than data.max_len=40"},
        {"longvalid", "a\nb\nc\nd\n", "un\nel\nd\n" L54 "\n", "error", 40, 1, "longvalid.tgt:4: sentence has ",
         "more than data.max_len=40"},
        {"validutf8", "a cat\n\xed\xa0\x80\n", "un gato\nel perro\n", NULL, 0, 1,
         "validutf8.src:2: invalid UTF-8 at byte 1", NULL},
    };
    int nc = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < nc; i++) run_bad_case(tmp, &cases[i], NULL);

    /* the same cases over an already prepared data_dir leave it exactly as it was */
    char *dd = path_in(tmp, "prepared");
    ll_config c;
    base_config(&c, dd);
    add_corpus(&c, 0, tmp, "c.en", "c.es", "en", "es");
    CHECK(ll_prepare_data(&c) == 0);
    for (int i = 0; i < nc; i++) run_bad_case(tmp, &cases[i], dd);
    CHECK(ll_data_is_prepared(&c) == 1);

    /* bad settings */
    ll_config b = c;
    b.n_train = 0;
    CHECK(ll_prepare_data(&b) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.train");
    b = c;
    snprintf(b.train[0].tgt_lang, LL_LANG_MAX, "e s");
    CHECK(ll_prepare_data(&b) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.train[0].tgt_lang");
    b = c;
    add_corpus(&b, 1, tmp, "c.en", "c.de", "en", "de");
    snprintf(b.lang_tags, sizeof b.lang_tags, "on");
    CHECK(ll_prepare_data(&b) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.valid[0].tgt_lang");
    b = c;
    b.vocab_size = 100000;
    CHECK(ll_prepare_data(&b) == -1);
    CHECK_CONTAINS(ll_errbuf(), "vocab");
    CHECK(entries(dd) == 4);
    CHECK(ll_data_is_prepared(&c) == 1);
    free(dd);
}

int main(void) {
    const double t0 = ll_now();
    const char *tmp = fixture_corpora();
    test_spm(tmp);
    test_tokfile(tmp);
    test_prepare_multi(tmp);
    test_prepare_options(tmp);
    test_bad_inputs(tmp);
    fprintf(stderr, "test_data: %.1f s\n", ll_now() - t0);
    return tu_finish("test_data");
}
