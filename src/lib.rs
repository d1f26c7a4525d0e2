//! Quiver: an Arrow-native, columnar event-reconstruction library.
//!
//! This facade re-exports the crates of the workspace and assembles the full step
//! catalogue that the `quiver` command line uses.

pub use quiver_columnar as columnar;
pub use quiver_datasets as datasets;
pub use quiver_reco as reco;

/// Every step type Quiver ships: the framework's own and the reconstruction's.
pub fn registry() -> columnar::Registry {
    columnar::Registry::with_builtin()
}

/// The plan `quiver run` uses when none is given.
pub mod default_plan {
    /// Where the text comes from (for messages).
    pub const NAME: &str = "plans/examples/square.toml (built in)";
    /// The plan.
    pub const TEXT: &str = include_str!("../plans/examples/square.toml");
}
