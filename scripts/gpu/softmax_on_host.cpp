// Runs src/model/kernels/causal_softmax.cu on the host, a warp as 32 lanes on one thread
// (shuffles and __syncwarp hand over from lane to lane), against the causal softmax computed in
// double, for each output type, several row lengths, parts of rows and rows that straddle heads,
// and that nothing past a part's last key is written; exits 1 on a difference.
//   c++ -std=c++17 -O1 scripts/gpu/softmax_on_host.cpp -o /tmp/softmax && /tmp/softmax
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <ucontext.h>
#include <vector>

// A warp is emulated on one thread: each lane runs on its own stack (ucontext), and at every
// shuffle or __syncwarp a lane hands over to the next, lane 31 back to lane 0, so a lane resumes
// only when all 32 have reached the same point. Deterministic, and a busy machine only slows it
// down in proportion.
struct Dim { unsigned x; };
Dim threadIdx, blockIdx;
Dim blockDim{256};
ucontext_t lane_context[32], launcher;
unsigned current_lane;
float shuffle_slots[32];

// Lanes take turns upwards from lane 0 or, to expose a lane that writes what another has not
// read yet, downwards from lane 31.
bool downwards;
static unsigned after(unsigned lane) { return downwards ? (lane + 31) % 32 : (lane + 1) % 32; }

static void next_lane() {
    unsigned from = current_lane, to = after(from);
    current_lane = to;
    threadIdx.x = (threadIdx.x & ~31u) | to;
    swapcontext(&lane_context[from], &lane_context[to]);
}

#define __device__
#define __forceinline__ inline
#define __global__
static unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
static void __syncwarp() { next_lane(); }
static float __shfl_xor_sync(unsigned, float v, int offset) {
    unsigned lane = current_lane;
    shuffle_slots[lane] = v;
    next_lane(); // every lane has written its value
    float other = shuffle_slots[lane ^ offset];
    next_lane(); // every lane has read before the next shuffle writes
    return other;
}
// fp16 round to nearest even (PTX cvt.rn.f16.f32), for normal results and subnormals.
static unsigned short host_f16(float x) {
    unsigned u = __float_as_uint(x), sign = (u >> 16) & 0x8000u;
    float a = std::fabs(x);
    if (a >= 65520.0f) return sign | 0x7c00u;
    if (a < 6.103515625e-05f) return sign | (unsigned short)std::nearbyint(a * 16777216.0f);
    int e; float m = std::frexp(a, &e);           // a = m·2^e, m in [0.5, 1)
    unsigned mant = (unsigned)std::nearbyint(m * 2048.0f); // 11 bits with the leading one
    if (mant == 2048) { mant = 1024; e += 1; }
    return sign | (unsigned short)(((e + 14) << 10) | (mant - 1024));
}
#define asm(...) (h = host_f16(x))
#include "../../src/model/kernels/causal_softmax.cu"
#undef asm

static double f16_value(unsigned short h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? std::ldexp(1024 + m, e - 25) : std::ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}
static double bf16_value(unsigned short h) {
    unsigned u = (unsigned)h << 16; float x; std::memcpy(&x, &u, 4); return x;
}

using Kernel = void (*)(float*, long long, int, int);

// Launches `kernel` over `rows` rows as the CUDA path does, warp by warp: lane i starts (or
// resumes) when lane i - 1 hands over or returns; the last lane's return ends the warp.
static Kernel running_kernel;
static float* running_scores;
static long long running_rows;
static int running_seq, running_part_rows;
static void lane_entry() {
    running_kernel(running_scores, running_rows, running_seq, running_part_rows);
    // The next lane starts, or resumes after the warp's last hand-over; the last lane ends it.
    if (current_lane == (downwards ? 0u : 31u)) setcontext(&launcher);
    unsigned next = after(current_lane);
    current_lane = next;
    threadIdx.x = (threadIdx.x & ~31u) | next;
    setcontext(&lane_context[next]);
}

static void launch(Kernel kernel, float* scores, long long rows, int seq, int part_rows) {
    running_kernel = kernel, running_scores = scores, running_rows = rows, running_seq = seq;
    running_part_rows = part_rows;
    static std::vector<char> stacks(32 * 65536);
    long long blocks = (rows + 7) / 8;
    for (long long b = 0; b < blocks; ++b)
        for (unsigned w = 0; w < 8; ++w) {
            for (unsigned lane = 0; lane < 32; ++lane) {
                getcontext(&lane_context[lane]);
                lane_context[lane].uc_stack.ss_sp = &stacks[lane * 65536];
                lane_context[lane].uc_stack.ss_size = 65536;
                lane_context[lane].uc_link = &launcher;
                makecontext(&lane_context[lane], lane_entry, 0);
            }
            blockIdx.x = (unsigned)b;
            current_lane = downwards ? 31 : 0;
            threadIdx.x = w * 32 + current_lane;
            swapcontext(&launcher, &lane_context[current_lane]);
        }
}

int main() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
    int failures = 0;
    auto fail = [&](const char* what, int seq, int type, long long r, int j, double got, double want) {
        if (failures++ < 10)
            std::printf("%s: seq %d type %d row %lld key %d: %g, want %g\n", what, seq, type, r, j,
                        got, want);
    };
    for (int order = 0; order < 2; ++order)
    for (int seq : {1, 5, 31, 32, 33, 64, 100})
    for (int part_rows : {(seq + 3) / 4, seq}) {
        downwards = order == 1;
        long long rows = 3LL * seq; // three heads
        std::vector<float> input(rows * seq);
        for (auto& v : input) v = dist(rng);
        for (int type = 0; type < 3; ++type) {
            std::vector<float> scores = input;
            Kernel k[] = {causal_softmax_f32, causal_softmax_f16, causal_softmax_bf16};
            launch(k[type], scores.data(), rows, seq, part_rows);
            int size = type == 0 ? 4 : 2;
            double worst = 0;
            for (long long r = 0; r < rows; ++r) {
                const float* x = &input[r * seq];
                int query = (int)(r % seq), visible = query + 1;
                int end = std::min(seq, (query / part_rows + 1) * part_rows);
                double max = -INFINITY, sum = 0;
                for (int j = 0; j < visible; ++j) max = std::fmax(max, x[j]);
                for (int j = 0; j < visible; ++j) sum += std::exp(x[j] - max);
                for (int j = 0; j < end; ++j) {
                    double want = j < visible ? std::exp(x[j] - max) / sum : 0.0, got;
                    if (type == 0) got = scores[r * seq + j];
                    else {
                        unsigned short h;
                        std::memcpy(&h, (char*)&scores[r * seq] + 2 * j, 2);
                        got = type == 1 ? f16_value(h) : bf16_value(h);
                    }
                    double tol = type == 0 ? 1e-6 : type == 1 ? 1e-3 * want + 1e-7 : 8e-3 * want + 1e-30;
                    if (j >= visible && got != 0.0) tol = 0; // masked keys are exactly 0
                    double err = std::fabs(got - want);
                    if (err > tol) fail("value", seq, type, r, j, got, want);
                    if (want > 1e-4) worst = std::fmax(worst, err / want);
                }
                // Past the part's last key the row is as the scores left it.
                const char* was = (const char*)&input[r * seq];
                const char* is = (const char*)&scores[r * seq];
                for (int byte = end * size; byte < seq * 4; ++byte)
                    if (was[byte] != is[byte]) fail("written past the part", seq, type, r, byte / size, 0, 0);
            }
            std::printf("lanes %s, seq %3d, parts of %3d, %s: largest relative error %.2e "
                        "(probabilities above 1e-4)\n", downwards ? "down" : "up", seq, part_rows,
                        type == 0 ? "f32 " : type == 1 ? "f16 " : "bf16", worst);
        }
    }
    std::printf(failures ? "FAILED (%d)\n" : "all rows match\n", failures);
    return failures != 0;
}
