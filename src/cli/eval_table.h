/* lleval's multi-system output: the table `sacrebleu -i A B ... -f text` prints
 * (tabulate's fancy_grid) and the paired tests' explanation. */
#ifndef LL_CLI_EVAL_TABLE_H
#define LL_CLI_EVAL_TABLE_H

#include <stdio.h>

/* cells[r * ncols + c]: row r's cell c, lines split on '\n'; the first column is
 * right-aligned, the others centred, as sacreBLEU asks tabulate to. */
void eval_table_print(FILE *out, int ncols, int nrows, const char *const *headers, const char *const *cells);

/* The text under the table of a paired test (sacrebleu/utils.py print_results_table). */
void eval_table_paired_note(FILE *out, int bootstrap, int n, const char *baseline_name);

#endif
