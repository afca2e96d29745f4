/* fenced.h — the fenced test backend's interface: for the registry. */
#ifndef DM_BACKENDS_FENCED_H
#define DM_BACKENDS_FENCED_H

#include <stddef.h>

#include "ops/backend.h"

dm_backend *dm_backend_fenced_create(int device, char *err, size_t errlen);

#endif
