/* minmax.h — the smaller and the larger of two ints, for every layer. */
#ifndef DM_MINMAX_H
#define DM_MINMAX_H

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

#endif
