// Pruning's selection on CUDA (column_select.rs): Wanda's per-output rule and the N:M rule, in
// one launch per weight, and magnitude's per-matrix threshold in a chain of nine; magnitude's
// scores are Wanda's with norms of 1. Compiled by NVRTC, so no headers.
//
// `weight` is `[rows, cols]`, row-major with rows `weight_stride` elements apart (CUDA's
// allocator pads rows to its pitch), in the type T: input channels by output channels, as the
// linears hold it. The score of weight (r, c) is |w| · norms[r] in f32, as the host's
// `wanda_scores` computes it. `mask` (one byte per weight, rows `mask_stride` bytes apart) gets
// 1 where a weight is selected, 0 elsewhere; the padding is left alone. In each column, the `k`
// lowest scores (0 ≤ k ≤ rows), ties by the lower row, are selected: the host's stable sort's
// first k.
//
// A block takes 32 neighbouring columns (threadIdx.x, so that a warp reads 32 neighbouring
// values of a row) and splits the rows into SELECT_WARPS ranges of consecutive rows
// (threadIdx.y), in order. The k-th smallest score of a column is found exactly by a radix
// select on the scores' bits (non-negative floats order as their bits do): four passes, each
// counting by their next 8 bits the scores that share the digits found so far, then picking
// the digit where the count reaches the rank still wanted. A fifth pass counts each range's
// scores equal to that threshold, and the last pass writes: 1 below the threshold, and 1 for
// the first (k - below) equal ones in row order (ranges before it first).
//
// A score that is not finite, or negative (bits at or above 0x7f800000 as unsigned), sets
// `*failed`, as does a launch with other than 32 × SELECT_WARPS threads a block: the mask is
// then meaningless, and the caller selects otherwise (the host names a weight whose score is
// not finite).

#define SELECT_WARPS 8
#define SELECT_THREADS (32 * SELECT_WARPS)
#define SELECT_BINS 256

__device__ __forceinline__ float widen_f32(float v) { return v; }

__device__ __forceinline__ float widen_f16(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float widen_bf16(unsigned short h) {
    return __uint_as_float((unsigned)h << 16);
}

// The bits of the score |value| · norm in f32 (one rounding, as the host's product).
#define SCORE_BITS(WIDEN, value, norm) __float_as_uint(fabsf(WIDEN(value)) * (norm))

#define LOWEST_PER_COLUMN(NAME, T, WIDEN)                                                       \
    extern "C" __global__ void NAME(const T* weight, int weight_stride, const float* norms,     \
                                    unsigned char* mask, int mask_stride, int rows, int cols,   \
                                    int k, int* failed) {                                       \
        __shared__ unsigned counts[SELECT_BINS][32];                                            \
        __shared__ unsigned found[32];                                                          \
        __shared__ unsigned wanted[32];                                                         \
        __shared__ unsigned equal_in[SELECT_WARPS][32];                                         \
        if (blockDim.x != 32 || blockDim.y != SELECT_WARPS) {                                   \
            *failed = 1;                                                                        \
            return;                                                                             \
        }                                                                                       \
        int lane = threadIdx.x;                                                                 \
        int range = threadIdx.y;                                                                \
        int thread = range * 32 + lane;                                                         \
        int col = blockIdx.x * 32 + lane;                                                       \
        bool active = col < cols;                                                               \
        int per_range = (rows + SELECT_WARPS - 1) / SELECT_WARPS;                               \
        int first = range * per_range < rows ? range * per_range : rows;                        \
        int end = first + per_range < rows ? first + per_range : rows;                          \
        const T* w = weight + (active ? col : 0);                                               \
        if (thread < 32) {                                                                      \
            found[thread] = 0u;                                                                 \
            wanted[thread] = (unsigned)k;                                                       \
        }                                                                                       \
        bool bad = false;                                                                       \
        for (int shift = 24; shift >= 0; shift -= 8) {                                          \
            for (int i = thread; i < SELECT_BINS * 32; i += SELECT_THREADS) {                   \
                counts[i / 32][i % 32] = 0u;                                                    \
            }                                                                                   \
            __syncthreads();                                                                    \
            unsigned prefix = found[lane];                                                      \
            for (int r = active ? first : end; r < end; ++r) {                                  \
                unsigned key = SCORE_BITS(WIDEN, w[(long long)r * weight_stride], norms[r]);    \
                bad = bad || key >= 0x7f800000u;                                                \
                if (shift == 24 || (key >> (shift + 8)) == prefix) {                            \
                    atomicAdd(&counts[(key >> shift) & 255u][lane], 1u);                        \
                }                                                                               \
            }                                                                                   \
            __syncthreads();                                                                    \
            if (range == 0) {                                                                   \
                unsigned want = wanted[lane];                                                   \
                unsigned below = 0u;                                                            \
                unsigned digit = 0u;                                                            \
                for (; digit < SELECT_BINS - 1; ++digit) {                                      \
                    unsigned n = counts[digit][lane];                                           \
                    if (below + n >= want) {                                                    \
                        break;                                                                  \
                    }                                                                           \
                    below += n;                                                                 \
                }                                                                               \
                found[lane] = (prefix << 8) | digit;                                            \
                wanted[lane] = want - below;                                                    \
            }                                                                                   \
            __syncthreads();                                                                    \
        }                                                                                       \
        if (bad) {                                                                              \
            *failed = 1;                                                                        \
        }                                                                                       \
        unsigned threshold = found[lane];                                                       \
        unsigned equal = 0u;                                                                    \
        for (int r = active ? first : end; r < end; ++r) {                                      \
            unsigned key = SCORE_BITS(WIDEN, w[(long long)r * weight_stride], norms[r]);        \
            equal += key == threshold ? 1u : 0u;                                                \
        }                                                                                       \
        equal_in[range][lane] = equal;                                                          \
        __syncthreads();                                                                        \
        unsigned rank = 0u;                                                                     \
        for (int before = 0; before < range; ++before) {                                        \
            rank += equal_in[before][lane];                                                     \
        }                                                                                       \
        unsigned ties = wanted[lane];                                                           \
        for (int r = active ? first : end; r < end; ++r) {                                      \
            unsigned key = SCORE_BITS(WIDEN, w[(long long)r * weight_stride], norms[r]);        \
            unsigned char zero = key < threshold ? 1 : 0;                                       \
            if (key == threshold) {                                                             \
                zero = rank < ties ? 1 : 0;                                                     \
                ++rank;                                                                         \
            }                                                                                   \
            mask[(long long)r * mask_stride + col] = zero;                                      \
        }                                                                                       \
    }

// N:M: in each column, of every group of `m` consecutive rows (rows % m == 0), the `n` lowest
// scores, ties by the lower row, get 1 in `mask`, as the host's `nm_mask`. A thread takes one
// group of one column (neighbouring threads, neighbouring columns) and ranks each score of the
// group against the others: m² comparisons, for the small m of N:M patterns. A score that is
// not finite or negative sets `*failed`.
#define LOWEST_PER_GROUP(NAME, T, WIDEN)                                                        \
    extern "C" __global__ void NAME(const T* weight, int weight_stride, const float* norms,     \
                                    unsigned char* mask, int mask_stride, int rows, int cols,   \
                                    int n, int m, int* failed) {                                \
        long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x;                        \
        long long groups = (long long)(rows / m) * cols;                                        \
        if (at >= groups) {                                                                     \
            return;                                                                             \
        }                                                                                       \
        long long col = at % cols;                                                              \
        long long first = (at / cols) * m;                                                      \
        const T* w = weight + first * weight_stride + col;                                      \
        const float* norm = norms + first;                                                      \
        bool bad = false;                                                                       \
        for (int j = 0; j < m; ++j) {                                                           \
            unsigned key = SCORE_BITS(WIDEN, w[(long long)j * weight_stride], norm[j]);         \
            bad = bad || key >= 0x7f800000u;                                                    \
            int rank = 0;                                                                       \
            for (int i = 0; i < m; ++i) {                                                       \
                unsigned other =                                                                \
                    SCORE_BITS(WIDEN, w[(long long)i * weight_stride], norm[i]);                \
                rank += other < key || (other == key && i < j) ? 1 : 0;                         \
            }                                                                                   \
            mask[(first + j) * mask_stride + col] = rank < n ? 1 : 0;                           \
        }                                                                                       \
        if (bad) {                                                                              \
            *failed = 1;                                                                        \
        }                                                                                       \
    }

// Magnitude's per-matrix rule: every score at or below the matrix's `k`-th smallest (ties at it
// included), by the same radix select over the whole matrix, as a chain of launches on one
// stream with no wait between them: per 8-bit digit, `matrix_histogram` counts the scores
// that share the digits found so far (a block's counts in shared memory, then added to the
// grid's `counts`), and `matrix_pick` (one thread) picks the digit where the count reaches the
// rank still wanted, in `state` (digits found, rank wanted: initially 0 and k), and clears
// `counts`; then `matrix_mask` writes 1 where a score's bits are at most the threshold's. A
// score that is not finite or negative sets `*failed`.
#define MATRIX_THREADS 256

#define MATRIX_HISTOGRAM(NAME, T, WIDEN)                                                        \
    extern "C" __global__ void NAME(const T* weight, int weight_stride, const float* norms,     \
                                    long long len, int cols, int shift, const unsigned* state,  \
                                    unsigned* counts, int* failed) {                            \
        __shared__ unsigned block_counts[SELECT_BINS];                                          \
        for (int i = threadIdx.x; i < SELECT_BINS; i += blockDim.x) {                           \
            block_counts[i] = 0u;                                                               \
        }                                                                                       \
        __syncthreads();                                                                        \
        unsigned prefix = state[0];                                                             \
        bool bad = false;                                                                       \
        long long stride = (long long)gridDim.x * blockDim.x;                                   \
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;           \
             i += stride) {                                                                     \
            long long r = i / cols;                                                             \
            T w = weight[r * weight_stride + i % cols];                                         \
            unsigned key = SCORE_BITS(WIDEN, w, norms[r]);                                      \
            bad = bad || key >= 0x7f800000u;                                                    \
            if (shift == 24 || (key >> (shift + 8)) == prefix) {                                \
                atomicAdd(&block_counts[(key >> shift) & 255u], 1u);                            \
            }                                                                                   \
        }                                                                                       \
        if (bad) {                                                                              \
            *failed = 1;                                                                        \
        }                                                                                       \
        __syncthreads();                                                                        \
        for (int i = threadIdx.x; i < SELECT_BINS; i += blockDim.x) {                           \
            if (block_counts[i] != 0u) {                                                        \
                atomicAdd(&counts[i], block_counts[i]);                                         \
            }                                                                                   \
        }                                                                                       \
    }

extern "C" __global__ void matrix_pick(unsigned* state, unsigned* counts) {
    unsigned want = state[1];
    unsigned below = 0u;
    unsigned digit = 0u;
    for (; digit < SELECT_BINS - 1; ++digit) {
        if (below + counts[digit] >= want) {
            break;
        }
        below += counts[digit];
    }
    state[0] = (state[0] << 8) | digit;
    state[1] = want - below;
    for (int i = 0; i < SELECT_BINS; ++i) {
        counts[i] = 0u;
    }
}

#define MATRIX_MASK(NAME, T, WIDEN)                                                             \
    extern "C" __global__ void NAME(const T* weight, int weight_stride, const float* norms,     \
                                    long long len, int cols, const unsigned* state,             \
                                    unsigned char* mask, int mask_stride) {                     \
        unsigned threshold = state[0];                                                          \
        long long stride = (long long)gridDim.x * blockDim.x;                                   \
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len;           \
             i += stride) {                                                                     \
            long long r = i / cols;                                                             \
            long long c = i % cols;                                                             \
            unsigned key = SCORE_BITS(WIDEN, weight[r * weight_stride + c], norms[r]);          \
            mask[r * mask_stride + c] = key <= threshold ? 1 : 0;                               \
        }                                                                                       \
    }

LOWEST_PER_COLUMN(lowest_per_column_f32, float, widen_f32)
LOWEST_PER_COLUMN(lowest_per_column_f16, unsigned short, widen_f16)
LOWEST_PER_COLUMN(lowest_per_column_bf16, unsigned short, widen_bf16)
LOWEST_PER_GROUP(lowest_per_group_f32, float, widen_f32)
LOWEST_PER_GROUP(lowest_per_group_f16, unsigned short, widen_f16)
LOWEST_PER_GROUP(lowest_per_group_bf16, unsigned short, widen_bf16)
MATRIX_HISTOGRAM(matrix_histogram_f32, float, widen_f32)
MATRIX_HISTOGRAM(matrix_histogram_f16, unsigned short, widen_f16)
MATRIX_HISTOGRAM(matrix_histogram_bf16, unsigned short, widen_bf16)
MATRIX_MASK(matrix_mask_f32, float, widen_f32)
MATRIX_MASK(matrix_mask_f16, unsigned short, widen_f16)
MATRIX_MASK(matrix_mask_bf16, unsigned short, widen_bf16)
