// Runs src/model/kernels/column_select.cu on the host, each block's threads on one thread (each
// __syncthreads hands over to the next thread), against the host's rules: per column, a stable
// sort of the scores |w|·norm and its first k (Wanda's); the same per group of m rows (N:M);
// every score at or below the matrix's k-th smallest (magnitude's). Weights in f32, fp16 and
// bf16 with many ties (whole columns of one value included), shapes whose rows and columns do
// not fill the blocks, rows padded as CUDA's allocator pads them, every k from 0 to all, and
// scores that are not finite, which must set the failure flag; exits 1 on a difference.
//   c++ -std=c++17 -O1 scripts/gpu/select_on_host.cpp -o /tmp/select && /tmp/select
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <ucontext.h>
#include <vector>

// A block is emulated on one thread: each of its threads runs on its own stack (ucontext), and
// at every __syncthreads a thread hands over to the next, the last back to the first, so a
// thread resumes only when all have reached the same barrier. Threads take turns upwards from
// thread 0 or, to expose a thread that reads what another has not written yet, downwards.
// Blocks run one after the other.
struct Dim { unsigned x, y; };
Dim threadIdx, blockIdx, blockDim, gridDim;
constexpr unsigned MAX_THREADS = 256;
ucontext_t thread_context[MAX_THREADS], launcher;
unsigned current_thread, threads;
bool downwards;
static unsigned after(unsigned t) { return downwards ? (t + threads - 1) % threads : (t + 1) % threads; }
static void enter(unsigned t) { current_thread = t; threadIdx.x = t % blockDim.x; threadIdx.y = t / blockDim.x; }

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

static std::function<void()> running;
static void thread_entry() {
    running();
    // The next thread starts, or resumes after the block's last barrier; the last one ends it.
    if (current_thread == (downwards ? 0u : threads - 1)) setcontext(&launcher);
    unsigned next = after(current_thread);
    enter(next);
    setcontext(&thread_context[next]);
}

// Runs `kernel` (a call of one kernel with its arguments) as a launch of `blocks` blocks of
// `block` threads.
static void launch(long long blocks, Dim block, std::function<void()> kernel) {
    blockDim = block, gridDim = {(unsigned)blocks, 1}, threads = block.x * block.y;
    running = std::move(kernel);
    static std::vector<char> stacks(MAX_THREADS * 65536);
    for (long long b = 0; b < blocks; ++b) {
        for (unsigned t = 0; t < threads; ++t) {
            getcontext(&thread_context[t]);
            thread_context[t].uc_stack.ss_sp = &stacks[t * 65536];
            thread_context[t].uc_stack.ss_size = 65536;
            thread_context[t].uc_link = &launcher;
            makecontext(&thread_context[t], thread_entry, 0);
        }
        blockIdx.x = (unsigned)b;
        enter(downwards ? threads - 1 : 0);
        swapcontext(&launcher, &thread_context[current_thread]);
    }
}

// The kernels of each weight type: per column, per group, the matrix's histogram and mask.
template <typename T> struct Kernels {
    void (*column)(const T*, int, const float*, unsigned char*, int, int, int, int, int*);
    void (*group)(const T*, int, const float*, unsigned char*, int, int, int, int, int, int*);
    void (*histogram)(const T*, int, const float*, long long, int, int, const unsigned*, unsigned*, int*);
    void (*mask)(const T*, int, const float*, long long, int, const unsigned*, unsigned char*, int);
};
const Kernels<float> F32{lowest_per_column_f32, lowest_per_group_f32, matrix_histogram_f32, matrix_mask_f32};
const Kernels<unsigned short> F16{lowest_per_column_f16, lowest_per_group_f16, matrix_histogram_f16, matrix_mask_f16};
const Kernels<unsigned short> BF16{lowest_per_column_bf16, lowest_per_group_bf16, matrix_histogram_bf16, matrix_mask_bf16};

// The rules, with `k` (and `m`) as column_select.rs launches them.
enum Rule { COLUMN, GROUP, MATRIX };

// Launches the kernels of `rule` as column_select.rs does: a block per 32 columns of
// 32 × SELECT_WARPS threads; a thread per group; the matrix's chain on a grid of 3 blocks
// (the grid-stride loops wrap). Rows of `w` are `ws` elements apart, rows of `mask` `ms`.
template <typename T>
static void run(const Kernels<T>& kernels, Rule rule, const std::vector<T>& w, int ws,
                const std::vector<float>& norms, std::vector<unsigned char>& mask, int ms,
                int rows, int cols, int k, int m, int* failed) {
    if (rule == COLUMN) {
        launch((cols + 31) / 32, {32, SELECT_WARPS}, [&] {
            kernels.column(w.data(), ws, norms.data(), mask.data(), ms, rows, cols, k, failed);
        });
    } else if (rule == GROUP) {
        long long groups = (long long)(rows / m) * cols;
        launch((groups + 255) / 256, {256, 1}, [&] {
            kernels.group(w.data(), ws, norms.data(), mask.data(), ms, rows, cols, k, m, failed);
        });
    } else {
        long long len = (long long)rows * cols;
        unsigned state[2] = {0, (unsigned)k}, counts[SELECT_BINS] = {};
        for (int shift = 24; shift >= 0; shift -= 8) {
            launch(3, {MATRIX_THREADS, 1}, [&] {
                kernels.histogram(w.data(), ws, norms.data(), len, cols, shift, state, counts, failed);
            });
            launch(1, {1, 1}, [&] { matrix_pick(state, counts); });
        }
        launch(3, {MATRIX_THREADS, 1}, [&] {
            kernels.mask(w.data(), ws, norms.data(), len, cols, state, mask.data(), ms);
        });
    }
}

// Exact for the values below (0, ±∞, or ±m·2^e with m < 2^11, in fp16's normal range).
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
static void fail(const char* what, int type, int rule, int rows, int cols, int k, long long at) {
    if (failures++ < 10)
        std::printf("%s: type %d, rule %d, %d × %d, k %d, at %lld\n", what, type, rule, rows, cols, k, at);
}

// Rows padded as CUDA's allocator pads them: weights by `pad` elements, masks by `pad + 5`
// bytes (0 for contiguous rows); padded weights are infinite, so a kernel that reads them
// raises its flag, and padded mask bytes must keep their 7.
int pad = 0;

// Runs the kernels of `type` and `rule` on `values` (as f32, all exact in the type) and
// compares with the host's rule.
static void check(int type, Rule rule, const std::vector<float>& values,
                  const std::vector<float>& norms, int rows, int cols, int k, int m, bool finite) {
    int ws = cols + pad, ms = cols + (pad ? pad + 5 : 0);
    std::vector<float> padded((size_t)rows * ws, INFINITY);
    for (int r = 0; r < rows; ++r)
        std::copy_n(&values[(size_t)r * cols], cols, &padded[(size_t)r * ws]);
    std::vector<unsigned char> stored((size_t)rows * ms, 7);
    int failed = 0;
    if (type == 0) {
        run(F32, rule, padded, ws, norms, stored, ms, rows, cols, k, m, &failed);
    } else {
        std::vector<unsigned short> half(padded.size());
        for (size_t i = 0; i < padded.size(); ++i) {
            half[i] = type == 1 ? to_f16(padded[i]) : to_bf16(padded[i]);
            float back = type == 1 ? f16_value(half[i]) : __uint_as_float((unsigned)half[i] << 16);
            if (back != padded[i] && !std::isnan(padded[i])) fail("inexact test value", type, rule, rows, cols, k, i);
        }
        run(type == 1 ? F16 : BF16, rule, half, ws, norms, stored, ms, rows, cols, k, m, &failed);
    }
    std::vector<unsigned char> mask(values.size());
    for (int r = 0; r < rows; ++r) {
        std::copy_n(&stored[(size_t)r * ms], cols, &mask[(size_t)r * cols]);
        for (int c = cols; c < ms; ++c)
            if (stored[(size_t)r * ms + c] != 7) fail("padding written", type, rule, rows, cols, k, r);
    }
    if (failed != (finite ? 0 : 1)) fail(finite ? "flagged" : "not flagged", type, rule, rows, cols, k, -1);
    if (!finite) return;
    auto score = [&](long long i) { return std::fabs(values[i]) * norms[i / cols]; };
    std::vector<unsigned char> want(values.size(), 0);
    if (rule == MATRIX) {
        std::vector<float> sorted(values.size());
        for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = score(i);
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 0; i < sorted.size(); ++i) want[i] = score(i) <= sorted[k - 1];
    } else {
        int group = rule == COLUMN ? rows : m;
        for (int c = 0; c < cols; ++c)
            for (int first = 0; first < rows; first += group) {
                std::vector<long long> order(group);
                for (int r = 0; r < group; ++r) order[r] = (long long)(first + r) * cols + c;
                std::stable_sort(order.begin(), order.end(), [&](long long a, long long b) { return score(a) < score(b); });
                for (int i = 0; i < k; ++i) want[order[i]] = 1;
            }
    }
    for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i] != want[i]) fail("mask", type, rule, rows, cols, k, i);
}

int main() {
    std::mt19937 rng(11);
    int launches[3] = {};
    for (int order = 0; order < 2; ++order)
    for (int rows : {1, 9, 64, 336})
    for (int cols : {1, 33, 70}) {
        downwards = order == 1;
        pad = cols == 33 ? 3 : 0;
        // Values exact in fp16 and bf16: few distinct magnitudes (many ties), both signs,
        // zeros, and whole columns of one value; norms with ties and a subnormal one.
        std::uniform_int_distribution<int> level(-6, 6);
        std::vector<float> values((size_t)rows * cols), norms(rows), ones(rows, 1.0f);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c)
                values[(size_t)r * cols + c] = c % 7 == 3 ? 0.5f : level(rng) * 0.25f;
        for (int r = 0; r < rows; ++r) norms[r] = r % 5 == 4 ? 1e-40f : 1.0f + (r % 3) * 0.5f;
        int len = rows * cols;
        for (int type = 0; type < 3; ++type) {
            for (int k : {0, 1, rows / 2, rows - 1, rows}) {
                check(type, COLUMN, values, norms, rows, cols, k, 0, true);
                ++launches[COLUMN];
            }
            // N:M where the rows divide into groups.
            for (auto [n, m] : {std::pair{1, 2}, {2, 4}, {3, 4}, {4, 8}})
                if (rows % m == 0) {
                    check(type, GROUP, values, norms, rows, cols, n, m, true);
                    ++launches[GROUP];
                }
            // The matrix's threshold (k ≥ 1: a ratio of 0 launches nothing), of magnitude's
            // scores and of scaled ones.
            for (int k : {1, len / 3, len})
                for (const auto* scale : {&ones, &norms}) {
                    check(type, MATRIX, values, *scale, rows, cols, std::max(k, 1), 0, true);
                    ++launches[MATRIX];
                }
        }
        // A weight or a norm that is not finite sets the flag.
        std::vector<float> bad = values;
        bad[bad.size() / 2] = INFINITY;
        std::vector<float> bad_norms = norms;
        bad_norms[rows - 1] = NAN;
        check(0, COLUMN, bad, norms, rows, cols, rows / 2, 0, false);
        check(2, COLUMN, values, bad_norms, rows, cols, rows / 2, 0, false);
        check(1, MATRIX, bad, ones, rows, cols, len / 2 + 1, 0, false);
        check(0, MATRIX, values, bad_norms, rows, cols, 1, 0, false);
        launches[COLUMN] += 2, launches[MATRIX] += 2;
        if (rows % 4 == 0) {
            check(1, GROUP, bad, norms, rows, cols, 2, 4, false);
            ++launches[GROUP];
        }
    }
    std::printf("%d per column, %d N:M and %d per matrix launches: %s\n", launches[COLUMN],
                launches[GROUP], launches[MATRIX], failures ? "FAILED" : "all masks match");
    return failures != 0;
}
