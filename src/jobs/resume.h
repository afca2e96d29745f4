/* resume.h — what a resumed run may change (docs/robustness.md, "Resume"): the config a
 * resume runs with (the run's config.json, then --set) against the config its checkpoint
 * holds (checksummed in model.safetensors). */
#ifndef DM_RESUME_H
#define DM_RESUME_H

#include "dormouse.h"
#include "jobs/job.h"

/* The keys a resume may change without breaking the run's exactness (steps, the budget,
 * logging, evaluation, checkpoint cadence, threads and where it runs): NULL-terminated. */
extern const char *const DM_RESUME_MUTABLE[];

/* Compare run (the config a resume of dir runs with) to saved (its checkpoint's, of step
 * `step`). Every key that differs and may change, or that the command line states
 * (sets: "key=value"), is noted "changed: key old -> new"; the first other one (a key
 * whose change would make the resumed run another run than the one saved: seed, batch,
 * learning rates, optimizer, precision...) is refused with a bad-input status naming it
 * and both values. Model keys are checked elsewhere (dm_config_check_model). 0 ok. */
int dm_resume_config(const dm_config *saved, const dm_config *run, const char *const *sets,
                     int n_sets, const char *dir, long step, const dm_job_io *io,
                     dm_status *st);

#endif
