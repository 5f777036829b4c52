// Runs src/model/kernels/column_select.cu on the host, a block's 256 threads on one thread
// (each __syncthreads hands over to the next thread), against the host's rule: per column, a
// stable sort of the scores |w|·norm and its first k. Weights in f32, fp16 and bf16 with many
// ties (whole columns of one value included), shapes whose rows and columns do not fill the
// block's ranges and warps, every k from 0 to all rows, and scores that are not finite, which
// must set the failure flag; exits 1 on a difference.
//   c++ -std=c++17 -O1 scripts/gpu/select_on_host.cpp -o /tmp/select && /tmp/select
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <ucontext.h>
#include <vector>

// A block is emulated on one thread: each of its threads runs on its own stack (ucontext), and
// at every __syncthreads a thread hands over to the next, the last back to the first, so a
// thread resumes only when all have reached the same barrier. Threads take turns upwards from
// thread 0 or, to expose a thread that reads what another has not written yet, downwards.
struct Dim { unsigned x, y; };
Dim threadIdx, blockIdx, blockDim{32, 8};
constexpr unsigned THREADS = 256;
ucontext_t thread_context[THREADS], launcher;
unsigned current_thread;
bool downwards;
static unsigned after(unsigned t) { return downwards ? (t + THREADS - 1) % THREADS : (t + 1) % THREADS; }
static void enter(unsigned t) { current_thread = t; threadIdx.x = t % 32; threadIdx.y = t / 32; }

static void __syncthreads() {
    unsigned from = current_thread, to = after(from);
    enter(to);
    swapcontext(&thread_context[from], &thread_context[to]);
}

#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__ static
static unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
// Threads switch only at barriers, so an add is atomic here.
static unsigned atomicAdd(unsigned* at, unsigned v) { unsigned old = *at; *at += v; return old; }
static float f16_value(unsigned short h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 31 ? (m ? NAN : INFINITY) : e ? std::ldexp(1024.0f + m, e - 25) : std::ldexp((float)m, -24);
    return (h & 0x8000) ? -v : v;
}
#define asm(...) (f = f16_value(h))
#include "../../src/model/kernels/column_select.cu"
#undef asm

template <typename T>
using Kernel = void (*)(const T*, const float*, unsigned char*, int, int, int, int*);

// One launch as the CUDA path makes it: a block per 32 columns, of 32 × SELECT_WARPS threads.
static void (*running)();
static void thread_entry() {
    running();
    // The next thread starts, or resumes after the block's last barrier; the last one ends it.
    if (current_thread == (downwards ? 0u : THREADS - 1)) setcontext(&launcher);
    unsigned next = after(current_thread);
    enter(next);
    setcontext(&thread_context[next]);
}

template <typename T>
static void launch(Kernel<T> kernel, const std::vector<T>& w, const std::vector<float>& norms,
                   std::vector<unsigned char>& mask, int rows, int cols, int k, int* failed) {
    static_assert(SELECT_THREADS == THREADS, "the emulator runs the kernel's block size");
    static Kernel<T> the_kernel;
    static const T* the_w;
    static const float* the_norms;
    static unsigned char* the_mask;
    static int the_rows, the_cols, the_k;
    static int* the_failed;
    the_kernel = kernel, the_w = w.data(), the_norms = norms.data(), the_mask = mask.data();
    the_rows = rows, the_cols = cols, the_k = k, the_failed = failed;
    running = [] { the_kernel(the_w, the_norms, the_mask, the_rows, the_cols, the_k, the_failed); };
    static std::vector<char> stacks(THREADS * 65536);
    for (int b = 0; b < (cols + 31) / 32; ++b) {
        for (unsigned t = 0; t < THREADS; ++t) {
            getcontext(&thread_context[t]);
            thread_context[t].uc_stack.ss_sp = &stacks[t * 65536];
            thread_context[t].uc_stack.ss_size = 65536;
            thread_context[t].uc_link = &launcher;
            makecontext(&thread_context[t], thread_entry, 0);
        }
        blockIdx.x = (unsigned)b;
        enter(downwards ? THREADS - 1 : 0);
        swapcontext(&launcher, &thread_context[current_thread]);
    }
}

// Exact for the values below (0, ±∞, or ±m·2^e with m < 2^11, in fp16's normal range).
// The N:M kernel has no barrier: its threads run one after the other.
template <typename T>
using GroupKernel = void (*)(const T*, const float*, unsigned char*, int, int, int, int, int*);

template <typename T>
static void launch_groups(GroupKernel<T> kernel, const std::vector<T>& w,
                          const std::vector<float>& norms, std::vector<unsigned char>& mask,
                          int rows, int cols, int n, int m, int* failed) {
    Dim block = blockDim;
    blockDim = {256, 1};
    long long groups = (long long)(rows / m) * cols;
    for (long long b = 0; b < (groups + 255) / 256; ++b)
        for (unsigned t = 0; t < 256; ++t) {
            blockIdx.x = (unsigned)b, threadIdx.x = t, threadIdx.y = 0;
            kernel(w.data(), norms.data(), mask.data(), rows, cols, n, m, failed);
        }
    blockDim = block;
}

static unsigned short to_f16(float x) {
    unsigned short sign = x < 0 ? 0x8000 : 0;
    if (x == 0) return sign;
    if (std::isinf(x)) return sign | 0x7c00;
    int e;
    float m = std::frexp(std::fabs(x), &e); // |x| = m·2^e, m in [0.5, 1)
    return sign | (unsigned short)(((e + 14) << 10) | ((unsigned)(m * 2048.0f) - 1024));
}
static unsigned short to_bf16(float x) { return (unsigned short)(__float_as_uint(x) >> 16); }

int failures = 0;
static void fail(const char* what, int type, int rows, int cols, int k, int r, int c) {
    if (failures++ < 10)
        std::printf("%s: type %d, %d × %d, k %d, row %d col %d\n", what, type, rows, cols, k, r, c);
}

// Runs the kernel of `type` on `values` (as f32, all exact in the type) and compares: the `k`
// lowest of each column where `m` is 0, else the `k` lowest of every `m` rows of each column.
static void check(int type, const std::vector<float>& values, const std::vector<float>& norms,
                  int rows, int cols, int k, int m, bool finite) {
    std::vector<unsigned char> mask(values.size(), 7);
    int failed = 0;
    if (type == 0) {
        if (m == 0) launch<float>(lowest_per_column_f32, values, norms, mask, rows, cols, k, &failed);
        else launch_groups<float>(lowest_per_group_f32, values, norms, mask, rows, cols, k, m, &failed);
    } else {
        std::vector<unsigned short> half(values.size());
        for (size_t i = 0; i < values.size(); ++i) {
            half[i] = type == 1 ? to_f16(values[i]) : to_bf16(values[i]);
            float back = type == 1 ? f16_value(half[i]) : __uint_as_float((unsigned)half[i] << 16);
            if (back != values[i] && !std::isnan(values[i])) fail("inexact test value", type, rows, cols, k, -1, -1);
        }
        if (m == 0)
            launch<unsigned short>(type == 1 ? lowest_per_column_f16 : lowest_per_column_bf16,
                                   half, norms, mask, rows, cols, k, &failed);
        else
            launch_groups<unsigned short>(type == 1 ? lowest_per_group_f16 : lowest_per_group_bf16,
                                          half, norms, mask, rows, cols, k, m, &failed);
    }
    if (failed != (finite ? 0 : 1)) fail(finite ? "flagged" : "not flagged", type, rows, cols, k, -1, -1);
    if (!finite) return;
    int group = m == 0 ? rows : m;
    for (int c = 0; c < cols; ++c)
        for (int first = 0; first < rows; first += group) {
            std::vector<int> order(group);
            std::iota(order.begin(), order.end(), first);
            auto score = [&](int r) { return std::fabs(values[(size_t)r * cols + c]) * norms[r]; };
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score(a) < score(b); });
            std::vector<unsigned char> want(rows, 0);
            for (int i = 0; i < k; ++i) want[order[i]] = 1;
            for (int r = first; r < first + group; ++r)
                if (mask[(size_t)r * cols + c] != want[r]) fail("mask", type, rows, cols, k, r, c);
        }
}

int main() {
    std::mt19937 rng(11);
    int launches = 0, group_launches = 0;
    for (int order = 0; order < 2; ++order)
    for (int rows : {1, 9, 64, 336})
    for (int cols : {1, 33, 70}) {
        downwards = order == 1;
        // Values exact in fp16 and bf16: few distinct magnitudes (many ties), both signs,
        // zeros, and whole columns of one value; norms with ties and a subnormal one.
        std::uniform_int_distribution<int> level(-6, 6);
        std::vector<float> values((size_t)rows * cols), norms(rows);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c)
                values[(size_t)r * cols + c] = c % 7 == 3 ? 0.5f : level(rng) * 0.25f;
        for (int r = 0; r < rows; ++r) norms[r] = r % 5 == 4 ? 1e-40f : 1.0f + (r % 3) * 0.5f;
        for (int type = 0; type < 3; ++type)
            for (int k : {0, 1, rows / 2, rows - 1, rows}) {
                if (k < 0) continue;
                check(type, values, norms, rows, cols, k, 0, true);
                ++launches;
            }
        // N:M where the rows divide into groups.
        for (auto [n, m] : {std::pair{1, 2}, {2, 4}, {3, 4}, {4, 8}})
            for (int type = 0; type < 3; ++type)
                if (rows % m == 0) {
                    check(type, values, norms, rows, cols, n, m, true);
                    ++group_launches;
                }
        // A weight or a norm that is not finite sets the flag.
        std::vector<float> bad = values;
        bad[bad.size() / 2] = INFINITY;
        check(0, bad, norms, rows, cols, rows / 2, 0, false);
        std::vector<float> bad_norms = norms;
        bad_norms[rows - 1] = NAN;
        check(2, values, bad_norms, rows, cols, rows / 2, 0, false);
        launches += 2;
        if (rows % 4 == 0) {
            check(1, bad, norms, rows, cols, 2, 4, false);
            ++group_launches;
        }
    }
    std::printf("%d per column and %d N:M launches: %s\n", launches, group_launches,
                failures ? "FAILED" : "all masks match");
    return failures != 0;
}
