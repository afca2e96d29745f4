/* emu_runtime.cpp — the CUDA emulator's runtime: an emulated device on the CPU for the
 * kernels of src/kernels/cuda and their host code (docs/emulator.md).
 *
 * Blocks: the blocks of a launch run one after another; the threads of a block are
 * fibers (each its own stack) that run until they reach __syncthreads, a warp collective
 * (a shuffle, a vote, __syncwarp) or their end. At each barrier the waiting threads are
 * resumed in the order DM_EMU_ORDER sets: forward (thread 0 first), reverse, or
 * random[:seed] (a permutation drawn afresh at every barrier of every block). A missing
 * barrier therefore shows as a result that changes with the order, and as a race fault
 * (emu.h: every access is checked).
 *
 * Device memory: host memory, one tracked allocation per cudaMalloc (256-byte aligned,
 * filled with 0xff bytes, NaN as floats, as a fresh GPU allocation is garbage); every
 * copy, set and kernel access is checked against it; freed memory stays known, so a
 * dangling pointer faults.
 *
 * Launches: the block size (1024 threads, 1024 x 1024 x 64), the grid, and the shared
 * memory (48 KiB of static, the dynamic part within 48 KiB unless cudaFuncSetAttribute
 * raised the kernel's limit, at most the device's 227 KiB opt-in) are checked as the GPU
 * refuses them: the launch fails with the GPU's error code, read by cudaGetLastError.
 *
 * Streams: work runs when it is issued, in issue order, but the emulator keeps the GPU's
 * ordering rules (vector clocks): a stream orders its own work; the legacy default stream
 * (NULL) waits for and is waited on by blocking streams, not by non-blocking ones; an
 * event orders what a stream waits on; a host synchronisation orders everything the host
 * issues later. Two operations touching the same allocation, one of them writing, on
 * streams that nothing orders, are a fault: on a GPU they could run at the same time.
 * Graph capture records the work issued on the capturing stream; the legacy stream, a
 * synchronisation, cudaMalloc or cudaFree during a capture fail as the runtime fails
 * them (and invalidate the capture); a replayed graph runs its work on the launch stream.
 *
 * Events time the host's wall clock between two records: a number greater than zero,
 * nothing like the GPU's time.
 *
 * Page-locked host memory (cudaMallocHost) is pages of their own; a copy from the device
 * into them takes them from the host until a host wait covers the copy, so a host that
 * reads the result of an asynchronous copy too early faults.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>

#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define DM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define DM_EMU_ASAN 1
#endif
#endif

#if !defined(__x86_64__) || defined(DM_EMU_UCONTEXT)
#include <ucontext.h>
#define DM_EMU_USE_UCONTEXT 1
#endif

/* ---- the emulated device ---- */
#define EMU_MAX_THREADS 1024
#define EMU_STATIC_SMEM (48 * 1024)      /* static __shared__ per block */
#define EMU_DEFAULT_SMEM (48 * 1024)     /* dynamic, unless raised */
#define EMU_OPTIN_SMEM (227 * 1024)      /* the most a block may have (an H100's) */
#define EMU_TOTAL_MEM ((size_t)80 << 30) /* what cudaMemGetInfo reports as total */

namespace dm_emu {

thread_ctx *cur;
dim3 block_idx, block_dim, grid_dim;
uint64_t cur_op;
bool race_on = true;

enum { T_RUN, T_BAR, T_WARP, T_DONE };

static const char *kernel_name;   /* the running kernel, for messages */
static uint64_t block_serial;     /* blocks run so far (the running one's number) */
static uint64_t launch_first_bs;  /* the first block of the running launch */
static uint64_t epoch;            /* barriers passed by the running block */
static bool in_kernel;

/* ---- faults ---- */
static void where(char *buf, size_t n) {
    if (in_kernel && cur)
        snprintf(buf, n, " [kernel %s, block (%u,%u,%u), thread (%u,%u,%u)]", kernel_name,
                 block_idx.x, block_idx.y, block_idx.z, cur->idx.x, cur->idx.y, cur->idx.z);
    else if (in_kernel)
        snprintf(buf, n, " [kernel %s]", kernel_name);
    else
        buf[0] = 0;
}

void fault(const char *fmt, ...) {
    char msg[1024], at[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    where(at, sizeof at);
    fprintf(stderr, "emu: FAULT: %s%s\n", msg, at);
    fflush(stderr);
    abort();
}

static void note(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu: %s\n", msg);
}

/* ---- allocations ---- */
static std::map<uintptr_t, region *> allocs; /* live device allocations by base */
static std::deque<region> regions;           /* every region ever made (dangling checks) */
static size_t allocated;
static uint64_t alloc_count;
static region dyn_region, static_region;     /* the running block's shared memory */
static size_t static_used, static_poisoned;

static const char *kind_name(const region *r) {
    return r->kind == R_GLOBAL   ? "device allocation"
           : r->kind == R_SHARED ? "shared memory"
                                 : "the thread's stack";
}

static std::string describe(const region *r) {
    char b[160];
    if (r->kind == R_GLOBAL)
        snprintf(b, sizeof b, "device allocation #%llu (%zu bytes%s)", (unsigned long long)r->id,
                 r->size, r->live ? "" : ", freed");
    else
        snprintf(b, sizeof b, "%s (%zu bytes)", kind_name(r), r->size);
    return b;
}

static region *find_alloc(const void *p, bool one_past) {
    uintptr_t u = (uintptr_t)p;
    auto it = allocs.upper_bound(u);
    if (it == allocs.begin()) return nullptr;
    --it;
    region *r = it->second;
    if (u < (uintptr_t)r->base + r->size || (one_past && u == (uintptr_t)r->base + r->size)) return r;
    return nullptr;
}

/* the freed region p pointed into, for a clearer message */
static const region *find_freed(const void *p) {
    uintptr_t u = (uintptr_t)p;
    for (auto it = regions.rbegin(); it != regions.rend(); ++it)
        if (!it->live && it->kind == R_GLOBAL && u >= (uintptr_t)it->base &&
            u < (uintptr_t)it->base + it->size)
            return &*it;
    return nullptr;
}

const region *find_region(uintptr_t u) {
    const void *p = (const void *)u;
    if (region *r = find_alloc(p, true)) return r;
    if (in_kernel) {
        for (region *r : {&dyn_region, &static_region})
            if (r->base && u >= (uintptr_t)r->base && u <= (uintptr_t)r->base + r->size) return r;
        if (cur && u >= (uintptr_t)cur->stack.base && u <= (uintptr_t)cur->stack.base + cur->stack.size)
            return &cur->stack;
    }
    return find_freed(p); /* dead: the access faults, naming it */
}

void fault_access(const region *r, const void *p, size_t n, size_t align, bool write) {
    const char *rw = write ? "writes" : "reads";
    if (!r)
        fault("%s %zu bytes at %p, which is no device memory (a host pointer passed to a kernel, "
              "or NULL)", rw, n, p);
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)r->base;
    if (!r->live)
        fault("%s %zu bytes at offset %lld of %s: used after cudaFree", rw, n,
              (long long)(u - b), describe(r).c_str());
    if (u < b || u - b + n > r->size)
        fault("%s %zu bytes at offset %lld of %s: out of bounds", rw, n, (long long)(u - b),
              describe(r).c_str());
    fault("%s %zu bytes at offset %lld of %s: misaligned (the address is not a multiple of %zu; "
          "a GPU faults with \"misaligned address\")", rw, n, (long long)(u - b),
          describe(r).c_str(), align);
}

/* ---- the race check (emu.h): per 2 bytes, the last writer and reader ---- */
static inline uint64_t stamp() { return block_serial << 32 | (epoch & 0x3fffff) << 10 | cur->lin; }

static bool conflicts(const region *r, uint64_t rec) {
    uint64_t bs = rec >> 32;
    if (bs < launch_first_bs) return false; /* an earlier launch: ordered */
    if (bs != block_serial) return r->kind == R_GLOBAL; /* another block of this launch */
    if (((rec >> 10) & 0x3fffff) != (epoch & 0x3fffff)) return false; /* a barrier between */
    return (rec & 1023) != cur->lin;
}

static void race_fault(const region *r, size_t off, bool write, uint64_t rec, bool rec_wrote) {
    uint64_t bs = rec >> 32;
    unsigned t = (unsigned)(rec & 1023);
    char other[160];
    if (bs != block_serial)
        snprintf(other, sizeof other, "another block of this launch %s it (blocks may run in any "
                 "order, or at once)", rec_wrote ? "wrote" : "read");
    else
        snprintf(other, sizeof other, "thread %u of this block %s it with no __syncthreads between",
                 t, rec_wrote ? "wrote" : "read");
    fault("race: %s offset %zu of %s, and %s", write ? "writes" : "reads", off,
          describe(r).c_str(), other);
}

void race_check(region *r, size_t off, bool write) {
    if (!r->shadow) {
        r->shadow = (shadow_ent *)calloc(r->size / 2 + 1, sizeof(shadow_ent));
        if (!r->shadow) fault("out of host memory for the race check of %s", describe(r).c_str());
    }
    shadow_ent &e = r->shadow[off >> 1];
    uint64_t me = stamp();
    if (e.w && e.w != me && conflicts(r, e.w)) race_fault(r, off, write, e.w, true);
    if (write && e.r && e.r != me && conflicts(r, e.r)) race_fault(r, off, write, e.r, false);
    (write ? e.w : e.r) = me;
}

/* the global allocations the running operation touched */
static std::vector<std::pair<region *, bool>> op_access;
void note_access(region *r, bool write) {
    (write ? r->mark_w : r->mark_r) = cur_op;
    op_access.push_back({r, write});
}

/* ---- fibers ---- */
#if DM_EMU_ASAN
static const void *main_bottom;
static size_t main_size;
#endif
#if DM_EMU_USE_UCONTEXT
static ucontext_t sched_ctx;
#else
extern "C" void dm_emu_switch(void **save, void *to);
asm(".text\n"
    ".globl dm_emu_switch\n"
    ".type dm_emu_switch,@function\n"
    "dm_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size dm_emu_switch,.-dm_emu_switch\n");
static void *sched_sp;
#endif

#if DM_EMU_ASAN
#define STACK_BYTES ((size_t)512 << 10)
#else
#define STACK_BYTES ((size_t)128 << 10)
#endif
static thread_ctx threads[EMU_MAX_THREADS];
static unsigned nstacks;
static std::function<void()> *body;

static void fiber_exit_to_scheduler(thread_ctx *me, bool done) {
#if DM_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(done ? nullptr : &fake, main_bottom, main_size);
#endif
#if DM_EMU_USE_UCONTEXT
    swapcontext((ucontext_t *)me->ctx, &sched_ctx);
#else
    dm_emu_switch(&me->sp, sched_sp);
#endif
#if DM_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    (void)done;
}

static void fiber_entry() {
    thread_ctx *me = cur;
#if DM_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &main_bottom, &main_size);
#endif
    (*body)();
    me->state = T_DONE;
    fiber_exit_to_scheduler(me, true);
    abort(); /* a finished fiber is never resumed */
}

static void ensure_stacks(unsigned n) {
    for (; nstacks < n; nstacks++) {
        thread_ctx &t = threads[nstacks];
        size_t page = 4096;
        char *m = (char *)mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) fault("cannot map a fiber stack: %s", strerror(errno));
        mprotect(m, page, PROT_NONE); /* a guard page below: overflow faults */
        t.stack = region{m + page, STACK_BYTES, R_LOCAL, true, 0, nullptr, 0, 0};
#if DM_EMU_USE_UCONTEXT
        t.ctx = calloc(1, sizeof(ucontext_t));
#endif
    }
}

static void fiber_init(thread_ctx &t) {
    t.state = T_RUN;
#if DM_EMU_USE_UCONTEXT
    ucontext_t *c = (ucontext_t *)t.ctx;
    getcontext(c);
    c->uc_stack.ss_sp = t.stack.base;
    c->uc_stack.ss_size = t.stack.size;
    c->uc_link = nullptr;
    makecontext(c, fiber_entry, 0);
#else
    uintptr_t top = ((uintptr_t)t.stack.base + t.stack.size) & ~(uintptr_t)15;
    uintptr_t *sp = (uintptr_t *)top;
    *--sp = 0;                        /* fiber_entry's return address: never used */
    *--sp = (uintptr_t)&fiber_entry;  /* where dm_emu_switch returns to */
    for (int i = 0; i < 6; i++) *--sp = 0; /* rbp rbx r12-r15 */
    t.sp = sp;
#endif
}

static void resume(thread_ctx *t) {
    cur = t;
#if DM_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, t->stack.base, t->stack.size);
#endif
#if DM_EMU_USE_UCONTEXT
    swapcontext(&sched_ctx, (ucontext_t *)t->ctx);
#else
    dm_emu_switch(&sched_sp, t->sp);
#endif
#if DM_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur = nullptr;
}

/* ---- the barrier order ---- */
enum { O_FORWARD, O_REVERSE, O_RANDOM };
static int order_mode = -1;
static uint64_t order_seed = 1, rng_state;

static void read_order() {
    if (order_mode >= 0) return;
    const char *e = getenv("DM_EMU_ORDER");
    order_mode = O_FORWARD;
    if (!e || !*e || !strcmp(e, "forward")) order_mode = O_FORWARD;
    else if (!strcmp(e, "reverse")) order_mode = O_REVERSE;
    else if (!strncmp(e, "random", 6)) {
        order_mode = O_RANDOM;
        if (e[6] == ':') order_seed = strtoull(e + 7, nullptr, 10);
    } else {
        fprintf(stderr, "error: DM_EMU_ORDER=%s: expected forward, reverse or random[:SEED]\n", e);
        exit(2);
    }
    rng_state = order_seed * 0x9E3779B97F4A7C15ull + 1;
    const char *rc = getenv("DM_EMU_RACECHECK");
    race_on = !(rc && !strcmp(rc, "0"));
    if (!race_on) note("the race check is off (DM_EMU_RACECHECK=0)");
    note("CUDA emulator: threads resumed in %s order at each barrier%s", e && *e ? e : "forward",
         order_mode == O_RANDOM ? " (a fresh permutation each time)" : "");
}

static uint64_t rng() {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- warps ---- */
struct warp_state {
    unsigned arrived, mask, gen;
    int kind, xbytes;
    uint64_t val[2][32];
    uint64_t vote[2];
    std::vector<unsigned char> xch[2]; /* warp_exchange: the 32 lanes' bytes, by generation */
};
static warp_state warps[EMU_MAX_THREADS / 32];
static unsigned nthreads_block;

unsigned active_mask() {
    unsigned base = cur->lin & ~31u, m = 0;
    for (unsigned l = 0; l < 32 && base + l < nthreads_block; l++)
        if (threads[base + l].state != T_DONE) m |= 1u << l;
    return m;
}

uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int arg, int width) {
    if (!in_kernel || !cur) fault("a warp collective outside a kernel");
    thread_ctx *me = cur;
    unsigned lane = me->lin & 31, base = me->lin & ~31u;
    unsigned lanes = nthreads_block - base < 32 ? nthreads_block - base : 32;
    unsigned exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    if (!(mask >> lane & 1))
        fault("warp collective: the calling lane %u is not in its mask 0x%08x", lane, mask);
    if (mask & ~exists)
        fault("warp collective: mask 0x%08x names lanes this warp does not have (the block has %u "
              "threads)", mask, nthreads_block);
    if (width <= 0 || width > 32 || (width & (width - 1))) fault("shuffle width %d", width);
    warp_state &w = warps[me->lin >> 5];
    if (w.arrived == 0) {
        w.mask = mask;
        w.kind = kind;
        w.xbytes = arg;
    } else if (w.mask != mask || w.kind != kind || (kind == W_EXCH && w.xbytes != arg)) {
        fault("warp collective: lanes of one warp meet at different collectives (masks 0x%08x and "
              "0x%08x)", w.mask, mask);
    }
    unsigned slot = w.gen & 1;
    w.val[slot][lane] = value;
    w.arrived |= 1u << lane;
    me->wgen = w.gen;
    if (w.arrived == mask) {
        uint64_t bits = 0;
        for (unsigned l = 0; l < 32; l++)
            if (mask >> l & 1 && w.val[slot][l] & 1) bits |= 1ull << l;
        w.vote[slot] = bits;
        if (kind == W_EXCH) { /* every lane's bytes copied while every lane waits here */
            w.xch[slot].resize(32 * (size_t)arg);
            for (unsigned l = 0; l < 32; l++)
                memcpy(w.xch[slot].data() + l * (size_t)arg, (const void *)w.val[slot][l],
                       (size_t)arg);
        }
        w.arrived = 0;
        w.gen++;
        for (unsigned l = 0; l < 32; l++)
            if (mask >> l & 1 && l != lane) threads[base + l].state = T_RUN;
    } else {
        for (unsigned l = 0; l < 32; l++)
            if (mask >> l & 1 && threads[base + l].state == T_DONE)
                fault("warp collective: lane %u of its mask 0x%08x has returned", l, mask);
        me->state = T_WARP;
        fiber_exit_to_scheduler(me, false);
    }
    slot = me->wgen & 1;
    unsigned seg = lane & ~(unsigned)(width - 1), src = lane;
    switch (kind) {
    case W_SHFL: src = seg + ((unsigned)arg & (width - 1)); break;
    case W_SHFL_XOR: src = lane ^ (unsigned)arg; if (src < seg || src >= seg + width) src = lane; break;
    case W_SHFL_UP: src = lane >= seg + (unsigned)arg ? lane - arg : lane; break;
    case W_SHFL_DOWN: src = lane + arg < seg + width ? lane + arg : lane; break;
    case W_BALLOT: return w.vote[slot];
    case W_ANY: return w.vote[slot] != 0;
    case W_ALL: return (w.vote[slot] & mask) == mask;
    case W_EXCH: return (uint64_t)(uintptr_t)w.xch[slot].data();
    default: return 0;
    }
    if (src >= 32 || !(mask >> src & 1))
        fault("shuffle from lane %u, which is not in the mask 0x%08x (undefined on a GPU)", src, mask);
    return w.val[slot][src];
}

const unsigned char *warp_exchange(const void *mine, size_t bytes) {
    if (!in_kernel || !cur) fault("a warp collective outside a kernel");
    unsigned base = cur->lin & ~31u;
    if (nthreads_block - base < 32)
        fault("a warp-wide matrix operation in a warp of %u threads (the block has %u)",
              nthreads_block - base, nthreads_block);
    return (const unsigned char *)(uintptr_t)warp_collective(
        W_EXCH, 0xffffffffu, (uint64_t)(uintptr_t)mine, (int)bytes, 32);
}

void syncthreads() {
    if (!in_kernel || !cur) fault("__syncthreads outside a kernel");
    cur->state = T_BAR;
    fiber_exit_to_scheduler(cur, false);
}

/* ---- shared memory ---- */
static char *dyn_buf, *static_buf;
static size_t dyn_bytes; /* the running launch's dynamic shared memory */

const region *dynamic_shared_region() { return &dyn_region; }
const region *static_shared_region() { return &static_region; }

void fault_index(long long i, size_t n) {
    fault("index %lld of a __shared__ array dimension of %zu: out of bounds", i, n);
}

void *static_shared_at(shared_site &site, size_t bytes, size_t align) {
    if (site.block != block_serial) {
        size_t off = (static_used + align - 1) / align * align;
        if (off + bytes > EMU_STATIC_SMEM)
            fault("static __shared__ memory over %d bytes", EMU_STATIC_SMEM);
        if (off + bytes + dyn_bytes > EMU_OPTIN_SMEM)
            fault("static (%zu) and dynamic (%zu) shared memory over the device's %d bytes",
                  off + bytes, dyn_bytes, EMU_OPTIN_SMEM);
        static_used = off + bytes;
        site.block = block_serial;
        site.off = off;
    }
    return static_buf + site.off;
}

/* ---- running a block ---- */
static void run_block(unsigned n) {
    block_serial++;
    epoch = 0;
    /* shared memory starts as garbage: 0xff bytes, NaN as floats */
    memset(dyn_buf, 0xff, dyn_bytes);
    memset(static_buf, 0xff, static_poisoned > static_used ? static_poisoned : static_used);
    static_poisoned = static_used;
    static_used = 0;
    for (unsigned i = 0; i < n; i++) {
        thread_ctx &t = threads[i];
        t.lin = i;
        t.idx = uint3v{i % block_dim.x, i / block_dim.x % block_dim.y, i / (block_dim.x * block_dim.y)};
        fiber_init(t);
    }
    for (unsigned w = 0; w < (n + 31) / 32; w++) warps[w].arrived = 0, warps[w].gen = 0;
    std::vector<unsigned> order(n);
    for (;;) {
        for (unsigned i = 0; i < n; i++) order[i] = order_mode == O_REVERSE ? n - 1 - i : i;
        if (order_mode == O_RANDOM)
            for (unsigned i = n; i > 1; i--) std::swap(order[i - 1], order[rng() % i]);
        for (unsigned i : order)
            if (threads[i].state == T_RUN) resume(&threads[i]);
        unsigned run = 0, bar = 0, warp = 0, done = 0;
        for (unsigned i = 0; i < n; i++) {
            int s = threads[i].state;
            run += s == T_RUN, bar += s == T_BAR, warp += s == T_WARP, done += s == T_DONE;
        }
        if (run) continue;
        if (done == n) break;
        if (bar && !warp && !done) { /* every thread at the barrier: release them */
            for (unsigned i = 0; i < n; i++) threads[i].state = T_RUN;
            epoch++;
            continue;
        }
        if (bar && !warp)
            fault("__syncthreads reached by %u threads of %u while %u have returned (a barrier "
                  "in divergent code: undefined on a GPU)", bar, n, done);
        for (unsigned w = 0; w < (n + 31) / 32; w++) /* a collective waiting on a lane that returned */
            for (unsigned l = 0; warps[w].arrived && l < 32; l++)
                if (warps[w].mask >> l & 1 && threads[w * 32 + l].state == T_DONE)
                    fault("warp collective: lane %u of its mask 0x%08x has returned (warp %u)", l,
                          warps[w].mask, w);
        fault("deadlock: %u threads at __syncthreads, %u at a warp collective, %u returned, of %u",
              bar, warp, done, n);
    }
}

static std::unordered_map<const void *, int> smem_limit; /* cudaFuncSetAttribute's */

static void run_kernel(const void *fn, const char *name, const launch_config &c,
                       std::function<void()> &b) {
    (void)fn;
    unsigned n = c.block.x * c.block.y * c.block.z;
    ensure_stacks(n);
    if (!dyn_buf) {
        dyn_buf = (char *)aligned_alloc(256, EMU_OPTIN_SMEM);
        static_buf = (char *)aligned_alloc(256, EMU_STATIC_SMEM);
        if (!dyn_buf || !static_buf) fault("out of host memory for shared memory");
        static_region = region{static_buf, EMU_STATIC_SMEM, R_SHARED, true, 0, nullptr, 0, 0};
        dyn_region = region{dyn_buf, 0, R_SHARED, true, 0, nullptr, 0, 0};
        /* its race-check state for the largest size a launch may ask */
        dyn_region.shadow = (shadow_ent *)calloc(EMU_OPTIN_SMEM / 2 + 1, sizeof(shadow_ent));
        if (!dyn_region.shadow) fault("out of host memory for shared memory");
    }
    dyn_bytes = c.smem;
    dyn_region.size = c.smem;
    kernel_name = name;
    block_dim = c.block;
    grid_dim = c.grid;
    nthreads_block = n;
    body = &b;
    launch_first_bs = block_serial + 1;
    in_kernel = true;
    for (unsigned z = 0; z < c.grid.z; z++)
        for (unsigned y = 0; y < c.grid.y; y++)
            for (unsigned x = 0; x < c.grid.x; x++) {
                block_idx = dim3(x, y, z);
                run_block(n);
            }
    in_kernel = false;
    body = nullptr;
}

} // namespace dm_emu

/* ================= the runtime API ================= */
using namespace dm_emu;

static cudaError_t last_err;
static cudaError_t fail(cudaError_t e) {
    last_err = e;
    return e;
}

/* ---- streams, their ordering, capture ---- */
struct graph_node {
    std::string what;
    std::function<void(cudaStream_t)> run;
};
struct CUgraph_st {
    std::vector<graph_node> nodes;
};
struct CUgraphExec_st {
    std::vector<graph_node> nodes;
};
struct CUstream_st {
    int id;
    bool nonblocking, live;
    uint64_t seq;
    std::vector<uint64_t> vc; /* per stream id: the last of its operations ordered before ours */
    CUgraph_st *capture;      /* the graph being captured, or NULL */
    cudaStreamCaptureMode mode;
    bool invalidated;
};
struct CUevent_st {
    bool recorded, live;
    std::vector<uint64_t> vc;
    double t_ms;
};

static std::deque<CUstream_st> streams; /* [0]: the legacy stream */
static std::vector<uint64_t> host_vc;   /* what the host has seen complete */
static int capturing;                   /* streams capturing now */

static CUstream_st *legacy() {
    if (streams.empty()) streams.push_back(CUstream_st{0, false, true, 0, {}, nullptr, {}, false});
    return &streams[0];
}
static CUstream_st *resolve(cudaStream_t s) { return s ? s : legacy(); }

static void join(std::vector<uint64_t> &a, const std::vector<uint64_t> &b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++)
        if (b[i] > a[i]) a[i] = b[i];
}
static void see(std::vector<uint64_t> &a, int id, uint64_t seq) {
    if ((int)a.size() <= id) a.resize(id + 1, 0);
    if (seq > a[id]) a[id] = seq;
}
static uint64_t seen(const std::vector<uint64_t> &a, int id) { return (int)a.size() > id ? a[id] : 0; }

/* an operation issued on s: its place in s and what it is ordered after */
static void issue(CUstream_st *s) {
    legacy();
    s->seq++;
    join(s->vc, host_vc);
    if (s->id == 0) {
        for (CUstream_st &b : streams)
            if (b.id != 0 && b.live && !b.nonblocking) {
                see(s->vc, b.id, b.seq);
                join(s->vc, b.vc);
            }
    } else if (!s->nonblocking) {
        CUstream_st *l = legacy();
        see(s->vc, 0, l->seq);
        join(s->vc, l->vc);
    }
    see(s->vc, s->id, s->seq);
}

/* who last wrote and read each allocation, by stream */
struct alloc_use {
    int wstream = -1;
    uint64_t wseq = 0;
    std::string wwhat;
    std::map<int, std::pair<uint64_t, std::string>> reads;
};
static std::unordered_map<const region *, alloc_use> uses;

static void stream_order_check(CUstream_st *s, const char *what) {
    for (auto &a : op_access) {
        region *r = a.first;
        bool write = a.second;
        alloc_use &u = uses[r];
        if (u.wstream >= 0 && u.wstream != s->id && seen(s->vc, u.wstream) < u.wseq)
            fault("stream race: %s on stream %d %s %s, which %s on stream %d wrote, and nothing "
                  "orders the two (no synchronisation, event, or legacy-stream rule between "
                  "them)", what, s->id, write ? "writes" : "reads", describe(r).c_str(),
                  u.wwhat.c_str(), u.wstream);
        if (write)
            for (auto &rd : u.reads)
                if (rd.first != s->id && seen(s->vc, rd.first) < rd.second.first)
                    fault("stream race: %s on stream %d writes %s, which %s on stream %d reads, "
                          "and nothing orders the two", what, s->id, describe(r).c_str(),
                          rd.second.second.c_str(), rd.first);
    }
    for (auto &a : op_access) {
        alloc_use &u = uses[a.first];
        if (a.second) {
            u.wstream = s->id;
            u.wseq = s->seq;
            u.wwhat = what;
            u.reads.clear();
        } else {
            u.reads[s->id] = {s->seq, what};
        }
    }
    op_access.clear();
}

/* run one operation on s now: its accesses checked against the streams' order */
static void run_op(CUstream_st *s, const char *what, const std::function<void()> &work) {
    issue(s);
    cur_op++;
    op_access.clear();
    work();
    stream_order_check(s, what);
}

/* the capture rules of the runtime (global and thread-local modes; one host thread here):
 * true when the call may go on */
static void invalidate_captures(const char *why) {
    for (CUstream_st &c : streams)
        if (c.capture && !c.invalidated) {
            c.invalidated = true;
            note("the capture on stream %d is invalidated: %s", c.id, why);
        }
}
static cudaError_t capture_forbids(const char *what) {
    bool strict = false;
    for (CUstream_st &c : streams)
        if (c.capture && c.mode != cudaStreamCaptureModeRelaxed) strict = true;
    if (!strict) return cudaSuccess;
    char why[200];
    snprintf(why, sizeof why, "%s while a stream is capturing", what);
    invalidate_captures(why);
    return cudaErrorStreamCaptureUnsupported;
}

static bool stream_ok(cudaStream_t s) { return !s || s->live; }

/* an operation on stream s: recorded when s captures, refused on the legacy stream while
 * a capture runs, else run now */
static cudaError_t submit(cudaStream_t s, const char *what, std::function<void(cudaStream_t)> op) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *st = resolve(s);
    if (st->capture) {
        if (st->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
        st->capture->nodes.push_back(graph_node{what, op});
        return cudaSuccess;
    }
    if (st->id == 0 && capturing) {
        /* stricter than the runtime, which refuses only what would make the legacy stream
         * depend on a capturing blocking stream, and synchronous copies: here any work on
         * the legacy stream during a capture fails, since work meant for the graph that
         * lands outside it is the bug to catch */
        char why[200];
        snprintf(why, sizeof why, "%s on the legacy (NULL) stream", what);
        invalidate_captures(why);
        note("%s while a stream is capturing: refused (cudaErrorStreamCaptureImplicit)", why);
        return fail(cudaErrorStreamCaptureImplicit);
    }
    op(s);
    return cudaSuccess;
}

/* ---- launches ---- */
void dm_emu::launch(const void *fn, const char *kname, const char *file, int line,
                    const launch_config &c, std::function<void()> b) {
    read_order();
    const char *base = strrchr(file, '/');
    char label[256];
    snprintf(label, sizeof label, "%s (%s:%d)", kname, base ? base + 1 : file, line);
    const char *name = label;
    if (!c.block.x || !c.block.y || !c.block.z || c.block.x > 1024 || c.block.y > 1024 ||
        c.block.z > 64 || (size_t)c.block.x * c.block.y * c.block.z > EMU_MAX_THREADS) {
        note("launch of %s refused: block (%u,%u,%u) (at most 1024 threads; 1024 x 1024 x 64)",
             name, c.block.x, c.block.y, c.block.z);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (!c.grid.x || !c.grid.y || !c.grid.z || c.grid.x > 0x7fffffffu || c.grid.y > 65535 ||
        c.grid.z > 65535) {
        note("launch of %s refused: grid (%u,%u,%u)", name, c.grid.x, c.grid.y, c.grid.z);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    auto it = smem_limit.find(fn);
    size_t limit = it == smem_limit.end() ? EMU_DEFAULT_SMEM : (size_t)it->second;
    if (c.smem > limit) {
        note("launch of %s refused: %zu bytes of dynamic shared memory, the kernel's limit is %zu%s",
             name, c.smem, limit,
             it == smem_limit.end() ? " (raise it with cudaFuncSetAttribute)" : "");
        fail(cudaErrorInvalidValue);
        return;
    }
    std::string what = std::string("kernel ") + name, kn = name;
    launch_config cc = c;
    auto op = [fn, kn, cc, b, what](cudaStream_t s) mutable {
        launch_config c2 = cc;
        c2.stream = s;
        run_op(resolve(s), what.c_str(), [&]() { run_kernel(fn, kn.c_str(), c2, b); });
    };
    submit(c.stream, what.c_str(), op);
}

extern "C" {

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError) N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection) N(cudaErrorNoDevice)
        N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady)
        N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources)
        N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated)
        N(cudaErrorStreamCaptureUnmatched) N(cudaErrorStreamCaptureImplicit)
        N(cudaErrorCapturedEvent)
#undef N
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_err;
    last_err = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_err; }

/* ---- the device ---- */
cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d != 0) return fail(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = EMU_MAX_THREADS; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = EMU_DEFAULT_SMEM; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = EMU_OPTIN_SMEM; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (d != 0) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "dormouse CUDA emulator (on the CPU)");
    p->totalGlobalMem = EMU_TOTAL_MEM;
    p->sharedMemPerBlock = EMU_DEFAULT_SMEM;
    p->sharedMemPerBlockOptin = EMU_OPTIN_SMEM;
    p->warpSize = 32;
    p->maxThreadsPerBlock = EMU_MAX_THREADS;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    return cudaSuccess;
}

static void host_sees_all() {
    for (CUstream_st &s : streams) {
        see(host_vc, s.id, s.seq);
        join(host_vc, s.vc);
    }
}

static long host_waits; /* dm_emu_host_waits */
static void pinned_release();
cudaError_t cudaDeviceSynchronize(void) {
    if (cudaError_t e = capture_forbids("cudaDeviceSynchronize")) return fail(e);
    host_waits++;
    legacy();
    host_sees_all();
    pinned_release();
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *total_bytes = EMU_TOTAL_MEM;
    *free_bytes = EMU_TOTAL_MEM - allocated;
    return cudaSuccess;
}

/* ---- memory ---- */
cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = nullptr;
    if (cudaError_t e = capture_forbids("cudaMalloc")) return fail(e);
    if (bytes == 0) return cudaSuccess; /* as the runtime: NULL, no error */
    if (bytes > EMU_TOTAL_MEM - allocated) return fail(cudaErrorMemoryAllocation);
    char *m = (char *)aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m) return fail(cudaErrorMemoryAllocation);
    memset(m, 0xff, bytes); /* garbage, as a fresh allocation: NaN as floats */
    regions.push_back(region{m, bytes, R_GLOBAL, true, ++alloc_count, nullptr, 0, 0});
    allocs[(uintptr_t)m] = &regions.back();
    allocated += bytes;
    *p = m;
    return cudaSuccess;
}

/* Page-locked host memory: pages of its own (mmap). A copy from the device into it is
 * asynchronous on a GPU: its bytes are the host's only once the host has waited for the
 * copy's stream (a synchronisation, an event after it). So the emulator takes those pages
 * from the host (PROT_NONE) when such a copy runs and gives them back at the host wait
 * that covers it; a host access before that faults, named (pinned_guard). */
struct pinned_copy {
    char *lo;
    size_t bytes;
    int stream;
    uint64_t seq;
};
static std::map<uintptr_t, size_t> pinned;    /* base -> mapped bytes */
static std::vector<pinned_copy> pinned_held;  /* copies into it the host has not waited for */

static size_t page_bytes() { return (size_t)sysconf(_SC_PAGESIZE); }
static const std::pair<const uintptr_t, size_t> *pinned_of(const void *p) {
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return nullptr;
    --it;
    return (uintptr_t)p < it->first + it->second ? &*it : nullptr;
}
/* the pages of [lo, lo + n) to the host (rw 1) or away from it */
static void pinned_protect(char *lo, size_t n, int rw) {
    size_t pg = page_bytes();
    uintptr_t a = (uintptr_t)lo & ~(pg - 1), b = ((uintptr_t)lo + n + pg - 1) & ~(pg - 1);
    mprotect((void *)a, b - a, rw ? PROT_READ | PROT_WRITE : PROT_NONE);
}
/* after a host wait: the copies it covers give their pages back (a page stays away while
 * another copy into it is still uncovered) */
static void pinned_release() {
    std::vector<pinned_copy> keep;
    for (pinned_copy &c : pinned_held)
        if (seen(host_vc, c.stream) < c.seq) keep.push_back(c);
    pinned_held.swap(keep);
    for (auto &a : pinned) pinned_protect((char *)a.first, a.second, 1);
    for (pinned_copy &c : pinned_held) pinned_protect(c.lo, c.bytes, 0);
}
/* a copy from the device into dst[n] on stream s has just run */
static void pinned_copied(void *dst, size_t n, const CUstream_st *s) {
    if (!pinned_of(dst)) return;
    pinned_held.push_back(pinned_copy{(char *)dst, n, s->id, s->seq});
    pinned_protect((char *)dst, n, 0);
}
static void pinned_fault(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    for (pinned_copy &c : pinned_held) {
        size_t pg = page_bytes();
        uintptr_t a = (uintptr_t)c.lo & ~(pg - 1);
        uintptr_t b = ((uintptr_t)c.lo + c.bytes + pg - 1) & ~(pg - 1);
        if ((uintptr_t)si->si_addr >= a && (uintptr_t)si->si_addr < b) {
            static const char msg[] = "emu: FAULT: the host touched page-locked memory that a "
                                      "copy from the device writes, before waiting for its "
                                      "stream (a synchronisation or an event after the copy)\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            abort();
        }
    }
    signal(sig, SIG_DFL); /* not ours: as if no handler had been set */
    raise(sig);
}
static void pinned_guard() {
    static bool set;
    if (set) return;
    set = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pinned_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    if (cudaError_t e = capture_forbids("cudaMallocHost")) return fail(e);
    size_t pg = page_bytes(), n = (bytes + pg - 1) / pg * pg;
    void *m = mmap(nullptr, n ? n : pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
    pinned_guard();
    pinned[(uintptr_t)m] = n ? n : pg;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    if (cudaError_t e = capture_forbids("cudaFreeHost")) return fail(e);
    if (!p) return cudaSuccess;
    auto it = pinned.find((uintptr_t)p);
    if (it == pinned.end()) {
        note("cudaFreeHost(%p): not the start of page-locked memory", p);
        return fail(cudaErrorInvalidValue);
    }
    host_sees_all(); /* cudaFreeHost waits for the device */
    pinned_release();
    munmap(p, it->second);
    pinned.erase(it);
    return cudaSuccess;
}

long dm_emu_host_waits(void) { return host_waits; }

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = capture_forbids("cudaFree")) return fail(e);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) {
        note("cudaFree(%p): not the start of a live device allocation", p);
        return fail(cudaErrorInvalidValue);
    }
    region *r = it->second;
    host_sees_all(); /* cudaFree waits for the device */
    r->live = false;
    free(r->base);
    free(r->shadow);
    r->shadow = nullptr;
    allocs.erase(it);
    uses.erase(r);
    allocated -= r->size;
    return cudaSuccess;
}

} /* extern "C" */

/* [p, p + n) inside one live device allocation, else a fault naming `what` */
region *dm_emu::device_range(const void *p, size_t n, const char *what, const char *which) {
    region *r = find_alloc(p, false);
    if (!r) {
        const region *f = find_freed(p);
        if (f) fault("%s: the %s %p is in %s", what, which, p, describe(f).c_str());
        fault("%s: the %s %p is no device memory", what, which, p);
    }
    uintptr_t off = (uintptr_t)p - (uintptr_t)r->base;
    if (off + n > r->size)
        fault("%s: the %s [offset %zu, +%zu bytes) runs past the end of %s", what, which,
              (size_t)off, n, describe(r).c_str());
    return r;
}

extern "C" {

static cudaError_t memcpy_op(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                             cudaStream_t s, const char *what) {
    if (kind == cudaMemcpyDefault) { /* as unified addressing infers it */
        bool s_dev = find_alloc(src, false) != nullptr, d_dev = find_alloc(dst, false) != nullptr;
        kind = s_dev ? (d_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                     : (d_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    }
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
        return fail(cudaErrorInvalidMemcpyDirection);
    if (n == 0) return cudaSuccess;
    bool ddst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool dsrc = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    region *rd = ddst ? device_range(dst, n, what, "destination") : nullptr;
    region *rs = dsrc ? device_range(src, n, what, "source") : nullptr;
    if (!ddst && find_alloc(dst, false))
        fault("%s: the destination %p is device memory, the kind says host", what, dst);
    if (!dsrc && find_alloc(src, false))
        fault("%s: the source %p is device memory, the kind says host", what, src);
    return submit(s, what, [=](cudaStream_t t) {
        CUstream_st *st = resolve(t);
        run_op(st, what, [&]() {
            if (rs) note_access(rs, false);
            if (rd) note_access(rd, true);
            memmove(dst, src, n);
        });
        if (!ddst) pinned_copied(dst, n, st);
    });
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
    return memcpy_op(dst, src, bytes, kind, s, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = memcpy_op(dst, src, bytes, kind, nullptr, "cudaMemcpy");
    if (!e) e = cudaStreamSynchronize(nullptr);
    return e;
}

cudaError_t cudaMemsetAsync(void *p, int byte, size_t bytes, cudaStream_t s) {
    if (bytes == 0) return cudaSuccess;
    region *r = device_range(p, bytes, "cudaMemsetAsync", "destination");
    return submit(s, "cudaMemsetAsync", [=](cudaStream_t t) {
        run_op(resolve(t), "cudaMemsetAsync", [&]() {
            note_access(r, true);
            memset(p, byte, bytes);
        });
    });
}

cudaError_t cudaMemset(void *p, int byte, size_t bytes) {
    cudaError_t e = cudaMemsetAsync(p, byte, bytes, nullptr);
    if (!e) e = cudaStreamSynchronize(nullptr);
    return e;
}

/* ---- streams ---- */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    legacy();
    streams.push_back(CUstream_st{(int)streams.size(), (flags & cudaStreamNonBlocking) != 0, true,
                                  0, {}, nullptr, {}, false});
    *s = &streams.back();
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s || !s->live) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) return fail(cudaErrorStreamCaptureUnmatched);
    s->live = false;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *st = resolve(s);
    if (st->capture) {
        invalidate_captures("cudaStreamSynchronize on the capturing stream");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (cudaError_t e = capture_forbids("cudaStreamSynchronize")) return fail(e);
    host_waits++;
    see(host_vc, st->id, st->seq);
    join(host_vc, st->vc);
    pinned_release();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    if (!stream_ok(s) || !e || !e->live) return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *st = resolve(s);
    join(st->vc, e->vc);
    return cudaSuccess;
}

/* ---- events ---- */
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st{false, true, {}, 0.0};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e || !e->live) return fail(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e || !e->live) return fail(cudaErrorInvalidResourceHandle);
    return submit(s, "cudaEventRecord", [e](cudaStream_t t) {
        CUstream_st *st = resolve(t);
        run_op(st, "cudaEventRecord", []() {});
        e->vc = st->vc;
        e->recorded = true;
        e->t_ms = now_ms();
    });
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e || !e->live) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t c = capture_forbids("cudaEventSynchronize")) return fail(c);
    host_waits++;
    join(host_vc, e->vc);
    pinned_release();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || !a->live || !b->live) return fail(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}

/* ---- graphs ---- */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (!s) {
        note("cudaStreamBeginCapture on the legacy (NULL) stream: not permitted");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (!s->live) return fail(cudaErrorInvalidResourceHandle);
    if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);
    s->capture = new CUgraph_st;
    s->mode = mode;
    s->invalidated = false;
    capturing++;
    return cudaSuccess;
}

/* DM_EMU_CAPTURE_FAIL=N: the N-th capture of the process (1-based) ends invalidated, as one
 * that met work it cannot record would (fault injection, for the code that must survive
 * a refused capture) */
static bool capture_fails() {
    static long n = 0;
    const char *e = getenv("DM_EMU_CAPTURE_FAIL");
    return ++n == (e ? atol(e) : 0);
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (!s || !s->live) return fail(cudaErrorInvalidResourceHandle);
    if (!s->capture) return fail(cudaErrorStreamCaptureUnmatched);
    CUgraph_st *graph = s->capture;
    bool bad = s->invalidated || capture_fails();
    s->capture = nullptr;
    s->invalidated = false;
    capturing--;
    if (bad) {
        delete graph;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = graph;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st) {
    CUstream_st *c = resolve(s);
    *st = !c->capture ? cudaStreamCaptureStatusNone
                      : c->invalidated ? cudaStreamCaptureStatusInvalidated
                                       : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    if (!g) return fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{g->nodes};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return fail(cudaErrorInvalidValue);
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle);
    /* a graph launched while capturing becomes part of the capture: node by node */
    for (graph_node &n : exec->nodes)
        if (cudaError_t e = submit(s, n.what.c_str(), n.run)) return e;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *kernel, cudaFuncAttribute a, int value) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) return fail(cudaErrorInvalidValue);
    if (value < 0 || value > EMU_OPTIN_SMEM) return fail(cudaErrorInvalidValue);
    smem_limit[kernel] = value;
    return cudaSuccess;
}

} /* extern "C" */

cudaError_t dm_emu::submit_op(cudaStream_t s, const char *what,
                              std::function<void(cudaStream_t)> op) {
    return submit(s, what, std::move(op));
}
void dm_emu::run_on(cudaStream_t s, const char *what, const std::function<void()> &work) {
    run_op(resolve(s), what, work);
}

/* the regions' shadows are freed at exit (LeakSanitizer sees none left) */
static struct emu_cleanup {
    ~emu_cleanup() {
        for (region &r : regions) {
            if (r.live) free(r.base);
            free(r.shadow);
            r.shadow = nullptr;
        }
        free(dyn_region.shadow);
        free(static_region.shadow);
        free(dm_emu::dyn_buf);
        free(dm_emu::static_buf);
    }
} cleanup_at_exit;
