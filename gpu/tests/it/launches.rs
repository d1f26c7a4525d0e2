//! Every kernel launch in the GPU steps takes its argument list from `quiver_gpu::args` (one
//! struct per kernel, its parameters named and in order), and at run time
//! `kernels::check_launch` compares the list, names and types, with the kernel's signature in
//! `gpu/kernels/*.cu`; `args`' own tests compare every list with the sources. Without a GPU
//! no launch runs, so this checks that no step writes a list of its own (which those checks
//! would not see), and that every kernel has a list.

use quiver_gpu::args::{lists, SHARED_LISTS};
use quiver_gpu::kernels::{self, check_launch};
use quiver_gpu::GpuError;

#[test]
fn every_kernel_is_launched_through_its_argument_list() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/steps");
    let mut builders = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for (k, line) in text.lines().enumerate() {
            if line.contains("Launch::new(") {
                builders.push(format!("{file}:{}: {}", k + 1, line.trim()));
            }
        }
    }
    // The one launch builder: `steps::launch_as`, which pushes a list of `args`.
    assert_eq!(builders.len(), 1, "{builders:#?}");
    assert!(
        builders[0].starts_with("mod.rs:") && builders[0].ends_with("Launch::new(run, kernel);"),
        "{builders:?}"
    );
    let listed: std::collections::BTreeSet<&str> = lists()
        .into_iter()
        .map(|l| l.0)
        .chain(SHARED_LISTS.iter().map(|s| s.0))
        .collect();
    for &(module, _, names) in kernels::SOURCES {
        for n in names {
            assert!(
                listed.contains(n),
                "kernel {n} of {module} has no list in args"
            );
        }
    }
}

#[test]
fn swapping_calibrates_two_u16_inputs_fails_the_check() {
    // The step's own argument list (`args::Calibrate`, which calibrate.rs pushes).
    let (_, mut args) = lists()
        .into_iter()
        .find(|(k, _)| *k == "calibrate")
        .unwrap();
    assert!(check_launch("calibrate", &args).is_ok());
    // `xx` and `yy` are both u16*: a check of the types alone cannot tell them apart.
    let (i, j) = (
        args.iter().position(|p| p.0 == "xx").unwrap(),
        args.iter().position(|p| p.0 == "yy").unwrap(),
    );
    args.swap(i, j);
    assert_eq!(args[i].1, args[j].1, "same types");
    let e = check_launch("calibrate", &args).unwrap_err();
    let GpuError::Arguments { kernel, why } = &e else {
        panic!("{e}")
    };
    assert_eq!(kernel, "calibrate");
    assert!(
        why.contains(&format!(
            "argument {} is passed as 'yy' but the kernel's parameter is 'xx'",
            i + 1
        )),
        "{e}"
    );
}
