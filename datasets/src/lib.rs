//! Quiver's CMS Phase-1-like pixel detector: topology, conditions, the synthetic event
//! generator with truth, and the dataset formats.

pub mod conditions;
pub mod topology;
