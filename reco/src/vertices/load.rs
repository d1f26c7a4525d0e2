//! Track selection for the vertex finder (reference `loadTracks`).

use super::{quality, TracksView, VertexError, MAX_SELECTED_TRACKS};

/// The selected tracks, in input order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Selected {
    /// Input slot of each selected track.
    pub itrk: Vec<u32>,
    /// z at the beam spot, cm.
    pub zt: Vec<f32>,
    /// σ²(z), cm².
    pub ezt2: Vec<f32>,
    /// pT², GeV².
    pub ptt2: Vec<f32>,
}

/// Keeps tracks with at least `min_hits` hits, `loose` quality and pT ≥ `pt_min`, stopping at
/// the first empty slot as the reference does. Selected tracks must have a finite z, a finite
/// positive variance and a finite pT: the clustering cannot order NaNs (its pointer graph could
/// loop) and a zero variance gives an infinite weight.
pub(crate) fn load_tracks(
    tracks: &TracksView,
    pt_min: f32,
    min_hits: u16,
) -> Result<Selected, VertexError> {
    tracks.validate_max(usize::MAX)?; // the capacity is the caller's (VertexConfig::max_tracks)
    let mut sel = Selected::default();
    for idx in 0..tracks.len() {
        let n_hits = tracks.n_hits[idx];
        if n_hits == 0 {
            break;
        }
        if n_hits < min_hits || tracks.quality[idx] != quality::LOOSE {
            continue;
        }
        let pt = tracks.pt[idx];
        // Written as the reference's rejection so that a NaN pT is "selected" and then refused.
        if pt < pt_min {
            continue;
        }
        let (z, ez2) = (tracks.zip[idx], tracks.cov_zip[idx]);
        if !pt.is_finite() {
            return Err(VertexError::InvalidTrack {
                index: idx,
                what: format!("pt = {pt} is not finite"),
            });
        }
        if !z.is_finite() {
            return Err(VertexError::InvalidTrack {
                index: idx,
                what: format!("zip = {z} is not finite"),
            });
        }
        if !(ez2.is_finite() && ez2 > 0.0) {
            return Err(VertexError::InvalidTrack {
                index: idx,
                what: format!("cov_zip = {ez2} is not finite and positive"),
            });
        }
        sel.itrk.push(idx as u32);
        sel.zt.push(z);
        sel.ezt2.push(ez2);
        sel.ptt2.push(pt * pt);
    }
    if sel.zt.len() > MAX_SELECTED_TRACKS {
        return Err(VertexError::TooManySelectedTracks {
            n: sel.zt.len(),
            max: MAX_SELECTED_TRACKS,
        });
    }
    Ok(sel)
}
