extern "C" __global__ void calibrate(
    const u16* module_in, const u16* xx, const u16* yy, const u16* adc_in, u32 n,
    const u32* range_first, const u32* range_last, const i32* range_cols, u32 n_ranges,
    const u8* data, u64 data_len, float min_ped, float min_gain, float ped_precision, float gain_precision,
    u32 rows_averaged, u32 dead_flag, u32 noisy_flag,
    u32 is_run2, u32 l1_modules, float gain_l1, float offset_l1, float gain_other, float offset_other, i32 min_electrons,
    u16* module_out, u16* adc_out, u32* status)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32 id = module_in[i];
    module_out[i] = (u16)id;
    adc_out[i] = adc_in[i];
    if (id == INVALID_MODULE) return;
    float factor, offset;
    if (!is_run2) { factor = 1.0f; offset = 0.0f; }
    else if (id < l1_modules) { factor = gain_l1; offset = offset_l1; }
    else { factor = gain_other; offset = offset_other; }
    if (id >= n_ranges) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u32 first = range_first[id], last = range_last[id];
    i32 n_cols = range_cols[id];
    if (n_cols <= 0 || last < first) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u64 col_len = (u64)(last - first) / (u64)n_cols;
    u64 off = (u64)first + (u64)yy[i] * col_len + 2ull * ((u64)xx[i] / (u64)rows_averaged);
    if (off >= (u64)last) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u64 at = 2ull * (off / 2ull);
    if (at + 1ull >= data_len) { atomicOr(status, STATUS_BAD_INPUT); return; }
    u32 gain_code = data[at], ped_code = data[at + 1];
    if (ped_code == dead_flag || ped_code == noisy_flag) {
        module_out[i] = (u16)INVALID_MODULE;
        adc_out[i] = 0;
        return;
    }
    float pedestal = __fadd_rn(__fmul_rn((float)ped_code, ped_precision), min_ped);
    float gain = __fadd_rn(__fmul_rn((float)gain_code, gain_precision), min_gain);
    float vcal = __fsub_rn(__fmul_rn((float)adc_in[i], gain), __fmul_rn(pedestal, gain));
    i32 q = __float2int_rz(__fadd_rn(__fmul_rn(vcal, factor), offset));
    if (q < min_electrons) q = min_electrons;
    adc_out[i] = (u16)q;
}
