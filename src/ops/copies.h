/* copies.h — the bookkeeping of a backend's bf16 copies in the op layer's side room
 * (ops.h), for the backends that keep some (cpu, cuda): which copies hold exactly bf16 of
 * their tensor now, the rooms the model gave for the running unit, and the model's bf16
 * weights. The backend owns the memory and does the rounding (its own kernel, on its own
 * memory); this says only where a copy is and whether it still holds. Self-contained (the
 * cuda module compiles it in).
 *
 * A copy is registered when it is made (dm_copies_made): by a fused producer in its own
 * pass into its output's room (dm_copies_room_of), or right after an op wrote a tensor
 * with a room (dm_copies_written, after), or by a matmul backward for its dout. It goes
 * when any op writes its tensor or its room (dm_copies_written, before the op runs), when
 * another copy is made where it lies, and at dm_copies_forget: so a product never reads a
 * copy that is not bf16 of its tensor as it is. Rooms are the running unit's (the model
 * gives them unit by unit); copies outlive them. */
#ifndef DM_OPS_COPIES_H
#define DM_OPS_COPIES_H

#include <stddef.h>
#include <stdint.h>

struct dm_ops;

typedef struct dm_copies {
    struct dm_copy { const float *x; const uint16_t *xb; size_t n; } *copy;
    int n_copy, cap_copy;
    struct dm_room { const float *x; size_t n; uint16_t *room; } *room;
    int n_room, cap_room;
    /* the model's weights w[n_wts] and their bf16 copy (the backend's memory) */
    const float *wts;
    const uint16_t *wts_b;
    size_t n_wts;
} dm_copies;

/* dst[n] = bf16(src) in the backend's memory: the backend's rounding */
typedef void (*dm_round_fn)(struct dm_ops *ops, uint16_t *dst, const float *src, size_t n);

/* xb[n] now holds bf16(x): registered (copies of x, and those where xb lies, go) */
void dm_copies_made(dm_copies *c, const float *x, const uint16_t *xb, size_t n);
/* the copy of x[n]: a registered one (of x, or of rows around it), or the weights' when x
 * lies in them; NULL: none */
const uint16_t *dm_copies_of(const dm_copies *c, const float *x, size_t n);
/* every registered copy goes (the weights' stays) */
void dm_copies_forget(dm_copies *c);
/* the registered copy kept at xb goes */
void dm_copies_drop_at(dm_copies *c, const uint16_t *xb);
/* room for a copy of x[n] (a room given again for the same x and n replaces it); all
 * rooms go */
void dm_copies_give_room(dm_copies *c, const float *x, size_t n, uint16_t *room);
void dm_copies_clear_rooms(dm_copies *c);
/* the room of y[n] (NULL: none) */
uint16_t *dm_copies_room_of(const dm_copies *c, const float *y, size_t n);
/* An op's output p[n]: before the op runs (after 0) the copies of it and those kept in it
 * go; after it (1) its room, when it has one its op did not fill, gets bf16 of it by
 * `round` */
void dm_copies_written(dm_copies *c, struct dm_ops *ops, dm_round_fn round, const float *p,
                       size_t n, int after);
void dm_copies_free(dm_copies *c);

#endif
