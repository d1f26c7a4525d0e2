//! Pixel tracks and primary vertices: CA doublets and ntuplets, fits, quality, vertices.
