/* llprep's work: validate the raw corpora, train (or copy) the sentencepiece
 * model, binarise every corpus and write the manifest.  Everything is built in
 * a staging directory inside data_dir and renamed into place at the end, so a
 * failed or interrupted run leaves data_dir as it was (at worst a hidden
 * staging directory of a killed run, removed by the next run). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"
#include "ll/core.h"

#define STAGE_PREFIX ".llprep."
#define CHUNK 4096 /* lines encoded in parallel at a time */
#define SPM_SEED 1 /* fixed: prepared data must not depend on train.seed */

typedef struct {
    const ll_config *cfg;
    char stage[LL_PATH_MAX + 64];
    char created[LL_PATH_MAX]; /* topmost directory this run created, "" if none */
    ll_spm *spm;
    ll_data_info info;
    ll_input_stamp *inputs;
    int n_inputs;
    uint64_t *hashes; /* per corpus file: train src,tgt,..., valid src,tgt,... */
    int64_t *lines;
    char **tags; /* "<2xx>" per train target language */
    int n_tags;
    const char *src_tags[2 * LL_MAX_CORPORA]; /* the corpora's distinct src_tag pieces */
    int n_src_tags;
} prep;

/* ---- checks ---- */

/* Every input is read more than once (line counts, sentencepiece training,
 * encoding; the manifest's hash on the next start), so a pipe, FIFO or
 * /dev/stdin would hang or read empty the second time: refused up front. */
static int regular_input(const char *path, const char *key, const char *where) {
    struct stat st;
    const char *sep = where[0] ? ": " : "";
    if (strpbrk(path, "\n\r")) /* (the manifest lists inputs a line each: it could never be read back) */
        return ll_fail("%s%s%s: the path holds a line break; rename the file", where, sep, key);
    if (stat(path, &st) != 0) return ll_fail("%s%s%s %s: cannot open: %s", where, sep, key, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ll_fail("%s%s%s %s: not a regular file (a pipe, FIFO, device or directory); ll reads each input more "
                       "than once (sentencepiece training, then encoding): save it to a file first",
                       where, sep, key, path);
    return 0;
}

static int check_config(const ll_config *cfg) {
    if (!cfg->data_dir[0]) return ll_fail("data.dir: not set");
    if (cfg->n_train < 1) return ll_fail("data.train: no training corpora");
    if (cfg->n_train > LL_MAX_CORPORA || cfg->n_valid > LL_MAX_CORPORA || cfg->n_valid < 0)
        return ll_fail("data: at most %d corpora per split", LL_MAX_CORPORA);
    if (strcmp(cfg->long_lines, "skip") && strcmp(cfg->long_lines, "error"))
        return ll_fail("data.long_lines: '%s' is not skip or error", cfg->long_lines);
    if (strcmp(cfg->lang_tags, "auto") && strcmp(cfg->lang_tags, "on") && strcmp(cfg->lang_tags, "off"))
        return ll_fail("data.lang_tags: '%s' is not auto, on or off", cfg->lang_tags);
    if (cfg->max_len < 2) return ll_fail("data.max_len: %d is too small (EOS alone takes one)", cfg->max_len);
    if (!cfg->spm_model[0] && cfg->vocab_size < 8) return ll_fail("data.vocab_size: %d is too small", cfg->vocab_size);
    char where[LL_PATH_MAX + 16]; /* "config:line" of the key or entry, for the messages */
    if (cfg->spm_model[0] &&
        regular_input(cfg->spm_model, "data.spm_model", ll_config_where(cfg, "data.spm_model", -1, where, sizeof where)))
        return -1;
    for (int s = 0; s < 2; s++) {
        const char *split = s ? "valid" : "train";
        const ll_corpus_cfg *cc = s ? cfg->valid : cfg->train;
        for (int i = 0; i < (s ? cfg->n_valid : cfg->n_train); i++) {
            if (!cc[i].src[0] || !cc[i].tgt[0]) return ll_fail("data.%s[%d]: src and tgt files are required", split, i);
            char key[48];
            snprintf(key, sizeof key, "data.%s", split);
            ll_config_where(cfg, key, i, where, sizeof where);
            snprintf(key, sizeof key, "data.%s[%d].src", split, i);
            if (regular_input(cc[i].src, key, where)) return -1;
            snprintf(key, sizeof key, "data.%s[%d].tgt", split, i);
            if (regular_input(cc[i].tgt, key, where)) return -1;
            if (!ll_lang_ok(cc[i].src_lang))
                return ll_fail("data.%s[%d].src_lang: invalid language code '%s' (letters, digits, _ and -)", split, i,
                               cc[i].src_lang);
            if (!ll_lang_ok(cc[i].tgt_lang))
                return ll_fail("data.%s[%d].tgt_lang: invalid language code '%s' (letters, digits, _ and -)", split, i,
                               cc[i].tgt_lang);
        }
    }
    return 0;
}

static const ll_corpus_cfg *corpus_at(const ll_config *cfg, int k) {
    return k < cfg->n_train ? &cfg->train[k] : &cfg->valid[k - cfg->n_train];
}

/* Scan every raw file once (a file listed twice is read once), then compare line counts. */
static int scan_inputs(prep *P) {
    const ll_config *cfg = P->cfg;
    int nc = cfg->n_train + cfg->n_valid;
    P->hashes = ll_calloc((size_t)(2 * nc), sizeof(uint64_t));
    P->lines = ll_calloc((size_t)(2 * nc), sizeof(int64_t));
    P->inputs = ll_calloc((size_t)(2 * nc + 1), sizeof(ll_input_stamp));
    for (int k = 0; k < 2 * nc; k++) {
        const ll_corpus_cfg *cc = corpus_at(cfg, k / 2);
        const char *path = k % 2 ? cc->tgt : cc->src;
        int j = 0;
        while (j < P->n_inputs && strcmp(P->inputs[j].path, path)) j++;
        if (j == P->n_inputs) {
            ll_input_stamp *st = &P->inputs[P->n_inputs];
            snprintf(st->path, sizeof st->path, "%s", path);
            if (ll_stat_stamp(path, &st->size, &st->mtime_ns) != 0 ||
                ll_scan_text(path, &P->lines[k], &st->hash) != 0) {
                if (access(path, F_OK) != 0) return ll_fail("%s: cannot open: %s", path, strerror(errno));
                return -1;
            }
            P->n_inputs++;
        } else {
            for (int m = 0; m < k; m++)
                if (!strcmp(m % 2 ? corpus_at(cfg, m / 2)->tgt : corpus_at(cfg, m / 2)->src, path))
                    P->lines[k] = P->lines[m];
        }
        P->hashes[k] = P->inputs[j].hash;
        if (k % 2 == 1 && P->lines[k] != P->lines[k - 1])
            return ll_fail("%s has %" PRId64 " lines but %s has %" PRId64, cc->src, P->lines[k - 1], cc->tgt,
                           P->lines[k]);
    }
    return 0;
}

static int add_lang(ll_data_info *info, const char *lang) {
    for (int i = 0; i < info->n_langs; i++)
        if (!strcmp(info->langs[i], lang)) return i;
    snprintf(info->langs[info->n_langs], LL_LANG_MAX, "%s", lang);
    return info->n_langs++;
}

/* Languages in order of appearance; tags for the distinct train target languages. */
static int plan_langs(prep *P) {
    const ll_config *cfg = P->cfg;
    ll_data_info *info = &P->info;
    for (int k = 0; k < cfg->n_train + cfg->n_valid; k++) {
        add_lang(info, corpus_at(cfg, k)->src_lang);
        add_lang(info, corpus_at(cfg, k)->tgt_lang);
    }
    P->tags = ll_calloc(LL_MAX_CORPORA, sizeof(char *));
    for (int i = 0; i < cfg->n_train; i++) {
        char tag[LL_LANG_MAX + 4];
        snprintf(tag, sizeof tag, "<2%s>", cfg->train[i].tgt_lang);
        int j = 0;
        while (j < P->n_tags && strcmp(P->tags[j], tag)) j++;
        if (j == P->n_tags) P->tags[P->n_tags++] = ll_strdup(tag);
    }
    info->lang_tags = !strcmp(cfg->lang_tags, "on") || (!strcmp(cfg->lang_tags, "auto") && P->n_tags > 1);
    for (int k = 0; k < cfg->n_train + cfg->n_valid; k++) {
        const char *t = corpus_at(cfg, k)->src_tag;
        int j = 0;
        while (j < P->n_src_tags && strcmp(P->src_tags[j], t)) j++;
        if (t[0] && j == P->n_src_tags) P->src_tags[P->n_src_tags++] = t;
    }
    if (!info->lang_tags) return 0;
    for (int i = 0; i < cfg->n_valid; i++) {
        int found = 0;
        for (int j = 0; j < cfg->n_train; j++) found |= !strcmp(cfg->train[j].tgt_lang, cfg->valid[i].tgt_lang);
        if (!found)
            return ll_fail("data.valid[%d].tgt_lang: '%s' is not a target language of data.train (no language tag)", i,
                           cfg->valid[i].tgt_lang);
    }
    return 0;
}

/* ---- directories ---- */

/* mkdir -p, remembering the topmost directory created so an error can undo it. */
static int mkdirs(char *created, size_t created_n, const char *dir) {
    char p[LL_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) == 0) {
            if (!created[0]) snprintf(created, created_n, "%s", p);
        } else if (errno != EEXIST) {
            int e = errno;
            p[i] = c;
            return ll_fail("%s: cannot create directory: %s", dir, strerror(e));
        }
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return ll_fail("%s: not a directory", dir);
    return 0;
}
static int make_dirs(prep *P, const char *dir) { return mkdirs(P->created, sizeof P->created, dir); }

/* rmdir dir and its parents up to and including top (each only when empty). */
static void remove_dirs_up_to(const char *dir, const char *top) {
    char p[LL_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (;;) {
        rmdir(p);
        if (!strcmp(p, top) || !strcmp(p, "/") || !strcmp(p, ".")) break;
        char *slash = strrchr(p, '/');
        if (!slash) break;
        *slash = 0;
    }
}

/* ---- data_dir's lock ---- */

#define LOCK_FILE ".lldata.lock" /* (not STAGE_PREFIX: remove_stale_stages leaves it) */

int ll_data_lock_take(ll_data_lock *l, const char *data_dir) {
    memset(l, 0, sizeof *l);
    l->fd = -1;
    if (!data_dir[0]) return ll_fail("data.dir: not set");
    snprintf(l->dir, sizeof l->dir, "%s", data_dir);
    char path[LL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" LOCK_FILE, data_dir);
    for (int said = 0, tries = 0;; tries++) {
        if (mkdirs(l->created, sizeof l->created, data_dir) != 0) return -1;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 && errno == ENOENT && tries < 100) continue; /* a holder's failed first preparation removed
                                                                  * data_dir just now: make it again */
        if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
            /* a data set on a read-only mount, or another user's: reading it needs no lock (preparing it
             * fails on its own, naming the file) */
            ll_warn("%s: cannot create data.dir's lock (%s): going on without it", path, strerror(errno));
            return 0;
        }
        if (fd < 0) {
            int e = errno;
            ll_data_lock_release(l, 1);
            return ll_fail("%s: cannot create data.dir's lock: %s", path, strerror(e));
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int e = errno;
            if (e != EAGAIN && e != EACCES) { /* (a file system without locks: go on without one) */
                ll_warn("%s: cannot lock (%s): nothing keeps another llprep or lltrain from preparing data.dir at "
                        "the same time", path, strerror(e));
                close(fd);
                return 0;
            }
            struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            if (!said++) { /* (also under --quiet: a process that waits says why) */
                if (fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK)
                    ll_warn("%s: waiting for PID %ld, which is preparing or opening this data.dir ...", data_dir,
                            (long)who.l_pid);
                else
                    ll_warn("%s: waiting for the process that holds %s ...", data_dir, path);
            }
            int r;
            while ((r = fcntl(fd, F_SETLKW, &fl)) != 0 && errno == EINTR) {}
            if (r != 0) {
                int e2 = errno;
                close(fd);
                ll_data_lock_release(l, 1);
                return ll_fail("%s: cannot lock: %s", path, strerror(e2));
            }
        }
        /* the holder removed the file when it let go: lock the one now at the path */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            l->fd = fd;
            ll_signal_cleanup_file(path, 1); /* a stopped holder lets go as ll_data_lock_release does */
            return 0;
        }
        close(fd);
    }
}

/* The file goes with the lock, so data_dir keeps only what llprep wrote: removed while still locked,
 * a waiter then finds its file gone and starts over on a new one (ll_data_lock_take). */
void ll_data_lock_release(ll_data_lock *l, int failed) {
    if (l->fd >= 0) {
        char path[LL_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/" LOCK_FILE, l->dir);
        unlink(path);
        ll_signal_cleanup_file(path, 0);
    }
    if (failed && l->created[0]) remove_dirs_up_to(l->dir, l->created);
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    l->created[0] = 0;
}

/* Remove a flat directory (staging dirs hold only files). */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[LL_PATH_MAX + 320];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* Staging directories of killed runs: remove those whose process is gone. */
static void remove_stale_stages(const char *data_dir) {
    DIR *d = opendir(data_dir);
    if (!d) return;
    struct dirent *e;
    char p[LL_PATH_MAX + 320];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, STAGE_PREFIX, strlen(STAGE_PREFIX)) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(STAGE_PREFIX), &end, 10);
        if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running */
        snprintf(p, sizeof p, "%s/%s", data_dir, e->d_name);
        remove_flat_dir(p);
    }
    closedir(d);
}

static void undo_dirs(prep *P) {
    if (P->stage[0]) remove_flat_dir(P->stage);
    if (P->created[0]) remove_dirs_up_to(P->cfg->data_dir, P->created);
}

/* ---- sentencepiece ---- */


static int make_spm(prep *P) {
    const ll_config *cfg = P->cfg;
    char model[LL_PATH_MAX + 96];
    snprintf(model, sizeof model, "%s/%s", P->stage, LL_SPM_FILE);
    snprintf(P->info.spm_file, sizeof P->info.spm_file, "%s", LL_SPM_FILE);
    const char *what = cfg->spm_model[0] ? cfg->spm_model : "the trained model";
    if (cfg->spm_model[0]) {
        if (ll_copy_file(cfg->spm_model, model) != 0) return -1;
    } else {
        /* the distinct train text files, source and target */
        const char **files = ll_calloc((size_t)(2 * cfg->n_train), sizeof(char *));
        int n = 0;
        for (int k = 0; k < 2 * cfg->n_train; k++) {
            const char *f = k % 2 ? cfg->train[k / 2].tgt : cfg->train[k / 2].src;
            int j = 0;
            while (j < n && strcmp(files[j], f)) j++;
            if (j == n) files[n++] = f;
        }
        char prefix[LL_PATH_MAX + 96];
        snprintf(prefix, sizeof prefix, "%s/spm", P->stage);
        /* user-defined pieces: the language tags first (ids 4, 5, ...), then the source tags */
        const char *symbols[3 * LL_MAX_CORPORA];
        int n_symbols = 0;
        for (int i = 0; P->info.lang_tags && i < P->n_tags; i++) symbols[n_symbols++] = P->tags[i];
        for (int i = 0; i < P->n_src_tags; i++) symbols[n_symbols++] = P->src_tags[i];
        int rc = ll_spm_train(files, n, prefix, cfg->vocab_size, symbols, n_symbols, SPM_SEED);
        free(files);
        if (rc != 0) return -1;
    }
    if (!(P->spm = ll_spm_load(model))) {
        if (!cfg->spm_model[0]) return -1;
        char why[1024]; /* name the user's file, not the staging copy (deleted on the way out) */
        const char *e = ll_errbuf();
        snprintf(why, sizeof why, "%s", !strncmp(e, model, strlen(model)) ? e + strlen(model) : e);
        return ll_fail("data.spm_model %s%s", cfg->spm_model, why);
    }
    int bos, pad, eos, unk;
    ll_spm_special_ids(P->spm, &bos, &pad, &eos, &unk);
    if (bos != LL_BOS || pad != LL_PAD || eos != LL_EOS || unk != LL_UNK)
        return ll_fail("%s: sentencepiece model has bos/pad/eos/unk ids %d/%d/%d/%d, ll needs %d/%d/%d/%d "
                       "(spm_train --bos_id=0 --pad_id=1 --eos_id=2 --unk_id=3)",
                       what, bos, pad, eos, unk, LL_BOS, LL_PAD, LL_EOS, LL_UNK);
    if (P->info.lang_tags)
        for (int i = 0; i < P->n_tags; i++)
            if (ll_spm_piece_id(P->spm, P->tags[i]) < 0)
                return ll_fail("%s: sentencepiece model has no piece %s for the target-language tag "
                               "(train it with --user_defined_symbols, or set data.lang_tags: off)",
                               what, P->tags[i]);
    for (int i = 0; i < P->n_src_tags; i++)
        if (ll_spm_piece_id(P->spm, P->src_tags[i]) < 0)
            return ll_fail("%s: sentencepiece model has no piece %s for a corpus's src_tag (train it with "
                           "--user_defined_symbols)",
                           what, P->src_tags[i]);
    P->info.vocab_size = ll_spm_vocab_size(P->spm);
    return 0;
}

/* ---- binarising ---- */

typedef struct {
    char *text; /* the chunk's lines, NUL-separated */
    size_t len, cap;
    size_t pos[CHUNK];
    int32_t *ids[CHUNK];
    int cap_ids[CHUNK], n_ids[CHUNK];
} side_chunk;

static void side_free(side_chunk *s) {
    free(s->text);
    for (int i = 0; i < CHUNK; i++) free(s->ids[i]);
    free(s);
}

/* Read up to CHUNK lines; returns how many (the sides have equal line counts). */
static int read_chunk(ll_linereader *r, side_chunk *s) {
    int n = 0;
    s->len = 0;
    char *line;
    ssize_t len;
    while (n < CHUNK && (len = ll_lr_next(r, &line)) >= 0) {
        if (s->len + (size_t)len + 1 > s->cap) {
            s->cap = 2 * (s->len + (size_t)len + 1);
            s->text = ll_realloc(s->text, s->cap);
        }
        s->pos[n++] = s->len;
        memcpy(s->text + s->len, line, (size_t)len + 1);
        s->len += (size_t)len + 1;
    }
    return n;
}

static int encode_chunk(const ll_spm *spm, side_chunk *s, int n, int threads) {
    int bad = -1;
#pragma omp parallel for schedule(dynamic, 64) num_threads(threads)
    for (int i = 0; i < n; i++) {
        s->n_ids[i] = ll_spm_encode(spm, s->text + s->pos[i], &s->ids[i], &s->cap_ids[i]);
        if (s->n_ids[i] < 0) {
#pragma omp critical
            if (bad < 0 || i < bad) bad = i;
        }
    }
    return bad;
}

/* Put the corpus's source tag before sentence i. */
static void add_tag(side_chunk *s, int i, int32_t tag) {
    if (s->n_ids[i] + 1 > s->cap_ids[i])
        s->ids[i] = ll_realloc(s->ids[i], sizeof(int32_t) * (size_t)(s->cap_ids[i] = s->n_ids[i] + 1));
    memmove(s->ids[i] + 1, s->ids[i], sizeof(int32_t) * (size_t)s->n_ids[i]);
    s->ids[i][0] = tag;
    s->n_ids[i]++;
}

/* Append EOS (the buffer may be exactly full). */
static void add_eos(side_chunk *s, int i) {
    if (s->n_ids[i] + 1 > s->cap_ids[i])
        s->ids[i] = ll_realloc(s->ids[i], sizeof(int32_t) * (size_t)(s->cap_ids[i] = s->n_ids[i] + 1));
    s->ids[i][s->n_ids[i]++] = LL_EOS;
}

static int binarize(prep *P, int k, ll_corpus_info *ci) {
    const ll_config *cfg = P->cfg;
    const ll_corpus_cfg *cc = corpus_at(cfg, k);
    int valid = k >= cfg->n_train, index = valid ? k - cfg->n_train : k;
    memset(ci, 0, sizeof *ci);
    snprintf(ci->split, sizeof ci->split, "%s", valid ? "valid" : "train");
    ci->index = index;
    ci->src_lang = add_lang(&P->info, cc->src_lang);
    ci->tgt_lang = add_lang(&P->info, cc->tgt_lang);
    ci->tgt_tag = -1;
    if (P->info.lang_tags) {
        char tag[LL_LANG_MAX + 4];
        snprintf(tag, sizeof tag, "<2%s>", cc->tgt_lang);
        ci->tgt_tag = ll_spm_piece_id(P->spm, tag);
    }
    const int32_t src_tag = cc->src_tag[0] ? ll_spm_piece_id(P->spm, cc->src_tag) : -1;
    const double ratio = strcmp(ci->split, "train") ? 0 : cfg->max_len_ratio; /* (validation: never filtered) */
    ll_corpus_file_name(ci->src_file, sizeof ci->src_file, ci->split, index, cc->src_lang, cc->tgt_lang, "src");
    ll_corpus_file_name(ci->tgt_file, sizeof ci->tgt_file, ci->split, index, cc->src_lang, cc->tgt_lang, "tgt");
    char path[LL_PATH_MAX + 160];
    ll_linereader rs = {0}, rt = {0};
    ll_tokfile_writer *ws = NULL, *wt = NULL;
    side_chunk *cs = ll_calloc(1, sizeof *cs), *ct = ll_calloc(1, sizeof *ct);
    int rc = -1, threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    if (ll_lr_open(&rs, cc->src) != 0 || ll_lr_open(&rt, cc->tgt) != 0) goto out;
    snprintf(path, sizeof path, "%s/%s", P->stage, ci->src_file);
    if (!(ws = ll_tokfile_create(path))) goto out;
    snprintf(path, sizeof path, "%s/%s", P->stage, ci->tgt_file);
    if (!(wt = ll_tokfile_create(path))) goto out;
    for (;;) {
        int64_t first = rs.lineno; /* 0-based line of the chunk's first line */
        int n = read_chunk(&rs, cs), nt = read_chunk(&rt, ct);
        if (n != nt) { /* a file changed since it was scanned */
            ll_fail("%s: line count changed while reading", n < nt ? cc->src : cc->tgt);
            goto out;
        }
        if (n == 0) break;
        int bs = encode_chunk(P->spm, cs, n, threads), bt = encode_chunk(P->spm, ct, n, threads);
        if (bs >= 0 || bt >= 0) {
            int src_first = bs >= 0 && (bt < 0 || bs <= bt);
            ll_fail("%s:%" PRId64 ": sentencepiece encoding failed", src_first ? cc->src : cc->tgt,
                    first + (src_first ? bs : bt) + 1);
            goto out;
        }
        for (int i = 0; i < n; i++) {
            ci->raw_lines++;
            if (cs->n_ids[i] == 0 || ct->n_ids[i] == 0) { /* fairseq drops empty sentences too */
                ci->skipped_empty++;
                continue;
            }
            if (ratio > 0) { /* (pieces alone: before the tag and EOS) */
                const int64_t a = cs->n_ids[i], b = ct->n_ids[i];
                if ((double)(a > b ? a : b) > ratio * (double)(a < b ? a : b)) {
                    ci->skipped_ratio++;
                    continue;
                }
            }
            if (src_tag >= 0) add_tag(cs, i, src_tag);
            add_eos(cs, i);
            add_eos(ct, i);
            if (cs->n_ids[i] > cfg->max_len || ct->n_ids[i] > cfg->max_len) {
                if (!strcmp(cfg->long_lines, "error")) {
                    int src_long = cs->n_ids[i] > cfg->max_len;
                    ll_fail("%s:%" PRId64 ": sentence has %d tokens, more than data.max_len=%d",
                            src_long ? cc->src : cc->tgt, first + i + 1, src_long ? cs->n_ids[i] : ct->n_ids[i],
                            cfg->max_len);
                    goto out;
                }
                ci->skipped_long++;
                continue;
            }
            if (ll_tokfile_append(ws, cs->ids[i], cs->n_ids[i], (uint64_t)(first + i)) != 0 ||
                ll_tokfile_append(wt, ct->ids[i], ct->n_ids[i], (uint64_t)(first + i)) != 0)
                goto out;
            ci->n_sents++;
            ci->src_tokens += cs->n_ids[i];
            ci->tgt_tokens += ct->n_ids[i];
        }
    }
    if (ci->n_sents == 0) {
        ll_fail("%s: no usable sentence pairs (%" PRId64 " empty, %" PRId64 " longer than data.max_len=%d, %" PRId64
                " with a length ratio above data.max_len_ratio=%g)",
                cc->src, ci->skipped_empty, ci->skipped_long, cfg->max_len, ci->skipped_ratio, (double)cfg->max_len_ratio);
        goto out;
    }
    rc = ll_tokfile_commit(ws);
    ws = NULL;
    if (rc == 0) rc = ll_tokfile_commit(wt);
    wt = NULL;
out:
    ll_tokfile_abort(ws);
    ll_tokfile_abort(wt);
    ll_lr_close(&rs);
    ll_lr_close(&rt);
    side_free(cs);
    side_free(ct);
    return rc;
}

/* ---- install ---- */

static int move_in(prep *P, const char *name) {
    char from[LL_PATH_MAX + 160], to[LL_PATH_MAX + 160];
    snprintf(from, sizeof from, "%s/%s", P->stage, name);
    snprintf(to, sizeof to, "%s/%s", P->cfg->data_dir, name);
    if (rename(from, to) != 0) return ll_fail("%s: cannot rename into place: %s", to, strerror(errno));
    return 0;
}

static int in_new_set(const ll_data_info *info, const char *name, char (*names)[64]) {
    if (!strcmp(name, info->spm_file) || !strcmp(name, LL_MANIFEST_FILE)) return 1;
    for (int i = 0; i < info->n_corpora; i++)
        for (int j = 0, nf = ll_corpus_files(info, i, names, NULL); j < nf; j++)
            if (!strcmp(name, names[j])) return 1;
    return 0;
}

/* The old manifest goes first: if we die halfway, data_dir has no manifest and
 * counts as unprepared rather than mixing old and new files. */
static int install(prep *P) {
    const char *dir = P->cfg->data_dir;
    char path[LL_PATH_MAX + 160];
    ll_data_info old;
    int have_old = ll_data_info_read(&old, dir) == 0;
    snprintf(path, sizeof path, "%s/%s", dir, LL_MANIFEST_FILE);
    if (unlink(path) != 0 && errno != ENOENT) return ll_fail("%s: cannot remove: %s", path, strerror(errno));
    if (move_in(P, P->info.spm_file) != 0) return -1;
    char(*names)[64] = ll_malloc(sizeof *names * LL_CORPUS_FILES), (*mine)[64] = ll_malloc(sizeof *mine * LL_CORPUS_FILES);
    int rc = 0;
    for (int i = 0; i < P->info.n_corpora && rc == 0; i++)
        for (int j = 0, nf = ll_corpus_files(&P->info, i, names, NULL); j < nf && rc == 0; j++) rc = move_in(P, names[j]);
    if (rc == 0) rc = move_in(P, LL_MANIFEST_FILE);
    if (rc != 0) {
        free(names);
        free(mine);
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    if (have_old) /* files of the previous preparation that this one does not have */
        for (int i = 0; i < old.n_corpora; i++)
            for (int j = 0, nf = ll_corpus_files(&old, i, names, NULL); j < nf; j++) {
                if (in_new_set(&P->info, names[j], mine) || strchr(names[j], '/')) continue;
                snprintf(path, sizeof path, "%s/%s", dir, names[j]);
                unlink(path);
            }
    free(names);
    free(mine);
    return 0;
}

/* ---- entry point ---- */

int ll_prepare_data(const ll_config *cfg) {
    prep P;
    memset(&P, 0, sizeof P);
    P.cfg = cfg;
    int rc = -1;
    uint64_t spm_hash = 0;
    if (check_config(cfg) != 0 || scan_inputs(&P) != 0 || plan_langs(&P) != 0) goto out;
    if (cfg->spm_model[0]) {
        ll_input_stamp *st = &P.inputs[P.n_inputs];
        snprintf(st->path, sizeof st->path, "%s", cfg->spm_model);
        if (ll_stat_stamp(cfg->spm_model, &st->size, &st->mtime_ns) != 0 || ll_hash_file(cfg->spm_model, &spm_hash))
            goto out;
        st->hash = spm_hash;
        P.n_inputs++;
    }
    P.info.hash = ll_data_hash(cfg, P.hashes, spm_hash);
    if (make_dirs(&P, cfg->data_dir) != 0) goto out;
    remove_stale_stages(cfg->data_dir);
    snprintf(P.stage, sizeof P.stage, "%s/%s%ld", cfg->data_dir, STAGE_PREFIX, (long)getpid());
    if (mkdir(P.stage, 0777) != 0) {
        ll_fail("%s: cannot create directory: %s", P.stage, strerror(errno));
        P.stage[0] = 0;
        goto out;
    }
    ll_signal_cleanup_dir(P.stage, 1); /* SIGTERM, SIGINT, SIGHUP: removed, as the tools' temporaries */
    if (make_spm(&P) != 0) goto out;
    P.info.spm_samples = cfg->spm_samples;
    P.info.spm_alpha = cfg->spm_samples > 0 ? cfg->spm_alpha : 0;
    P.info.spm_sides = cfg->spm_samples > 0 ? ll_spm_sides_mask(cfg->spm_sample_sides) : 0;
    if (cfg->spm_samples > 0 && !P.info.spm_sides) {
        ll_fail("data.spm_sample_sides: '%s' is not both, source or target", cfg->spm_sample_sides);
        goto out;
    }
    for (int k = 0; k < cfg->n_train + cfg->n_valid; k++) {
        if (binarize(&P, k, &P.info.corpora[k]) != 0) goto out;
        P.info.n_corpora++;
        if (k < cfg->n_train && ll_write_samples(cfg, P.spm, &P.info, P.stage, k) != 0) goto out;
    }
    char path[LL_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/%s", P.stage, LL_MANIFEST_FILE);
    if (ll_manifest_write(path, &P.info, P.inputs, P.n_inputs) != 0 || install(&P) != 0) goto out;
    rc = 0;
out:
    if (rc != 0)
        undo_dirs(&P);
    else
        remove_flat_dir(P.stage); /* empty by now */
    ll_signal_cleanup_dir(P.stage, 0);
    if (P.spm) ll_spm_free(P.spm);
    for (int i = 0; i < P.n_tags; i++) free(P.tags[i]);
    free(P.tags);
    free(P.hashes);
    free(P.lines);
    free(P.inputs);
    return rc;
}
