/* stats.h — the median and spread of a set of readings: what every timing and every A/B
 * arm reports (`dormouse bench`, `dormouse ab`, the programs in bench/). */
#ifndef DM_STATS_H
#define DM_STATS_H

/* Median of x[0..n) (the mean of the middle two when n is even); x is left as it is.
 * *spread = max - min when spread != NULL. NAN (and a NAN spread) when n < 1. */
double dm_median(const double *x, int n, double *spread);

#endif
