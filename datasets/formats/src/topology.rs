//! CMS Phase-1 pixel topology constants, as the reference's
//! `Geometry/phase1PixelTopology.h` fixes them.
//!
//! These are facts of the detector numbering, not tunable parameters.

/// Rows in one readout chip (ROC).
pub const NUM_ROWS_IN_ROC: u16 = 80;
/// Columns in one ROC.
pub const NUM_COLS_IN_ROC: u16 = 52;
/// Rows in one module (2 ROCs).
pub const NUM_ROWS_IN_MODULE: u16 = 2 * NUM_ROWS_IN_ROC;
/// Columns in one module (8 ROCs).
pub const NUM_COLS_IN_MODULE: u16 = 8 * NUM_COLS_IN_ROC;
/// Pixels in one module.
pub const NUM_PIXELS_IN_MODULE: u32 = NUM_ROWS_IN_MODULE as u32 * NUM_COLS_IN_MODULE as u32;

/// Number of modules (detIndex 0..1855).
pub const NUMBER_OF_MODULES: u16 = 1856;
/// Barrel modules: 148 ladders of 8.
pub const NUMBER_OF_BARREL_MODULES: u16 = 1184;
/// Barrel ladders.
pub const NUMBER_OF_LADDERS_IN_BARREL: usize = 148;
/// Modules per barrel ladder.
pub const MODULES_PER_LADDER: u16 = 8;
/// Layers: BPix1..4 (0..3), FPix+1..3 (4..6), FPix−1..3 (7..9).
pub const NUMBER_OF_LAYERS: usize = 10;
/// First detIndex of each layer, and the module count as the last entry.
pub const LAYER_START: [u32; NUMBER_OF_LAYERS + 1] =
    [0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856];
/// Ladders per barrel layer.
pub const LADDERS_PER_LAYER: [u16; 4] = [12, 28, 44, 64];
/// The largest power of two dividing every `LAYER_START` entry.
pub const MAX_MODULE_STRIDE: u32 = 16;
/// Size of the `layer` lookup (`1856 / 16`).
pub const LAYER_INDEX_SIZE: usize = (NUMBER_OF_MODULES as u32 / MAX_MODULE_STRIDE) as usize;
/// The module centre in "local-edge" pitch units, x.
pub const X_OFFSET: i32 = -81;
/// The module centre in "local-edge" pitch units, y.
pub const Y_OFFSET: i32 = -216;
/// Module index marking an invalid digi (`InvId`).
pub const INVALID_MODULE: u16 = 9999;

/// Layer (0..9) of every group of `MAX_MODULE_STRIDE` modules: `layer_of(det) = LAYER[det/16]`.
pub const LAYER: [u8; LAYER_INDEX_SIZE] = {
    let mut out = [0u8; LAYER_INDEX_SIZE];
    let mut i = 0;
    while i < LAYER_INDEX_SIZE {
        let det = i as u32 * MAX_MODULE_STRIDE;
        let mut l = 0;
        while l < NUMBER_OF_LAYERS && det >= LAYER_START[l + 1] {
            l += 1;
        }
        out[i] = l as u8;
        i += 1;
    }
    out
};

/// The layer (0..9) of a detIndex.
///
/// ```
/// use quiver_formats::topology::layer_of;
/// assert_eq!(layer_of(0), 0);
/// assert_eq!(layer_of(96), 1);
/// assert_eq!(layer_of(1855), 9);
/// ```
pub const fn layer_of(det_index: u16) -> u8 {
    LAYER[(det_index as u32 / MAX_MODULE_STRIDE) as usize]
}

/// True for the double-width rows 79 and 80.
pub const fn is_big_pix_x(px: u16) -> bool {
    px == 79 || px == 80
}

/// True for the double-width first and last column of every ROC.
pub const fn is_big_pix_y(py: u16) -> bool {
    let c = py % NUM_COLS_IN_ROC;
    c == 0 || c == NUM_COLS_IN_ROC - 1
}

/// True for the first and last row of a module.
pub const fn is_edge_x(px: u16) -> bool {
    px == 0 || px == NUM_ROWS_IN_MODULE - 1
}

/// True for the first and last column of a module.
pub const fn is_edge_y(py: u16) -> bool {
    py == 0 || py == NUM_COLS_IN_MODULE - 1
}

/// Lower edge of row `px` in pitch units, counting the big rows twice.
///
/// ```
/// use quiver_formats::topology::local_x;
/// assert_eq!(local_x(79), 79);
/// assert_eq!(local_x(80), 81);
/// assert_eq!(local_x(160), 162);
/// ```
pub const fn local_x(px: u16) -> u16 {
    px + (px > 79) as u16 + (px > 80) as u16
}

/// Lower edge of column `py` in pitch units, counting the big columns twice.
///
/// ```
/// use quiver_formats::topology::local_y;
/// assert_eq!(local_y(0), 0);
/// assert_eq!(local_y(1), 2);
/// assert_eq!(local_y(416), 432);
/// ```
pub const fn local_y(py: u16) -> u16 {
    let roc = py / NUM_COLS_IN_ROC;
    py + 2 * roc + !py.is_multiple_of(NUM_COLS_IN_ROC) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_table_matches_layer_start() {
        for det in 0..NUMBER_OF_MODULES {
            let expected = LAYER_START.iter().rposition(|&s| s <= det as u32).unwrap();
            assert_eq!(layer_of(det) as usize, expected, "det {det}");
        }
    }

    #[test]
    fn sixteen_big_columns_and_two_big_rows() {
        assert_eq!(
            (0..NUM_COLS_IN_MODULE).filter(|&c| is_big_pix_y(c)).count(),
            16
        );
        assert_eq!(
            (0..NUM_ROWS_IN_MODULE).filter(|&r| is_big_pix_x(r)).count(),
            2
        );
    }
}
