/* emu.h — the device side of CUDA C++ as host C++: what the kernels of src/kernels/cuda
 * use, run on the CPU by the emulator (emu_runtime.cpp; docs/emulator.md).
 *
 * A .cu file reaches the compiler through emu_translate (emu_translate.cpp), which
 * rewrites four things and leaves the rest as written:
 *   - kernel<<<grid, block, smem, stream>>>(args)  ->  a launch through dm_emu::launch;
 *   - every pointer to an arithmetic type (float *, const uint8_t *, ...) outside the
 *     parameter lists of extern "C" functions  ->  dm_emu::ptr<T>, a pointer that knows
 *     the allocation it points into and checks every access against it;
 *   - extern __shared__ T s[]  ->  the block's dynamic shared memory, as a dm_emu::ptr;
 *   - __shared__ T a[n]...  ->  a view of the block's static shared memory (dm_emu::sview)
 *     whose every index is checked against its dimension.
 *
 * Every access through a dm_emu::ptr is checked: inside its allocation (a cudaMalloc,
 * the block's shared memory, the thread's own stack for pointers to locals), the
 * allocation still alive, naturally aligned, and not racing: a word written by one
 * thread and read or written by another of the same block with no __syncthreads
 * between, or written by one block and touched by another block of the same launch, is
 * a fault. A fault prints "emu: FAULT: ..." with the kernel, block and thread, and
 * aborts (a GPU would stop the context at the first illegal access too).
 *
 * Not modelled (docs/emulator.md): timing; blocks running concurrently (they run one
 * after another, so a kernel that needs two blocks to run at once deadlocks here); the
 * memory model between blocks beyond the race check above; accesses through pointers to
 * structs or through template parameter types (not rewritten, so not checked); a ptr
 * converted back to a raw pointer (host code's casts and runtime calls) is not checked;
 * host code dereferencing device memory (it is host memory here, so that works);
 * warp divergence cost and instruction-level semantics (fast-math intrinsics are the libm
 * functions). The race check knows __syncthreads as the only ordering inside a block: a
 * warp-synchronous exchange through shared memory (ordered by __syncwarp on a GPU) is
 * reported as a race.
 */
#ifndef DM_EMU_H
#define DM_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__
#define __launch_bounds__(...)
static constexpr int warpSize = 32;

namespace dm_emu {

struct uint3v {
    unsigned x, y, z;
};

/* an allocation the emulator knows: device memory, a block's shared memory, a thread's
 * stack */
enum region_kind { R_GLOBAL, R_SHARED, R_LOCAL };
struct shadow_ent {
    uint64_t w, r; /* the last writer and reader: block serial, epoch, thread (0: none) */
};
struct region {
    char *base;
    size_t size;
    region_kind kind;
    bool live;
    uint64_t id;            /* cudaMalloc's sequence number (global), else 0 */
    shadow_ent *shadow;     /* race-check state per 2 bytes, made on first kernel access */
    uint64_t mark_r, mark_w; /* the operation that last noted a read / write of it */
};

/* a thread of the running block (a fiber) */
struct thread_ctx {
    uint3v idx;
    unsigned lin;  /* x + y bx + z bx by */
    region stack;  /* its stack: where pointers to its locals point */
    void *sp;      /* saved stack pointer (or ucontext) */
    void *ctx;
    int state;     /* running, at __syncthreads, at a warp collective, done */
    unsigned wgen; /* the warp collective's generation it waits on */
};

extern thread_ctx *cur;
extern dim3 block_idx, block_dim, grid_dim;

/* the region address u points into (an address, not a pointer: nothing is read there) */
const region *find_region(uintptr_t u);
[[noreturn]] void fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fault_access(const region *r, const void *p, size_t n, size_t align, bool write);
void race_check(region *r, size_t off, bool write);
void note_access(region *r, bool write);
extern uint64_t cur_op;
extern bool race_on; /* DM_EMU_RACECHECK=0 turns the race check off */

/* the check of one access of n bytes at q through a pointer into r */
inline void check(const region *rc, const void *q, size_t n, size_t align, bool write) {
    uintptr_t u = (uintptr_t)q, b = rc ? (uintptr_t)rc->base : 0;
    if (!rc || !rc->live || u < b || u - b + n > rc->size || u % align)
        fault_access(rc, q, n, align, write);
    region *r = const_cast<region *>(rc);
    if (r->kind != R_LOCAL) {
        if (race_on) race_check(r, u - b, write);
        if (r->kind == R_GLOBAL && (write ? r->mark_w : r->mark_r) != cur_op) note_access(r, write);
    }
}

template <class T> class ptr;

/* a writable element seen through a ptr: reads and writes checked apart */
template <class T> class ref {
  public:
    T *q;
    const region *r;
    ref(T *q_, const region *r_) : q(q_), r(r_) {}
    operator T() const {
        check(r, q, sizeof(T), alignof(T), false);
        return *q;
    }
    ref &operator=(T v) {
        check(r, q, sizeof(T), alignof(T), true);
        *q = v;
        return *this;
    }
    ref &operator=(const ref &o) { return *this = (T)o; }
#define DM_EMU_COMPOUND(op)                                                              \
    template <class V> ref &operator op(V v) {                                           \
        T x = (T) * this;                                                                \
        x op v;                                                                          \
        return *this = x;                                                                \
    }
    DM_EMU_COMPOUND(+=)
    DM_EMU_COMPOUND(-=)
    DM_EMU_COMPOUND(*=)
    DM_EMU_COMPOUND(/=)
    DM_EMU_COMPOUND(|=)
    DM_EMU_COMPOUND(&=)
    DM_EMU_COMPOUND(^=)
#undef DM_EMU_COMPOUND
    ptr<T> operator&() const { return ptr<T>(q, r); }
};

template <class U> inline const U &deref(const U *q, const region *r) {
    check(r, q, sizeof(U), alignof(U), false);
    return *q;
}
template <class U> inline ref<U> deref(U *q, const region *r) { return ref<U>(q, r); }

/* a pointer into one allocation: arithmetic as a T *, every access checked */
template <class T> class ptr {
  public:
    T *p = nullptr;
    const region *r = nullptr;
    ptr() = default;
    ptr(T *q) : p(q), r(q ? find_region((uintptr_t)q) : nullptr) {}
    ptr(T *q, const region *r_) : p(q), r(r_) {}
    template <class U, class = typename std::enable_if<std::is_convertible<U *, T *>::value>::type>
    ptr(const ptr<U> &o) : p(o.p), r(o.r) {}
    explicit operator bool() const { return p != nullptr; }
    /* the raw pointer, for host code in a .cu file (a runtime call, a cast); an access
     * through it is not checked */
    operator T *() const { return p; }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    auto operator[](I i) const -> decltype(deref(p, r)) {
        return deref(p + i, r);
    }
    auto operator*() const -> decltype(deref(p, r)) { return deref(p, r); }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    ptr operator+(I i) const { return ptr(p + i, r); }
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    ptr operator-(I i) const { return ptr(p - i, r); }
    std::ptrdiff_t operator-(const ptr &o) const { return p - o.p; }
    template <class I> ptr &operator+=(I i) { p += i; return *this; }
    template <class I> ptr &operator-=(I i) { p -= i; return *this; }
    ptr &operator++() { ++p; return *this; }
    ptr &operator--() { --p; return *this; }
    ptr operator++(int) { ptr t = *this; ++p; return t; }
    ptr operator--(int) { ptr t = *this; --p; return t; }
    bool operator==(const ptr &o) const { return p == o.p; }
    bool operator!=(const ptr &o) const { return p != o.p; }
    bool operator<(const ptr &o) const { return p < o.p; }
    bool operator==(std::nullptr_t) const { return p == nullptr; }
    bool operator!=(std::nullptr_t) const { return p != nullptr; }
};
template <class T, class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
inline ptr<T> operator+(I i, const ptr<T> &a) { return a + i; }

/* ---- shared memory ---- */
/* the block's dynamic shared memory (the launch's third argument), as T */
const region *dynamic_shared_region();
template <class T> inline ptr<T> dynamic_shared() {
    const region *r = dynamic_shared_region();
    return ptr<T>((T *)r->base, r);
}
/* one __shared__ declaration: its place in the running block's static shared memory */
struct shared_site {
    uint64_t block = 0;
    size_t off = 0;
};
void *static_shared_at(shared_site &site, size_t bytes, size_t align);
const region *static_shared_region();
[[noreturn]] void fault_index(long long i, size_t n);

/* a __shared__ array A (T[n], T[n][m], ...) seen as the kernel indexes it: every index
 * checked against its dimension, every element access checked as a ptr's (and
 * race-checked); it decays to a ptr as an array decays to a pointer */
template <class A> class sview {
    using E = typename std::remove_extent<A>::type;
    static constexpr size_t N = std::extent<A>::value;
    E *base;
    const region *r;

  public:
    sview(E *b, const region *r_) : base(b), r(r_) {}
    template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
    auto operator[](I i) const {
        if (i < 0 || (unsigned long long)i >= N) fault_index((long long)i, N);
        if constexpr (std::is_array<E>::value)
            return sview<E>(base[i], r);
        else
            return deref(base + i, r);
    }
    operator ptr<E>() const { return ptr<E>(base, r); }
};
template <class A> inline sview<A> static_shared(shared_site &site) {
    using E = typename std::remove_extent<A>::type;
    return sview<A>((E *)static_shared_at(site, sizeof(A), alignof(A)), static_shared_region());
}

/* ---- barriers and warp collectives ---- */
void syncthreads();
enum { W_SHFL, W_SHFL_XOR, W_SHFL_UP, W_SHFL_DOWN, W_BALLOT, W_ANY, W_ALL, W_SYNC, W_EXCH };
/* lane's part in a warp collective of `kind` over `mask`: value in, the lane's result out
 * (its source lane's value for the shuffles, the vote for the votes) */
uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int arg, int width);
unsigned active_mask();
/* a collective of all 32 lanes of the warp (tensor-core fragments, mma.h): each lane's
 * `bytes` at mine, copied while the whole warp waits; the 32 lanes' bytes back, lane by
 * lane, valid until the lane's next collective */
const unsigned char *warp_exchange(const void *mine, size_t bytes);

template <class T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 64 bits");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ---- for the emulated libraries (emu_blaslt.cpp) ---- */
/* [p, p + n) inside one live device allocation, else a fault naming what and which */
region *device_range(const void *p, size_t n, const char *what, const char *which);
/* an operation on stream s (recorded under capture, refused on the legacy stream during
 * one, else run now with its accesses checked against the streams' order): op runs with
 * the stream it runs on */
cudaError_t submit_op(cudaStream_t s, const char *what, std::function<void(cudaStream_t)> op);
/* inside op: run work as the operation, its accesses noted by note_access */
void run_on(cudaStream_t s, const char *what, const std::function<void()> &work);

/* ---- launches ---- */
struct launch_config {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    launch_config(dim3 g, dim3 b, size_t m = 0, cudaStream_t s = 0)
        : grid(g), block(b), smem(m), stream(s) {}
};
/* runs (or, under capture, records) body on every thread of every block; name, file and
 * line: the kernel and where it is launched, for messages */
void launch(const void *fn, const char *name, const char *file, int line, const launch_config &c,
            std::function<void()> body);

template <class... P> struct launch_site {
    void (*fn)(P...);
    const char *name, *file;
    int line;
    launch_config cfg;
    void operator()(P... args) const {
        std::tuple<typename std::decay<P>::type...> t(args...);
        void (*f)(P...) = fn;
        launch((const void *)fn, name, file, line, cfg, [f, t]() { std::apply(f, t); });
    }
};
template <class... P>
inline launch_site<P...> kernel_launch(void (*fn)(P...), const char *name, const char *file,
                                       int line, launch_config c) {
    return launch_site<P...>{fn, name, file, line, c};
}

} // namespace dm_emu

#define threadIdx (dm_emu::cur->idx)
#define blockIdx (dm_emu::block_idx)
#define blockDim (dm_emu::block_dim)
#define gridDim (dm_emu::grid_dim)

inline void __syncthreads() { dm_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    dm_emu::warp_collective(dm_emu::W_SYNC, mask, 0, 0, 32);
}
inline unsigned __activemask() { return dm_emu::active_mask(); }
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return dm_emu::from_bits<T>(
        dm_emu::warp_collective(dm_emu::W_SHFL, mask, dm_emu::to_bits(v), src, width));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32) {
    return dm_emu::from_bits<T>(
        dm_emu::warp_collective(dm_emu::W_SHFL_XOR, mask, dm_emu::to_bits(v), lanemask, width));
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return dm_emu::from_bits<T>(
        dm_emu::warp_collective(dm_emu::W_SHFL_UP, mask, dm_emu::to_bits(v), (int)delta, width));
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return dm_emu::from_bits<T>(
        dm_emu::warp_collective(dm_emu::W_SHFL_DOWN, mask, dm_emu::to_bits(v), (int)delta, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)dm_emu::warp_collective(dm_emu::W_BALLOT, mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) {
    return (int)dm_emu::warp_collective(dm_emu::W_ANY, mask, pred != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int pred) {
    return (int)dm_emu::warp_collective(dm_emu::W_ALL, mask, pred != 0, 0, 32);
}

/* atomics: a thread runs alone until it reaches a barrier, so each is indivisible; the
 * access is checked (and race-exempt: atomics do not race) */
namespace dm_emu {
template <class T> inline T *atomic_at(ptr<T> a) {
    /* bounds and alignment, no race check: the read-modify-write is indivisible */
    uintptr_t u = (uintptr_t)a.p, b = a.r ? (uintptr_t)a.r->base : 0;
    if (!a.r || !a.r->live || u < b || u - b + sizeof(T) > a.r->size || u % alignof(T))
        fault_access(a.r, a.p, sizeof(T), alignof(T), true);
    if (a.r->kind == R_GLOBAL) note_access(const_cast<region *>(a.r), true);
    return a.p;
}
} // namespace dm_emu
template <class T> inline T atomicAdd(dm_emu::ptr<T> a, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    *p = o + v;
    return o;
}
template <class T> inline T atomicSub(dm_emu::ptr<T> a, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    *p = o - v;
    return o;
}
template <class T> inline T atomicMax(dm_emu::ptr<T> a, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    *p = o > v ? o : v;
    return o;
}
template <class T> inline T atomicMin(dm_emu::ptr<T> a, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    *p = o < v ? o : v;
    return o;
}
template <class T> inline T atomicExch(dm_emu::ptr<T> a, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    *p = v;
    return o;
}
template <class T> inline T atomicCAS(dm_emu::ptr<T> a, T cmp, T v) {
    T *p = dm_emu::atomic_at(a), o = *p;
    if (o == cmp) *p = v;
    return o;
}

/* the intrinsics the kernels use: bit casts and IEEE-rounded arithmetic */
inline unsigned __float_as_uint(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
inline float __uint_as_float(unsigned u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
inline int __float_as_int(float x) { return (int)__float_as_uint(x); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline long long __double_as_longlong(double x) {
    long long u;
    memcpy(&u, &x, 8);
    return u;
}
/* round-to-nearest arithmetic that the compiler may not contract into an FMA */
inline float __fmul_rn(float a, float b) {
    volatile float r = a * b;
    return r;
}
inline float __fadd_rn(float a, float b) {
    volatile float r = a + b;
    return r;
}
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }

#endif
