/* copies.c — the bookkeeping of a backend's bf16 copies in the side room (copies.h). */
#include "ops/copies.h"

#include <stdlib.h>
#include <string.h>

/* [a, a + n) and [b, b + m) overlap (elements of size sz) */
static int overlap(const void *a, size_t n, const void *b, size_t m, size_t sz) {
    const char *p = a, *q = b;
    return n && m && p < q + m * sz && q < p + n * sz;
}

/* the registry without entry i */
static void drop(dm_copies *c, int i) {
    memmove(c->copy + i, c->copy + i + 1, (size_t)(c->n_copy - i - 1) * sizeof *c->copy);
    c->n_copy--;
}

/* room for one more entry of *arr (of *cap, elem bytes each); 0 ok, 1 out of memory */
static int grow(void **arr, int n, int *cap, size_t elem) {
    if (n < *cap) return 0;
    int want = *cap ? 2 * *cap : 32;
    void *p = realloc(*arr, (size_t)want * elem);
    if (!p) return 1;
    *arr = p;
    *cap = want;
    return 0;
}

void dm_copies_made(dm_copies *c, const float *x, const uint16_t *xb, size_t n) {
    for (int i = c->n_copy - 1; i >= 0; i--)
        if (overlap(c->copy[i].x, c->copy[i].n, x, n, sizeof(float)) ||
            overlap(c->copy[i].xb, c->copy[i].n, xb, n, sizeof(uint16_t)))
            drop(c, i);
    if (grow((void **)&c->copy, c->n_copy, &c->cap_copy, sizeof *c->copy))
        return; /* not registered: the products round x themselves */
    c->copy[c->n_copy++] = (struct dm_copy){x, xb, n};
}

const uint16_t *dm_copies_of(const dm_copies *c, const float *x, size_t n) {
    for (int i = c->n_copy - 1; i >= 0; i--)
        if (x >= c->copy[i].x && x + n <= c->copy[i].x + c->copy[i].n)
            return c->copy[i].xb + (x - c->copy[i].x);
    if (c->wts_b && x >= c->wts && x + n <= c->wts + c->n_wts) return c->wts_b + (x - c->wts);
    return NULL;
}

void dm_copies_forget(dm_copies *c) { c->n_copy = 0; }

void dm_copies_drop_at(dm_copies *c, const uint16_t *xb) {
    for (int i = c->n_copy - 1; i >= 0; i--)
        if (c->copy[i].xb == xb) drop(c, i);
}

void dm_copies_give_room(dm_copies *c, const float *x, size_t n, uint16_t *room) {
    for (int i = 0; i < c->n_room; i++)
        if (c->room[i].x == x && c->room[i].n == n) {
            c->room[i].room = room;
            return;
        }
    if (grow((void **)&c->room, c->n_room, &c->cap_room, sizeof *c->room))
        return; /* no room: the products round x themselves */
    c->room[c->n_room++] = (struct dm_room){x, n, room};
}

void dm_copies_clear_rooms(dm_copies *c) { c->n_room = 0; }

uint16_t *dm_copies_room_of(const dm_copies *c, const float *y, size_t n) {
    for (int i = c->n_room - 1; i >= 0; i--)
        if (c->room[i].x == y && n <= c->room[i].n) return c->room[i].room;
    return NULL;
}

void dm_copies_written(dm_copies *c, struct dm_ops *ops, dm_round_fn round, const float *p,
                       size_t n, int after) {
    if (!after) { /* p is about to change: the copies of it, and those kept in it, go */
        for (int i = c->n_copy - 1; i >= 0; i--)
            if (overlap(c->copy[i].x, c->copy[i].n, p, n, sizeof(float)) ||
                overlap(c->copy[i].xb, c->copy[i].n * sizeof(uint16_t), p, n * sizeof(float),
                        1))
                drop(c, i);
        return;
    }
    uint16_t *room = dm_copies_room_of(c, p, n);
    if (!room) return;
    for (int i = c->n_copy - 1; i >= 0; i--)
        if (c->copy[i].x == p && c->copy[i].n == n) return; /* its op made it */
    round(ops, room, p, n);
    dm_copies_made(c, p, room, n);
}

void dm_copies_free(dm_copies *c) {
    free(c->copy);
    free(c->room);
    memset(c, 0, sizeof *c);
}
