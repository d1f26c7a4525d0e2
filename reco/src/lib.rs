//! Quiver's CMS Phase-1 pixel reconstruction on CPU, ported from the reference `serial`
//! chain. Each step's numerical core is a plain function over columns and conditions;
//! the step adapters that wire them into a plan are thin.

pub mod capacity;
pub mod classifier;
pub mod local;
pub mod steps;
pub mod tracks;
pub mod vertices;
