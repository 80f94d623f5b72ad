// extern "C" shim over sentencepiece's C++ API: the only C++ in ll.  Every
// entry point catches exceptions so none cross into C.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ll/core.h"
#include "ll/data.h"

// Exported by libsentencepiece but not declared in its public header.
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
}
} // namespace sentencepiece

// Thread count is fixed, not taken from the machine: the EM sums are split per
// thread, and 1 vs 2 threads do give different pieces (spm 0.1.97).
#define LL_SPM_THREADS 2
// Caps the sentences spm loads (~2.8 GB peak for a million 17-word sentences);
// beyond it spm samples with its own fixed seed, so training stays reproducible.
#define LL_SPM_MAX_SENTENCES 2000000

struct ll_spm {
    sentencepiece::SentencePieceProcessor sp;
    std::string proto;
};

namespace {

// Streams the lines of several files to the trainer (no comma-joined paths).
class FileLines : public sentencepiece::SentenceIterator {
  public:
    explicit FileLines(std::vector<std::string> files) : files_(std::move(files)) { Next(); }
    bool done() const override { return done_; }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return status_; }
    void Next() override {
        while (!done_) {
            if (in_.is_open() && std::getline(in_, line_)) {
                if (!line_.empty() && line_.back() == '\r') line_.pop_back();
                if (!line_.empty()) return;
                continue;
            }
            if (in_.is_open()) in_.close();
            if (next_ >= files_.size()) {
                done_ = true;
                return;
            }
            in_.open(files_[next_], std::ios::binary);
            if (!in_) {
                status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound,
                                                      files_[next_] + ": cannot open");
                done_ = true;
                return;
            }
            next_++;
        }
    }

  private:
    std::vector<std::string> files_;
    size_t next_ = 0;
    std::ifstream in_;
    std::string line_;
    bool done_ = false;
    sentencepiece::util::Status status_;
};

ll_spm *finish_load(ll_spm *s, const sentencepiece::util::Status &st, const char *what) {
    if (!st.ok()) {
        ll_fail("%s: cannot load sentencepiece model: %s", what, st.ToString().c_str());
        delete s;
        return nullptr;
    }
    s->proto = s->sp.serialized_model_proto();
    return s;
}

bool is_tag_piece(const std::string &p) { return p.size() > 3 && p[0] == '<' && p[1] == '2' && p.back() == '>'; }

} // namespace

extern "C" {

int ll_spm_train(const char *const *files, int n_files, const char *model_prefix, int vocab_size,
                 const char *const *lang_tags, int n_tags, uint64_t seed) {
    try {
        std::vector<std::string> inputs(files, files + n_files);
        std::string tags;
        for (int i = 0; i < n_tags; i++) tags += (i ? "," : "") + std::string(lang_tags[i]);
        std::unordered_map<std::string, std::string> args = {
            {"model_type", "unigram"},
            {"vocab_size", std::to_string(vocab_size)},
            {"character_coverage", "1.0"},
            {"bos_id", "0"},
            {"pad_id", "1"},
            {"eos_id", "2"},
            {"unk_id", "3"},
            {"num_threads", std::to_string(LL_SPM_THREADS)},
            {"input_sentence_size", std::to_string(LL_SPM_MAX_SENTENCES)},
            {"shuffle_input_sentence", "true"},
            {"minloglevel", "2"}, // training chatter would bury llprep's output
        };
        if (!tags.empty()) args["user_defined_symbols"] = tags;
        sentencepiece::SetRandomGeneratorSeed((unsigned)(seed ^ (seed >> 32)));
        FileLines it(inputs);
        std::string proto;
        auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
        sentencepiece::logging::SetMinLogLevel(0);
        if (!st.ok()) {
            std::string m = st.ToString();
            while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
            for (char &c : m)
                if (c == '\n') c = ' '; // errors are one line
            // drop spm's "Internal: file(line) [condition] " prefix; keep its advice
            size_t br = m.find("] ");
            if (m.compare(0, 9, "Internal:") == 0 && br != std::string::npos) m.erase(0, br + 2);
            return ll_fail("sentencepiece training failed (data.vocab_size=%d): %s", vocab_size, m.c_str());
        }
        std::string path = std::string(model_prefix) + ".model";
        ll_atomic_file af;
        if (ll_atomic_open(&af, path.c_str()) != 0) return -1;
        if (fwrite(proto.data(), 1, proto.size(), af.f) != proto.size()) {
            ll_atomic_abort(&af);
            return ll_fail("%s: write failed", path.c_str());
        }
        return ll_atomic_commit(&af);
    } catch (const std::exception &e) {
        return ll_fail("sentencepiece training failed: %s", e.what());
    }
}

ll_spm *ll_spm_load(const char *model_path) {
    try {
        ll_spm *s = new ll_spm;
        return finish_load(s, s->sp.Load(model_path), model_path);
    } catch (const std::exception &e) {
        ll_fail("%s: cannot load sentencepiece model: %s", model_path, e.what());
        return nullptr;
    }
}

ll_spm *ll_spm_load_bytes(const void *proto, size_t n) {
    try {
        ll_spm *s = new ll_spm;
        return finish_load(s, s->sp.LoadFromSerializedProto(std::string((const char *)proto, n)), "embedded model");
    } catch (const std::exception &e) {
        ll_fail("embedded model: cannot load sentencepiece model: %s", e.what());
        return nullptr;
    }
}

void ll_spm_free(ll_spm *s) { delete s; }

int ll_spm_vocab_size(const ll_spm *s) { return s->sp.GetPieceSize(); }

int ll_spm_piece_id(const ll_spm *s, const char *piece) {
    int id = s->sp.PieceToId(piece);
    // PieceToId answers unk for unknown pieces.
    if (id == s->sp.unk_id() && s->sp.IdToPiece(id) != piece) return -1;
    return id;
}

const char *ll_spm_id_piece(const ll_spm *s, int id) {
    if (id < 0 || id >= s->sp.GetPieceSize()) return nullptr;
    return s->sp.IdToPiece(id).c_str();
}

int ll_spm_encode(const ll_spm *s, const char *text, int32_t **ids, int *cap) {
    try {
        std::vector<int> v;
        if (!s->sp.Encode(text, &v).ok()) return -1;
        if ((int)v.size() > *cap || !*ids) {
            *cap = (int)v.size() + 16;
            *ids = (int32_t *)ll_realloc(*ids, sizeof(int32_t) * (size_t)*cap);
        }
        for (size_t i = 0; i < v.size(); i++) (*ids)[i] = v[i];
        return (int)v.size();
    } catch (const std::exception &) {
        return -1;
    }
}

/* Sampled segmentations draw from sentencepiece's per-thread generator, which is seeded from the
 * global seed the first time a thread uses it and never again: a fresh thread that sets the seed
 * and makes its first draw under one lock owns a stream no other thread touches. */
static std::mutex sample_seed_lock;
static thread_local bool sample_seeded = false;

int ll_spm_sample_thread_init(const ll_spm *s, uint32_t seed) {
    if (sample_seeded) return ll_fail("sentencepiece sampling: this thread's generator is already seeded");
    try {
        std::lock_guard<std::mutex> g(sample_seed_lock);
        // (unsigned)-1 is spm's "seed from std::random_device"
        sentencepiece::SetRandomGeneratorSeed(seed == 0xffffffffu ? 0x9e3779b9u : seed);
        std::vector<int> v;
        if (!s->sp.SampleEncode("seed", -1, 0.5f, &v).ok()) // the first draw seeds this thread's generator
            return ll_fail("sentencepiece sampling: this model cannot sample segmentations");
        sample_seeded = true;
        return 0;
    } catch (const std::exception &e) {
        return ll_fail("sentencepiece sampling: %s", e.what());
    }
}

int ll_spm_sample_encode(const ll_spm *s, const char *text, float alpha, int32_t **ids, int *cap) {
    if (!sample_seeded) return -1; /* the stream would depend on whichever thread ran first */
    try {
        std::vector<int> v;
        if (!s->sp.SampleEncode(text, -1, alpha, &v).ok()) return -1;
        if ((int)v.size() > *cap || !*ids) {
            *cap = (int)v.size() + 16;
            *ids = (int32_t *)ll_realloc(*ids, sizeof(int32_t) * (size_t)*cap);
        }
        for (size_t i = 0; i < v.size(); i++) (*ids)[i] = v[i];
        return (int)v.size();
    } catch (const std::exception &) {
        return -1;
    }
}

char *ll_spm_decode(const ll_spm *s, const int32_t *ids, int n) {
    try {
        std::vector<int> v;
        int V = s->sp.GetPieceSize();
        for (int i = 0; i < n; i++) {
            int id = ids[i];
            if (id < 0 || id >= V || s->sp.IsControl(id) || is_tag_piece(s->sp.IdToPiece(id))) continue;
            v.push_back(id);
        }
        std::string out;
        if (!s->sp.Decode(v, &out).ok()) out.clear();
        return ll_strdup(out.c_str());
    } catch (const std::exception &) {
        return ll_strdup("");
    }
}

const void *ll_spm_proto(const ll_spm *s, size_t *n) {
    *n = s->proto.size();
    return s->proto.data();
}

void ll_spm_special_ids(const ll_spm *s, int *bos, int *pad, int *eos, int *unk) {
    *bos = s->sp.bos_id();
    *pad = s->sp.pad_id();
    *eos = s->sp.eos_id();
    *unk = s->sp.unk_id();
}

} // extern "C"
