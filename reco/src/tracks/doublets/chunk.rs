//! The chunk test of the doublet search: the cuts that are pure predicates of a candidate
//! (z0, φ, pT, barrel cluster size), for `CHUNK` packed candidates at once, portable and in
//! AVX2 with the same bits.

use std::mem::MaybeUninit;

use super::{mask8, CHUNK};

/// The cuts of the doublet search that do not depend on the layer pair.
#[derive(Clone, Copy)]
pub(super) struct SharedCuts {
    pub(super) do_z0_cut: bool,
    pub(super) z0_cut: f32,
    pub(super) do_pt_cut: bool,
    pub(super) min_radius2_t4: f32,
    pub(super) i2p: f32,
}

/// An inner hit (z, r, φ, y-size) and the cuts of its layer pair that [`pass_mask`] applies.
#[derive(Clone, Copy)]
pub(super) struct Probe {
    pub(super) mez: f32,
    pub(super) mer: f32,
    pub(super) mep: i16,
    pub(super) mes: i32,
    pub(super) phicut: i16,
    pub(super) maxr: f32,
    pub(super) dy_barrel: i32,
    pub(super) barrel_size_cut: bool,
}

/// Bit j set when candidate j of the chunk passes the z0, φ, pT and barrel cluster-size
/// cuts: pure predicates, evaluated for a chunk at once (branch-free, vectorisable), with
/// the same f32 expressions as one candidate at a time.
#[inline(always)]
pub(super) fn pass_mask(c: &Chunk, probe: &Probe, shared: &SharedCuts) -> u32 {
    let Probe {
        mez,
        mer,
        mep,
        mes,
        phicut,
        maxr,
        dy_barrel,
        barrel_size_cut,
    } = *probe;
    let SharedCuts {
        do_z0_cut,
        z0_cut,
        do_pt_cut,
        min_radius2_t4,
        i2p,
    } = *shared;
    let (zs, rs, ps, sys) = (c.z, c.r, c.iphi, c.size_y);
    let mut pass = [false; CHUNK];
    for j in 0..CHUNK {
        let (zo, ro) = (zs[j], rs[j]);
        let dr = ro - mer;
        let z0_fails =
            do_z0_cut & ((dr > maxr) | (dr < 0.0) | ((mez * ro - mer * zo).abs() > z0_cut * dr));
        // |Δφ| in int16 units: min(|a − b|, |b − a|) with wrapping, which is
        // |a − b| (the two differ only for −32768, where both are 32768).
        let idphi = (ps[j].wrapping_sub(mep) as i32).abs();
        let so = sys[j] as i32;
        let size_fails = barrel_size_cut & (mes > 0) & (so > 0) & ((so - mes).abs() > dy_barrel);
        let dphi = ((idphi as u16) as i16) as f32 * i2p;
        let pt_fails =
            do_pt_cut & (dphi * dphi * (min_radius2_t4 - mer * ro) > (ro - mer) * (ro - mer));
        pass[j] = !(z0_fails | (idphi > phicut as i32) | size_fails | pt_fails);
    }
    mask8(pass[..8].try_into().unwrap()) | (mask8(pass[8..].try_into().unwrap()) << 8)
}

/// `CHUNK` consecutive packed candidates (what [`pass_mask`] reads).
pub(super) struct Chunk<'a> {
    pub(super) z: &'a [f32; CHUNK],
    pub(super) r: &'a [f32; CHUNK],
    pub(super) iphi: &'a [i16; CHUNK],
    pub(super) size_y: &'a [i16; CHUNK],
}

/// [`pass_mask`] in AVX2, eight candidates per register: the same IEEE operations in the
/// same order (no FMA; ordered comparisons, false with a NaN as Rust's), and the same
/// integer arithmetic (int16 wrapping difference, then sign extension), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn pass_mask_avx2(c: &Chunk, probe: &Probe, shared: &SharedCuts) -> u32 {
    use std::arch::x86_64::*;
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (mez, mer) = (_mm256_set1_ps(probe.mez), _mm256_set1_ps(probe.mer));
    let mut bits = 0u32;
    for h in 0..CHUNK / 8 {
        // SAFETY: each array holds CHUNK = 16 entries; h·8 + 8 ≤ 16 (and 8 i16 = 128 bits).
        let (zo, ro, ps, so) = unsafe {
            (
                _mm256_loadu_ps(c.z.as_ptr().add(8 * h)),
                _mm256_loadu_ps(c.r.as_ptr().add(8 * h)),
                _mm_loadu_si128(c.iphi.as_ptr().add(8 * h).cast()),
                _mm_loadu_si128(c.size_y.as_ptr().add(8 * h).cast()),
            )
        };
        let dr = _mm256_sub_ps(ro, mer);
        let mut fail = _mm256_setzero_ps();
        if shared.do_z0_cut {
            let far = _mm256_cmp_ps::<_CMP_GT_OQ>(dr, _mm256_set1_ps(probe.maxr));
            let inward = _mm256_cmp_ps::<_CMP_LT_OQ>(dr, _mm256_setzero_ps());
            let z0 = _mm256_and_ps(
                _mm256_sub_ps(_mm256_mul_ps(mez, ro), _mm256_mul_ps(mer, zo)),
                abs,
            );
            let z0_far =
                _mm256_cmp_ps::<_CMP_GT_OQ>(z0, _mm256_mul_ps(_mm256_set1_ps(shared.z0_cut), dr));
            fail = _mm256_or_ps(fail, _mm256_or_ps(_mm256_or_ps(far, inward), z0_far));
        }
        let idphi = _mm256_abs_epi32(_mm256_cvtepi16_epi32(_mm_sub_epi16(
            ps,
            _mm_set1_epi16(probe.mep),
        )));
        let phi_far = _mm256_cmpgt_epi32(idphi, _mm256_set1_epi32(probe.phicut as i32));
        fail = _mm256_or_ps(fail, _mm256_castsi256_ps(phi_far));
        if probe.barrel_size_cut & (probe.mes > 0) {
            let so = _mm256_cvtepi16_epi32(so);
            let big = _mm256_cmpgt_epi32(so, _mm256_setzero_si256());
            let dy = _mm256_abs_epi32(_mm256_sub_epi32(so, _mm256_set1_epi32(probe.mes)));
            let off = _mm256_cmpgt_epi32(dy, _mm256_set1_epi32(probe.dy_barrel));
            fail = _mm256_or_ps(fail, _mm256_castsi256_ps(_mm256_and_si256(big, off)));
        }
        if shared.do_pt_cut {
            // (idphi as u16) as i16: 32768 becomes −32768, as the scalar cast chain does.
            let wrapped = _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(idphi));
            let dphi = _mm256_mul_ps(_mm256_cvtepi32_ps(wrapped), _mm256_set1_ps(shared.i2p));
            let lhs = _mm256_mul_ps(
                _mm256_mul_ps(dphi, dphi),
                _mm256_sub_ps(
                    _mm256_set1_ps(shared.min_radius2_t4),
                    _mm256_mul_ps(mer, ro),
                ),
            );
            let pt = _mm256_cmp_ps::<_CMP_GT_OQ>(lhs, _mm256_mul_ps(dr, dr));
            fail = _mm256_or_ps(fail, pt);
        }
        bits |= ((!_mm256_movemask_ps(fail) as u32) & 0xff) << (8 * h);
    }
    bits
}

/// Writes `outer[j]` for each set bit j of `bits`, in ascending j, to the first entries of
/// `dst` (which holds at least `CHUNK`), without a branch per bit: every candidate is
/// stored, the position advancing past the kept ones.
#[inline(always)]
pub(super) fn pack_outer(outer: &[u32; CHUNK], bits: u32, dst: &mut [MaybeUninit<u32>]) {
    let dst: &mut [MaybeUninit<u32>; CHUNK] = (&mut dst[..CHUNK]).try_into().unwrap();
    let mut m = 0;
    for (j, &h) in outer.iter().enumerate() {
        dst[m & (CHUNK - 1)].write(h);
        m += ((bits >> j) & 1) as usize;
    }
}

/// For each byte value b, the positions of b's set bits in ascending order, one per nibble
/// (the permutation that packs the lanes b keeps to the front of a register).
const PACK_LUT: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut b = 0;
    while b < 256 {
        let (mut v, mut m, mut j) = (0u32, 0, 0);
        while j < 8 {
            if b & (1 << j) != 0 {
                v |= (j as u32) << (4 * m);
                m += 1;
            }
            j += 1;
        }
        t[b] = v;
        b += 1;
    }
    t
};

/// [`pack_outer`] in AVX2: each half of the chunk packed by one lane permutation from a
/// table and stored whole (the lanes past the kept ones are overwritten by the next half
/// or left past the length).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
#[inline]
pub(super) fn pack_outer_avx2(outer: &[u32; CHUNK], bits: u32, dst: &mut [MaybeUninit<u32>]) {
    use std::arch::x86_64::*;
    assert!(dst.len() >= CHUNK);
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let mut m = 0usize;
    for h in 0..CHUNK / 8 {
        let b = (bits >> (8 * h)) & 0xff;
        let perm = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(PACK_LUT[b as usize] as i32), shifts),
            _mm256_set1_epi32(7),
        );
        // SAFETY: `outer` holds CHUNK = 16 u32, h·8 + 8 ≤ 16; m ≤ 8 after the first half,
        // so the store covers dst[m..m + 8] ⊂ dst[..16].
        unsafe {
            let v = _mm256_loadu_si256(outer.as_ptr().add(8 * h).cast());
            let packed = _mm256_permutevar8x32_epi32(v, perm);
            _mm256_storeu_si256(dst.as_mut_ptr().add(m).cast(), packed);
        }
        m += b.count_ones() as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::local::test_support::SplitMix;

    fn uniform(rng: &mut SplitMix, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((rng.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    /// Moves `x` by `nudge` ulps (for finite positive `x`).
    fn ulps(x: f32, nudge: i64) -> f32 {
        f32::from_bits((x.to_bits() as i64 + nudge) as u32)
    }

    /// The AVX2 chunk test passes the candidates the scalar one passes, also at the
    /// boundaries of the z0 and pT cuts (a few ulps around a candidate's own boundary, where
    /// a fused or regrouped product would flip the decision), at the φ wrap-around (a
    /// difference of −32768) and with every cut switched on and off.
    #[test]
    fn pass_mask_is_the_same_on_every_path() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut st = SplitMix(17);
            let (mut passed, mut failed, mut near) = (0u32, 0u32, 0u32);
            for round in 0..40_000usize {
                let mep = st.next() as i16;
                let mut probe = Probe {
                    mez: uniform(&mut st, -30.0, 30.0),
                    mer: uniform(&mut st, 2.0, 16.0),
                    mep,
                    mes: [-1, 0, 8, 20, 40][round % 5],
                    phicut: [522, 626, 730, 32767][round % 4],
                    maxr: uniform(&mut st, 1.0, 20.0),
                    dy_barrel: [4, 8, 12][round % 3],
                    barrel_size_cut: round % 3 != 0,
                };
                let mut shared = SharedCuts {
                    do_z0_cut: round % 7 != 1,
                    z0_cut: uniform(&mut st, 5.0, 20.0),
                    do_pt_cut: round % 7 != 2,
                    min_radius2_t4: uniform(&mut st, 0.0, 5000.0),
                    i2p: std::f32::consts::PI / 32768.0,
                };
                let (mut z, mut r) = ([0f32; CHUNK], [0f32; CHUNK]);
                let (mut iphi, mut size_y) = ([0i16; CHUNK], [0i16; CHUNK]);
                for j in 0..CHUNK {
                    z[j] = uniform(&mut st, -50.0, 50.0);
                    r[j] = probe.mer + uniform(&mut st, -2.0, 15.0);
                    iphi[j] = match (round + j) % 5 {
                        0 => st.next() as i16,
                        1 => mep.wrapping_add(i16::MIN), // |Δφ| = 32768
                        _ => mep.wrapping_add((uniform(&mut st, -1500.0, 1500.0)) as i16),
                    };
                    size_y[j] = uniform(&mut st, -8.0, 60.0) as i16;
                    if (round + j) % 11 == 0 {
                        r[j] = probe.mer; // Δr = 0
                    }
                }
                // One lane at the boundary of the z0 cut, another at that of the pT cut.
                let j = round % CHUNK;
                let nudge = (round / CHUNK) as i64 % 7 - 3;
                let dr = r[j] - probe.mer;
                let z0 = ((probe.mez * r[j] - probe.mer * z[j]).abs()) / dr;
                if z0.is_finite() && z0 > 0.0 {
                    shared.z0_cut = ulps(z0, nudge);
                    probe.maxr = 100.0;
                    near += 1;
                }
                let k = (j + 5) % CHUNK;
                let idphi = (iphi[k].wrapping_sub(mep) as i32).abs();
                let dphi = ((idphi as u16) as i16) as f32 * shared.i2p;
                let (drk, ro) = (r[k] - probe.mer, r[k]);
                let m = drk * drk / (dphi * dphi) + probe.mer * ro;
                if m.is_finite() && m > 0.0 {
                    shared.min_radius2_t4 = ulps(m, nudge);
                }
                let c = Chunk {
                    z: &z,
                    r: &r,
                    iphi: &iphi,
                    size_y: &size_y,
                };
                let want = pass_mask(&c, &probe, &shared);
                // SAFETY: the CPU has AVX2.
                let got = unsafe { pass_mask_avx2(&c, &probe, &shared) };
                assert_eq!(got, want, "round {round}");
                passed += want.count_ones();
                failed += CHUNK as u32 - want.count_ones();
            }
            assert!(
                passed > 10_000 && failed > 10_000 && near > 30_000,
                "{passed} passed, {failed} failed, {near} at a z0 boundary"
            );
        }
    }

    /// Both packings keep exactly the candidates of the set bits, in order, for every one
    /// of the 65536 masks of a chunk.
    #[test]
    fn pack_outer_keeps_the_set_bits_in_order() {
        let outer: [u32; CHUNK] = std::array::from_fn(|j| 1000 + 7 * j as u32);
        for bits in 0..=u16::MAX as u32 {
            let want: Vec<u32> = (0..CHUNK)
                .filter(|&j| bits >> j & 1 == 1)
                .map(|j| outer[j])
                .collect();
            let mut dst = [MaybeUninit::new(0u32); CHUNK];
            pack_outer(&outer, bits, &mut dst);
            // SAFETY: every entry was initialised above.
            let got: Vec<u32> = dst[..want.len()]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
            assert_eq!(got, want, "{bits:#x}");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("popcnt")
            {
                let mut dst = [MaybeUninit::new(0u32); CHUNK];
                // SAFETY: the CPU has AVX2 and POPCNT.
                unsafe { pack_outer_avx2(&outer, bits, &mut dst) };
                // SAFETY: every entry was initialised above.
                let got: Vec<u32> = dst[..want.len()]
                    .iter()
                    .map(|x| unsafe { x.assume_init() })
                    .collect();
                assert_eq!(got, want, "avx2 {bits:#x}");
            }
        }
    }
}
