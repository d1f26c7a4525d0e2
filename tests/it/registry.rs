//! The step catalogue: one type per name. A second registration of a name used to replace
//! the first silently, so the catalogue depended on the order in which crates registered
//! (the GPU crate had to come after the reconstruction's, or its backends were lost).

use quiver_columnar::{Backend, Error, Registry};

#[test]
fn the_catalogue_offers_both_backends_for_every_gpu_type() {
    let r = quiver::registry();
    for name in quiver_gpu::GPU_STEP_TYPES {
        let t = r.get(name).unwrap_or_else(|| panic!("'{name}' registered"));
        assert_eq!(t.backends, [Backend::Cpu, Backend::Gpu], "{name}");
    }
}

#[test]
fn a_step_type_registered_twice_is_refused_naming_it() {
    let mut r = Registry::with_builtin();
    quiver_reco::steps::register(&mut r);
    let clusters = r.get("clusterize").expect("registered").clone();
    let e = r.try_add(clusters).unwrap_err();
    assert!(
        matches!(&e, Error::DuplicateStepType { name } if name == "clusterize"),
        "{e:?}"
    );
    assert!(e.to_string().contains("step type 'clusterize'"), "{e}");
    // The refused registration changed nothing.
    assert_eq!(r.get("clusterize").unwrap().backends, [Backend::Cpu]);
}

#[test]
fn registering_the_cpu_types_after_the_gpu_ones_is_refused_not_silently_replacing_them() {
    let mut r = Registry::with_builtin();
    quiver_gpu::register(&mut r);
    let wrong_order = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        quiver_reco::steps::register(&mut r)
    }));
    let msg = wrong_order
        .err()
        .and_then(|p| p.downcast::<String>().ok())
        .map(|m| *m)
        .unwrap_or_default();
    assert!(
        msg.contains("is registered twice"),
        "reco after gpu must be refused, got: {msg:?}"
    );
}
