/* mma.h — the warp's matrix operations (nvcuda::wmma) under the CUDA emulator
 * (docs/emulator.md): the m16n16k16 shape on bf16 operands with float accumulators, what
 * the kernels use.
 *
 * A fragment holds its lane's 8 elements in the lane layout of sm_80's mma.m16n8k16 (two
 * of them side by side for n = 16; g = lane / 4, q = lane % 4):
 *   matrix_a, accumulator  element i: row g + 8 ((i / 2) % 2), column 2q + i % 2 + 8 (i / 4)
 *   matrix_b               element i: row (k) 2q + i % 2 + 8 ((i / 2) % 2), column g + 8 (i / 4)
 * WMMA leaves the layout unspecified: a kernel that indexes fragment elements by position
 * computes something else here, as it would on some GPU.
 *
 * Every load, store and product is a collective of the warp's 32 lanes (a warp with fewer,
 * or lanes that disagree on the pointer, leading dimension or layout, is a fault). Loads
 * and stores are checked accesses (the allocation's bounds, races) and check what the
 * hardware requires: a 256-bit aligned pointer and a leading dimension of a multiple of 16
 * bytes. A product is the exact products of bf16 values summed in float in k order (the
 * tensor core's order of summation is not modelled).
 */
#ifndef DM_EMU_MMA_H
#define DM_EMU_MMA_H

#include "cuda_bf16.h"
#include "emu.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <class L> struct fragment<matrix_a, 16, 16, 16, __nv_bfloat16, L> {
    static constexpr int num_elements = 8;
    __nv_bfloat16 x[8];
};
template <class L> struct fragment<matrix_b, 16, 16, 16, __nv_bfloat16, L> {
    static constexpr int num_elements = 8;
    __nv_bfloat16 x[8];
};
template <> struct fragment<accumulator, 16, 16, 16, float, void> {
    static constexpr int num_elements = 8;
    float x[8];
};

namespace detail {
inline unsigned lane() { return dm_emu::cur->lin & 31; }
/* element i of a lane: (row, column) of the 16 x 16 tile */
inline void at_ac(unsigned lane, int i, int *r, int *c) {
    *r = (int)(lane >> 2) + 8 * ((i >> 1) & 1);
    *c = 2 * (int)(lane & 3) + (i & 1) + 8 * (i >> 2);
}
inline void at_b(unsigned lane, int i, int *r, int *c) {
    *r = 2 * (int)(lane & 3) + (i & 1) + 8 * ((i >> 1) & 1);
    *c = (int)(lane >> 2) + 8 * (i >> 2);
}
/* the collective every operation starts with: the lanes' arguments must agree */
struct args {
    const void *p;
    unsigned ldm;
    int layout, what;
};
inline void agree(const char *op, const void *p, unsigned ldm, int layout, int what,
                  size_t elem) {
    args mine = {p, ldm, layout, what}, o;
    const unsigned char *all = dm_emu::warp_exchange(&mine, sizeof mine);
    for (int l = 0; l < 32; l++)
        if (memcpy(&o, all + l * sizeof o, sizeof o),
            o.p != p || o.ldm != ldm || o.layout != layout || o.what != what)
            dm_emu::fault("%s: lanes %u and %d of the warp pass different arguments", op,
                          lane(), l);
    if (p == nullptr) return;
    if ((uintptr_t)p % 32)
        dm_emu::fault("%s: the pointer %p is not 256-bit aligned", op, p);
    if ((ldm * elem) % 16)
        dm_emu::fault("%s: leading dimension %u is not a multiple of 16 bytes", op, ldm);
}
/* element (r, c) of a matrix at p, leading dimension ldm, row- or column-major */
template <class T> inline dm_emu::ptr<T> elem(T *p, unsigned ldm, bool row, int r, int c) {
    return dm_emu::ptr<T>(p) + (row ? (size_t)r * ldm + c : (size_t)c * ldm + r);
}
template <class L> constexpr bool is_row() { return std::is_same<L, row_major>::value; }
} // namespace detail

namespace detail {
/* a bf16 operand's 8 elements of this lane, at its layout `at` (at_ac for matrix_a, at_b
 * for matrix_b) */
inline void load_operand(__nv_bfloat16 *x, const char *op, int what,
                         void (*at)(unsigned, int, int *, int *), const __nv_bfloat16 *p,
                         unsigned ldm, bool row) {
    agree(op, p, ldm, row, what, 2);
    const uint16_t *q = (const uint16_t *)p;
    for (int i = 0; i < 8; i++) {
        int r, c;
        at(lane(), i, &r, &c);
        x[i].x = *elem(q, ldm, row, r, c);
    }
}
} // namespace detail

template <class L>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, L> &f,
                             const __nv_bfloat16 *p, unsigned ldm) {
    detail::load_operand(f.x, "wmma::load_matrix_sync (matrix_a)", 0, detail::at_ac, p, ldm,
                         detail::is_row<L>());
}
template <class L>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, L> &f,
                             const __nv_bfloat16 *p, unsigned ldm) {
    detail::load_operand(f.x, "wmma::load_matrix_sync (matrix_b)", 1, detail::at_b, p, ldm,
                         detail::is_row<L>());
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
    detail::agree("wmma::load_matrix_sync (accumulator)", p, ldm, layout, 2, 4);
    for (int i = 0; i < 8; i++) {
        int r, c;
        detail::at_ac(detail::lane(), i, &r, &c);
        f.x[i] = *detail::elem(p, ldm, layout == mem_row_major, r, c);
    }
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
    detail::agree("wmma::store_matrix_sync", p, ldm, layout, 3, 4);
    for (int i = 0; i < 8; i++) {
        int r, c;
        detail::at_ac(detail::lane(), i, &r, &c);
        *detail::elem(p, ldm, layout == mem_row_major, r, c) = f.x[i];
    }
}
template <class U, class T, class L>
inline void fill_fragment(fragment<U, 16, 16, 16, T, L> &f, T v) {
    for (int i = 0; i < 8; i++) f.x[i] = v;
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v) {
    for (int i = 0; i < 8; i++) f.x[i] = v;
}

/* d = a b + c: the warp's 16 x 16 tiles gathered from the 32 lanes, each lane's 8
 * elements of d summed in k order */
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    struct both {
        __nv_bfloat16 a[8], b[8];
    } mine;
    memcpy(mine.a, a.x, sizeof mine.a);
    memcpy(mine.b, b.x, sizeof mine.b);
    const unsigned char *all = dm_emu::warp_exchange(&mine, sizeof mine);
    float A[16][16], B[16][16];
    for (unsigned l = 0; l < 32; l++) {
        both o;
        memcpy(&o, all + l * sizeof o, sizeof o);
        for (int i = 0; i < 8; i++) {
            int r, k;
            detail::at_ac(l, i, &r, &k);
            A[r][k] = __bfloat162float(o.a[i]);
            detail::at_b(l, i, &k, &r);
            B[k][r] = __bfloat162float(o.b[i]);
        }
    }
    float out[8];
    for (int i = 0; i < 8; i++) {
        int r, col;
        detail::at_ac(detail::lane(), i, &r, &col);
        float s = c.x[i];
        for (int k = 0; k < 16; k++) s += A[r][k] * B[k][col];
        out[i] = s;
    }
    memcpy(d.x, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

#endif
