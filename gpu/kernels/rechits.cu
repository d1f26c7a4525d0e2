#define DET_STRIDE 23
__device__ __forceinline__ u32 local_x(u32 px) { return px + (px > ROWS_IN_ROC - 1u ? 1u : 0u) + (px > ROWS_IN_ROC ? 1u : 0u); }
__device__ __forceinline__ u32 local_y(u32 py) { u32 roc = py / COLS_IN_ROC; return py + 2u * roc + (py % COLS_IN_ROC > 0u ? 1u : 0u); }
__device__ __forceinline__ bool big_x(u32 px) { return px == ROWS_IN_ROC - 1u || px == ROWS_IN_ROC; }
__device__ __forceinline__ bool big_y(u32 py) { u32 c = py % COLS_IN_ROC; return c == 0u || c == COLS_IN_ROC - 1u; }

__device__ i32 unbalance(i32 qf, i32 ql) {
    double num = (double)fabsf((float)(qf - ql));
    double den = (double)(float)(qf + ql);
    return __double2int_rz(__ddiv_rn(__dmul_rn(8.0, num), den));
}

__device__ float correction(i32 size_m1, i32 q_f, i32 q_l, u32 upper_edge_first, u32 lower_edge_last,
                            float lorentz_shift, float thickness, float cot_angle, float pitch,
                            bool first_big, bool last_big) {
    if (size_m1 == 0) return 0.0f;
    float w_eff = 0.0f;
    bool simple = true;
    if (size_m1 == 1) {
        float w_inner = __fmul_rn(pitch, (float)((i32)lower_edge_last - (i32)upper_edge_first));
        float w_pred = __fsub_rn(__fmul_rn(thickness, cot_angle), lorentz_shift);
        w_eff = __fsub_rn(fabsf(w_pred), w_inner);
        simple = (w_eff < 0.0f) | (w_eff > pitch);
    }
    if (simple) {
        float sum_of_edge = 2.0f;
        if (first_big) sum_of_edge = __fadd_rn(sum_of_edge, 1.0f);
        if (last_big) sum_of_edge = __fadd_rn(sum_of_edge, 1.0f);
        w_eff = __fmul_rn(__fmul_rn(pitch, 0.5f), sum_of_edge);
    }
    float q_diff = (float)(q_l - q_f);
    float q_sum = (float)(q_l + q_f);
    if (q_sum == 0.0f) q_sum = 1.0f;
    return __fmul_rn(__fmul_rn(0.5f, __fdiv_rn(q_diff, q_sum)), w_eff);
}

__device__ short atan2s(float y, float x) {
    float r = __fdiv_rn(__fsub_rn(fabsf(x), fabsf(y)), __fadd_rn(fabsf(x), fabsf(y)));
    if (x < 0.0f) r = -r;
    i32 base = x >= 0.0f ? 8192 : 24576;
    float z = __fmul_rn(r, r);
    float p = __fmul_rn(r, __fadd_rn(-10422.177734375f, __fmul_rn(z, __fadd_rn(3349.97412109375f,
              __fmul_rn(z, __fadd_rn(-1525.589599609375f, __fmul_rn(z, 406.64190673828125f)))))));
    i32 v = __float2int_rz(p);            // Rust `as i16`: truncate, saturate, NaN -> 0
    if (v > 32767) v = 32767;
    if (v < -32768) v = -32768;
    short angle = (short)(base + v);
    if (y < 0.0f) angle = (short)(-(i32)angle);
    return angle;
}

extern "C" __global__ void rechits(
    const u16* module, const i32* clus, const u16* xx, const u16* yy, const u16* adc,
    const u32* run_first, const u32* run_end, const u32* run_nclus, const u16* run_me, const u32* run_hit,
    const float* beam, u32 beam_stride, u32 cap, const float* det, float thickness_b, float thickness_e, float pitch_x, float pitch_y,
    float* x_local, float* y_local, float* xerr_local, float* yerr_local,
    float* x_global, float* y_global, float* z_global, float* r_global,
    short* iphi, i32* charge, short* size_x, short* size_y, u16* det_index, u32* status)
{
    // Nine arrays of `cap` clusters in the launch's dynamic shared memory.
    DYN_SHARED(u32, rh_sh);
    u32 *min_row = rh_sh, *max_row = rh_sh + cap, *min_col = rh_sh + 2u * cap, *max_col = rh_sh + 3u * cap;
    i32 *q_f_x = (i32*)(rh_sh + 4u * cap), *q_l_x = (i32*)(rh_sh + 5u * cap);
    i32 *q_f_y = (i32*)(rh_sh + 6u * cap), *q_l_y = (i32*)(rh_sh + 7u * cap), *q_sum = (i32*)(rh_sh + 8u * cap);
    u32 r = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u32 first = run_first[r], end = run_end[r], nclus = run_nclus[r], me = run_me[r];
    if (nclus == 0u) return;   // a slot without clusters (the whole block)
    if (nclus > cap) {         // the host sized the launch for fewer: a bug, never wrong hits
        if (tid == 0u) atomicOr(status, STATUS_BAD_INPUT);
        return;
    }
    for (u32 c = tid; c < nclus; c += nt) {
        min_row[c] = 0xffffffffu; max_row[c] = 0u; min_col[c] = 0xffffffffu; max_col[c] = 0u;
        q_f_x[c] = 0; q_l_x[c] = 0; q_f_y[c] = 0; q_l_y[c] = 0; q_sum[c] = 0;
    }
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 c = clus[i];
        if (module[i] != me || c < 0 || (u32)c >= nclus) continue;
        u32 x = xx[i], y = yy[i];
        if (x >= N_ROWS || y >= N_COLS) { atomicOr(status, STATUS_BAD_INPUT); continue; }
        atomicMin(&min_row[c], x); atomicMax(&max_row[c], x);
        atomicMin(&min_col[c], y); atomicMax(&max_col[c], y);
    }
    __syncthreads();
    for (u32 i = first + tid; i < end; i += nt) {
        i32 c = clus[i];
        if (module[i] != me || c < 0 || (u32)c >= nclus) continue;
        u32 x = xx[i], y = yy[i];
        if (x >= N_ROWS || y >= N_COLS) continue;
        i32 ch = (i32)adc[i];
        atomicAdd(&q_sum[c], ch);
        if (min_row[c] == x) atomicAdd(&q_f_x[c], ch);
        if (max_row[c] == x) atomicAdd(&q_l_x[c], ch);
        if (min_col[c] == y) atomicAdd(&q_f_y[c], ch);
        if (max_col[c] == y) atomicAdd(&q_l_y[c], ch);
    }
    __syncthreads();
    const float* d = det + (u64)me * DET_STRIDE;
    // The beam spot of the run's event: one per run, or one per event of beam_stride slots.
    const float* bs = beam + 3u * (beam_stride != 0u ? r / beam_stride : r);
    const float bsx = bs[0], bsy = bs[1], bsz = bs[2];
    for (u32 c = tid; c < nclus; c += nt) {
        if (min_row[c] == 0xffffffffu) continue;   // no pixel: the slot stays empty
        u32 h = run_hit[r] + c;
        u32 mnr = min_row[c], mxr = max_row[c], mnc = min_col[c], mxc = max_col[c];
        u32 llxl = local_x((u16)(mnr + 1u)), llyl = local_y((u16)(mnc + 1u));
        u32 urxl = local_x(mxr), uryl = local_y(mxc);
        i32 mx = (i32)llxl + (i32)urxl, my = (i32)llyl + (i32)uryl;
        i32 xsize = (i32)urxl + 2 - (i32)llxl, ysize = (i32)uryl + 2 - (i32)llyl;
        xsize += (big_x(mnr) ? 1 : 0) + (big_x(mxr) ? 1 : 0);
        ysize += (big_y(mnc) ? 1 : 0) + (big_y(mxc) ? 1 : 0);
        xsize = 8 * xsize - unbalance(q_f_x[c], q_l_x[c]);
        ysize = 8 * ysize - unbalance(q_f_y[c], q_l_y[c]);
        bool edge_x = mnr == 0u || mxr == N_ROWS - 1;
        bool edge_y = mnc == 0u || mxc == N_COLS - 1;
        short sx = (short)(xsize < 1023 ? xsize : 1023), sy = (short)(ysize < 1023 ? ysize : 1023);
        if (edge_x) sx = (short)(-(i32)sx);
        if (edge_y) sy = (short)(-(i32)sy);
        float shift_x = d[0], shift_y = d[1], cwx = d[2], cwy = d[3], x0 = d[4], y0 = d[5], z0 = d[6];
        float x_pos = __fadd_rn(shift_x, __fmul_rn(pitch_x, __fadd_rn(__fmul_rn(0.5f, (float)mx), (float)X_OFFSET)));
        float y_pos = __fadd_rn(shift_y, __fmul_rn(pitch_y, __fadd_rn(__fmul_rn(0.5f, (float)my), (float)Y_OFFSET)));
        float gvz = __fdiv_rn(-1.0f, z0);
        float cot_alpha = __fmul_rn(__fsub_rn(x_pos, x0), gvz);
        float cot_beta = __fmul_rn(__fsub_rn(y_pos, y0), gvz);
        float thickness = d[22] != 0.0f ? thickness_b : thickness_e;
        float xcorr = correction((i32)(mxr - mnr), q_f_x[c], q_l_x[c], llxl, urxl, cwx, thickness, cot_alpha, pitch_x, big_x(mnr), big_x(mxr));
        float ycorr = correction((i32)(mxc - mnc), q_f_y[c], q_l_y[c], llyl, uryl, cwy, thickness, cot_beta, pitch_y, big_y(mnc), big_y(mxc));
        u32 ix = (mxr - mnr == 0u ? 1u : 0u) + ((mxr - mnr == 0u && big_x(mnr)) ? 1u : 0u);
        u32 iy = (mxc - mnc == 0u ? 1u : 0u) + ((mxc - mnc == 0u && big_y(mnc)) ? 1u : 0u);
        float xerr = edge_x ? 0.0050f : d[7 + ix];
        float yerr = edge_y ? 0.0085f : d[10 + iy];
        float x = __fadd_rn(x_pos, xcorr), y = __fadd_rn(y_pos, ycorr);
        charge[h] = q_sum[c];
        det_index[h] = (u16)me;
        x_local[h] = x; y_local[h] = y;
        size_x[h] = sx; size_y[h] = sy;
        xerr_local[h] = __fmul_rn(xerr, xerr);
        yerr_local[h] = __fmul_rn(yerr, yerr);
        const float* rot = d + 13;
        float xg = __fadd_rn(__fmul_rn(rot[0], x), __fmul_rn(rot[3], y));
        float yg = __fadd_rn(__fmul_rn(rot[1], x), __fmul_rn(rot[4], y));
        float zg = __fadd_rn(__fmul_rn(rot[2], x), __fmul_rn(rot[5], y));
        xg = __fadd_rn(xg, d[19]); yg = __fadd_rn(yg, d[20]); zg = __fadd_rn(zg, d[21]);
        xg = __fsub_rn(xg, bsx); yg = __fsub_rn(yg, bsy); zg = __fsub_rn(zg, bsz);
        x_global[h] = xg; y_global[h] = yg; z_global[h] = zg;
        r_global[h] = __fsqrt_rn(__fadd_rn(__fmul_rn(xg, xg), __fmul_rn(yg, yg)));
        iphi[h] = atan2s(yg, xg);
    }
}
