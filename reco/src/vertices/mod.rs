//! Primary vertices from pixel tracks: density clustering, fit, split, sort by Σ pT².
