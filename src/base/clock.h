/* clock.h — the one wall clock every layer reads (the atlas, the optimizer's timings, the
 * time budget, bench). */
#ifndef DM_CLOCK_H
#define DM_CLOCK_H

/* Seconds on a monotonic clock. */
double dm_now(void);

#endif
