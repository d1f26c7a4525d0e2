//! The plan parser and validator on arbitrary text, against the full registry of the
//! `quiver` command (every step type, parameter and range): a resolved plan or a plan error.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quiver_columnar::{PlanSpec, Registry};

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(quiver::registry)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = PlanSpec::from_toml(text, "fuzz") {
            if let Ok(plan) = quiver_columnar::validate(&spec, registry()) {
                let _ = plan.describe();
            }
        }
    }
});
