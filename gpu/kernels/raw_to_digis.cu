#define DUMMY_DET_ID 0xffffffffu
struct Cabling {
    const u32* link; const u32* roc; const u32* raw_id; const u32* roc_in_det; const u32* module_id;
    const u8* bad_rocs; const u8* mod_to_unp; u32 size;
};

__device__ __forceinline__ bool cab_index(u32 fed_idx, u32 link, u32 roc, u32* out) {
    if (link >= 1u && link <= MAX_LINK && roc >= 1u && roc <= MAX_ROC && fed_idx < MAX_FED) {
        *out = fed_idx * MAX_LINK * MAX_ROC + (link - 1u) * MAX_ROC + (roc - 1u);
        return true;
    }
    return false;
}

__device__ u32 check_roc(u32 ww, u32 fed_idx, u32 link, const Cabling& c) {
    u32 t = (ww >> 21) & 0x1fu;
    if (t == 25u) {
        u32 i;
        if (cab_index(fed_idx, link, 1u, &i)) {
            if (i > 0u && i < c.size && !(c.link[i] == link && c.roc[i] == 1u)) return 0u;
        }
        return 25u;
    }
    if ((t >= 26u && t <= 29u) || t == 31u) return t;
    if (t == 30u) return ((ww >> 8) & 0xfu) == 1u ? 40u : 30u;
    return 0u;
}

__device__ u32 lookup_raw_id(u32 fed_idx, u32 link, u32 roc, const Cabling& c) {
    u32 i;
    if (cab_index(fed_idx, link, roc, &i) && c.raw_id[i] != 9999u) return c.raw_id[i];
    return DUMMY_DET_ID;
}

__device__ u32 err_raw_id(u32 fed_idx, u32 ww, u32 t, const Cabling& c) {
    u32 link = (ww >> 26) & 0x3fu;
    switch (t) {
    case 25u: case 30u: case 31u: case 36u: case 40u:
        return lookup_raw_id(fed_idx, link, 1u, c);
    case 29u: {
        i32 local_ch = (i32)(ww & 1u) + 2 * (i32)((ww >> 1) & 1u) + 3 * (i32)((ww >> 2) & 1u)
                     + 4 * (i32)((ww >> 3) & 1u) + 5 * (i32)((ww >> 4) & 1u);
        i32 block = (i32)((ww >> 8) & 0x7u);
        i32 chan = (block % 2 == 0) ? (block / 2) * 9 + local_ch : ((block - 1) / 2) * 9 + 4 + local_ch;
        if (chan < 1 || chan > 36) return DUMMY_DET_ID;
        return lookup_raw_id(fed_idx, (u32)chan, 1u, c);
    }
    case 37u: case 38u:
        return lookup_raw_id(fed_idx, link, (ww >> 21) & 0x1fu, c);
    default:
        return DUMMY_DET_ID;
    }
}

// Segments: words seg_start[s]..seg_start[s+1] belong to FED seg_fed[s].
extern "C" __global__ void raw_to_digis(
    const u32* words, u32 n_words, const u32* seg_start, const u32* seg_fed, u32 n_seg,
    const u32* c_link, const u32* c_roc, const u32* c_raw_id, const u32* c_roc_in_det, const u32* c_module_id,
    const u8* c_bad_rocs, const u8* c_mod_to_unp, u32 c_size, u32 use_quality,
    u16* xx, u16* yy, u16* adc_out, u16* module_out, u32* raw_id_out, u32* pdigi_out,
    u32* err_count, u32* err_index, u8* err_type, u32* err_raw, u32* status)
{
    u32 w = blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= n_words) return;
    Cabling c = { c_link, c_roc, c_raw_id, c_roc_in_det, c_module_id, c_bad_rocs, c_mod_to_unp, c_size };
    // The segment holding word w: last s with seg_start[s] <= w.
    u32 lo = 0u, hi = n_seg;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (seg_start[mid] <= w) lo = mid; else hi = mid; }
    u32 fed_idx = seg_fed[lo] - FED_ID_MIN;
    u32 ww = words[w];
    xx[w] = 0; yy[w] = 0; adc_out[w] = 0; module_out[w] = (u16)INVALID_MODULE; raw_id_out[w] = 0u; pdigi_out[w] = 0u;
    if (ww == 0u) return;
    u32 link = (ww >> 26) & 0x3fu;
    u32 roc = (ww >> 21) & 0x1fu;
    u32 et = check_roc(ww, fed_idx, link, c);
    u32 e_type = 0u, e_raw = 0u;
    u32 index;
    if (roc >= 8u && et != 0u) {
        e_type = et; e_raw = err_raw_id(fed_idx, ww, et, c);
    } else if (link < 1u || link > MAX_LINK) {
        e_type = 35u; e_raw = DUMMY_DET_ID;
    } else if (!cab_index(fed_idx, link, roc, &index)) {
        if (roc != 25u) { e_type = 36u; e_raw = err_raw_id(fed_idx, ww, 36u, c); }
    } else if (!(use_quality && c.bad_rocs[index] != 0) && c.mod_to_unp[index] == 0) {
        u32 raw_id = c.raw_id[index];
        u32 roc_in_det = c.roc_in_det[index];
        u32 module_id = c.module_id[index];
        if (roc_in_det >= 16u || (module_id >= 2000u && module_id != INVALID_MODULE)) {
            atomicOr(status, STATUS_BAD_INPUT);
            return;
        }
        bool barrel = ((raw_id >> 25) & 0x7u) == 1u;
        u32 layer; i32 side;
        if (barrel) {
            u32 module = (raw_id >> 2) & 0x3ffu;
            layer = (raw_id >> 20) & 0xfu;
            side = module < 5u ? -1 : 1;
        } else {
            u32 panel = (raw_id >> 10) & 0x3u;
            layer = 0u;
            side = panel == 1u ? -1 : 1;
        }
        u32 lr, lc;
        bool ok;
        if (layer == 1u) {
            lc = (ww >> 15) & 0x3fu;
            lr = (ww >> 8) & 0x7fu;
            ok = lr < 80u && lc < 52u;
        } else {
            u32 dcol = (ww >> 16) & 0x1fu;
            u32 pxid = (ww >> 8) & 0xffu;
            ok = dcol < 26u && pxid >= 2u && pxid < 162u;
            lr = 80u - pxid / 2u;
            lc = dcol * 2u + pxid % 2u;
        }
        if (!ok) {
            e_type = 37u; e_raw = raw_id;
        } else {
            bool orientation_b = !barrel || (side == -1 && layer != 1u);
            u32 row, col;
            if (orientation_b) {
                if (roc_in_det < 8u) { row = lr; col = (8u - roc_in_det) * 52u - 1u - lc; }
                else { row = 159u - lr; col = (roc_in_det - 8u) * 52u + lc; }
            } else {
                if (roc_in_det < 8u) { row = 159u - lr; col = roc_in_det * 52u + lc; }
                else { row = lr; col = (16u - roc_in_det) * 52u - 1u - lc; }
            }
            u32 adc = ww & 0xffu;
            xx[w] = (u16)row; yy[w] = (u16)col; adc_out[w] = (u16)adc; module_out[w] = (u16)module_id;
            raw_id_out[w] = raw_id;
            pdigi_out[w] = row | (col << 11) | ((adc < 1023u ? adc : 1023u) << 22);
        }
    }
    if (e_type != 0u) {
        u32 k = atomicAdd(err_count, 1u);
        err_index[k] = w; err_type[k] = (u8)e_type; err_raw[k] = e_raw;
    }
}
