// The CUDA built-ins the kernels use, for the host: the one shim behind which the emulation
// tests compile every kernel module (gpu/kernels/*.cu) with the system C++ compiler
// (`-ffp-contract=off`, so `__fmul_rn` & co. are plain IEEE float operations). A block's
// threads run one after the other on one OS thread (where `__syncthreads` has nothing to
// wait for) or each on its own OS thread (a barrier: `emu_threads::emu_sync`); atomics are
// real atomics; `__shared__` memory is one per process, as one block runs at a time.
#include <cmath>
#include <climits>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
// Dynamic shared memory (`DYN_SHARED`): one buffer, as one block runs at a time.
alignas(16) static unsigned char emu_dyn_shared[1 << 16];
#define DYN_SHARED(T, name) T* name = (T*)emu_dyn_shared
struct Dim3 { unsigned x, y, z; };
static thread_local Dim3 blockIdx, blockDim, threadIdx;
static void (*emu_sync_fn)() = nullptr;
extern "C" void emu_set_sync(void (*f)()) { emu_sync_fn = f; }
extern "C" void emu_thread(unsigned b, unsigned bd, unsigned t) { blockIdx.x = b; blockDim.x = bd; threadIdx.x = t; }
static inline void __syncthreads() { emu_sync_fn(); }
template <class T> static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> static inline T atomicMax(T* p, T v) {
    T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v > o && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return o;
}
template <class T> static inline T atomicMin(T* p, T v) {
    T o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < o && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return o;
}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
// Rust's `as i32`: truncation, saturation, NaN -> 0 (PTX `cvt.rzi.s32`).
static inline int __float2int_rz(float f) {
    if (std::isnan(f)) return 0;
    if (f >= 2147483648.0f) return INT_MAX;
    if (f <= -2147483648.0f) return INT_MIN;
    return (int)f;
}
static inline int __double2int_rz(double f) {
    if (std::isnan(f)) return 0;
    if (f >= 2147483648.0) return INT_MAX;
    if (f <= -2147483648.0) return INT_MIN;
    return (int)f;
}
static inline float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, sizeof f); return f; }
