/* text.h — text from files and flags made safe to quote in a one-line message. */
#ifndef DM_TEXT_H
#define DM_TEXT_H

#include <stddef.h>

/* s as buf can show it on one line: control bytes (newlines, tabs, escape sequences)
 * become '?', and text beyond n - 1 bytes is cut with "...". Returns buf. */
const char *dm_printable(const char *s, char *buf, size_t n);

/* The name of names[0..n) nearest to s for a typo: the smallest edit distance (insert,
 * delete, substitute, or swap two neighbours: "stpes" is one from "steps"), at most a
 * third of the longer name's length, the first of equals; NULL when none is that close. */
const char *dm_nearest(const char *s, const char *const *names, int n);

/* s as one shell word: as it is when it needs no quoting, else in single quotes (a command
 * printed for the user runs as printed). Returns buf. */
const char *dm_shell_quote(const char *s, char *buf, size_t n);

#endif
