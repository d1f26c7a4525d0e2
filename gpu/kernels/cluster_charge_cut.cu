extern "C" __global__ void charge_cut(
    u16* module, i32* clus, const u16* adc,
    const u32* run_first, const u32* run_end, const u32* run_nclus, const u16* run_module,
    u32 max_per_module, u32 l1_modules, i32 min_charge_l1, i32 min_charge, u32* ncl_out)
{
    __shared__ i32 charge[MAX_CLUS_PER_MODULE];
    __shared__ u32 newclus[MAX_CLUS_PER_MODULE];
    __shared__ u32 sum_s;
    u32 r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u32 first = run_first[r], end = run_end[r], orig = run_nclus[r];
    u32 self_id = run_module[r];
    if (tid == 0) ncl_out[r] = orig;
    if (orig == 0u) return;
    u32 nclus = orig;
    if (nclus > max_per_module) {
        for (u32 i = first + tid; i < end; i += nt)
            if (module[i] != INVALID_MODULE && clus[i] >= (i32)max_per_module) { module[i] = (u16)INVALID_MODULE; clus[i] = (i32)INVALID_MODULE; }
        nclus = max_per_module;
    }
    for (u32 c = tid; c < nclus; c += nt) charge[c] = 0;
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        if (module[i] == INVALID_MODULE) continue;
        i32 c = clus[i];
        if (c >= 0 && c < (i32)nclus) atomicAdd(&charge[c], (i32)adc[i]);
        else { module[i] = (u16)INVALID_MODULE; clus[i] = (i32)INVALID_MODULE; }
    }
    __syncthreads();
    i32 cut = self_id < l1_modules ? min_charge_l1 : min_charge;
    if (tid == 0) {
        u32 sum = 0u;
        for (u32 c = 0; c < nclus; ++c) {
            u32 ok = charge[c] > cut ? 1u : 0u;
            sum += ok;
            newclus[c] = ok ? sum : INVALID_MODULE + 1u;
        }
        sum_s = sum;
        ncl_out[r] = sum == nclus ? orig : sum;
    }
    __syncthreads();
    if (sum_s == nclus) return;
    for (u32 i = first + tid; i < end; i += nt) {
        if (module[i] == INVALID_MODULE) continue;
        clus[i] = (i32)newclus[clus[i]] - 1;
        if (clus[i] == (i32)INVALID_MODULE) module[i] = (u16)INVALID_MODULE;
    }
}
