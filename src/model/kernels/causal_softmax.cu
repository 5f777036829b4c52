// Causal softmax of attention scores, for CUDA's attention by cuBLAS products
// (attention_plan.rs, cublas_attention.rs); compiled by NVRTC, so no headers.
//
// `scores` holds `rows` rows of `seq` f32 scores (already scaled by 1/sqrt(head_dim)); row `r`
// is query `r % seq` of its head, which sees keys 0..=r % seq. Queries come in parts of
// `part_rows` rows, and a part's products read the probabilities of keys up to its last row
// only. A warp takes a row: the maximum and the sum of exponentials in f32 in one pass (each
// lane keeps its own running maximum and rescales its sum only when the maximum grows, so
// about one exponential per score; the lanes are then combined), then the probabilities up to the part's last key, masked keys 0, written
// over the row in the output type T, so that a 2-byte T fills the first half of the row. Each
// step of the writing pass reads its 32 scores before any lane writes: a write at element j
// lands on f32 element j / 2 (2-byte T) or j (f32), both already read.

__device__ __forceinline__ float prob_f32(float x) { return x; }

__device__ __forceinline__ unsigned short prob_f16(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

// Round to nearest even, as PyTorch's and the half crate's conversions do; probabilities are
// never NaN or infinite, but a NaN stays a (quiet) NaN.
__device__ __forceinline__ unsigned short prob_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

#define FULL_WARP 0xffffffffu

#define CAUSAL_SOFTMAX(NAME, T, CONVERT)                                                        \
    extern "C" __global__ void NAME(float* scores, long long rows, int seq, int part_rows) {    \
        long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);         \
        if (row >= rows) {                                                                      \
            return;                                                                             \
        }                                                                                       \
        int lane = threadIdx.x & 31;                                                            \
        int query = (int)(row % seq);                                                           \
        int visible = query + 1;                                                                \
        long long part_end = ((long long)(query / part_rows) + 1) * part_rows;                  \
        int end = part_end < seq ? (int)part_end : seq;                                         \
        float* s = scores + row * (long long)seq;                                               \
        float neg_inf = __int_as_float(0xff800000);                                             \
        float max = neg_inf;                                                                    \
        float sum = 0.0f;                                                                       \
        for (int j = lane; j < visible; j += 32) {                                              \
            float x = s[j];                                                                     \
            if (x > max) {                                                                      \
                sum *= expf(max - x);                                                           \
                max = x;                                                                        \
            }                                                                                   \
            sum += expf(x - max);                                                               \
        }                                                                                       \
        for (int offset = 16; offset > 0; offset >>= 1) {                                       \
            float other_max = __shfl_xor_sync(FULL_WARP, max, offset);                          \
            float other_sum = __shfl_xor_sync(FULL_WARP, sum, offset);                          \
            float grown = fmaxf(max, other_max);                                                \
            float mine = max == neg_inf ? 0.0f : sum * expf(max - grown);                       \
            float theirs = other_max == neg_inf ? 0.0f : other_sum * expf(other_max - grown);   \
            sum = mine + theirs;                                                                \
            max = grown;                                                                        \
        }                                                                                       \
        float inverse = 1.0f / sum;                                                             \
        T* p = (T*)s;                                                                           \
        for (int base = 0; base < end; base += 32) {                                            \
            int j = base + lane;                                                                \
            float x = j < visible ? s[j] : 0.0f;                                                \
            __syncwarp();                                                                       \
            if (j < end) {                                                                      \
                p[j] = CONVERT(j < visible ? expf(x - max) * inverse : 0.0f);                   \
            }                                                                                   \
            __syncwarp();                                                                       \
        }                                                                                       \
    }

CAUSAL_SOFTMAX(causal_softmax_f32, float, prob_f32)
CAUSAL_SOFTMAX(causal_softmax_f16, unsigned short, prob_f16)
CAUSAL_SOFTMAX(causal_softmax_bf16, unsigned short, prob_bf16)
