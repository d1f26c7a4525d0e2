__device__ __forceinline__ u32 mr_event(const u32* event_offsets, u32 n_events, u32 g) {
    u32 lo = 0u, hi = n_events;
    while (hi - lo > 1u) { u32 mid = (lo + hi) / 2u; if (event_offsets[mid] <= g) lo = mid; else hi = mid; }
    return lo;
}

extern "C" __global__ void mr_flag(const u16* module, const u16* xx, const u16* yy, u32 n, const u32* event_offsets, u32 n_events, u32* start, u32* status)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32 m = module[i], s = 0u;
    if (m != INVALID_MODULE) {
        if (m >= MAX_MODULES || xx[i] >= N_ROWS || yy[i] >= N_COLS) {
            atomicOr(status, STATUS_BAD_INPUT);
        } else {
            u32 b = event_offsets[mr_event(event_offsets, n_events, i)], j = i;
            s = 1u;
            while (j > b) {
                --j;
                u32 p = module[j];
                if (p != INVALID_MODULE) { s = p != m ? 1u : 0u; break; }
            }
        }
    }
    start[i] = s;
}

// Slots e * MAX_MODULES + k (zero-filled: an unused slot is an empty run): run k of event e,
// batch digi indices; per event the longest run and the runs past max_pix with their digis
// cut (atomics that only count).
extern "C" __global__ void mr_fill(
    const u16* module, u32 n, const u32* event_offsets, u32 n_events, const u32* start, const u32* pos, u32 max_pix,
    u32* run_first, u32* run_end, u32* run_base, u16* run_module, u32* worst, u32* over, u64* cut)
{
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || start[i] == 0u) return;
    u32 e = mr_event(event_offsets, n_events, i);
    u32 b = event_offsets[e], eend = event_offsets[e + 1u];
    u32 m = module[i], j = i + 1u;
    while (j < eend && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    u32 len = j - i;
    atomicMax(&worst[e], len);
    if (len > max_pix) { atomicAdd(&over[e], 1u); atomicAdd(&cut[e], (u64)(len - max_pix)); }
    u32 k = pos[i];
    if (k < MAX_MODULES) {
        u32 slot = e * MAX_MODULES + k;
        run_first[slot] = i;
        run_end[slot] = len > max_pix ? i + max_pix : j;
        run_base[slot] = b;
        run_module[slot] = (u16)m;
    }
}

// Table row r: its first digi (batch index) must be of row_module[r].
extern "C" __global__ void run_check(const u16* module, u32 n_rows, const u32* row_first, const u16* row_module, u32* status)
{
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    if (module[row_first[r]] != row_module[r]) atomicOr(status, STATUS_BAD_INPUT);
}

// Run r's end: from run_first[r], the first valid digi of another module than run_module[r]
// before run_limit[r] (its event's end), else run_limit[r].
extern "C" __global__ void run_ends(const u16* module, u32 n_runs, const u32* run_first, const u16* run_module, const u32* run_limit, u32* run_end)
{
    u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n_runs) return;
    u32 m = run_module[r], lim = run_limit[r], j = run_first[r];
    while (j < lim && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    run_end[r] = j;
}

// Slot s (event s / slots_per_event): as run_ends up to its event's end, for the slots with
// clusters; a slot without any is an empty span at its first digi.
extern "C" __global__ void slot_ends(const u16* module, u32 n_slots, u32 slots_per_event, const u32* slot_first, const u16* slot_module,
    const u32* slot_nclus, const u32* event_offsets, u32* slot_end)
{
    u32 s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_slots) return;
    u32 j = slot_first[s];
    if (slot_nclus[s] != 0u) {
        u32 m = slot_module[s], lim = event_offsets[s / slots_per_event + 1u];
        while (j < lim && (module[j] == INVALID_MODULE || module[j] == m)) ++j;
    }
    slot_end[s] = j;
}
