// The block-wide exclusive prefix sum several kernel modules use (clusterize, both CA
// modules); include-guarded, since the host emulation compiles the modules as one file.
#ifndef QUIVER_BLOCK_EXCLUSIVE_SCAN
#define QUIVER_BLOCK_EXCLUSIVE_SCAN
// Exclusive prefix sum of value[s..end), plus base, into first[s..end) by one block whose
// size is a power of two; buf holds blockDim.x words of shared memory, carry one. Returns
// the sum of the segment (without base, in every thread). Each thread sums a contiguous run of the segment, the runs'
// sums are scanned in shared memory, and each thread writes its run: one pass of barriers
// rather than one per blockDim.x values (u32 sums wrap, so the grouping changes nothing).
// first may be value (each thread reads an element before writing it).
__device__ __forceinline__ u32 block_exclusive_scan(const u32* value, u32 s, u32 end, u32* first, u32* buf, u32* carry, u32 base)
{
    u32 t = threadIdx.x, nt = blockDim.x;
    u32 n = end > s ? end - s : 0u;
    u32 per = (n + nt - 1u) / nt;
    u32 a = t * per < n ? s + t * per : end;
    u32 b = a + per < end ? a + per : end;
    u32 sum = 0u;
    for (u32 k = a; k < b; ++k) sum += value[k];
    buf[t] = sum;
    __syncthreads();
    for (u32 off = 1u; off < nt; off <<= 1) {
        u32 x = t >= off ? buf[t - off] : 0u;
        __syncthreads();
        buf[t] += x;
        __syncthreads();
    }
    u32 acc = base + (buf[t] - sum);
    if (t == nt - 1u) *carry = buf[t];
    for (u32 k = a; k < b; ++k) { u32 v = value[k]; first[k] = acc; acc += v; }
    __syncthreads();
    u32 total = *carry;
    __syncthreads();
    return total;
}
#endif
