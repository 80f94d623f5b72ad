/* Fuzz target: the YAML config parser (src/config/).  The input is config
 * text; comment lines "#set section.key=value" are also applied as --set
 * overrides (YAML ignores them, so seeds stay valid configs).  Besides "no
 * crash", it checks the documented round trip: a loaded config dumps to text
 * that reloads to an identical struct, and the dump is a fixed point. */
#include <stddef.h>

#include "../../src/config/schema.h"
#include "fuzz_util.h"
#include "ll/config.h"
#include "ll/core.h"

/* Everything ll_config_dump describes: the fields before the text pointer. */
#define CFG_BYTES offsetof(ll_config, text)

static void round_trip(const ll_config *c) {
    char *text = ll_config_dump(c);
    ll_config r;
    if (ll_config_load_text(&r, text, "dump") != 0) {
        fprintf(stderr, "dump does not reload: %s\n%s", ll_errbuf(), text);
        abort();
    }
    if (memcmp(c, &r, CFG_BYTES) != 0) {
        fprintf(stderr, "reloaded dump differs\n%s", text);
        abort();
    }
    char *again = ll_config_dump(&r);
    if (strcmp(text, again) != 0) {
        fprintf(stderr, "dump is not a fixed point\n%s\n---\n%s", text, again);
        abort();
    }
    free(again);
    free(text);
    ll_config_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0; /* configs are small; keep executions fast */
    int fd0 = fz_lowest_fd();
    ll_verbosity = 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    ll_config c;
    /* Text with a NUL byte: the loader stops at it (ll_config_load rejects such files). */
    int rc = ll_config_load_text_in(&c, text, "fuzz.cfg", "/fuzz/base");
    if (rc == 0) {
        for (char *p = text; (p = strstr(p, "#set ")); p++) {
            char line[512];
            size_t n = strcspn(p + 5, "\n");
            if (n >= sizeof line) continue;
            memcpy(line, p + 5, n);
            line[n] = 0;
            ll_config_set(&c, line);
        }
        ll_config_validate(&c);
        round_trip(&c);
        for (int i = 0; i < ll_cfg_nkeys; i++) free(ll_config_get(&c, ll_cfg_keys[i].name));
        char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
        int nl = ll_config_langs(&c, langs);
        for (int i = 0; i < nl; i++)
            if (ll_config_lang_index(&c, langs[i]) != i) abort();
        ll_config_free(&c);
    }
    free(text);
    /* the file entry point too (it adds the NUL check and path resolution) */
    char path[300];
    fz_path(path, sizeof path, "in.cfg");
    fz_write(path, data, size);
    if (ll_config_load(&c, path) == 0) ll_config_free(&c);
    fz_check_fds(fd0, "ll_config_load");
    return 0;
}
